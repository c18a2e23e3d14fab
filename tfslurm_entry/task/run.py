"""One task's run, in order: preflight's checks, the ports held, then rank 0's head or a
member (step/), then the program or server (task/__init__.py maps the modules)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError, TransientError
from ..inprogram import program_end
from ..log import log
from ..options import count, option, switch
from ..resolve import Plan, network, roles
from ..resolve.plan import with_addresses
from ..resolve.roles import PARAMETER_SERVER, port_of
from ..step import secret
from ..step.outcome import INTERRUPTED, write_result
from ..step.program import Command, exec_program
from . import addresses, environment, files, hold, preflight, server

# A role's modules are imported where the role starts (_head, _member, _cannot_start): rank 0's
# supervision is no member's, and a task without a cluster (exec_program) needs neither. Every
# task of a large step starts at once on a node's CPUs: each import it skips is its own time.

# How long a task that cannot start tries to tell rank 0 (which may still be starting).
TELL_HEAD_S = 10


@dataclass(frozen=True)
class Settings:
    """The options of the run (not of the resolution): each field is an option (options.py)."""

    chief_timeout: int = option(
        300,
        count,
        "every task waits at most S seconds for the step's other tasks to start (rank 0 for "
        "the rest, the rest for rank 0); then the step is stopped, naming who is missing",
        metavar="S",
    )
    worker_restarts: int = option(
        3,
        count,
        "parameter-server jobs: a worker's server that dies is restarted in place up to N "
        "times, and the step goes on without a worker lost for good while the chief, every ps "
        "and another worker remain; 0 stops the step at the first loss",
        metavar="N",
    )
    result_file: str | None = option(
        None,
        str,
        "rank 0 writes how the step ended there, one line starting with completed, "
        "preempted (Slurm's notice stopped it once the programs saved: requeue it), interrupted "
        "(a task was killed or lost, or found its port taken: a requeue may help) or failed (a "
        "program's own error); tfslurm-run keeps it in the run directory and acts on it",
        metavar="PATH",
    )
    require_gpu: bool = option(
        False,
        switch,
        "a task whose role computes (every multi-worker task, a parameter-server worker) stops "
        "with one error line before it starts when TensorFlow would run on the CPU (no GPUs "
        "given, no driver, a CUDA library missing, the CPU image)",
        switch=True,
    )
    save_timeout: int = option(
        300,
        count,
        "after Slurm's notice (preemption, the time limit's --signal, a requeue: every program "
        "gets SIGTERM once), rank 0 waits at most S seconds for every program to save and end, "
        "stopping none, then stops the rest; --result-file then says preempted",
        metavar="S",
    )
    end_barrier: int = option(
        3600,
        count,
        "multi-worker jobs: a Python program that ends normally waits at most S seconds for "
        "every other task's program to end too, and rank 0's leaves last, so TensorFlow "
        "reports no task as crashed; a failing one does not wait; 0 turns it off",
        metavar="S",
        old_vars=("TFSLURM_END_BARRIER_S",),
    )


def run_task(
    plan: Plan, program: str, args: Sequence[str], environ: Mapping[str, str], settings: Settings
) -> int:
    """Start this task's role as the plan says and supervise it; its exit status."""
    me = plan.me
    with contextlib.ExitStack() as held:
        try:
            argv, env, notes = preflight.prepare(
                plan, program, args, environ, settings.result_file, settings.require_gpu
            )
            if me is None:
                _announce(plan, notes)
                exec_program(argv, env)  # no cluster to join: the program is the task
            step_secret = _step_secret(plan, environ)
            own_address = addresses.network_address(plan)
            ports = held.enter_context(hold.hold_ports(plan))
            tmpdir = held.enter_context(files.task_tmpdir(plan.step, me, environ))
        except ConfigError as err:
            _cannot_start(plan, err, settings, environ)
            raise
        env["TMPDIR"] = str(tmpdir)
        env.pop(secret.ENV, None)  # the step's, not the program's
        if plan.strategy != PARAMETER_SERVER:
            env.update(program_end.program_env(settings.end_barrier, env))
        _announce(plan, notes)
        ready = Ready(Command(argv, env), environ, tmpdir, ports, own_address, step_secret)
        if me.rank == 0:
            return _head(plan, settings, ready)
        return _member(plan, settings, ready)


class Ready(NamedTuple):
    """This task, prepared: what its role runs and what it holds until it ends."""

    command: Command
    """the user's program with the role's environment (TF_CONFIG, TMPDIR, ...)"""
    environ: Mapping[str, str]
    """the task's own environment: the role's is made again from it once --network's
    addresses are known"""
    tmpdir: Path
    held: hold.Held
    own_address: str | None
    """this node's address on --network's interface or subnet, sent with the check-in"""
    secret: secret.Secret
    """what the check-in proves (step/secret.py)"""


def _step_secret(plan: Plan, environ: Mapping[str, str]) -> secret.Secret:
    """The step's secret (TFSLURM_STEP_SECRET, else the user's key file, else none)."""
    return secret.load_secret(environ, plan.step, Path.home())


