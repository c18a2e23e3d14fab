"""What a parameter-server job's ps and worker tasks run: their TensorFlow server's start."""

import pytest

from tfslurm_entry.task.server import interop_env


@pytest.mark.parametrize(
    ("asked", "cpus", "expected"),
    [(None, 1, "2"), ("1", 8, "2"), ("0", 1, "2"), (None, 4, None), ("3", 1, "3"), ("x", 1, "2")],
)
def test_servers_get_at_least_two_inter_op_threads(asked, cpus, expected):
    env = {} if asked is None else {"TF_NUM_INTEROP_THREADS": asked}
    got = interop_env(env, cpus).get("TF_NUM_INTEROP_THREADS")
    assert got == (expected if expected is not None else asked)
