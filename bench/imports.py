"""Measurement 2a: `import tensorflow` from the shipped SIF, a sandbox of it, and a host venv.

Every task of every job pays this import, so it decides most of a job's start-up. Each sample
is a fresh process that times `import tensorflow` inside Python (perf_counter), so Apptainer's
own start is not in it. Variants, interleaved round by round so load hits them alike:

- the shipped SIF (/data/tf-slurm.sif, lz4: `make sif`'s default), on node c1 as the job user,
  and the same with its bytecode bundle turned off (TFSLURM_BYTECODE_BUNDLE=0);
- the same image squashed with gzip (Apptainer's own default, what the kit shipped before),
  built in the run from the sandbox below: what the compression change bought;
- the SIF through the per-node cache: tfslurm-run's copy of the image on the node (made by a
  one-node job on c1 that holds it while the imports run): what a task of a job that Slurm
  may stop imports from, after the copy (timed too);
- a sandbox directory unpacked from the shipped SIF (`apptainer build --sandbox`) onto /data,
  with and without the bundle;
- the bench host's own virtualenv (no container): the floor.

The SIF is mounted by squashfuse in each process, so its page cache starts cold every time;
the sandbox and the venv are read from the host's warm page cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import jobs, startup
from bench.common import BenchError, Cluster, progress, summary

STAGE = "import"
GZIP_SIF = "/data/bench/tf-slurm-gzip.sif"
CODE = (
    "import time; t = time.perf_counter(); import tensorflow; "
    "print('IMPORT', time.perf_counter() - t)"
)
SIF, SIF_NO_BUNDLE, GZIP, NODE_CACHE, SANDBOX, SANDBOX_NO_BUNDLE, VENV = (
    "SIF (shipped: lz4, bytecode bundle)",
    "SIF, bytecode bundle off",
    "SIF, gzip (Apptainer's default)",
    "SIF through the per-node cache",
    "sandbox directory",
    "sandbox, bytecode bundle off",
    "host venv",
)
NO_BUNDLE = "--env TFSLURM_BYTECODE_BUNDLE=0"


def _parse(output: str, where: str) -> float:
    for line in output.splitlines():
        if line.startswith("IMPORT "):
            return float(line.split()[1])
    raise BenchError(f"`import tensorflow` {where} printed no time:\n{output[-1500:]}")


def in_container(cluster: Cluster, image: str, options: str = "") -> float:
    """Seconds `import tensorflow` took in a fresh `apptainer exec IMAGE python` on c1."""
    out = cluster.ok(
        f'TF_CPP_MIN_LOG_LEVEL=3 apptainer exec {options} {image} python -c "{CODE}" 2>&1',
        service="c1",
    )
    return _parse(out, f"in {image}")


def in_host_venv() -> float:
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", CODE],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    return _parse(proc.stdout + proc.stderr, f"in {sys.executable}")


def hold_copy(cluster: Cluster) -> tuple[jobs.Job, str, float]:
    """A one-node job on c1 whose tfslurm-run copies the SIF onto the node, as every job of
    the kit's does where squashfuse mounts it, and holds the copy (scancel the job after: the
    copy goes with it): (the job, the copy's image directory, the copy's seconds as
    tfslurm-run says them)."""
    out = cluster.ok(
        "sbatch --parsable -N1 -w c1 -o /data/bench/out/copy-%j.out /data/bin/tfslurm-run "
        f"--copy yes --run-dir /data/bench/runs/copy --entry '/data/bench/hold.sh {{image}}' "
        f"{jobs.SIF} hold"
    )
    job = jobs.Job(id=out.strip().split(";")[0], submitted=time.time())
    output = f"/data/bench/out/copy-{job.id}.out"
    if jobs.wait_until(cluster, job, f"grep -q '^COPY ' {output}", 300) != "met":
        cluster.run(f"scancel {job.id}")
        raise BenchError(f"the image was not copied:\n{cluster.ok(f'cat {output}')}")
    log = cluster.ok(f"cat {output}")
    directory = next(line.split()[1] for line in log.splitlines() if line.startswith("COPY "))
    return job, directory, startup.copied(log) or float("nan")


def measure(cluster: Cluster, rounds: int, warmup: bool = True, gzip: bool = True) -> dict:
    """warmup and gzip off (the smoke mode): no unrecorded first round, no gzip SIF (the
    section's longest step, about a minute on 2 cores)."""
    progress(STAGE, f"unpacking {jobs.SIF} into {jobs.SANDBOX}")
    unpack_s = startup.make_sandbox(cluster)
    gzip_build_s = None
    if gzip:
        progress(STAGE, f"squashing the sandbox with gzip into {GZIP_SIF}")
        gzip_build_s = cluster.seconds(
            f"apptainer build --force --mksquashfs-args '-comp gzip -b 128K' {GZIP_SIF} "
            f"{jobs.SANDBOX}"
        )
    images = ((SIF, jobs.SIF), (GZIP, GZIP_SIF)) if gzip else ((SIF, jobs.SIF),)
    sizes = {name: int(cluster.ok(f"stat -c %s {path}")) for name, path in images}
    sizes[SANDBOX] = int(cluster.ok(f"du -sb {jobs.SANDBOX} | cut -f1"))
    progress(STAGE, f"copying {jobs.SIF} onto c1 with tfslurm-run (a job holds the copy)")
    holder, cache, cache_unpack_s = hold_copy(cluster)
    runners = {
        SIF: lambda: in_container(cluster, jobs.SIF),
        SIF_NO_BUNDLE: lambda: in_container(cluster, jobs.SIF, NO_BUNDLE),
        **({GZIP: lambda: in_container(cluster, GZIP_SIF)} if gzip else {}),
        NODE_CACHE: lambda: in_container(cluster, cache),
        SANDBOX: lambda: in_container(cluster, jobs.SANDBOX),
        SANDBOX_NO_BUNDLE: lambda: in_container(cluster, jobs.SANDBOX, NO_BUNDLE),
        VENV: in_host_venv,
    }
    samples: dict[str, list[float]] = {name: [] for name in runners}
    try:
        if warmup:  # one unrecorded import each: the files into the host's page cache
            for run in runners.values():
                run()
        for r in range(rounds):
            t0 = time.monotonic()
            for name, run in runners.items():
                samples[name].append(run())
            progress(
                STAGE,
                f"round {r + 1}/{rounds} ({time.monotonic() - t0:.0f} s): "
                + ", ".join(f"{name} {s[-1]:.2f} s" for name, s in samples.items()),
            )
    finally:
        cluster.run(f"scancel {holder.id}; rm -rf {jobs.SANDBOX} {GZIP_SIF}")
    base = samples[SANDBOX]
    return {
        "import_s": {name: summary(s) for name, s in samples.items()},
        "over_sandbox": {
            name: summary([a / b for a, b in zip(s, base, strict=True)])
            for name, s in samples.items()
            if name != SANDBOX
        },
        "bytes": sizes,
        "sandbox_unpack_s": unpack_s,
        "node_cache_unpack_s": cache_unpack_s,
        "gzip_build_s": gzip_build_s,
        "rounds": rounds,
    }
