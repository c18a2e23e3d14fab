"""What every benchmark section shares: progress lines, statistics, the machine, the cluster."""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from bench.repo import ROOT as ROOT  # every bench module takes the root from here

# The same variable devcluster.py and the e2e tests honour: a second cluster beside the default.
PROJECT = os.environ.get("TFSLURM_DEV_PROJECT", "tfslurm-dev")
JOB_USER = "runner"
_T0 = time.monotonic()


class BenchError(Exception):
    """A benchmark cannot go on; the message says why and what to do."""


def progress(stage: str, message: str) -> None:
    """One line per stage with the time since the run started (like containers/buildtool.py)."""
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {stage}: {message}", flush=True)


def summary(samples: Sequence[float]) -> dict:
    """Median with its spread (quartiles, min, max) and n: how every figure is reported."""
    values = sorted(float(s) for s in samples)
    if not values:
        return {
            "n": 0,
            "median": None,
            "q1": None,
            "q3": None,
            "min": None,
            "max": None,
            "samples": [],
        }
    q1, _, q3 = (
        statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    )
    return {
        "n": len(values),
        "median": statistics.median(values),
        "q1": q1,
        "q3": q3,
        "min": values[0],
        "max": values[-1],
        "samples": values,
    }


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> dict:
    """Per-pair ratios of side-by-side samples (a_i / b_i), summarised like any sample."""
    return summary([a / b for a, b in zip(numerators, denominators, strict=True) if b > 0])


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _command(cmd: Sequence[str]) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _field(path: str, prefix: str, parse):
    """parse() of the first line of the file that starts with prefix; None if there is none."""
    return next((parse(line) for line in _read(path).splitlines() if line.startswith(prefix)), None)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def host_machine() -> dict:
    """The host the figures were taken on; load and other clusters say how shared it was."""
    cpu = _field("/proc/cpuinfo", "model name", lambda v: v.split(":", 1)[1].strip())
    mem_kb = _field("/proc/meminfo", "MemTotal:", lambda v: int(v.split()[1])) or 0
    os_name = _field("/etc/os-release", "PRETTY_NAME=", lambda v: v.split("=", 1)[1].strip('"'))
    projects = _command(["docker", "ps", "--format", '{{.Label "com.docker.compose.project"}}'])
    return {
        "cpu_model": cpu or platform.processor(),
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "os": os_name or platform.system(),
        "python": platform.python_version(),
        "docker": _command(["docker", "version", "--format", "{{.Server.Version}}"]),
        "compose": _command(["docker", "compose", "version", "--short"]),
        "load_average_at_start": load_average(),
        "compose_projects_running": sorted({p for p in projects.split() if p}),
    }


class Cluster:
    """Shell commands on the dev cluster's containers (compose project PROJECT), via docker exec."""

    def __init__(self, project: str = PROJECT) -> None:
        self.project = project
        self._containers: dict[str, str] = {}

    def container(self, service: str) -> str:
        """The service's container id, looked up once: every `docker` call costs the 2-core host
        CPU that the jobs being measured would otherwise have."""
        if service not in self._containers:
            self._containers[service] = self._find(service)
        return self._containers[service]

    def _find(self, service: str) -> str:
        found = _command(
            [
                "docker",
                "ps",
                "-q",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
                "--filter",
                f"label=com.docker.compose.service={service}",
            ]
        )
        if not found:
            raise BenchError(
                f"no running {service} container in compose project {self.project}; start the "
                f"cluster with `TFSLURM_DEV_PROJECT={self.project} make dev-cluster cifar10-sample`"
            )
        return found.split()[0]

    def run(
        self, command: str, service: str = "login", user: str = JOB_USER, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        def attempt() -> subprocess.CompletedProcess:
            exec_ = ["docker", "exec", "-u", user, "-w", "/data", self.container(service)]
            return subprocess.run(
                [*exec_, "bash", "-lc", command],
                capture_output=True,
                text=True,
                timeout=timeout,
            )

        proc = attempt()
        if proc.returncode != 0 and "No such container" in proc.stderr:
            self._containers.pop(service, None)  # recreated by compose: look it up again
            proc = attempt()
        return proc

    def ok(self, command: str, **kwargs) -> str:
        proc = self.run(command, **kwargs)
        if proc.returncode != 0:
            raise BenchError(
                f"`{command}` on the cluster exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
        return proc.stdout

    def seconds(self, command: str, service: str = "c1") -> float:
        """Wall-clock seconds a shell command took on a node, timed there (its output dropped)."""
        out = self.ok(
            f"a=$EPOCHREALTIME; {command} >/dev/null 2>&1; b=$EPOCHREALTIME; echo $a $b",
            service=service,
        ).split()
        return float(out[1]) - float(out[0])

    def copy_in(self, source: Path, target: str) -> None:
        """Copy a local file or directory onto the shared /data, owned by the job user."""
        login = self.container("login")
        self.ok(f"rm -rf {shlex.quote(target)}", user="root")  # else a directory nests
        subprocess.run(
            ["docker", "cp", str(source), f"{login}:{target}"], check=True, capture_output=True
        )
        self.ok(f"chown -R {JOB_USER}:{JOB_USER} {shlex.quote(target)}", user="root")

    def versions(self) -> dict:
        return {
            "apptainer": self.ok("apptainer --version").strip(),
            "slurm": self.ok("sinfo -V").strip(),
            "node_cpus_on_paper": self.ok("sinfo -p debug --noheader -o %c").strip(),
        }


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
