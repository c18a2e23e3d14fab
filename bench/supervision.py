"""Step supervision at scale, simulated on localhost: how long check-in, exit and abort take.

A step of N tasks is played on one machine. Rank 0 is the real `tfslurm-entry` (its own
process, fake Slurm variables for a step of N tasks on the node "localhost"), so the head is
exactly what runs on a cluster. The N-1 members are run_member (step/member.py), the real member
code, as threads: N-1 Python processes do not fit on a 2-core, 24 GiB machine at N = 4096, so
they are packed PER_PROCESS to a process. A thread runs what a member's entrypoint runs after
its program has started, which is all the protocol sees. The one member that fails in the
abort scenario is a real `tfslurm-entry` process whose program exits 3.

Scenarios (each with every member starting before rank 0 listens, as srun starts them):
- exit: a parameter-server step; the chief's program exits 0 once every member has checked in,
  and every member (a ps/worker server) must hear "exit 0".
- abort: a multi-worker step; once every member has checked in, one member's program exits 3,
  and every other member must hear the abort.

Measured: check-in (rank 0 listening -> the last member checked in, from rank 0's own log
line), fan-out (rank 0's decision -> the last member heard it, wall clock on one machine; the
abort's decision is when this process read rank 0's line, or the first member heard it if that
was earlier), the whole step's end, and rank 0's peak memory (its ru_maxrss).

    python -m bench.supervision --tasks 16 256 1024 4096     # prints JSON
    python -m bench.supervision member ...                    # one member process (internal)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from bench.common import ROOT, BenchError, progress, summary
from bench.localstep import JOB, free_port_base, step_env
from tfslurm_entry.step import dial, reach
from tfslurm_entry.step.member import Seat, run_member
from tfslurm_entry.step.outcome import ABORTED
from tfslurm_entry.step.protocol import (
    Abort,
    Challenge,
    Connection,
    Ended,
    Exit,
    Hello,
    Probe,
    ProtocolError,
    Reached,
    Release,
    Released,
    Start,
    port_greeting,
)
from tfslurm_entry.step.secret import NO_SECRET

# Members per process: real member code runs two threads per member, and past about 64 threads
# a process's GIL hand-offs, not rank 0, set the pace; the event loop takes many more.
PER_PROCESS = {"threads": 64, "protocol": 512}
MEMBERS = tuple(PER_PROCESS)
SCENARIOS = ("exit", "abort")
TIMEOUT_S = 120  # a scenario that has not ended by then has failed
LOST = -1  # a member's status when rank 0 closed its connection without a word
CHECKED_IN = re.compile(r"all (\d+) tasks checked in ([\d.]+) s after rank 0 listened")
CHIEF_ENDED = re.compile(r"chief program ended with exit 0 .*\(at (\S+)\)")
STOPPING = re.compile(r"rank (\d+) on \S+ failed with exit 3; stopping the step")


def port_base(tasks: int) -> int:
    """A port base with the rank-0 port and the control port (base + tasks) free: the step's
    whole window, free right now."""
    return free_port_base(tasks + 1)


def gate_program(gate: Path, status: int) -> list[str]:
    """A program that waits until the file gate exists, then exits with status."""
    return ["/bin/sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.02; done; exit {status}"]


# ---- one member process: many members as threads -------------------------------------------


def answer_probes(address: str, ranks: Sequence[int], tasks: int) -> None:
    """Listen on each simulated member's TensorFlow port and answer rank 0's start-up check
    (step/reach.py) as that member's guard would, from one thread: rank 0 is the real entrypoint
    and checks its peers before its program starts. A rank's port is base + rank (one node)."""
    base = int(address.rsplit(":", 1)[1]) - tasks
    sel = selectors.DefaultSelector()
    for rank in ranks:
        try:
            sock = socket.create_server(("", base + rank), backlog=64)
        except OSError:  # taken by something else: rank 0 then names it, as it should
            continue
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, port_greeting(f"{JOB}.0", rank))

    def serve() -> None:
        while True:
            for key, _ in sel.select():
                if key.data is None:  # an answered probe: closed once the prober has
                    with contextlib.suppress(OSError):
                        if not key.fileobj.recv(256):
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                    continue
                with contextlib.suppress(OSError):
                    conn, _ = key.fileobj.accept()
                    conn.send(key.data)
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ, None)

    threading.Thread(target=serve, daemon=True).start()


