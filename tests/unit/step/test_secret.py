"""The step's secret (tfslurm_entry/step/secret.py) and the check-in that proves it, on real
localhost sockets against rank 0's ControlServer: a bad proof, a replayed hello and a member
without the secret are refused; the rank they named stays free."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading

import pytest

from bench.repo import ROOT as REPO
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.step import dial
from tfslurm_entry.step.control import Arrived, ControlServer, Refused, listen
from tfslurm_entry.step.protocol import Challenge, Hello, encode
from tfslurm_entry.step.secret import (
    ENV,
    KEY_FILE,
    NO_SECRET,
    Secret,
    for_step,
    load_secret,
    make_key,
)

KEY = Secret(b"a" * 64, ENV)
OTHER = Secret(b"b" * 64, ENV)
HELLO = Hello("4242.0", 3, 1)


def test_a_proof_holds_only_for_its_nonce_its_words_and_its_secret():
    proof = KEY.proof("n1", HELLO.words())
    assert KEY.proves("n1", HELLO.words(), proof)
    assert not KEY.proves("n2", HELLO.words(), proof)  # replayed on another connection
    assert not KEY.proves("n1", Hello("4242.0", 3, 2).words(), proof)  # another rank
    assert not KEY.proves("n1", HELLO.words(), OTHER.proof("n1", HELLO.words()))
    assert not KEY.proves("n1", HELLO.words(), "-")  # a member without a secret
    assert NO_SECRET.proof("n1", HELLO.words()) == "-"


def test_a_secret_longer_than_blake2s_key_counts_in_full():
    """BLAKE2b takes 64 bytes of key at most: a longer secret is hashed to that, not cut."""
    long, differs_at_the_end = Secret(b"a" * 100, ENV), Secret(b"a" * 99 + b"b", ENV)
    proof = long.proof("n1", HELLO.words())
    assert long.proves("n1", HELLO.words(), proof)
    assert not differs_at_the_end.proves("n1", HELLO.words(), proof)


def test_proving_and_checking_a_secret_load_no_openssl():
    """A task's check-in makes and checks proofs without OpenSSL's libcrypto (hashlib and hmac
    load it): 9 % of each task's start in a 256-task step (secret.py)."""
    code = (
        "import sys\n"
        "from tfslurm_entry.step.secret import Secret, for_step, new_nonce\n"
        "key = Secret(for_step(b'k' * 64, '4242.0'), 'test')\n"
        "nonce = new_nonce()\n"
        "assert key.proves(nonce, 'hello', key.proof(nonce, 'hello'))\n"
        "print(sorted(m for m in sys.modules if m in ('_hashlib', 'hashlib', 'hmac', 'secrets')))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert found.stdout.strip() == "[]"


def test_the_environments_secret_wins_and_a_short_one_is_an_error(tmp_path):
    make_key(tmp_path)
    found = load_secret({ENV: "c" * 64}, "1.0", tmp_path)
    assert found == Secret(b"c" * 64, ENV)
    with pytest.raises(ConfigError, match=f"{ENV} has 6 characters: .* at least 32"):
        load_secret({ENV: "abc123"}, "1.0", tmp_path)


def test_the_key_file_gives_each_step_its_own_secret(tmp_path):
    path, made = make_key(tmp_path)
    assert made and path == tmp_path / KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert make_key(tmp_path) == (path, False)  # an existing key is kept
    first, again, other = (load_secret({}, s, tmp_path) for s in ("7.0", "7.0", "7.1"))
    assert first.key == again.key == for_step(path.read_bytes().strip(), "7.0")
    assert first.key != other.key and first.source == f"~/{KEY_FILE}"


def test_a_key_file_others_may_read_is_ignored_and_said_so(tmp_path):
    path, _ = make_key(tmp_path)
    os.chmod(path, 0o644)
    found = load_secret({}, "7.0", tmp_path)
    assert found.key is None and "is not private to you (mode 644" in found.source
    assert load_secret({}, "7.0", tmp_path / "nobody").source == f"no {ENV} and no ~/{KEY_FILE}"


@pytest.fixture
def head():
    """Rank 0's control server of a step of 3 tasks with KEY, on a free localhost port, polled
    by a thread of its own (it sends each connection its challenge when it accepts it); the
    events it returned come through the queue."""
    listener = listen(0, 2)
    events: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    with ControlServer(listener, "4242.0", 3, KEY) as server:

        def serve() -> None:
            while not stop.is_set():
                for event in server.poll(0.1):
                    events.put(event)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield events, f"localhost:{listener.getsockname()[1]}"
        stop.set()
        thread.join(5)


def next_of(events: queue.SimpleQueue, kind: type, timeout: float = 5.0):
    """The next event of that kind (others before it are skipped)."""
    while not isinstance(event := events.get(timeout=timeout), kind):
        pass
    return event


def said_to(channel: dial.Channel) -> bytes:
    """Everything rank 0 sends this connection until it closes it."""
    channel.sock.settimeout(5)
    data = b""
    while chunk := channel.sock.recv(4096):
        data += chunk
    return data


def member(address: str) -> dial.Channel:
    return dial.Channel(dial.connect(address, 5), "member")


def nonce_of(channel: dial.Channel) -> str:
    challenge = channel.next(5)
    assert isinstance(challenge, Challenge)
    return challenge.nonce


@pytest.mark.parametrize("secret", [OTHER, NO_SECRET], ids=["bad-proof", "missing-secret"])
def test_a_hello_without_the_secrets_proof_is_refused_and_its_rank_stays_free(head, secret):
    events, address = head
    impostor = member(address)
    assert dial.check_in(impostor, HELLO, secret, 5)
    refused = next_of(events, Refused)
    assert refused.hello.rank == 1 and refused.peer.startswith("127.0.0.1:")
    assert said_to(impostor) == b"refused\n"
    own = member(address)
    assert dial.check_in(own, HELLO, KEY, 5)
    assert next_of(events, Arrived).rank == 1
    impostor.close()
    own.close()


def test_a_hello_recorded_on_one_connection_is_refused_on_another(head):
    events, address = head
    first = member(address)
    nonce = nonce_of(first)
    recorded = encode(dial.signed(HELLO, nonce, KEY))  # what a listener on the wire saw
    replay = member(address)
    assert nonce_of(replay) != nonce
    replay.sock.sendall(recorded)
    assert next_of(events, Refused).hello.rank == 1
    assert said_to(replay) == b"refused\n"
    first.sock.sendall(recorded)  # on its own connection the same line is good
    assert next_of(events, Arrived).rank == 1
    first.close()
    replay.close()


def test_nothing_secret_crosses_the_wire(head):
    _, address = head
    channel = member(address)
    line = encode(dial.signed(HELLO, nonce_of(channel), KEY))
    assert KEY.key.decode() not in line.decode() and len(line.split()) == 5
    channel.close()
