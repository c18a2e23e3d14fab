"""Rules 3 and 4: addresses, roles and the cluster spec."""

import pytest

from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import roles


def test_address_is_host_and_the_port_of_its_local_index():
    assert roles.addresses(["a", "a", "b", "b"], [0, 1, 0, 1], [8888, 8889, 8890]) == [
        "a:8888",
        "a:8889",
        "b:8888",
        "b:8889",
    ]


def test_addresses_follow_a_port_list_with_gaps():
    assert roles.addresses(["a", "a", "a"], [0, 1, 2], [12998, 12999, 12000]) == [
        "a:12998",
        "a:12999",
        "a:12000",
    ]


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