def run_members(address: str, ranks: Sequence[int], tasks: int, timeout: float, out: Path) -> None:
    """Run run_member for each rank in a thread; write when each one heard rank 0's
    verdict, and its exit status."""
    answer_probes(address, ranks, tasks)
    threading.stack_size(256 * 1024)  # thousands of threads: keep the reserved stacks small
    heard: dict[int, float] = {}
    status: dict[int, int] = {}

    def member(rank: int) -> None:
        said: list[str] = []

        def log(message: str) -> None:
            heard.setdefault(rank, time.time())
            said.append(message)

        step = f"{JOB}.0"  # members with nothing to run (no argv), no peers to reach
        seat = Seat(
            rank=rank,
            host="localhost",
            address=address,
            step=step,
            size=tasks,
            timeout=timeout,
            save_timeout=timeout,
        )
        status[rank] = run_member(seat, log, reach.Reach(None, [], step))
        if said and "lost rank 0's control connection" in said[0]:
            status[rank] = LOST  # not told: rank 0 went away

    threads = [threading.Thread(target=member, args=(r,), daemon=True) for r in ranks]
    for thread in threads:
        thread.start()
    out.with_suffix(".ready").touch()  # every member is trying to reach rank 0
    for thread in threads:
        thread.join(TIMEOUT_S)
    out.write_text(json.dumps({"heard": heard, "status": status}))


def run_protocol(address: str, ranks: Sequence[int], tasks: int, timeout: float, out: Path) -> None:
    """The members' side of the protocol for every rank from one event loop, as cheaply as
    Python allows, so that what is measured is rank 0: the same lines, the same connection
    attempts with dial.py's jittered backoff and per-attempt timeout, no threads; every
    member answers rank 0's challenge with its hello and reports its peers reached when rank 0
    says "probe". The step has no secret (rank 0 takes "-" as the proof): section 8 times the
    proof with real entrypoints."""
    answer_probes(address, ranks, tasks)
    host, port = address.rsplit(":", 1)
    found = socket.getaddrinfo(host, int(port), socket.AF_INET, socket.SOCK_STREAM)[0]
    sel = selectors.DefaultSelector()
    rng = random.Random()
    pauses = {r: dial.pauses(rng) for r in ranks}
    due = {r: time.monotonic() for r in ranks}  # rank -> when its next attempt starts
    heard: dict[int, float] = {}
    status: dict[int, int] = {}
    talks: dict[int, Connection] = {}  # rank -> its side of the conversation
    deadline = time.monotonic() + timeout

    def attempt(rank: int) -> None:
        sock = socket.socket(found[0], found[1], found[2])
        sock.setblocking(False)
        sock.connect_ex(found[4])
        sel.register(sock, selectors.EVENT_WRITE, (rank, time.monotonic() + dial.CONNECT_TIMEOUT_S))

    def retry(sock: socket.socket, rank: int) -> None:
        sel.unregister(sock)
        sock.close()
        due[rank] = time.monotonic() + next(pauses[rank])

    out.with_suffix(".ready").touch()
    while len(status) < len(ranks) and time.monotonic() < deadline:
        now = time.monotonic()
        for rank in [r for r, at in due.items() if at <= now]:
            del due[rank]
            attempt(rank)
        wait = min(due.values(), default=now + 0.05) - now
        for key, mask in sel.select(max(min(wait, 0.05), 0)):
            sock, (rank, give_up) = key.fileobj, key.data
            if mask & selectors.EVENT_WRITE:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    retry(sock, rank)
                    continue
                sel.modify(sock, selectors.EVENT_READ, (rank, None))  # rank 0's challenge next
                talks[rank] = Connection("member")
            else:
                try:
                    data = sock.recv(256)
                except OSError:
                    data = b""
                talk, said = talks[rank], None
                try:
                    for said in talk.events(data):
                        if isinstance(said, Challenge):
                            hello = Hello(f"{JOB}.0", tasks, rank)
                            sock.send(talk.send(dial.signed(hello, said.nonce, NO_SECRET)))
                        elif isinstance(said, Probe):
                            sock.send(talk.send(Reached(rank, None)))
                        elif isinstance(said, Release):
                            sock.send(talk.send(Released(rank)))
                        elif not isinstance(said, Start):
                            break  # the last line (exit, abort), or the end of the connection
                    else:
                        continue  # more to come
                except ProtocolError:
                    said = Ended()
                heard[rank] = time.time()
                told = isinstance(said, Exit | Abort)
                status[rank] = LOST if not told else 0 if isinstance(said, Exit) else ABORTED
                sel.unregister(sock)
                sock.close()
        now = time.monotonic()
        for key in list(sel.get_map().values()):
            rank, give_up = key.data
            if give_up is not None and now > give_up:
                retry(key.fileobj, rank)
    out.write_text(json.dumps({"heard": heard, "status": status}))


