"""--network: the addresses' host names are the nodes' names on the chosen network."""

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.network import check_pattern, names_on
from tfslurm_entry.resolve.slurm_env import read_step_env


def test_a_pattern_names_every_node_in_the_same_order():
    assert names_on(["n10", "n9"], "{host}-ib") == ["n10-ib", "n9-ib"]
    assert names_on(["c1"], "{host}.ib.example.org") == ["c1.ib.example.org"]
    assert names_on(["n10", "n9"], None) == ["n10", "n9"]


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        ("ib0", "has no {host}"),
        ("10.1.0.0/16", "has no {host}"),
        ("{host}_ib", "node c1 would be 'c1_ib'"),
        ("{host}-", "node c1 would be 'c1-'"),
        ("{host}..ib", "node c1 would be 'c1..ib'"),
        ("{host}-{rank}", "node c1 would be 'c1-{rank}'"),
    ],
)
def test_a_pattern_that_makes_no_host_names_is_refused(pattern, said):
    with pytest.raises(ConfigError) as err:
        check_pattern(pattern)
    assert said in err.value.what and "e.g. --network '{host}-ib'" in err.value.hint


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
