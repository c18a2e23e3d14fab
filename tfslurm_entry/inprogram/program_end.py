"""The end of a multi-worker program: every task waits for the others, the leader leaves last.

Why: in TensorFlow 2.21 no MultiWorkerMirroredStrategy task tells the coordination service
(which lives in the coordination leader's process: the chief, else worker 0) that it is
leaving. A worker that exits while the chief still evaluates stops sending heartbeats, and
about ten seconds later the service declares it crashed on every task still running
(``E0000 ... The following tasks are unhealthy (stopped sending heartbeats)``,
tensorflow/tensorflow#58434); a task still running when the leader exits fails its next
heartbeat (``Connection refused``). TensorFlow's source asks programs for a barrier of their
own at the end; users' programs (and TensorFlow's tutorials) have none.

So tfslurm-entry starts a multi-worker step's program with this package's ``autoload/``
directory first on PYTHONPATH and END_BARRIER_VAR set (program_env). Python imports the
sitecustomize there at start-up, in every interpreter the program starts, and it calls
install(): at the interpreter's normal exit, a process that made a multi-worker strategy
(TensorFlow imported, its coordination service configured for two or more tasks) waits at
one barrier with the step's other tasks, and the leader then waits until tfslurm-entry has
seen every other task's program end. A failing program does not wait: an uncaught exception
or sys.exit (exit, quit) with a non-zero status skips it (but 42, TensorFlow's exit once it
saved on Slurm's notice), and a signal ends the process before atexit. (Python gives atexit no
exit status: a bare ``raise SystemExit(3)`` is not seen.)
Programs may still call tfslurm_entry.tf.end_of_job themselves: the barrier is passed once.

Standard library only, and TensorFlow only once it is imported already: every Python the
program starts imports this module.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

BARRIER_ID = "tfslurm/end_of_job"
# Set by tfslurm-entry for a multi-worker step's program: the barrier's timeout in seconds.
END_BARRIER_VAR = "TFSLURM_END_BARRIER"
# Rank 0's program in a multi-worker step gets this variable: the path of a file that appears
# once every other task's program has ended with exit 0, or after Slurm's notice however it
# ended (step/head.py creates it).
OTHERS_ENDED_VAR = "TFSLURM_OTHERS_ENDED"
# And this one: the path of a file that appears when Slurm's notice reached the step. Its
# program then leaves last whatever its exit status (TensorFlow's PreemptionCheckpointHandler
# exits 42 once it saved, on every worker at about the same moment): the coordination service
# lives in the leader's process, and a worker still on its way out when it goes logs
# `Failed to send RPC to coordination service` at E level.
NOTICE_VAR = "TFSLURM_NOTICE"
# TensorFlow's PreemptionCheckpointHandler exits with this status once it saved on the notice
# (off Google's platforms), on every task at the step they agreed: they pass the barrier too, or
# a task that saved quickly would leave while the leader still writes, and ten seconds later the
# service would declare it crashed (`stopped sending heartbeats`, seen with a chief slowed down).
SAVED_EXIT = 42
AUTOLOAD_DIR = Path(__file__).resolve().parent / "autoload"
LINGER_S = 60.0  # how long the leader waits for the others' processes after the barrier

_passed = False  # the barrier was reached in this process (at exit, or by end_of_job)
_exit_status: object = None  # what the program passed to sys.exit, if it called it


def program_env(timeout: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that make a multi-worker program's Pythons load the autoload directory
    (for tfslurm-entry), and end at the barrier unless timeout is 0."""
    path = environ.get("PYTHONPATH")
    env = {"PYTHONPATH": os.pathsep.join([str(AUTOLOAD_DIR), *([path] if path else [])])}
    if timeout:
        env[END_BARRIER_VAR] = str(timeout)
    return env


def install(environ: Mapping[str, str] = os.environ) -> bool:
    """Arrange the barrier at this interpreter's normal exit (from autoload/sitecustomize.py);
    whether it was arranged."""
    timeout = environ.get(END_BARRIER_VAR, "")
    if not timeout.isdigit() or int(timeout) == 0:
        return False
    task = _task(environ.get("TF_CONFIG"))  # read now: a program may change TF_CONFIG later
    marker = environ.get(OTHERS_ENDED_VAR)
    sys.exit = _recording(sys.exit)
    for name in ("exit", "quit"):  # site's exit() and quit(), which some scripts end with
        if callable(getattr(builtins, name, None)):
            setattr(builtins, name, _recording(getattr(builtins, name)))
    atexit.register(_at_exit, int(timeout), task, marker, environ.get(NOTICE_VAR))
    return True


