"""The site check's look from outside the step: do the tasks' TensorFlow ports answer from where
the check was started (the login node, where every user of the cluster is)?

A TensorFlow server runs the graphs anyone who reaches its port sends (docs/shared-nodes.md).
What narrows that is the site's: a network only compute nodes are on (--network), a partition
with ExclusiveUser=YES, a firewall that admits the kit's ports only from compute nodes. The site
check says which of them hold for the step it runs (`exposure`). For the firewall it looks:
`tfslurm-run --site-check` starts a listener where it runs (`listen`, the entrypoint's
--site-check-observer mode) and gives the step its address (TFSLURM_SITE_CHECK_FROM); rank 0,
while every task still holds its TensorFlow port, dials it, proves the step's secret and sends
the ports (`look`); the listener connects to each (reach.check_all) and answers how many greeted
it as their task. It ends after that one conversation (or at its timeout).

Lines on the wire: protocol.py's (challenge, hello, ports, answered, refused).
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, TextIO

from ..log import log
from ..step import dial, reach
from ..step.dial import Channel
from ..step.protocol import LOOK, Answered, Challenge, Hello, Ports, ProtocolError, Refusal
from ..step.secret import Secret, load_secret, new_nonce

ENV = "TFSLURM_SITE_CHECK_FROM"  # HOST:PORT of the listener, from tfslurm-run
EXCLUSIVE_ENV = "TFSLURM_EXCLUSIVE_USER"  # "debug=NO gpu=YES": each partition's, from tfslurm-run
LISTEN_S = 900.0  # the listener's life at most (tfslurm-run ends it with its step)
WINDOW_S = 3.0  # how long the listener tries a port that does not answer (a firewall drops it)
REACH_S = 5.0  # how long rank 0 tries the listener's address, and waits for its challenge
SHARED_NODES = "docs/shared-nodes.md"


class Look(NamedTuple):
    """What the listener outside the step saw: on host, `answered` of `tried` task ports."""

    host: str
    answered: int
    tried: int


def listen(environ: Mapping[str, str], timeout: float, out: TextIO = sys.stdout) -> int:
    """The listener: print HOST:PORT, then serve the site check's rank 0 once (0), or give up
    at the timeout (1). Only a rank 0 that proves its step's secret is served: anyone else
    could make it probe where they like."""
    host = socket.gethostname().split(".")[0]
    deadline = time.monotonic() + timeout
    with socket.create_server(("", 0)) as server:
        print(f"{host}:{server.getsockname()[1]}", file=out, flush=True)
        while (left := deadline - time.monotonic()) > 0:
            server.settimeout(left)
            try:
                conn, peer = server.accept()
            except OSError:
                continue
            with Channel(conn, "head", LOOK) as channel:
                try:
                    if _serve(channel, peer, host, environ, deadline):
                        return 0
                except ProtocolError as err:
                    log(f"site check listener on {host}: closed {peer[0]}:{peer[1]}: {err}")
    log(f"site check listener on {host}: no rank 0 of a site check came within {timeout:.0f} s")
    return 1


def _serve(
    channel: Channel, peer: tuple, host: str, environ: Mapping[str, str], deadline: float
) -> bool:
    """One connection: True once a proven rank 0's ports were tried and answered."""
    wait = max(min(deadline - time.monotonic(), 30.0), 1.0)
    nonce = new_nonce()
    channel.send(Challenge.now(nonce))
    hello = channel.next(wait)
    if not isinstance(hello, Hello) or hello.rank != 0:
        return False
    secret = load_secret(environ, hello.step, Path.home())
    if secret.key is None or not secret.proves(nonce, hello.words(), hello.proof):
        log(
            f"site check listener on {host}: refused {peer[0]}:{peer[1]}: it did not prove "
            f"step {hello.step}'s secret (not that check's rank 0)"
        )
        channel.send(Refusal())
        return False
    ports = channel.next(wait)
    if not isinstance(ports, Ports):
        return False
    unreached = reach.check_all(list(ports.targets), hello.step, WINDOW_S)
    channel.send(Answered(host, len(ports.targets) - len(unreached)))
    return True


def look(address: str, step: str, targets: Sequence[tuple[int, str]], secret: Secret) -> Look | str:
    """Rank 0's side: the listener's count for the tasks' ports (rank, host:port), or why there
    is none (a phrase)."""
    conn = dial.connect(address, REACH_S)
    if conn is None:
        return f"rank 0 could not connect to tfslurm-run's listener at {address}"
    with Channel(conn, "member", LOOK) as channel:
        hello = Hello(step, len(targets), 0)
        try:
            if not dial.check_in(channel, hello, secret, REACH_S, Ports(tuple(targets))):
                return f"{address} did not answer as tfslurm-run's listener"
            answer = channel.next(WINDOW_S + 10.0)
        except ProtocolError as err:
            return f"the listener at {address} said what rank 0 cannot read ({err})"
    if isinstance(answer, Answered):
        return Look(answer.host, answer.count, len(targets))
    if isinstance(answer, Refusal):
        return f"the listener at {address} refused rank 0's proof of the step's secret"
    return f"the listener at {address} went away without an answer"


def exclusive_users(value: str) -> dict[str, str]:
    """TFSLURM_EXCLUSIVE_USER's "debug=NO gpu=YES" as {partition: setting}."""
    pairs = (word.partition("=") for word in value.split())
    return {name: setting for name, _, setting in pairs if name and setting}


def exposure(
    network: str | None, partition: str | None, environ: Mapping[str, str], seen: Look | str | None
) -> list[str]:
    """The lines that say who can reach this step's TensorFlow ports, one per measure that
    narrows it (docs/shared-nodes.md); seen: the listener's look (a phrase: why none; None: no
    listener was given). Pure."""
    lines = [
        f"who can reach TensorFlow's ports (a TensorFlow server runs what it is sent: "
        f"{SHARED_NODES}):"
    ]
    if network:
        lines.append(f"  network: --network {network!r}: only hosts on that network")
    else:
        lines.append(
            "  network: Slurm's node names (no --network): every host on the nodes' default "
            "network; --network picks a private one only compute nodes are on"
        )
    setting = exclusive_users(environ.get(EXCLUSIVE_ENV, "")).get(partition or "")
    name = f"partition {partition}" if partition else "the partition"
    if setting == "YES":
        lines.append(f"  {name}: ExclusiveUser=YES: no other user's job shares these nodes")
    elif setting:
        lines.append(
            f"  {name}: ExclusiveUser={setting}: other users' jobs may share these nodes "
            "(ExclusiveUser=YES in slurm.conf, or a job's --exclusive=user, keeps them off)"
        )
    else:
        lines.append(f"  {name}: ExclusiveUser not known here (tfslurm-run --site-check reads it)")
    if seen is None:
        lines.append(
            "  from the login node: not looked (tfslurm-run --site-check looks from where it runs)"
        )
    elif isinstance(seen, str):
        lines.append(f"  from where the check was started: not looked: {seen}")
    elif seen.answered:
        lines.append(
            f"  from {seen.host}, where the check was started: {seen.answered} of {seen.tried} "
            "task ports answer: anyone there can reach them (a firewall that admits the kit's "
            "ports only from the compute nodes keeps them out)"
        )
    else:
        lines.append(
            f"  from {seen.host}, where the check was started: none of the {seen.tried} task "
            "ports answers"
        )
    return lines
