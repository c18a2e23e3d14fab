"""Properties over generated inputs: placement is a bijection, bad input stays an exit-2 error."""

import contextlib
import io
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fake_slurm import step_env
from tfslurm_entry.cli import main, run
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve.placement import local_indices, place_ranks

counts_st = st.lists(st.integers(1, 6), min_size=1, max_size=8)
methods_st = st.sampled_from(["", "block", "cyclic", "plane"])


@given(counts=counts_st, method=methods_st, plane=st.integers(1, 5))
def test_placement_is_a_bijection_onto_the_declared_slots(counts, method, plane):
    slots = place_ranks(counts, method, plane)
    assert len(slots) == sum(counts)
    assert Counter(slots) == Counter({i: c for i, c in enumerate(counts)})


@given(counts=counts_st, method=methods_st, plane=st.integers(1, 5))
def test_local_indices_number_each_hosts_ranks_from_zero(counts, method, plane):
    hosts = [f"h{i}" for i in range(len(counts))]
    slots = place_ranks(counts, method, plane)
    local = local_indices(hosts, slots)
    for i in range(len(hosts)):
        assert [local[r] for r, s in enumerate(slots) if s == i] == list(range(counts[i]))


@given(counts=counts_st)
def test_cyclic_first_round_visits_every_host_in_order(counts):
    slots = place_ranks(counts, "cyclic")
    assert slots[: len(counts)] == list(range(len(counts)))


@given(counts=counts_st, plane=st.integers(1, 5))
def test_plane_of_one_is_cyclic_and_huge_plane_is_block(counts, plane):
    assert place_ranks(counts, "plane", 1) == place_ranks(counts, "cyclic")
    assert place_ranks(counts, "plane", 100) == place_ranks(counts, "block")


junk = st.text(alphabet="n0123456789[]-,()x: abc", max_size=16)
maybe = st.one_of(st.none(), junk)
VARS = [
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_DISTRIBUTION",
    "SLURM_DIST_PLANESIZE",
    "SLURM_LOCALID",
    "SLURMD_NODENAME",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "CUDA_VISIBLE_DEVICES",
    "TFSLURM_STRATEGY",
    "TFSLURM_NUM_PS",
    "TFSLURM_PORT_BASE",
    "TFSLURM_GPUS_PER_TASK",
]


@settings(max_examples=400, deadline=None)
@given(values=st.fixed_dictionaries({name: maybe for name in VARS}), base=st.booleans())
def test_bad_strings_only_ever_end_as_the_exit_2_error(values, base):
    env = step_env(**{k: v for k, v in values.items() if v is not None})
    for name, value in values.items():
        if value is None and base:
            env.pop(name, None)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = run(["--print-config"], env)
        except ConfigError:
            code = 2
    assert code in (0, 2)


@settings(max_examples=100, deadline=None)
@given(
    argv=st.lists(
        st.sampled_from(
            [
                "--ps",
                "--port-base",
                "--gpus-per-task",
                "--strategy",
                "-1",
                "0",
                "x",
                "65536",
                "parameter-server",
                "--print-config",
                "--explain",
            ]
        ),
        max_size=5,
    )
)
def test_bad_options_are_exit_2_never_a_traceback(argv):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--print-config"], step_env())
    assert code in (0, 2)