# ---- the orchestrator -----------------------------------------------------------------------


class Head:
    """Rank 0's real entrypoint, its stderr read line by line and stamped on arrival."""

    def __init__(self, argv: list[str], env: dict[str, str], on_line) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[tuple[float, str]] = []
        self.on_line = on_line
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.peak_kib = 0
        threading.Thread(target=self._watch_memory, daemon=True).start()

    def _watch_memory(self) -> None:
        """Rank 0's peak resident memory (VmHWM) as last seen before it ended. Not the
        rusage of wait4: that counts the parent's pages the child shared between fork and
        exec, here this whole benchmark's."""
        status = Path(f"/proc/{self.proc.pid}/status")
        while not self.lines:  # until its first line: exec'd by then, its memory its own
            time.sleep(0.005)
        while self.proc.returncode is None:
            try:
                found = re.search(r"VmHWM:\s+(\d+) kB", status.read_text())
            except OSError:
                return
            if found:
                self.peak_kib = max(self.peak_kib, int(found.group(1)))
            time.sleep(0.02)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip()))
            self.on_line(line)

    def wait(self) -> tuple[int, int]:
        """(exit status, peak resident memory in KiB) once rank 0's entrypoint has ended."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            pid, wait_status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(wait_status)
                self.reader.join(5)
                self.cpu_s = usage.ru_utime + usage.ru_stime
                return self.proc.returncode, self.peak_kib
            time.sleep(0.05)
        self.proc.kill()
        raise BenchError(f"rank 0 did not end within {TIMEOUT_S} s:\n{self.text()}")

    def text(self) -> str:
        return "\n".join(line for _, line in self.lines[-20:])

    def find(self, pattern: re.Pattern) -> tuple[float, re.Match] | None:
        for at, line in self.lines:
            if match := pattern.search(line):
                return at, match
        return None


def simulate(tasks: int, scenario: str, workdir: Path, members_as: str = "protocol") -> dict:
    """One step of `tasks` tasks on localhost; its figures (see the module's docstring)."""
    if scenario not in SCENARIOS:
        raise ValueError(scenario)
    workdir.mkdir(parents=True, exist_ok=True)
    gate = workdir / "gate"
    gate.unlink(missing_ok=True)
    base = port_base(tasks)
    address = f"localhost:{base + tasks}"  # the plan's control address for this layout
    failing = tasks // 2 if scenario == "abort" else None
    simulated = [r for r in range(1, tasks) if r != failing]
    size = PER_PROCESS[members_as]
    groups = [simulated[i : i + size] for i in range(0, len(simulated), size)]
    members = []
    for i, ranks in enumerate(groups):
        out = workdir / f"members-{i}.json"
        out.unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "bench.supervision",
            "member",
            "--as",
            members_as,
            "--address",
            address,
            "--first",
            str(ranks[0]),
            "--count",
            str(len(ranks)),
            "--step-tasks",
            str(tasks),
            "--out",
            str(out),
        ]
        if failing is not None and ranks[0] < failing <= ranks[-1]:
            argv += ["--skip", str(failing)]
        out.with_suffix(".ready").unlink(missing_ok=True)
        members.append((subprocess.Popen(argv, cwd=ROOT), out))
    entry = [sys.executable, "-m", "tfslurm_entry"]
    real_member = None
    if failing is not None:
        real_member = subprocess.Popen(
            [*entry, *gate_program(gate, 3)],
            env=step_env(tasks, failing, base, TIMEOUT_S),
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
        )
    strategy = ["--strategy", "parameter-server"] if scenario == "exit" else []
    program = gate_program(gate, 0) if scenario == "exit" else ["/bin/sleep", "300"]

    def open_gate(line: str) -> None:
        if CHECKED_IN.search(line):
            gate.touch()

    deadline = time.monotonic() + TIMEOUT_S
    while not all(out.with_suffix(".ready").exists() for _, out in members):
        if time.monotonic() > deadline:
            raise BenchError(f"member processes not started within {TIMEOUT_S} s")
        time.sleep(0.02)
    t0 = time.time()
    head = Head([*entry, *strategy, *program], step_env(tasks, 0, base, TIMEOUT_S), open_gate)
    status, maxrss_kib = head.wait()
    for proc, _ in members:
        proc.wait(TIMEOUT_S)
    if real_member is not None:
        real_member.wait(TIMEOUT_S)
    ended = time.time()
    heard: dict[int, float] = {}
    statuses: dict[int, int] = {}
    for _, out in members:
        if not out.exists():
            raise BenchError(f"a member process wrote no results ({out}):\n{head.text()}")
        data = json.loads(out.read_text())
        heard.update({int(k): v for k, v in data["heard"].items()})
        statuses.update({int(k): v for k, v in data["status"].items()})
    checked = head.find(CHECKED_IN)
    if checked is None:
        raise BenchError(f"{scenario}, {tasks} tasks: not every member checked in:\n{head.text()}")
    want = 0 if scenario == "exit" else ABORTED
    wrong = {r: s for r, s in statuses.items() if s != want}
    if len(statuses) != len(simulated) or wrong:
        raise BenchError(
            f"{scenario}, {tasks} tasks: {len(simulated) - len(statuses)} members "
            f"did not end, {len(wrong)} ended wrongly ({dict(list(wrong.items())[:5])})"
        )
    if scenario == "exit":
        found = head.find(CHIEF_ENDED)
        decided = datetime.fromisoformat(found[1].group(1)).timestamp() if found else None
    else:
        found = head.find(STOPPING)
        # Read from rank 0's output after rank 0 wrote it, so possibly after a member heard
        # the abort (seen: 23 us later): no member hears it before rank 0 decides.
        decided = min(found[0], *heard.values()) if found else None
        if found is None or int(found[1].group(1)) != failing:
            raise BenchError(
                f"abort, {tasks} tasks: rank 0 did not name rank {failing}:\n{head.text()}"
            )
    if decided is None:
        raise BenchError(f"{scenario}, {tasks} tasks: rank 0 logged no decision:\n{head.text()}")
    return {
        "tasks": tasks,
        "scenario": scenario,
        "checkin_s": float(checked[1].group(2)),
        "fanout_s": max(heard.values()) - decided,
        "step_s": ended - t0,
        "rank0_maxrss_mib": maxrss_kib / 1024,
        "rank0_cpu_s": head.cpu_s,
        "rank0_status": status,
        "member_processes": len(members),
    }