def _learner(
    plan: Plan, env: dict[str, str], ready: Ready
) -> Callable[[Mapping[str, str]], None] | None:
    """With --network an interface or a subnet: what the task does with every node's address
    from the check-in: its role's TF_CONFIG and proxy exemption, and its reach targets, on
    them. None otherwise (the plan has the addresses already)."""
    if not network.exchanged(plan.network):
        return None

    def learn(nodes: Mapping[str, str]) -> None:
        placed = with_addresses(plan, nodes)
        env.update(environment.network_env(placed, ready.environ))
        targets = roles.reach_targets(placed.tasks, placed.strategy, placed.rank)
        ready.held.reach.targets[:] = [(t.rank, t.address) for t in targets]
        if plan.rank == 0:
            shown = ", ".join(f"{host} {address}" for host, address in list(nodes.items())[:4])
            more = f" and {len(nodes) - 4} more" if len(nodes) > 4 else ""
            log(f"addresses on --network {plan.network}: {shown}{more}")

    return learn


def _cannot_start(
    plan: Plan, err: ConfigError, settings: Settings, environ: Mapping[str, str]
) -> None:
    """A task that cannot start says so where the step will hear it: a member tells rank 0,
    which stops the step now instead of waiting for it until the check-in timeout; rank 0
    writes the verdict a batch script reads (interrupted: a requeue may help) for a port that
    was taken."""
    me = plan.me
    if me is None:
        return
    if me.rank != 0:
        from ..step import dial
        from ..step.protocol import Hello

        hello = Hello(plan.step, len(plan.tasks), me.rank)
        timeout = min(settings.chief_timeout, TELL_HEAD_S)
        try:
            step_secret = _step_secret(plan, environ)
        except ConfigError:
            return  # its own error is the one said
        dial.tell_head(hello, plan.control_address, err.exit_code, step_secret, timeout)
    elif settings.result_file and isinstance(err, TransientError):
        line = f"{INTERRUPTED}: rank 0 on {me.host} could not start: {err.what}"
        write_result(Path(settings.result_file), line, log)


def _announce(plan: Plan, notes: Sequence[str]) -> None:
    """The line each task logs before it starts: who it is, where, and what it may use; then
    its notes (preflight.prepare: rank 0's on the proxy and Keras, any task's on its GPUs)."""
    me = plan.me
    if me is None:
        log("no TF_CONFIG (not a multi-task Slurm step); running the program as is")
    else:
        gpus = "untouched" if me.gpus is None else (me.gpus or "none")
        group = "" if me.component is None else f" het group {me.component}"
        log(
            f"rank {me.rank}/{len(plan.tasks)} host {me.host}{group} role {me.task_type} "
            f"index {me.index} addr {me.address} gpus {gpus}"
        )
    for note in notes:
        log(note)


def _head(plan: Plan, settings: Settings, ready: Ready) -> int:
    """Rank 0 runs the program: the chief of a parameter-server job, or worker 0."""
    from ..step.head import run_head
    from ..step.inputs import Step

    env, tmpdir = ready.command.env, ready.tmpdir
    servers = plan.strategy == PARAMETER_SERVER
    others_ended = None if servers else tmpdir / "others-ended"
    notice_file = None if servers else tmpdir / "notice"
    if others_ended:
        env[program_end.OTHERS_ENDED_VAR] = str(others_ended)
        env[program_end.NOTICE_VAR] = str(notice_file)
    expendable = {}
    if servers and settings.worker_restarts > 0:
        expendable = {t.rank: f"worker {t.index}" for t in plan.tasks if t.task_type == "worker"}
    step = Step(
        host=plan.me.host,
        port=port_of(plan.control_address),
        members={t.rank: t.host for t in plan.tasks[1:]},
        servers=servers,
        timeout=settings.chief_timeout,
        others_ended=others_ended,
        notice_file=notice_file,
        expendable=expendable,
        result_file=Path(settings.result_file) if settings.result_file else None,
        name=plan.step,
        address=ready.own_address,
        secret=ready.secret,
        learn=_learner(plan, env, ready),
        save_timeout=settings.save_timeout,
        windows=_kill_windows(ready.environ),
        job_end=_number(ready.environ.get("SLURM_JOB_END_TIME")),
    )
    return run_head(ready.command, step, log, ready.held.control, ready.held.reach)


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _kill_windows(environ: Mapping[str, str]) -> dict[str, float]:
    """What Slurm leaves a program to save after each kind of notice, where tfslurm-run read it
    from Slurm's configuration (TFSLURM_GRACE_TIME, TFSLURM_KILL_WAIT)."""
    named = {
        "TFSLURM_GRACE_TIME": "after a preemption's notice (GraceTime)",
        "TFSLURM_KILL_WAIT": "after scancel's or scontrol requeue's (KillWait)",
    }
    found = {what: _number(environ.get(var)) for var, what in named.items()}
    return {what: seconds for what, seconds in found.items() if seconds is not None}


def _member(plan: Plan, settings: Settings, ready: Ready) -> int:
    """Every other task: a multi-worker task runs the program; a parameter-server job's ps or
    worker runs a TensorFlow server until the chief is done (a worker's, restarted in place)."""
    from ..step.member import Seat, run_member

    me = plan.me
    command = ready.command
    seat = Seat(
        rank=me.rank,
        host=me.host,
        address=plan.control_address,
        step=plan.step,
        size=len(plan.tasks),
        timeout=settings.chief_timeout,
        save_timeout=settings.save_timeout,
        own_address=ready.own_address,
        secret=ready.secret,
    )
    if plan.strategy == PARAMETER_SERVER:
        command = server.command(me, command.env)
        restarts = settings.worker_restarts if me.task_type == "worker" else 0
        seat = seat._replace(server=f"{me.task_type} {me.index} server", restarts=restarts)
    seat = seat._replace(command=command, learn=_learner(plan, command.env, ready))
    return run_member(seat, log, ready.held.reach)
