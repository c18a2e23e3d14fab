"""Any task but rank 0: check in with the head, reach its peers, run the program or server,
end as the head says.

A member connects to the head and says hello; once every task has, it checks the TensorFlow
ports of its peers (reach.py) and reports; when every task has reached its peers it frees its
own port ("release"), and only when every task has done so ("start") does it start its program
or server: a step whose tasks cannot reach each other stops before anything runs, and no
program meets a port still answering for the check. It ends when its program ends (and
tells the head), when the head says "exit 0" (a server, once the chief is done) or "abort"
(another task failed), or when the head is gone or never answers: without rank 0 the step
cannot finish anyway. A worker's server that dies is restarted in place first, and the head
hears of it only once the restarts are used up.
"""

from __future__ import annotations

import queue
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence

from .control import connect, hello, send
from .log import Log
from .outcome import ABORTED, TRANSIENT, Failure, describe
from .program import Program
from .reach import MIN_PROBE_S, Reach


def run_member(
    rank: int,
    host: str,
    address: str,
    timeout: float,
    log: Log,
    argv: Sequence[str] | None,
    env: Mapping[str, str],
    *,
    step: str,
    size: int,
    reach: Reach,
    server: str | None = None,
    restarts: int = 0,
    own_address: str | None = None,
    learn: Callable[[Mapping[str, str]], None] | None = None,
) -> int:
    """Check in with the head at address, then run argv; this task's exit status.

    reach: this task's side of the start-up check (its port's guard, its peers).

    step, size: the step's JOB.STEP and task count, which the head checks (control.py).

    own_address: this node's address on --network's interface or subnet, sent with the hello;
    learn: given every node's address from the head, before the reach check (they go into
    argv's TF_CONFIG, env, and the reach targets).

    server: argv is this task's TensorFlow server ("worker 1 server"), which runs until the
    head says the chief has ended; one that dies is started again in place, at most
    `restarts` times, before the head hears of it. No argv: a member with nothing to run.
    """
    me = f"rank {rank} on {host}"
    events: queue.Queue = queue.Queue()

    def start() -> Program:
        return Program(argv, env, lambda status: events.put(("program", 0, status)),
                       me, log)  # fmt: skip

    program = None
    conn = connect(address, timeout)
    if conn is None:
        reach.release()
        log(f"{me}: rank 0's control address {address} did not answer within {timeout:.0f} s; "
            f"stopping, exiting with {ABORTED}")  # fmt: skip
        return ABORTED
    used = 0
    with conn:
        send(conn, hello(step, size, rank, own_address))
        nodes: dict[str, str] = {}
        threading.Thread(target=_read_head, args=(conn, events, nodes), daemon=True).start()
        kind, _, value = events.get()
        if kind == "probe":
            if learn is not None:
                learn(nodes)
            unreached = reach.check(value)
            send(conn, f"reach {rank} {'ok' if unreached is None else unreached.line()}")
            kind, _, value = events.get()
        reach.release()
        if kind == "release":
            send(conn, f"released {rank}")
            kind, _, value = events.get()
        if kind == "start":
            program = None if argv is None else start()
            kind, _, value = events.get()
        while kind == "program" and server is not None and used < restarts:
            if not _restartable(value, program):
                break
            used += 1
            log(f"{me}: {server} ended with {describe(value)}; restarting it in place "
                f"(restart {used} of {restarts})")  # fmt: skip
            program = start()
            kind, _, value = events.get()
        if kind == "program":
            send(conn, f"done {rank} {value}")
            if server is not None and value == 128 + signal.SIGTERM:
                log(f"{me}: got SIGTERM (Slurm is stopping the step); exiting with {value}")
            elif server is not None:
                after = f" after {used} restarts" if used else ""
                log(f"{me}: {server} ended with {describe(value)}{after}; told rank 0")
            elif value != 0:
                log(f"{me}: program failed with {describe(value)}; told rank 0")
            return value
        if kind == "exit":  # only servers hear it: they run until told
            if program is not None:
                program.stop()
            log(f"{me}: chief ended with exit 0; exiting with 0")
            return 0
        if kind == "other":
            log(f"{me}: {address} is the control port of another step (job.step {value}), not "
                f"of this one ({step}): the two steps' ports collide; stopping, exiting with "
                f"{TRANSIENT} (a requeue or a new submission gets other ports)")  # fmt: skip
            if program is not None:
                program.stop()
            return TRANSIENT
        if kind == "abort":
            log(f"{me}: stopping: {value}; exiting with {ABORTED}")
        else:
            log(f"{me}: lost rank 0's control connection (rank 0 killed or its node lost); "
                f"stopping, exiting with {ABORTED}")  # fmt: skip
        if program is not None:
            program.stop()
        return ABORTED


def _restartable(status: int, program: Program | None) -> bool:
    """A server that died of something other than Slurm stopping the step (SIGTERM)."""
    stopping = program is not None and signal.SIGTERM in program.forwarded
    return not stopping and status != 128 + signal.SIGTERM


def _read_head(conn: socket.socket, events: queue.Queue, nodes: dict[str, str]) -> None:
    """The head's lines, as events: probe (after the nodes' addresses, into `nodes`), release
    and start, then the last one: exit, abort, other, or lost (the connection closed)."""
    lines = conn.makefile(encoding="ascii", errors="replace")
    while True:
        try:
            words = lines.readline().split()
        except OSError:  # reset: rank 0's process or node is gone
            words = []
        if len(words) == 3 and words[0] == "node":
            nodes[words[1]] = words[2]
            continue
        if len(words) == 2 and words[0] == "probe":
            events.put(("probe", 0, _seconds(words[1])))
            continue
        if words in (["release"], ["start"]):
            events.put((words[0], 0, None))
            continue
        if words == ["exit", "0"]:
            events.put(("exit", 0, 0))
        elif len(words) == 3 and words[0] == "other":
            events.put(("other", 0, f"{words[1]} of {words[2]} tasks"))
        elif failure := Failure.parse(words):
            events.put(("abort", 0, failure))
        else:
            events.put(("lost", 0, None))
        return


def _seconds(text: str) -> float:
    try:
        return max(float(text), MIN_PROBE_S)
    except ValueError:
        return MIN_PROBE_S
