"""Stamp when the first Python in a benchmark task (tfslurm-entry's) started; children skip it."""

import os
import time

if "BENCH_T_PYTHON" not in os.environ:
    os.environ["BENCH_T_PYTHON"] = repr(time.time())
    print(
        f'BENCH {{"event":"python_start","t":{os.environ["BENCH_T_PYTHON"]},'
        f'"rank":{os.environ.get("SLURM_PROCID", "0")},'
        f'"host":"{os.environ.get("SLURMD_NODENAME", "")}"}}',
        flush=True,
    )
