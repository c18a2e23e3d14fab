"""Rank 0 (the head): run the program and supervise the step, so that its tasks end together.

Without it a finished parameter-server job sits in its allocation until the time limit (ps and
worker servers only ever `join()`), and when one task dies the others wait forever on
collectives or RPCs unless the user remembered `srun --kill-on-bad-exit=1`. So rank 0's
entrypoint runs its program as a child and hears from every member over the control
connections (control.py). Every decision is one log line naming the rank, host and reason.

The head's work, one part each (the start-up phase in startup.py, the counts in books.py):

- Startup: every member must connect within the timeout (CheckIn; one that does not has
  failed), every task reach its peers and free its port; then the programs start.
- Members: the connection of each member still running, and the head's one line to each
  ("exit 0" when the chief is done, or the abort); once the step has failed the head stays to
  tell members that connect late, instead of leaving them to run until their own timeout.
- Losses: a lost worker is not a failure in a parameter-server step that allows restarts:
  the ClusterCoordinator runs its steps on the other workers, so the head logs the loss and
  goes on while the chief, every ps and at least one worker remain.
- Tally: rank 0's program's status, the first failure, and when programs ended well; from it
  the task's exit status and the step's verdict (outcome.py).

A slow end is not a failure: when every other task has ended well and rank 0's program is
still running (a chief evaluating, writing metrics), the head waits for it without limit, as
Slurm itself would. It creates the file named by `others_ended` at that moment, so that the
program can leave last (inprogram/program_end.py: TensorFlow's coordination service lives
in rank 0's process, and a task still running when it goes logs errors).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from enum import Enum

from ..log import Log, timestamp
from .books import Losses, Members, Overdue, Tally, Unended, leave_after
from .control import Arrived, ControlServer, Garbled, Lost, Refused, Stranger
from .inputs import Step
from .notice import Notice, Signals, slurm_signals_whole_step
from .outcome import LOST, Failure, verdict, write_result
from .preempted import Preempted, sooner, task_status
from .program import Command, Program, ProgramEnded
from .protocol import Done, Exit, Heard, Reached, Relay, Released
from .reach import Reach
from .secret import HOW_TO_GET_ONE
from .startup import Startup

# After Slurm's notice, how long rank 0 waits for the members it releases to exit first.
LEAVE_LAST_S = 5.0


class Phase(Enum):
    """Where rank 0 is in the step; its moves are NEXT's, made by Head.enter only."""

    STARTING = "start-up"  # members check in, reach their peers, free their ports
    RUNNING = "running"  # every program runs
    NOTICED = "noticed"  # Slurm's notice: every program saves and ends, rank 0 waits for them
    ENDING = "ending"  # rank 0's program ended, or a task failed: the others end or are told


NEXT = {
    Phase.STARTING: {Phase.RUNNING, Phase.NOTICED, Phase.ENDING},
    Phase.RUNNING: {Phase.NOTICED, Phase.ENDING},
    Phase.ENDING: {Phase.ENDING, Phase.NOTICED},  # a notice while the others end well
    Phase.NOTICED: set(),
}


def run_head(command: Command, step: Step, log: Log, listener: socket.socket, reach: Reach) -> int:
    """Hear every member check in and reach its peers, run the program, end the step
    together; this task's status. listener: the control port, already listening (preflight
    holds it from the start). reach: rank 0's own side of the start-up check (reach.py)."""
    if step.secret.key is None:
        log(
            f"rank 0 on {step.host}: this step has no secret ({step.secret.source}): any user who "
            f"reaches its control port {step.port} can check in as one of its tasks; "
            f"{HOW_TO_GET_ONE}"
        )
    with ControlServer(listener, step.name, len(step.members) + 1, step.secret) as control:
        signals = Signals(lambda signum: control.post(Heard(0, signum)), slurm_signals_whole_step())
        signals.install()

        def start_program() -> Program:
            ended = lambda status: control.post(ProgramEnded(status))  # noqa: E731
            program = Program(command, ended, head.me, log)
            signals.target = program.send
            return program

        head = Head(control, step, log, reach, start_program, signals)
        while head.going:
            for event in control.poll(head.wait_at_most()) or [head.late()]:
                head.handle(event)
        head.release_held()
    status = head.finish()
    if step.result_file is not None:
        if head.phase is Phase.NOTICED:
            line = head.preempted.verdict()
        else:
            line = verdict(status, head.tally.failure, head.losses.lost)
        write_result(step.result_file, line, log)
    return status


