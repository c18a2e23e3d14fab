"""Whole resolution: the spec's rules end to end, TensorFlow's resolver cases and its defects."""

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env


def plan_for(env, node_gpus=(), **options):
    return resolve(read_step_env(env), Options(**options), node_gpus)


def test_rank_order_follows_nodelist_not_sorted_hosts():
    # TensorFlow's resolver sorts n10 before n9 and tells rank 0 it is n10:8888.
    plan = plan_for(step_env(0, "n[9-10]", "1(x2)"), port_base=8888)
    assert plan.me.address == "n9:8888"
    assert plan.tf_config["cluster"] == {"worker": ["n9:8888", "n10:8888"]}


def test_upstream_simple_case():
    env = step_env(0, "t02n13,t02n41,t02n43", "1(x3)")
    plan = plan_for(env, port_base=8888)
    assert plan.tf_config == {
        "cluster": {"worker": ["t02n13:8888", "t02n41:8888", "t02n43:8888"]},
        "task": {"type": "worker", "index": 0},
    }


def test_upstream_multi_task_per_node_port_increments():
    plan = plan_for(
        step_env(3, "t02n13,t02n41", "2(x2)"), port_base=8888, strategy="parameter-server"
    )
    assert plan.tf_config == {
        "cluster": {
            "chief": ["t02n13:8888"],
            "ps": ["t02n13:8889"],
            "worker": ["t02n41:8888", "t02n41:8889"],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_upstream_nodelists_with_uneven_tasks_per_node():
    env = step_env(8, "n[1-2],m5,o[3-4,6,7-9]", "3(x2),2,1(x6)")
    plan = plan_for(env, port_base=9000)
    hosts = [t.host for t in plan.tasks]
    assert hosts == ["n1"] * 3 + ["n2"] * 3 + ["m5"] * 2 + ["o3", "o4", "o6", "o7", "o8", "o9"]
    assert plan.me.address == "o3:9000" and plan.me.index == 8


def test_cyclic_placement_changes_addresses():
    plan = plan_for(step_env(1, "a,b", "2(x2)", SLURM_DISTRIBUTION="cyclic"), port_base=100)
    assert [t.address for t in plan.tasks] == ["a:100", "b:100", "a:101", "b:101"]
    assert plan.me.host == "b"


def test_plane_placement():
    env = step_env(2, "a,b", "3,2", SLURM_DISTRIBUTION="plane", SLURM_DIST_PLANESIZE="2")
    plan = plan_for(env, port_base=100)
    assert [t.address for t in plan.tasks] == ["a:100", "a:101", "b:100", "b:101", "a:102"]


def test_host_listed_twice_is_not_collapsed():
    plan = plan_for(step_env(0, "n1,n1", "1(x2)"), port_base=500)
    assert plan.tf_config["cluster"]["worker"] == ["n1:500", "n1:501"]


def test_default_ports_from_job_and_step_lie_below_the_ephemeral_range():
    one = plan_for(step_env(0, "n1", "2", SLURM_JOB_ID="77", SLURM_STEP_ID="0"))
    two = plan_for(step_env(0, "n1", "2", SLURM_JOB_ID="77", SLURM_STEP_ID="1"))
    first = one.ports.numbers[0]
    assert first >= 10000 and one.ports.numbers[-1] < 32768
    assert one.ports.kind == "default" and first != two.ports.numbers[0]
    assert [t.address for t in one.tasks] == [f"n1:{first}", f"n1:{first + 1}"]
    assert one.control_address == f"n1:{first + 2}"


def test_no_job_id_and_no_port_base_is_an_error():
    env = step_env()
    del env["SLURM_JOB_ID"]
    with pytest.raises(ConfigError, match=r"SLURM_JOB_ID is not set.*--port-base"):
        plan_for(env)
    assert plan_for(env, port_base=2000).ports.numbers[0] == 2000


def test_ports_reserved_by_slurm_give_task_and_control_ports():
    env = step_env(0, "n[1-2]", "3,1", SLURM_STEP_RESV_PORTS="12005-12008")
    plan = plan_for(env)
    assert [t.address for t in plan.tasks] == ["n1:12005", "n1:12006", "n1:12007", "n2:12005"]
    assert plan.control_address == "n1:12008"
    assert plan.ports.kind == "slurm" and "SLURM_STEP_RESV_PORTS=12005-12008" in plan.ports.source


def test_a_reservation_that_wraps_around_is_used_in_its_order():
    env = step_env(0, "n1", "2", SLURM_STEP_RESV_PORTS="12999,12000-12001")
    plan = plan_for(env)
    assert [t.address for t in plan.tasks] == ["n1:12999", "n1:12000"]
    assert plan.control_address == "n1:12001"


def test_port_base_option_wins_over_the_reservation():
    env = step_env(0, "n1", "2", SLURM_STEP_RESV_PORTS="12005-12007")
    plan = plan_for(env, port_base=20000)
    assert plan.me.address == "n1:20000" and plan.ports.kind == "option"


def test_a_reservation_too_small_names_what_was_reserved_and_what_is_needed():
    env = step_env(0, "n[1-2]", "3,1", SLURM_STEP_RESV_PORTS="12010-12011")
    with pytest.raises(ConfigError) as err:
        plan_for(env)
    assert "Slurm reserved 2 ports for this step (SLURM_STEP_RESV_PORTS=12010-12011)" in str(
        err.value
    )
    assert "needs 4" in str(err.value) and "--resv-ports=N" in str(err.value)


def test_a_malformed_reservation_is_named():
    env = step_env(0, "n1", "2", SLURM_STEP_RESV_PORTS="12010-abc")
    with pytest.raises(ConfigError, match=r"SLURM_STEP_RESV_PORTS='12010-abc' is not a list"):
        plan_for(env)


def test_the_step_knows_its_job_and_step_id():
    assert plan_for(step_env(0, SLURM_JOB_ID="77", SLURM_STEP_ID="3")).step == "77.3"


@pytest.mark.parametrize(
    ("procid", "role", "index"),
    [(0, "chief", 0), (1, "ps", 0), (2, "ps", 1), (3, "worker", 0), (5, "worker", 2)],
)
def test_parameter_server_roles(procid, role, index):
    plan = plan_for(step_env(procid, "n[1-3]", "2(x3)"), strategy="parameter-server", num_ps=2)
    assert (plan.role, plan.me.index) == (role, index)
    assert plan.tf_config["task"] == {"type": role, "index": index}


def test_outside_slurm_and_one_task_steps_have_no_tf_config():
    outside = resolve(None, Options())
    assert (outside.tf_config, outside.cuda_visible_devices, outside.role) == (None, None, "local")
    single = plan_for(step_env(0, "n1", "1"), node_gpus=["0"], strategy="parameter-server")
    assert (single.tf_config, single.cuda_visible_devices, single.rank) == (None, None, 0)


def test_self_check_hostname_mismatch_shows_both_and_distribution():
    env = step_env(0, "n[1-2]", "2(x2)", SLURMD_NODENAME="n2", SLURM_DISTRIBUTION="cyclic")
    with pytest.raises(ConfigError) as info:
        plan_for(env)
    # cyclic puts rank 0 on n1: Slurm says n2, so the variables are not the step's own.
    assert "placed on host n1 (distribution 'cyclic')" in str(info.value)
    assert "SLURMD_NODENAME='n2'" in str(info.value)


def test_self_check_local_id_mismatch():
    env = step_env(1, "n[1-2]", "2(x2)", SLURM_LOCALID="0", SLURMD_NODENAME="n1")
    with pytest.raises(
        ConfigError, match=r"local index 1 on n1 \(distribution 'block'\).*LOCALID=0"
    ):
        plan_for(env)


def test_self_check_passes_when_slurm_agrees():
    env = step_env(3, "n[1-2]", "2(x2)", SLURM_LOCALID="1", SLURMD_NODENAME="n2")
    assert plan_for(env).me.host == "n2"


# Rule 6 through resolution


def test_multi_worker_splits_node_gpus_among_its_tasks():
    env = step_env(1, "n[1-2]", "2(x2)")
    plan = plan_for(env, node_gpus=["4", "5", "6", "7"])
    assert plan.cuda_visible_devices == "6,7"
    assert [t.gpus for t in plan.tasks] == ["4,5", "6,7", "4,5", "6,7"]


def test_parameter_server_chief_and_ps_get_no_gpus_workers_split():
    env = step_env(0, "n[1-2]", "2(x2)")
    plan = plan_for(env, node_gpus=["0", "1"], strategy="parameter-server")
    assert [t.gpus for t in plan.tasks] == ["", "", "0", "1"]


def test_gpus_per_task_option():
    plan = plan_for(step_env(1, "n1", "2"), node_gpus=["0", "1", "2", "3"], gpus_per_task=1)
    assert plan.cuda_visible_devices == "1"


def test_slurm_bound_gpus_are_left_untouched():
    env = step_env(1, "n1", "2", SLURM_GPUS_PER_TASK="1", CUDA_VISIBLE_DEVICES="3")
    plan = plan_for(env, node_gpus=["3"])
    assert plan.cuda_visible_devices is None


def test_slurm_bound_gpus_with_explicit_option_are_split():
    env = step_env(1, "n1", "2", SLURM_GPUS_PER_TASK="2", CUDA_VISIBLE_DEVICES="0,1,2,3")
    plan = plan_for(env, node_gpus=["0", "1", "2", "3"], gpus_per_task=2)
    assert plan.cuda_visible_devices == "2,3"


def test_slurm_bound_chief_still_gets_no_gpus():
    env = step_env(0, "n1", "3", SLURM_GPUS_PER_TASK="1", CUDA_VISIBLE_DEVICES="0")
    plan = plan_for(env, node_gpus=["0"], strategy="parameter-server")
    assert plan.cuda_visible_devices == ""


def test_no_gpus_leaves_visibility_untouched():
    plan = plan_for(step_env(0), node_gpus=[])
    assert plan.cuda_visible_devices is None
    assert all(t.gpus is None for t in plan.tasks)


def test_too_few_gpus_on_this_host_is_an_error():
    with pytest.raises(ConfigError, match="host n1 has 1 GPUs"):
        plan_for(step_env(0, "n1", "2"), node_gpus=["0"])


def test_too_few_gpus_elsewhere_is_left_to_that_host():
    plan = plan_for(step_env(0, "n[1-2]", "1,3"), node_gpus=["0", "1"])
    assert plan.cuda_visible_devices == "0,1"
    assert [t.gpus for t in plan.tasks[1:]] == ["?"] * 3


@pytest.mark.parametrize("strategy", ["multi-worker", "parameter-server"])
def test_control_address_follows_rank_0s_host_ports(strategy):
    env = read_step_env(step_env(2, "n[1-2]", "3,2"))
    assert resolve(env, Options(strategy=strategy, port_base=5000)).control_address == "n1:5003"


def test_control_port_overflow_is_refused():
    env = read_step_env(step_env(0, "n[1-2]", "2(x2)"))
    with pytest.raises(ConfigError, match=r"reaches port 65536.*65533 or lower"):
        resolve(env, Options(strategy="parameter-server", port_base=65534))
