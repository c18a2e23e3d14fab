"""What the head is given to supervise the step: rank 0's Step (task/run.py makes it from the
plan and the settings). A member's Seat is member.py's: a member imports nothing of rank 0's,
and every task of a large step starts at once on a node's CPUs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .secret import NO_SECRET, Secret


@dataclass(frozen=True)
class Step:
    """The step as rank 0 supervises it."""

    host: str
    port: int
    """rank 0's control port"""
    members: Mapping[int, str]
    """every other task: rank -> host"""
    servers: bool
    """the members are parameter-server ps/worker servers, which run until told; else they run
    programs of their own and report when those end"""
    timeout: float
    """how long members have to check in"""
    others_ended: Path | None = None
    """a file created once every member's program has ended with exit 0 (after Slurm's
    notice: however it ended)"""
    notice_file: Path | None = None
    """a file created when Slurm's notice reaches the step: rank 0's program then leaves last
    whatever its status (program_end.py)"""
    expendable: Mapping[int, str] = field(default_factory=dict)
    """the members the step can lose (worker rank -> "worker I"), as long as one remains"""
    result_file: Path | None = None
    """where to write the step's verdict for the batch script"""
    name: str = "-"
    """JOB.STEP: members of other steps that reach this port are turned away"""
    address: str | None = None
    """rank 0's node address on --network's interface or subnet: every node's is exchanged"""
    secret: Secret = NO_SECRET
    """what a member's hello must prove (secret.py)"""
    learn: Callable[[Mapping[str, str]], None] | None = None
    """given every node's address (Slurm's name -> address), before the reach check: rank 0's
    TF_CONFIG and reach targets on them"""
    save_timeout: float = 300.0
    """after Slurm's notice, how long rank 0 waits for every program to save and end"""
    windows: Mapping[str, float] = field(default_factory=dict)
    """what Slurm leaves a program to save after each kind of notice, where tfslurm-run found
    out ("after a preemption's notice (GraceTime)": 30.0, ...)"""
    job_end: float | None = None
    """when the job's time limit ends it (Unix time), where Slurm says (SLURM_JOB_END_TIME)"""
