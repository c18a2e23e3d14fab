"""Rules 3 and 4: addresses, default ports, roles and the cluster spec."""

import pytest

from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import roles


def test_address_is_host_and_port_base_plus_local_index():
    assert roles.addresses(["a", "a", "b", "b"], [0, 1, 0, 1], 8888) == [
        "a:8888",
        "a:8889",
        "b:8888",
        "b:8889",
    ]


def test_port_overflow_says_which_base_fits():
    with pytest.raises(ConfigError, match=r"reaches port 65537.*65532 or lower"):
        roles.addresses(["a"] * 4, [0, 1, 2, 3], 65534)


def test_default_port_base_is_deterministic_and_in_range():
    for job in (0, 1, 4242, 10**9, 2**32 - 1):
        for step in (0, 3, 4294967294):  # 4294967294 is the batch step's id
            base = roles.default_port_base(job, step)
            assert base == roles.default_port_base(job, step)
            assert roles.PORT_MIN <= base < roles.PORT_MAX
            assert base + roles.PORT_STRIDE <= roles.PORT_MAX


def test_default_port_windows_of_neighbouring_jobs_and_steps_never_overlap():
    bases = [roles.default_port_base(job, step) for job in range(7000, 7040) for step in range(16)]
    assert len(set(bases)) == len(bases)
    assert all(abs(x - y) >= roles.PORT_STRIDE for x in bases[:50] for y in bases[:50] if x != y)


def test_multi_worker_every_rank_is_a_worker():
    assert roles.assign_roles(3, "multi-worker") == [("worker", 0), ("worker", 1), ("worker", 2)]


def test_parameter_server_chief_then_ps_then_workers():
    assert roles.assign_roles(6, "parameter-server", 2) == [
        ("chief", 0),
        ("ps", 0),
        ("ps", 1),
        ("worker", 0),
        ("worker", 1),
        ("worker", 2),
    ]


def test_cluster_spec_lists_each_type_in_rank_order():
    assigned = roles.assign_roles(4, "parameter-server", 1)
    spec = roles.cluster_spec(assigned, ["h0:1", "h1:1", "h2:1", "h3:1"])
    assert spec == {"chief": ["h0:1"], "ps": ["h1:1"], "worker": ["h2:1", "h3:1"]}
    assert list(spec) == ["chief", "ps", "worker"]


@pytest.mark.parametrize(
    ("tasks", "ps", "expected"),
    [(2, 1, "needs at least 3 tasks"), (4, 3, "needs at least 5 tasks"), (4, 0, "at least one ps")],
)
def test_parameter_server_needs_a_worker_and_a_ps(tasks, ps, expected):
    with pytest.raises(ConfigError, match=expected):
        roles.assign_roles(tasks, "parameter-server", ps)


def test_unknown_strategy():
    with pytest.raises(ConfigError, match="unknown strategy 'horovod'"):
        roles.assign_roles(2, "horovod")
