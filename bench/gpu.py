"""docs/benchmarks.md's GPU section: CIFAR-10 on one GPU through the kit versus plain `python`.

    python -m bench.gpu --python PY --out RESULTS.json [--rounds N] [--steps S] [--data DIR]

On a GPU node (the lent GPU machines, a Slurm GPU node). examples/cifar10/train.py runs on one
GPU, the same program with the same data and arguments started two ways, alternating round by
round (kit, plain, kit, plain, ...) so that drift on the machine hits both alike:

- kit: `PY -m tfslurm_entry --require-gpu train.py ...` with the variables of a one-task Slurm
  step (what `srun -n1 apptainer run --nv tf-slurm-gpu.sif --require-gpu train.py` gets): the
  kit checks the GPU, puts NVIDIA's wheels on the program's library path and exec's it;
- plain: `PY train.py ...`, its LD_LIBRARY_PATH naming every lib directory of NVIDIA's CUDA
  wheels, as a user of a split install (`pip install --target`) must set it for TensorFlow to
  find them (docs/gpu-runs/2026-11-26-h200.md); then both load the same libraries.

Two figures, each from its own runs: images/s, train.py's own progress lines after the first
(tracing and warm-up excluded), and process start to the first training step, the parent's
clock from starting the process to reading train.py's `step 1/1` line (--log-every 1, which
would slow the throughput runs: each progress line fetches the loss and writes summaries).
The throughput runs' length comes from an unrecorded warm-up run through the kit (it also
warms the page cache and compiles the kit's bytecode, which the first measured run would pay):
its images/s sizes --steps to about --train-seconds, unless --steps is given.

`--allow-cpu` drops --require-gpu and the need for nvidia-smi: a dry run on a CPU, only to
see the harness work. The results JSON is rewritten after every run, so a run cut short keeps
what it measured; the Markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, BenchError, progress, ratio_summary, summary, write_json

STAGE = "gpu"
TRAIN = ROOT / "examples" / "cifar10" / "train.py"
MAKE_SAMPLE = ROOT / "examples" / "cifar10" / "make_sample.py"
GOAL_RATIO = 0.98  # issue 47: the kit's images/s at least 0.98 of plain python's
# train.py's progress line: "[rank 0 worker 0] step 40/200 loss 2.1 accuracy 0.3 9026 images/s
# ETA 0s" (Task.log and Trainer.run).
PROGRESS = re.compile(
    r"^\[rank \S+ \w+ \d+\] step (?P<step>\d+)/(?P<steps>\d+) loss \S+ accuracy \S+ "
    r"(?P<rate>\d+(?:\.\d+)?) images/s"
)
# TensorFlow's line when it makes the GPU a device (INFO: TF_CPP_MIN_LOG_LEVEL must be 0).
GPU_DEVICE = re.compile(r"Created device \S*device:GPU:\d+")
E_LINE = re.compile(r"^(E\d{4} |Traceback)")  # as tests/gpu/test_tensorflow_gpu.py counts them
PROGRESS_LINES = 20  # per throughput run: the first is dropped, the median of the rest taken
WARMUP_STEPS, WARMUP_LOG_EVERY = 200, 20
SIDES = ("kit", "plain")
# The lib directories of NVIDIA's CUDA wheels (site-packages/nvidia/*/lib), in the order the
# kit's task/cuda.py wheel_lib_dirs() lists them, as seen by the Python measured.
WHEEL_LIBS = (
    "import os, pathlib\n"
    "try:\n    import nvidia\nexcept ImportError:\n    raise SystemExit(0)\n"
    "dirs = sorted(lib for d in nvidia.__path__ for lib in pathlib.Path(d).glob('*/lib')"
    " if lib.is_dir())\n"
    "print(os.pathsep.join(map(str, dirs)))"
)
TF_VERSION = (
    "import importlib.metadata as m\n"
    "for name in ('tensorflow', 'tensorflow-cpu'):\n"
    "    try:\n        print(name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n        pass"
)
SHOW_LIBRARY_PATH = "import os; print(os.environ.get('LD_LIBRARY_PATH', ''))"


# -- pure: train.py's output, statistics, the table ---------------------------------------


@dataclass(frozen=True)
class Line:
    """One progress line of train.py and when the parent read it (seconds after the start)."""

    t: float
    step: int
    steps: int
    images_per_s: float


def progress_lines(lines: Iterable[tuple[float, str]]) -> list[Line]:
    """train.py's progress lines among (seconds since the start, line of stdout) pairs."""
    found = []
    for t, text in lines:
        match = PROGRESS.match(text.strip())
        if match:
            step, steps = int(match["step"]), int(match["steps"])
            found.append(Line(t, step, steps, float(match["rate"])))
    return found


