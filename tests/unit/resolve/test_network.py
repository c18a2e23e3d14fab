"""--network: the addresses' hosts are the nodes' names on the chosen network (a pattern), or
their addresses there (an interface or a subnet: exchanged at the check-in)."""

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.network import (
    INTERFACE,
    PATTERN,
    SUBNET,
    check_pattern,
    kind,
    names_on,
)
from tfslurm_entry.resolve.plan import with_addresses
from tfslurm_entry.resolve.slurm_env import read_step_env


def test_a_pattern_names_every_node_in_the_same_order():
    assert names_on(["n10", "n9"], "{host}-ib") == ["n10-ib", "n9-ib"]
    assert names_on(["c1"], "{host}.ib.example.org") == ["c1.ib.example.org"]
    assert names_on(["n10", "n9"], None) == ["n10", "n9"]


@pytest.mark.parametrize(
    ("network", "expected"),
    [
        ("{host}-ib", PATTERN),
        ("ib0", INTERFACE),
        ("enp65s0f1", INTERFACE),
        ("10.1.0.0/16", SUBNET),
        ("10.1.2.3/16", SUBNET),
    ],
)
def test_the_three_forms(network, expected):
    assert kind(network) == expected


@pytest.mark.parametrize(
    ("network", "said"),
    [
        ("10.1.2.3", "is one address, not a network"),
        ("10.1.0.0/33", "is not a subnet"),
        ("fd00::/64", "IPv6 subnets are not supported yet"),
        ("infiniband-port0", "is not a pattern with {host}, an interface name or a subnet"),
        ("ib 0", "is not a pattern with {host}, an interface name or a subnet"),
        ("{host}_ib", "node c1 would be 'c1_ib'"),
    ],
)
def test_anything_else_is_refused_naming_the_three_forms(network, said):
    with pytest.raises(ConfigError) as err:
        kind(network)
    assert said in err.value.what
    assert "('{host}-ib'), its interface name (ib0) or its subnet (10.1.0.0/16)" in err.value.hint


def test_an_interface_or_a_subnet_keeps_slurms_names_until_the_check_in():
    assert names_on(["n10", "n9"], "ib0") == ["n10", "n9"]
    env = read_step_env(step_env(1, "n[1-2]", "2(x2)"))
    plan = resolve(env, Options(port_base=7000, network="10.1.0.0/16"))
    assert plan.tf_config["cluster"] == {"worker": ["n1:7000", "n1:7001", "n2:7000", "n2:7001"]}
    placed = with_addresses(plan, {"n1": "10.1.0.5", "n2": "10.1.0.6"})
    assert placed.tf_config["cluster"] == {
        "worker": ["10.1.0.5:7000", "10.1.0.5:7001", "10.1.0.6:7000", "10.1.0.6:7001"]
    }
    assert placed.tf_config["task"] == {"type": "worker", "index": 1}
    assert placed.control_address == plan.control_address == "n1:7002"  # before any address
    with pytest.raises(
        ConfigError,
        match=r"rank 0 sent no address on --network '10.1.0.0/16' "
        "for n2",
    ):
        with_addresses(plan, {"n1": "10.1.0.5"})


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("ib0", "has no {host}"),
        ("{host}_ib", "node c1 would be 'c1_ib'"),
        ("{host}-", "node c1 would be 'c1-'"),
        ("{host}..ib", "node c1 would be 'c1..ib'"),
        ("{host}-{rank}", "node c1 would be 'c1-{rank}'"),
    ],
)
def test_a_pattern_that_makes_no_host_names_is_refused(pattern, said):
    with pytest.raises(ConfigError) as err:
        check_pattern(pattern)
    assert said in err.value.what and "pattern with {host} ('{host}-ib')" in err.value.hint


def test_tf_config_and_rank_0s_control_address_use_the_network_names():
    env = read_step_env(step_env(2, "n[1-2]", "2(x2)"))
    plan = resolve(env, Options(strategy="parameter-server", port_base=7000, network="{host}-ib"))
    assert plan.tf_config["cluster"] == {
        "chief": ["n1-ib:7000"],
        "ps": ["n1-ib:7001"],
        "worker": ["n2-ib:7000", "n2-ib:7001"],
    }
    assert plan.control_address == "n1-ib:7002"
    # Slurm's names stay what the kit's own lines and checks speak of
    assert [t.host for t in plan.tasks] == ["n1", "n1", "n2", "n2"]


def test_without_network_the_addresses_are_slurms_node_names():
    plan = resolve(read_step_env(step_env(0, "n[1-2]", "1(x2)")), Options(port_base=7000))
    assert plan.tf_config["cluster"] == {"worker": ["n1:7000", "n2:7000"]}
    assert plan.control_address == "n1:7001" and plan.network is None