def _recording(exit_):
    """An exit that remembers its status first: atexit cannot see how the program exits."""

    def exit(status: object = None) -> None:
        global _exit_status
        _exit_status = status
        exit_(status)

    return exit


def _task(tf_config: str | None) -> str | None:
    """This task's name in TensorFlow's terms, from TF_CONFIG."""
    try:
        task = json.loads(tf_config or "")["task"]
        return task_name(task["type"], int(task["index"]))
    except (ValueError, KeyError, TypeError):
        return None


def task_name(task_type: str, index: int) -> str:
    """A task as TensorFlow names the coordination leader (/job:worker/replica:0/task:1)."""
    return f"/job:{task_type}/replica:0/task:{index}"


def failing() -> bool:
    """Whether the program is ending in failure: an uncaught exception, or sys.exit with a
    status that is not 0 (sys.exit("message") is status 1)."""
    uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return uncaught is not None or _exit_status not in (None, 0)


def _at_exit(timeout: int, task: str | None, marker: str | None, notice: str | None) -> None:
    if _passed or "tensorflow" not in sys.modules:
        return
    if _exit_status == SAVED_EXIT:  # every task saved and leaves: together, the leader last
        end_here(timeout, task, marker)
    elif notice and Path(notice).exists():  # stopped by Slurm, not saved: no barrier
        if _leader(task):
            wait_for_others(marker, LINGER_S)
    elif not failing():
        end_here(timeout, task, marker)


def _leader(task: str | None) -> bool:
    """Whether this process is the coordination service's leader (it made a multi-worker
    strategy of two or more tasks, and is the leader the service names)."""
    from tensorflow.python.eager import context

    config = context.context().coordination_service
    return bool(config and config.service_type) and task == config.service_leader


def end_here(timeout: float, task: str | None, marker: str | None, linger: float = LINGER_S):
    """leave() if this process made a multi-worker strategy of two or more tasks: TensorFlow's
    coordination service is configured then, and names the leader."""
    from tensorflow.python.eager import context  # the coordination service's Python handle

    config = context.context().coordination_service
    if config is None or not config.service_type:
        return  # no multi-worker strategy was made in this process
    if sum(job.num_tasks for job in config.coordinated_job_list) < 2:
        return  # one worker: nothing to wait for
    leave(timeout, task is not None and task == config.service_leader, marker, linger)


def leave(timeout: float, leader: bool, marker: str | None, linger: float = LINGER_S) -> None:
    """Wait at the end-of-job barrier with every other task, at most ``timeout`` seconds; the
    leader then waits, at most ``linger`` seconds, until the others' programs have ended, so
    the coordination service outlives them all. Once per process."""
    global _passed
    if _passed:
        return
    _passed = True
    from tensorflow.python.eager import context

    started = time.monotonic()
    try:
        context.context().wait_at_barrier(BARRIER_ID, int(timeout * 1000))
    except Exception as err:  # DeadlineExceeded, or a task found dead: end without them
        waited = time.monotonic() - started
        _say(
            f"gave up waiting for the other tasks after {waited:.0f} s ({_first_sentence(err)}); "
            "this task ends without them"
        )
        return
    if leader:
        wait_for_others(marker, linger)


def wait_for_others(marker: str | None, linger: float, poll: float = 0.05) -> bool:
    """Wait until the file ``marker`` exists, at most ``linger`` seconds; whether it does.

    tfslurm-entry creates it in rank 0's task once every other task's program has ended.
    Without it (not under tfslurm-entry) there is nothing to wait for.
    """
    if not marker:
        return False
    path, deadline = Path(marker), time.monotonic() + linger
    while not path.exists():
        if time.monotonic() >= deadline:
            _say(
                f"other tasks still running {linger:g} s after the end-of-job barrier; "
                "the coordination leader ends anyway"
            )
            return False
        time.sleep(poll)
    return True


def _first_sentence(err: Exception) -> str:
    text = str(err).strip().split(". ")[0].rstrip(".")
    return text or type(err).__name__


def _say(line: str) -> None:
    print(f"tfslurm: end of job: {line}", file=sys.stderr, flush=True)