def steady_images_per_s(lines: Sequence[Line]) -> float | None:
    """The median of train.py's own images/s after its first progress line, whose interval
    holds the first step (tracing, cuDNN's choices, the input pipeline filling); None without
    two lines."""
    rates = [line.images_per_s for line in lines[1:]]
    return statistics.median(rates) if rates else None


def first_step_s(lines: Sequence[Line]) -> float | None:
    """When step 1's progress line was read: process start to the first training step done.
    None if step 1 printed no line (--log-every above 1)."""
    return next((line.t for line in lines if line.step == 1), None)


def completed(lines: Sequence[Line]) -> bool:
    """Whether the run printed its last step's line (train.py logs the last step always)."""
    return bool(lines) and lines[-1].step == lines[-1].steps


def stderr_facts(text: str) -> dict:
    """What TensorFlow's log says about a run: the GPU made a device, its error lines."""
    errors = [line for line in text.splitlines() if E_LINE.search(line)]
    return {"gpu_device_created": bool(GPU_DEVICE.search(text)), "e_lines": errors[:20]}


def plan_steps(images_per_s: float, batch: int, seconds: float) -> tuple[int, int]:
    """(--steps, --log-every) for a throughput run of about `seconds` of training at that
    rate, with PROGRESS_LINES progress lines; at least one step per line."""
    steps = max(PROGRESS_LINES, round(images_per_s * seconds / batch))
    log_every = max(1, steps // PROGRESS_LINES)
    return log_every * PROGRESS_LINES, log_every


def log_every_for(steps: int) -> int:
    """--log-every for a given --steps: PROGRESS_LINES lines where there are enough steps."""
    return max(1, steps // PROGRESS_LINES)


def gpus(nvidia_smi: str) -> list[dict]:
    """`nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` as a list of GPUs."""
    found = []
    for row in nvidia_smi.splitlines():
        name, _, driver = row.rpartition(",")
        if name.strip():
            found.append({"name": name.strip(), "driver": driver.strip()})
    return found


def paired(runs: Sequence[dict], kind: str, key: str) -> list[tuple[float, float]]:
    """(kit, plain) values of one figure, round by round, where both runs of a round have it."""
    by_round: dict[int, dict[str, float]] = {}
    for run in runs:
        if run["kind"] == kind and run.get(key) is not None:
            by_round.setdefault(run["round"], {})[run["side"]] = run[key]
    return [(r["kit"], r["plain"]) for _, r in sorted(by_round.items()) if len(r) == 2]


def summarise(runs: Sequence[dict]) -> dict:
    """Each side's medians with their spread, the per-round kit/plain ratio of images/s and
    the per-round kit - plain difference of the start to the first step."""

    def side(name: str, kind: str, key: str) -> dict:
        values = [
            r[key]
            for r in runs
            if r["side"] == name and r["kind"] == kind and r.get(key) is not None
        ]
        return summary(values)

    rates = paired(runs, "throughput", "images_per_s")
    starts = paired(runs, "startup", "first_step_s")
    ratio = ratio_summary([k for k, _ in rates], [p for _, p in rates])
    return {
        **{
            name: {
                "images_per_s": side(name, "throughput", "images_per_s"),
                "first_step_s": side(name, "startup", "first_step_s"),
                "throughput_run_wall_s": side(name, "throughput", "wall_s"),
                "startup_run_wall_s": side(name, "startup", "wall_s"),
            }
            for name in SIDES
        },
        "images_per_s_kit_over_plain": ratio,
        "first_step_kit_minus_plain_s": summary([k - p for k, p in starts]),
        "goal_ratio": GOAL_RATIO,
        "goal_met": ratio["median"] is not None and ratio["median"] >= GOAL_RATIO,
    }


def fmt(stats: Mapping | None, unit: str = "", digits: int = 2) -> str:
    """'1.23 s (IQR 1.10-1.40, range 1.00-1.90, n=5)', as bench/report.py writes figures."""
    if not stats or not stats.get("n"):
        return "not measured"
    m, q1, q3, lo, hi = (stats[k] for k in ("median", "q1", "q3", "min", "max"))
    u = f" {unit}" if unit and unit != "x" else unit
    if stats["n"] == 1:
        return f"{m:.{digits}f}{u} (n=1)"
    d = digits
    return f"{m:.{d}f}{u} (IQR {q1:.{d}f}-{q3:.{d}f}, range {lo:.{d}f}-{hi:.{d}f}, n={stats['n']})"


def markdown(results: Mapping) -> str:
    """The section's table: each side's figures and the comparison, then what and where."""
    s, config = results["summary"], results["config"]
    kit, plain = s["kit"], s["plain"]
    gpu = ", ".join(f"{g['name']} (driver {g['driver']})" for g in results["gpus"])
    if results["dry_run_on_cpu"]:
        gpu = f"{gpu or 'none'}, DRY RUN on the CPU (--allow-cpu): not a measurement"
    kit_name = "`tfslurm-entry`" if results["dry_run_on_cpu"] else "`tfslurm-entry --require-gpu`"
    rows = [
        f"| | kit ({kit_name}) | plain `python` | kit vs plain |",
        "| --- | --- | --- | --- |",
        f"| images/s | {fmt(kit['images_per_s'], '', 0)} | {fmt(plain['images_per_s'], '', 0)} "
        f"| kit ÷ plain: {fmt(s['images_per_s_kit_over_plain'], 'x', 3)} |",
        f"| process start → first training step | {fmt(kit['first_step_s'], 's')} "
        f"| {fmt(plain['first_step_s'], 's')} "
        f"| kit minus plain: {fmt(s['first_step_kit_minus_plain_s'], 's')} |",
        f"| wall time of a throughput run | {fmt(kit['throughput_run_wall_s'], 's', 1)} "
        f"| {fmt(plain['throughput_run_wall_s'], 's', 1)} | |",
    ]
    verdict = "met" if s["goal_met"] else "NOT met"
    if results["dry_run_on_cpu"]:
        verdict = "not judged (dry run)"
    return "\n".join(
        [
            f"GPU: {gpu}; commit {results['commit']}; {results['date']}; "
            f"TensorFlow {results['tensorflow']}; {results['cpus']} CPUs",
            f"train.py --batch-size {config['batch_size']} --steps {config['steps']} "
            f"--log-every {config['log_every']} --threads {config['threads']}; "
            f"{results['rounds_done']} round(s), kit and plain alternating",
            "",
            *rows,
            "",
            f"goal: kit ÷ plain images/s at least {GOAL_RATIO}: {verdict}",
        ]
    )


# -- processes ----------------------------------------------------------------------------


@dataclass
class Ran:
    """One process: its exit status, wall time, stdout lines with the times they were read."""

    returncode: int
    wall_s: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    stderr: str = ""
    timed_out: bool = False


def launch(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Ran:
    """Run argv, stamping each stdout line with the seconds since the process was started
    (read as the program flushes it: train.py prints with flush=True); stderr to a file,
    so a chatty TensorFlow never blocks on a full pipe."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # its own group: a timeout stops whatever it started
        )
        lines: list[tuple[float, str]] = []

        def read() -> None:
            for text in proc.stdout:
                lines.append((time.monotonic() - t0, text.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, 9)
            proc.wait()
        wall = time.monotonic() - t0
        reader.join(timeout=10)
        err.seek(0)
        return Ran(proc.returncode, wall, lines, err.read(), timed_out)


def output(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """A short command's stdout; BenchError naming it if it fails."""
    try:
        proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BenchError(f"`{' '.join(argv)}` could not run: {err}") from err
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise BenchError(f"`{' '.join(argv)}` exited {proc.returncode}: {tail[0]}")
    return proc.stdout.strip()


def commit() -> str:
    """The commit measured: COMMIT where given (the device's copy of the tree has no .git),
    else the working tree's, else unknown."""
    given = os.environ.get("COMMIT", "").strip()
    if given:
        return given[:9]
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else "unknown"


def base_env(gpu: str | None) -> dict[str, str]:
    """What both sides share: this environment without any step's variables, the repository
    on PYTHONPATH (train.py imports tfslurm_entry.tf), tf-keras, TensorFlow's INFO lines (its
    "Created device ... GPU:0" says the GPU was used) and one GPU."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFSLURM_"))}
    env.pop("TF_CONFIG", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["TF_USE_LEGACY_KERAS"] = "1"  # the kit's images set it; train.py needs it
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def one_task_step(host: str) -> dict[str, str]:
    """The variables srun gives the only task of a one-task step (srun -n1): the kit then has
    no cluster to join and exec's the program, after its checks and the library path."""
    return {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": "1",
        "SLURM_STEP_NODELIST": host,
        "SLURM_STEP_TASKS_PER_NODE": "1",
        "SLURM_JOB_ID": "4747",
        "SLURM_STEP_ID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURMD_NODENAME": host,
    }


def node_name() -> str:
    """This node's name as Slurm would list it; localhost where the name is not a plain one
    (a one-task step never uses it, but the kit still parses the node list)."""
    name = socket.gethostname().split(".")[0]
    return name if re.fullmatch(r"[A-Za-z0-9-]+", name) else "localhost"


def with_libraries(env: Mapping[str, str], wheel_dirs: str) -> dict[str, str]:
    """env with every wheel lib directory on LD_LIBRARY_PATH after its own, as the kit puts
    them (task/cuda.py library_path), so both sides load the same CUDA libraries."""
    own = [d for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    extra = [d for d in wheel_dirs.split(os.pathsep) if d and d not in own]
    out = dict(env)
    if own or extra:
        out["LD_LIBRARY_PATH"] = os.pathsep.join(own + extra)
    return out


@dataclass(frozen=True)
class Setup:
    python: str
    data: Path
    batch_size: int
    threads: int
    require_gpu: bool
    timeout: float
    envs: dict[str, dict[str, str]]


def command(setup: Setup, side: str, out_dir: Path, steps: int, log_every: int) -> list[str]:
    """The side's command line for train.py; the same program and arguments on both."""
    train = f"--steps {steps} --batch-size {setup.batch_size} --log-every {log_every} "
    # No checkpoint but the one train.py writes after its last step.
    train += f"--checkpoint-every {10**9} --threads {setup.threads}"
    program = [str(TRAIN), "--data-dir", str(setup.data), "--output-dir", str(out_dir)]
    program += train.split()
    if side == "plain":
        return [setup.python, *program]
    gpu = ["--require-gpu"] if setup.require_gpu else []
    return [setup.python, "-m", "tfslurm_entry", *gpu, *program]


def train_run(setup: Setup, side: str, kind: str, rnd: int, steps: int, log_every: int) -> dict:
    """One run of train.py, from a fresh output directory (a checkpoint there would resume)."""
    out_dir = Path(tempfile.mkdtemp(prefix=f"bench-gpu-{side}-"))
    try:
        ran = launch(
            command(setup, side, out_dir, steps, log_every), setup.envs[side], setup.timeout
        )
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    lines = progress_lines(ran.lines)
    first = first_step_s(lines)
    result = {
        "side": side,
        "kind": kind,
        "round": rnd,
        "steps": steps,
        "log_every": log_every,
        "returncode": ran.returncode,
        "timed_out": ran.timed_out,
        "wall_s": round(ran.wall_s, 3),
        "completed": completed(lines),
        "first_line_s": round(lines[0].t, 3) if lines else None,
        "first_step_s": None if first is None else round(first, 3),
        "images_per_s": steady_images_per_s(lines) if kind != "startup" else None,
        "progress": [[round(x.t, 3), x.step, x.images_per_s] for x in lines],
        **stderr_facts(ran.stderr),
    }
    if ran.returncode != 0 or not lines:
        result["stdout_tail"] = [text for _, text in ran.lines[-10:]]
        result["stderr_tail"] = ran.stderr[-3000:]
    return result


def describe(run: dict) -> str:
    if run["returncode"] != 0 or not run["completed"]:
        why = "timed out" if run["timed_out"] else f"exit {run['returncode']}"
        tail = (run.get("stderr_tail") or "").strip().splitlines()[-1:] or [""]
        return f"FAILED ({why}, {len(run['progress'])} progress lines) {tail[0][:200]}"
    shown = f"wall {run['wall_s']:.1f} s"
    if run["kind"] == "startup":
        shown += f", first step at {run['first_step_s']:.2f} s"
    else:
        rate = run["images_per_s"]
        shown += f", {rate:.0f} images/s" if rate is not None else ", no steady images/s"
    gpu = "GPU device made" if run["gpu_device_created"] else "no GPU device line"
    return f"{shown}; {gpu}; {len(run['e_lines'])} E-lines"


# -- the run ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="the Python with TensorFlow's CUDA build")
    parser.add_argument("--out", type=Path, required=True, help="the results JSON")
    parser.add_argument("--rounds", type=int, default=3, help="kit and plain pairs (3)")
    parser.add_argument(
        "--steps", type=int, help="steps per throughput run (default: about --train-seconds)"
    )
    parser.add_argument("--train-seconds", type=float, default=20.0, help="(20)")
    parser.add_argument("--batch-size", type=int, default=1024, help="(1024)")
    parser.add_argument("--threads", type=int, default=4, help="train.py --threads (4)")
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(tempfile.gettempdir()) / "tfslurm-bench-gpu" / "cifar10",
        help="a CIFAR-10-format sample; made with make_sample.py if it has none",
    )
    parser.add_argument("--run-timeout", type=float, default=300.0, help="per run, seconds")
    parser.add_argument(
        "--budget-s", type=float, help="start no round that would end after this many seconds"
    )
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="a dry run without a GPU: no --require-gpu, no nvidia-smi (not a measurement)",
    )
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "batch_size", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def gpu_facts(allow_cpu: bool) -> tuple[list[dict], str | None]:
    """The node's GPUs (nvidia-smi) and the one to train on; ([], None) in a dry run."""
    if shutil.which("nvidia-smi") is None:
        if allow_cpu:
            return [], None
        raise BenchError(
            "no nvidia-smi here: run on a GPU node (--allow-cpu for a dry run on the CPU)"
        )
    found = gpus(output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]))
    if not found and not allow_cpu:
        raise BenchError("nvidia-smi lists no GPU: run on a GPU node")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return found, (visible or "0") if found else None


