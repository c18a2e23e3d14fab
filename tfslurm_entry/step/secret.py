"""The step's secret: how rank 0 tells the step's own tasks from anyone else who reaches its
control port. A hello's step, task count and rank are public (squeue shows them, MpiParams the
port range), so without a secret any user on the network could check in as a task.

Every task of a step gets the same environment from srun, which no other user can read
(/proc/PID/environ is the owner's): tfslurm-run puts a fresh TFSLURM_STEP_SECRET there for each
job. Without it, a private key file in the user's home (shared by the nodes, like the user's
programs) gives each step a secret of its own, derived from the key and the step's JOB.STEP.

Nothing secret crosses the wire: rank 0 sends each connection a fresh nonce (protocol.py's
Challenge), the member answers with a MAC of the nonce and its hello's words, and rank 0
counts the member only if the MAC is right. A recorded hello is worth nothing on another
connection: its nonce is another one.

The MAC is keyed BLAKE2b (RFC 7693's keyed mode, a MAC by design, as HMAC-SHA256 was before
protocol 3), from Python's own `_blake2`, the module hashlib.blake2b is: importing hashlib or
hmac loads OpenSSL's libcrypto (3.5 MB mapped and relocated), 9 % of each task's start in a
256-task step (bench/stepstart.py, with a secret and without). Rank 0 compares a proof with its
own through a second MAC of each (equal tags for equal proofs, and their timing says nothing of
the proof), where hmac.compare_digest would load libcrypto too; nonces and keys are os.urandom's.

The pure part (proof, proves, from_environ) here; reading the key file is load_secret's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError

ENV = "TFSLURM_STEP_SECRET"
KEY_FILE = Path(".config", "tfslurm", "step-key")  # under the user's home
MIN_SECRET_CHARS = 32  # 128 bits of hex, at least: shorter ones are guessable
HOW_TO_GET_ONE = (
    "run the step through tfslurm-run (a fresh secret per job), or make a key once with "
    "`apptainer run IMAGE --make-step-key` (~/" + str(KEY_FILE) + ", private; your home must "
    "be the same on every node)"
)


class Secret(NamedTuple):
    """The step's secret (key None: the step has none) and where it came from, for the one
    line rank 0 says about it."""

    key: bytes | None
    source: str

    def proof(self, nonce: str, words: str) -> str:
        """What a member sends for the hello `words` on the connection whose nonce is `nonce`:
        the keyed BLAKE2b in hex, or "-" without a secret."""
        if self.key is None:
            return "-"
        return mac(self.key, f"{nonce} {words}".encode()).hex()

    def proves(self, nonce: str, words: str, proof: str) -> bool:
        """Whether `proof` is this secret's for the nonce and hello words (always, without a
        secret: the step said so once). The comparison is of a MAC of each, so that how long
        it takes tells a sender nothing of how much of its proof was right."""
        if self.key is None:
            return True
        expected = self.proof(nonce, words).encode()
        return mac(self.key, expected) == mac(self.key, proof.encode())


NO_SECRET = Secret(None, "none given")
# BLAKE2b's longest key; a longer secret is hashed to this length first (HMAC does the same).
MAX_KEY = 64


def _blake2b():
    try:
        from _blake2 import blake2b  # hashlib.blake2b itself, without hashlib's OpenSSL
    except ImportError:  # a Python built otherwise
        from hashlib import blake2b
    return blake2b


def mac(key: bytes, message: bytes) -> bytes:
    """message's 32-byte MAC under key: keyed BLAKE2b."""
    blake2b = _blake2b()
    if len(key) > MAX_KEY:
        key = blake2b(key).digest()
    return blake2b(message, key=key, digest_size=32).digest()


def new_nonce() -> str:
    return os.urandom(16).hex()


def from_environ(environ: Mapping[str, str]) -> Secret | None:
    """TFSLURM_STEP_SECRET's secret; None where it is not set. Too short a one is an error
    (ConfigError naming it): it would only look like protection."""
    value = environ.get(ENV, "").strip()
    if not value:
        return None
    if len(value) < MIN_SECRET_CHARS:
        raise ConfigError(
            f"{ENV} has {len(value)} characters: a step's secret needs at least "
            f"{MIN_SECRET_CHARS} (e.g. `openssl rand -hex 32`); unset it to let tfslurm-run "
            "make one",
            HOW_TO_GET_ONE,
        )
    return Secret(value.encode(), ENV)


def for_step(key: bytes, step: str) -> bytes:
    """One step's secret from the user's key: each step's differs, none reveals the key."""
    return mac(key, f"tfslurm step {step}".encode())


def load_secret(environ: Mapping[str, str], step: str, home: Path) -> Secret:
    """The step's secret: TFSLURM_STEP_SECRET, else one derived from ~/.config/tfslurm/step-key
    if that is the user's and no one else's, else none (Secret(None, why))."""
    if (found := from_environ(environ)) is not None:
        return found
    path = home / KEY_FILE
    try:
        info = path.stat()
    except OSError:
        return Secret(None, f"no {ENV} and no ~/{KEY_FILE}")
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        return Secret(
            None,
            f"~/{KEY_FILE} is not private to you (mode {stat.S_IMODE(info.st_mode):o}, "
            f"owner uid {info.st_uid}): ignored; `chmod 600` it",
        )
    key = path.read_bytes().strip()
    if len(key) < MIN_SECRET_CHARS:
        return Secret(None, f"~/{KEY_FILE} holds {len(key)} bytes: ignored; make it again")
    return Secret(for_step(key, step), f"~/{KEY_FILE}")


def make_key(home: Path) -> tuple[Path, bool]:
    """Write a new random key to ~/.config/tfslurm/step-key (0600), unless one is there;
    (its path, whether it was made now)."""
    path = home / KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return path, True