def _line(r: int, rounds: int, one: dict, kind: str) -> str:
    return (
        f"round {r + 1}/{rounds}, {one['tasks']} tasks, members as {kind}, {one['scenario']}: "
        f"check-in {one['checkin_s']:.2f} s, fan-out {one['fanout_s']:.3f} s, "
        f"rank 0 {one['rank0_maxrss_mib']:.0f} MiB"
    )


FIGURES = ("checkin_s", "fanout_s", "step_s", "rank0_maxrss_mib", "rank0_cpu_s")


def measure(
    task_counts: Sequence[int], rounds: int, workdir: Path, kinds: Sequence[str] = MEMBERS
) -> dict:
    """Every kind of member, scenario and size, `rounds` times, interleaved; summaries as
    result[kind][scenario][tasks][figure]."""
    runs: dict = {k: {s: {str(n): [] for n in task_counts} for s in SCENARIOS} for k in kinds}
    for r in range(rounds):
        for tasks in task_counts:
            for kind in kinds:
                for scenario in SCENARIOS:
                    one = simulate(tasks, scenario, workdir / f"{kind}-{scenario}-{tasks}", kind)
                    runs[kind][scenario][str(tasks)].append(one)
                    progress("supervision", _line(r, rounds, one, kind))
    result: dict = {"per_process": PER_PROCESS, "rounds": rounds, "task_counts": list(task_counts)}
    for kind, by_scenario in runs.items():
        result[kind] = {
            scenario: {
                size: {key: summary([one[key] for one in ones]) for key in FIGURES}
                for size, ones in by_size.items()
            }
            for scenario, by_size in by_scenario.items()
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    m = sub.add_parser("member", help="(internal) one process of simulated members")
    m.add_argument("--address", required=True)
    m.add_argument("--first", type=int, required=True)
    m.add_argument("--count", type=int, required=True)
    m.add_argument("--step-tasks", type=int, required=True)
    m.add_argument("--skip", type=int, action="append", default=[])
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--as", dest="members_as", choices=MEMBERS, default="protocol")
    parser.add_argument("--tasks", type=int, nargs="+", default=[16, 256, 1024, 4096])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--as", dest="kinds", choices=MEMBERS, action="append")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tfslurm-supervision"))
    args = parser.parse_args(argv)
    if args.command == "member":
        ranks = [
            r
            for r in range(args.first, args.first + args.count + len(args.skip))
            if r not in args.skip
        ]
        run = run_members if args.members_as == "threads" else run_protocol
        run(args.address, ranks, args.step_tasks, TIMEOUT_S, args.out)
        return 0
    try:
        result = measure(args.tasks, args.rounds, args.workdir, args.kinds or MEMBERS)
        print(json.dumps(result, indent=1))
    except BenchError as err:
        print(f"bench.supervision: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