class Head:
    """What rank 0 does on each event (run_head's loop): hello, reach, done and lost from
    members, its own reach report and program's end, and a member late past the timeout."""

    def __init__(
        self,
        control: ControlServer,
        step: Step,
        log: Log,
        reach: Reach,
        start_program: Callable[[], Program],
        signals: Signals,
    ) -> None:
        self.step, self.log = step, log
        self.signals = signals
        self.phase = Phase.STARTING
        self.preempted: Preempted | None = None
        """Slurm's notice, once it came (NOTICED)"""
        self.me = f"rank 0 on {step.host}"
        self.reach, self.start_program = reach, start_program
        self.program: Program | None = None
        self.members = Members(control)
        self.startup = Startup(control, step, log, reach, self.members)
        self.losses = Losses(dict(step.expendable))
        self.tally = Tally()
        if not self.startup.checkin.waiting and (failure := self.startup.probe()):
            self._fail(failure)

    def enter(self, phase: Phase) -> None:
        """Move to phase: the one place rank 0's phase changes."""
        if phase not in NEXT[self.phase]:
            raise RuntimeError(f"rank 0 cannot go from {self.phase.value} to {phase.value}")
        self.phase = phase

    @property
    def going(self) -> bool:
        match self.phase:
            case Phase.STARTING | Phase.RUNNING:
                return True
            case Phase.NOTICED:  # Slurm stops every task: none is waited for to start
                ended = self.program is None or self.tally.status is not None
                return not ended or len(self.members) > 0
        # After a failure, keep answering until every member has checked in (or the timeout
        # has passed): one that connects late must hear the abort, not find no one listening
        # and run until its own timeout. Rank 0's program, once stopped, is waited for.
        if self.startup.checkin.waiting:
            return True
        if self.program is not None and self.tally.status is None:
            return True
        return self.tally.failure is None and len(self.members) > 0

    def wait_at_most(self) -> float | None:
        """How long the next poll may wait: until check-in's or the reach reports' deadline,
        or after Slurm's notice, the end of the wait for every program."""
        if self.phase is Phase.NOTICED:
            return self.preempted.wait_at_most()
        return self.startup.wait_at_most()

    def late(self) -> Overdue | Unended:
        """The event for a deadline passing (poll() came back empty)."""
        if self.phase is Phase.NOTICED:
            return Unended()
        return self.startup.late()

    def handle(self, event: object) -> None:
        if isinstance(event, Heard):
            self._noticed(event.rank, event.signum)
        elif self.phase is Phase.NOTICED and isinstance(
            event, ProgramEnded | Done | Lost | Unended
        ):
            self._ended_after_notice(event)
        elif (failed := self._failure(event)) and self.tally.failure is None:
            # Only once the programs run: a task that never checked in, reached its peers or
            # freed its port fails the step (the programs start after all of them have).
            chief_running = self.program is not None and self.tally.status is None
            if self.losses.can_lose(failed.rank, chief_running):
                self.log(f"{self.me}: {self.losses.lose(failed)}")
            else:
                self._fail(failed)
        if self.phase is Phase.STARTING and self.startup.ready:
            self.enter(Phase.RUNNING)
            self.startup.start()
            self.program = self.start_program()

    def _failure(self, event: object) -> Failure | None:
        """Act on an event before Slurm's notice; the failure it is, if it is one."""
        match event:
            case ProgramEnded(status):
                return self._program_ended(status)
            case Arrived(rank, conn):
                return self.startup.hello(rank, conn, self.tally.failure)
            case Reached(rank, unreached):
                return self.startup.reached(rank, unreached, self.tally.failure is not None)
            case Released(rank):
                self.startup.released(rank)
            case Overdue():
                return self.startup.overdue(event)
            case Done(rank, status) if rank in self.members:
                self.members.drop(rank)
                if status != 0:
                    return Failure(rank, self.step.members[rank], status)
                self._ended_well()
            case Lost(rank, why) if rank in self.members:
                self.members.drop(rank)
                return Failure(rank, self.step.members[rank], None, why or LOST)
            case Garbled(peer, error):
                self.log(
                    f"{self.me}: closed a connection from {peer} to the control port: it said "
                    f"what rank 0 cannot read ({error}): not a task of this kit's version"
                )
            case Refused(hello, peer):
                self.log(
                    f"{self.me}: refused a check-in as rank {hello.rank} from {peer}: it did not "
                    "prove the step's secret (not one of this step's tasks); the rank stays free "
                    "for its own task"
                )
            case Stranger(hello):
                self.log(
                    f"{self.me}: turned away rank {hello.rank} of another step (job.step "
                    f"{hello.step} of {hello.size} tasks) that reached this step's control "
                    "port: the two steps' ports collide"
                )
        return None

    def _program_ended(self, status: int) -> Failure | None:
        self.enter(Phase.ENDING)
        self.tally.status = status
        if status != 0:
            return Failure(0, self.step.host, status)
        self.tally.ended_well()
        if self.step.servers:
            lost = f" ({len(self.losses.lost)} lost on the way)" if self.losses.lost else ""
            self.log(
                f"{self.me}: chief program ended with exit 0 after {self.program.seconds:.1f} s "
                f"(at {timestamp(self.tally.ends[-1])}); telling {len(self.members)} servers to "
                "stop" + lost
            )
            self.members.tell_all(Exit(0))
        elif self.startup.checkin.waiting or len(self.members):
            others = len(self.startup.checkin.waiting) + len(self.members)
            self.log(
                f"{self.me}: program ended with exit 0 after {self.program.seconds:.1f} s; "
                f"waiting for {others} other tasks"
            )
        return None

    def _ended_well(self) -> None:
        self.tally.ended_well()
        everyone = not self.startup.checkin.waiting and len(self.members) == 0
        if everyone and self.tally.status is None and self.step.others_ended:
            self.step.others_ended.touch()  # rank 0's program may now leave last

    def _fail(self, failure: Failure) -> None:
        self.enter(Phase.ENDING)
        self.tally.failure = failure
        still = len(self.members) + (self.program is not None and self.tally.status is None)
        if self.program is None:
            self.log(f"{self.me}: {failure}; stopping the step before any program started")
        else:
            self.log(f"{self.me}: {failure}; stopping the step ({still} tasks still running)")
        self.members.tell_all(failure.message())
        self.reach.release()
        if self.program is not None:
            self.program.stop()

    def _noticed(self, rank: int, signum: int) -> None:
        """Slurm's notice, to rank 0 (rank 0) or to a member (which reported it): every
        program gets its SIGTERM once (members their own, or the relay), nobody is stopped;
        before any program started, the step stops. After a failure the step is being stopped
        already (Slurm's SIGTERM may be srun --kill-on-bad-exit's own): it stays a failure."""
        if self.phase is Phase.ENDING and self.tally.failure is not None:
            return
        if rank != 0:
            self.signals.relayed()
        if self.phase is not Phase.NOTICED:
            self.enter(Phase.NOTICED)
            notice = Notice(signum, time.time()) if rank != 0 else self.signals.notice
            self.preempted = Preempted(notice, time.monotonic() + self.step.save_timeout)
            if self.step.notice_file is not None:
                self.step.notice_file.touch()
            started = self.program is not None
            self.log(self.preempted.started_line(self.me, self.step.save_timeout, started))
            left = None if self.step.job_end is None else self.step.job_end - time.time()
            if started and (line := sooner(self.step.save_timeout, self.step.windows, left)):
                self.log(f"{self.me}: {line}")
            self.reach.release()
            if not started:
                self.tally.failure = Failure(0, self.step.host, 128 + signum, "stopped by Slurm")
                self.members.tell_all(self.tally.failure.message())
                return
            self.members.say_all(Relay())
        self.signals.deliver(signum if rank == 0 else None)

    def _ended_after_notice(self, event: object) -> None:
        """A program that ended after the notice (saved, or stopped by it), or the wait for
        the rest passing: they are stopped now."""
        preempted = self.preempted
        match event:
            case ProgramEnded(status):
                self.tally.status = status
                preempted.end(0, status)
                if self.step.servers:  # the chief has saved: the servers may go
                    self.members.tell_all(Exit(0))
            case Done(rank, status) if rank in self.members:
                preempted.held[rank] = self.members.running.pop(rank)
                self._ended_late(rank, status)
            case Lost(rank) if rank in self.members:
                self.members.drop(rank)
                self._ended_late(rank, None)
            case Unended():
                running = self.tally.status is None and self.program is not None
                preempted.unended = [0] * running + sorted(self.members.running)
                self.members.tell_all(Failure(0, self.step.host, None).message())
                if running:
                    self.program.stop()

    def _ended_late(self, rank: int, status: int | None) -> None:
        """A member's program ended after the notice (status None: the member vanished)."""
        self.preempted.end(rank, status)
        if not self.members.running and self.step.others_ended:
            self.step.others_ended.touch()  # rank 0's program may now leave last

    def release_held(self) -> None:
        """The step has ended: the members held after their programs ended may exit, and
        rank 0 leaves after them (srun --kill-on-bad-exit would otherwise stop a member that
        is still on its way out, and say so)."""
        if self.phase is Phase.NOTICED:
            leave_after(list(self.preempted.held.values()), LEAVE_LAST_S)

    def finish(self) -> int:
        """This task's exit status; for a multi-worker step that ended well, rank 0's last
        line first: the spread of the programs' ends. After Slurm's notice: how the programs
        ended, and rank 0's program's status."""
        if self.phase is Phase.NOTICED:
            self.log(self.preempted.ended_line(self.me, self.step.servers))
            if self.tally.status is not None:
                return task_status(self.tally.status)
            return 128 + self.preempted.notice.signum
        ends = self.tally.ends
        if self.tally.failure is None and self.tally.status == 0 and not self.step.servers:
            self.log(
                f"{self.me}: all {len(self.step.members) + 1} programs ended with exit 0, the "
                f"last at {timestamp(ends[-1])} ({ends[-1] - ends[0]:.1f} s after the first)"
            )
        return self.tally.exit_status()
