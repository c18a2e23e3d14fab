"""The site check: one job step that tells an administrator, per node, what would break or slow a
distributed TensorFlow job there, before a user's job meets it.

    srun -N4 --ntasks-per-node=1 apptainer run tf-slurm.sif --site-check /data /scratch

Every task asks its node the questions (questions.py) and holds its task port as a job's task would
(reach.Guard, through task/hold.py). Then each checks in with rank 0 on the control
port; once all have, rank 0 says "probe", every task connects to every other task's port
(reach.check_all) and sends rank 0 its findings and its clock's offset from rank 0's. Rank 0
prints one table, a verdict per node, then the details with what to do, and who can reach the
tasks' TensorFlow ports (outside.py: the network, the partition's ExclusiveUser, and whether
the ports answer where the check was started, asked before "bye"); says "bye" (members hold
their ports until then, so no peer is probed after it closed); exits 1 if any node would break
a job. Its lines (hello, node, probe with rank 0's clock, report, bye) are protocol.py's.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..log import log
from ..resolve import Plan, network, proxy, roles
from ..step import dial, reach
from ..step.dial import Channel
from ..step.protocol import (
    SITE_CHECK,
    Bye,
    Challenge,
    Hello,
    Node,
    Probe,
    ProtocolError,
    Refusal,
    RemoteProtocolError,
    Report,
)
from ..step.secret import HOW_TO_GET_ONE, Secret, load_secret, new_nonce
from ..task.hold import hold_ports
from . import outside, questions
from .questions import FAIL, OK, WARN, Finding

CHECK_IN_S = 60  # how long rank 0 waits for the other tasks (--chief-timeout overrides)
SHOWN_WHEN_OK = ("gpus",)  # what an admin wants to see found, not only what is wrong
COLUMNS = ("names", "reach", "proxy", "ports", "binds", "gpus", "cpus", "clock", "tmpdir", "copy")
NO_REPORT = (
    "its task did not check in with rank 0 in time: it did not start, or cannot reach rank 0's "
    "control port (its own line in the step's output says which)"
)
Row = tuple[str, list[Finding] | None]  # (node, findings); None: the task never reported


class Check(NamedTuple):
    """What each task of the check was given: the step, the paths every job needs, its
    environment, how long rank 0 waits for the others, and the step's secret."""

    plan: Plan
    paths: Sequence[str]
    environ: Mapping[str, str]
    timeout: float
    secret: Secret


def run(plan: Plan, paths: Sequence[str], environ: Mapping[str, str], timeout: float) -> int:
    """Check this task's node and, on rank 0, print the step's table; the exit status."""
    me = plan.me
    if me is None:  # not a step of several tasks: this node alone
        host = environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
        rows = [(host, local_findings(host, paths, environ, []))]
        print(table(rows, header(plan, paths, 1)), flush=True)
        return verdict_status(rows)
    hosts = proxy.step_hosts(t.address for t in plan.tasks)
    address, names = questions.own_address(plan)
    check = Check(plan, paths, environ, timeout, load_secret(environ, plan.step, Path.home()))
    with hold_ports(plan) as held:
        findings = [names, *local_findings(me.host, paths, environ, hosts)]
        if me.rank == 0:
            if check.secret.key is None:
                log(
                    f"rank 0 on {me.host}: this site check has no secret "
                    f"({check.secret.source}): any user who reaches its control port can "
                    f"report as a node; {HOW_TO_GET_ONE}"
                )
            return _head(check, held.control, findings, address)
        return _member(check, findings, address)


def local_findings(
    host: str, paths: Sequence[str], environ: Mapping[str, str], hosts: Sequence[str]
) -> list[Finding]:
    """What the task finds on its node (host) alone; hosts: the step's, for the proxy."""
    return [
        questions.proxy_use(environ, hosts),
        questions.port_range(host),
        questions.binds(paths, environ),
        questions.gpus(environ),
        questions.cpus(environ),
        questions.tmpdir(environ),
        questions.copy_dir(environ),
    ]