def tensorflow_version(python: str) -> str:
    found = output([python, "-c", TF_VERSION])
    if not found:
        raise BenchError(f"{python} has no TensorFlow: give --python one with its CUDA build")
    return found


def make_setup(args: argparse.Namespace, gpu: str | None) -> tuple[Setup, dict]:
    """Both sides' environments, and a check that their programs get one library path."""
    base = base_env(gpu)
    wheel_dirs = output([args.python, "-c", WHEEL_LIBS], base)
    envs = {
        "kit": {**base, **one_task_step(node_name())},
        "plain": with_libraries(base, wheel_dirs),
    }
    setup = Setup(
        python=args.python,
        data=args.data,
        batch_size=args.batch_size,
        threads=args.threads,
        require_gpu=not args.allow_cpu,
        timeout=args.run_timeout,
        envs=envs,
    )
    # What the kit's program gets (the kit exec's it: its own line goes to stderr).
    probe = [args.python, "-m", "tfslurm_entry", args.python, "-c", SHOW_LIBRARY_PATH]
    kit_dirs = [d for d in output(probe, envs["kit"]).split(os.pathsep) if d]
    plain_dirs = [d for d in envs["plain"].get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    libraries = {
        "wheel_lib_dirs": [d for d in wheel_dirs.split(os.pathsep) if d],
        "kit_program_ld_library_path": kit_dirs,
        "plain_ld_library_path": plain_dirs,
        "same": sorted(kit_dirs) == sorted(plain_dirs),
    }
    return setup, libraries


def make_sample(python: str, data: Path) -> None:
    if (data / "cifar-10-batches-bin" / "data_batch_5.bin").is_file():
        return
    progress(STAGE, f"writing a CIFAR-10-format sample into {data}")
    cmd = [python, str(MAKE_SAMPLE), str(data), "--train-per-file", "2000", "--test", "1000"]
    output(cmd)


def measure(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    found, gpu = gpu_facts(args.allow_cpu)
    results: dict = {
        "section": "gpu",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "gpus": found,
        "gpu_used": gpu,
        "dry_run_on_cpu": args.allow_cpu,
        "tensorflow": tensorflow_version(args.python),
        "python": output([args.python, "-c", "import platform; print(platform.python_version())"]),
        "cpus": os.cpu_count(),
        "host": socket.gethostname(),
    }
    progress(STAGE, f"{results['tensorflow']}, GPUs {found or 'none'}, commit {results['commit']}")
    make_sample(args.python, args.data)
    setup, results["libraries"] = make_setup(args, gpu)
    if not results["libraries"]["same"]:
        progress(STAGE, "warning: the two sides' programs get different LD_LIBRARY_PATHs")
    runs: list[dict] = []
    results.update(runs=runs, rounds_done=0)

    warm_steps = min(WARMUP_STEPS, args.steps) if args.steps else WARMUP_STEPS
    warm_every = log_every_for(warm_steps) if args.steps else WARMUP_LOG_EVERY
    progress(STAGE, f"warm-up through the kit, unrecorded, --steps {warm_steps}")
    warm = train_run(setup, "kit", "warmup", 0, warm_steps, warm_every)
    results["warmup"] = warm
    progress(STAGE, f"  {describe(warm)}")
    if warm["returncode"] != 0 or warm["images_per_s"] is None:
        raise BenchError(f"the warm-up run failed: {describe(warm)}")
    if args.steps:
        steps, log_every = args.steps, log_every_for(args.steps)
    else:
        steps, log_every = plan_steps(warm["images_per_s"], args.batch_size, args.train_seconds)
    results["config"] = {
        "batch_size": args.batch_size,
        "steps": steps,
        "log_every": log_every,
        "threads": args.threads,
        "rounds": args.rounds,
        "train_seconds": None if args.steps else args.train_seconds,
        "startup_runs": "--steps 1 --log-every 1",
        "kit": " ".join(command(setup, "kit", Path("OUT"), steps, log_every)),
        "plain": " ".join(command(setup, "plain", Path("OUT"), steps, log_every)),
    }
    write_json(args.out, results)
    for rnd in range(1, args.rounds + 1):
        round_start = time.monotonic()
        for kind, n, every in (("startup", 1, 1), ("throughput", steps, log_every)):
            for side in SIDES:
                progress(STAGE, f"round {rnd}/{args.rounds}: {side}, {kind}, --steps {n}")
                run = train_run(setup, side, kind, rnd, n, every)
                runs.append(run)
                progress(STAGE, f"  {describe(run)}")
                results["summary"] = summarise(runs)
                write_json(args.out, results)
        results["rounds_done"] = rnd
        # Rounds take alike: another one would end about a round's time from now.
        next_end = 2 * time.monotonic() - round_start - started
        if args.budget_s and rnd < args.rounds and next_end > args.budget_s:
            results["stopped_early"] = f"after round {rnd}: another would pass --budget-s"
            progress(STAGE, results["stopped_early"])
            break
    results["summary"] = summarise(runs)
    results["duration_s"] = round(time.monotonic() - started, 1)
    write_json(args.out, results)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        results = measure(args)
    except BenchError as err:
        print(f"bench.gpu: error: {err}", file=sys.stderr)
        return 1
    print(markdown(results), flush=True)
    failed = [r for r in results["runs"] if r["returncode"] != 0 or not r["completed"]]
    if failed:
        print(f"bench.gpu: {len(failed)} run(s) failed; see {args.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