def _targets(
    plan: Plan, nodes: Mapping[str, str]
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """Each task's TensorFlow port (rank, address): where --network's addresses are exchanged,
    at its node's (nodes: Slurm's name -> address); and the tasks (rank, host) left out for
    their node having none."""
    exchanged = network.exchanged(plan.network)
    targets, skipped = [], []
    for task in plan.tasks:
        if exchanged and task.host not in nodes:
            skipped.append((task.rank, task.host))
            continue
        address = task.address
        if exchanged:
            address = f"{nodes[task.host]}:{roles.port_of(task.address)}"
        targets.append((task.rank, address))
    return targets, skipped


def _probe_all(plan: Plan, nodes: Mapping[str, str]) -> Finding:
    """Every other task's port, leaving out a node that found no address on --network (its
    names column says why)."""
    every, left_out = _targets(plan, nodes)
    targets = [(rank, address) for rank, address in every if rank != plan.rank]
    skipped = [host for rank, host in left_out if rank != plan.rank]
    unreached = reach.check_all(targets, plan.step, reach.PROBE_S)
    found = questions.reached(plan, unreached, reach.PROBE_S, len(targets))
    if not skipped:
        return found
    level = questions.worst([found.level, WARN])
    unchecked = f"{', '.join(dict.fromkeys(skipped))} not checked: no address on --network"
    return found._replace(level=level, text=f"{found.text}; {unchecked}")


def _head(check: Check, server: socket.socket, own: list[Finding], address: str | None) -> int:
    plan, timeout = check.plan, check.timeout
    deadline = time.monotonic() + timeout
    members, addresses = _gather(server, plan, deadline, check.secret)
    nodes = {plan.tasks[rank].host: a for rank, a in addresses.items()}
    if address:
        nodes[plan.me.host] = address
    lines = [Node(host, a) for host, a in nodes.items()]
    for member in members.values():
        member.send(*lines, Probe(reach.PROBE_S, time.time()))
    reports: dict[int, list[Finding]] = {
        0: [*own, _probe_all(plan, nodes), questions.clock(0.0, plan.me.host)]
    }
    late = time.monotonic() + reach.PROBE_S + timeout
    for rank, member in members.items():
        reports[rank] = _read_report(member, rank, plan.me.host, late)
    seen = _look_from_outside(check, nodes)  # every port still held: before "bye"
    for member in members.values():
        member.send(Bye())
        member.close()
    rows = [
        (t.host if t.local_index == 0 else f"{t.host}/{t.local_index}", reports.get(t.rank))
        for t in plan.tasks
    ]
    partition = check.environ.get("SLURM_JOB_PARTITION")
    notes = outside.exposure(plan.network, partition, check.environ, seen)
    print(table(rows, header(plan, check.paths, len(plan.tasks)), notes), flush=True)
    return verdict_status(rows)


def _look_from_outside(check: Check, nodes: Mapping[str, str]) -> outside.Look | str | None:
    """The listener's look at every task's port, where tfslurm-run started one."""
    where = check.environ.get(outside.ENV, "").strip()
    if not where:
        return None
    targets, _ = _targets(check.plan, nodes)
    return outside.look(where, check.plan.step, targets, check.secret)


def _gather(
    server: socket.socket, plan: Plan, deadline: float, secret: Secret
) -> tuple[dict[int, Channel], dict[int, str]]:
    """Every member's control connection, by rank, as they check in proving the step's secret
    (until the deadline), and the address on --network each sent with its hello."""
    wanted = {t.rank for t in plan.tasks[1:]}
    members: dict[int, Channel] = {}
    addresses: dict[int, str] = {}
    while set(members) != wanted:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        server.settimeout(left)
        try:
            conn, peer = server.accept()
        except OSError:
            continue
        member = Channel(conn, "head", SITE_CHECK)
        nonce = new_nonce()
        member.send(Challenge.now(nonce))
        try:
            hello = member.next(max(deadline - time.monotonic(), 1.0))
        except RemoteProtocolError as err:
            log(f"rank 0 on {plan.me.host}: closed {peer[0]}:{peer[1]}: {err}")
            hello = None
        ours = isinstance(hello, Hello) and hello.same_step(plan.step, len(plan.tasks))
        if ours and not secret.proves(nonce, hello.words(), hello.proof):
            log(
                f"rank 0 on {plan.me.host}: refused a report as rank {hello.rank} from "
                f"{peer[0]}:{peer[1]}: it did not prove the check's secret (not one of its tasks)"
            )
            member.send(Refusal())
        elif ours and hello.rank in wanted:
            members[hello.rank] = member
            if hello.address:
                addresses[hello.rank] = hello.address
            continue
        member.close()  # not a task of this step
    return members, addresses


def _read_report(member: Channel, rank: int, host0: str, deadline: float) -> list[Finding] | None:
    try:
        message = member.next(max(deadline - time.monotonic(), 1.0))
    except RemoteProtocolError as err:
        log(f"rank 0 on {host0}: rank {rank}'s report: {err}")
        return None
    if not isinstance(message, Report):
        return None
    try:
        report = json.loads(message.json)
        findings = [Finding(*item) for item in report["findings"]]
        return [*findings, questions.clock(float(report["skew"]), host0)]
    except (ValueError, TypeError, KeyError):
        return None


def _member(check: Check, own: list[Finding], address: str | None) -> int:
    plan, timeout, secret = check.plan, check.timeout, check.secret
    me = plan.me
    deadline = time.monotonic() + timeout
    conn = dial.connect(plan.control_address, timeout)
    hello = Hello(plan.step, len(plan.tasks), me.rank, address=address)
    channel = None if conn is None else Channel(conn, "member", SITE_CHECK)
    try:
        checked = channel is not None and dial.check_in(
            channel, hello, secret, deadline - time.monotonic()
        )
    except RemoteProtocolError as err:
        channel.close()
        raise ConfigError(
            f"rank {me.rank} on {me.host}: rank 0 at {plan.control_address} said what this task "
            f"cannot read ({err})",
            "every task of the check must run the same kit (the same image)",
        ) from None
    if not checked:
        if channel is not None:
            channel.close()
        raise ConfigError(
            f"rank {me.rank} on {me.host} could not reach rank 0's control port "
            f"{plan.control_address} within {timeout:.0f} s",
            "rank 0's table lists this node as not reporting; check that the nodes reach each "
            "other on the kit's ports",
        )
    with channel:
        return _report(channel, check, own, timeout + reach.PROBE_S)


def _report(channel: Channel, check: Check, own: list[Finding], timeout: float) -> int:
    """After the check-in: the nodes' addresses, the probe, this task's report, then "bye"."""
    plan, me = check.plan, check.plan.me
    nodes: dict[str, str] = {}
    try:
        message = channel.next(timeout)
        while isinstance(message, Node):
            nodes[message.host] = message.address
            message = channel.next(timeout)
    except ProtocolError as err:
        log(f"rank {me.rank} on {me.host}: rank 0 said what this task cannot read ({err})")
        return 1
    if isinstance(message, Refusal):
        raise ConfigError(
            f"rank 0 refused rank {me.rank} on {me.host}: its proof of the check's secret "
            f"({check.secret.source}) is not rank 0's",
            f"every task needs the same one: {HOW_TO_GET_ONE}",
        )
    if not isinstance(message, Probe) or message.clock is None:
        return 1  # rank 0 went away: its own line says why
    skew = time.time() - message.clock  # off by the one-way latency: well under 1 ms
    findings = [*own, _probe_all(plan, nodes)]
    report = {"skew": skew, "findings": [list(f) for f in findings]}
    channel.send(Report(me.rank, json.dumps(report, separators=(",", ":"))))
    with contextlib.suppress(ProtocolError):
        channel.next(timeout)  # "bye", or rank 0 gone: either way the check is over
    return 0


def header(plan: Plan, paths: Sequence[str], count: int) -> str:
    network = f"--network {plan.network!r}" if plan.network else "Slurm's node names"
    task_ports = plan.ports.source if plan.ports else "none (one task)"
    checked = ", ".join(paths) if paths else "none given"
    return (
        f"tfslurm site check of {count} tasks (step {plan.step}): addresses {network}; "
        f"task ports {task_ports}; paths {checked}"
    )


def table(rows: Sequence[Row], title: str, notes: Sequence[str] = ()) -> str:
    """One row per node: its verdict and each check's level; then the details of each finding
    that is not ok, with its fix; the notes (who can reach the ports); the verdict line. Pure."""
    width = max([len("node"), *(len(node) for node, _ in rows)])
    lines = [title, f"{'node':<{width}}  verdict  " + "  ".join(COLUMNS)]
    details: dict[tuple[str, ...], list[str]] = {}  # one line for a finding several nodes share
    for node, findings in rows:
        if findings is None:
            lines.append(f"{node:<{width}}  {FAIL:<7}  " + "  ".join("-" * len(c) for c in COLUMNS))
            details.setdefault((FAIL, "did not report", NO_REPORT), []).append(node)
            continue
        level = {f.check: f.level for f in findings}
        cells = [f"{level.get(c, '-'):<{len(c)}}" for c in COLUMNS]
        verdict = questions.worst(list(level.values()))
        lines.append(f"{node:<{width}}  {verdict:<7}  " + "  ".join(cells).rstrip())
        for f in findings:
            if f.level != OK or f.check in SHOWN_WHEN_OK:
                key = (f.level, f.check, f.text + (f"; fix: {f.fix}" if f.fix else ""))
                details.setdefault(key, []).append(node)
    lines += [
        f"{level} {check} on {', '.join(nodes)}: {text}"
        for (level, check, text), nodes in details.items()
    ]
    lines += notes
    failed = sum(1 for _, f in rows if _verdict(f) == FAIL)
    warned = sum(1 for _, f in rows if _verdict(f) == WARN)
    if failed:
        end = f"verdict: {FAIL}: {failed} of {len(rows)} nodes would break a job"
    else:
        end = f"verdict: {OK}: no node would break a job"
    if warned:
        end += f"; {warned} with warnings"
    return "\n".join([*lines, end])


def _verdict(findings: list[Finding] | None) -> str:
    return FAIL if findings is None else questions.worst([f.level for f in findings])


def verdict_status(rows: Sequence[Row]) -> int:
    """1 if a node would break a job (or did not report), else 0."""
    return 1 if any(_verdict(f) == FAIL for _, f in rows) else 0
