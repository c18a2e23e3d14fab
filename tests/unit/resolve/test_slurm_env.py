"""Rule 1 (hosts and tasks per node) and the bad-input checks of reading the step environment."""

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve.slurm_env import node_distribution, read_step_env


def test_outside_slurm_is_none():
    assert read_step_env({"PATH": "/bin"}) is None


def test_a_podman_container_without_slurms_variables_is_refused_unless_local():
    """Podman passes no host variable unless asked: inside, a Slurm task and a laptop's run
    look the same. Refused with the flag that passes them, unless TFSLURM_LOCAL=1 says it is not
    Slurm's; one SLURM_* variable is enough to tell it is not hidden."""
    with pytest.raises(ConfigError) as caught:
        read_step_env({"PATH": "/bin", "container": "podman"})
    said = str(caught.value)
    assert said.startswith("no SLURM_* variable in this Podman container"), said
    assert "srun podman run -e 'SLURM_*' --network host IMAGE" in said, said
    assert "podman run -e TFSLURM_LOCAL=1 IMAGE" in said, said
    assert read_step_env({"container": "podman", "TFSLURM_LOCAL": "1"}) is None
    assert read_step_env({"container": "podman", "SLURM_JOB_ID": "7"}) is None
    assert read_step_env({"container": "docker"}) is None


def test_a_step_whose_tasks_lack_their_own_variables_is_refused():
    """Slurm 22.05's --container passes srun's variables to each task but not slurmstepd's own
    (seen on its dev cluster): every task would look like the only one and train alone."""
    srun_passed = {
        "SLURM_JOB_ID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NODELIST": "c[1-2]",
        "SLURM_CONTAINER": "/data/tf-slurm.oci",
    }
    with pytest.raises(ConfigError) as caught:
        read_step_env(srun_passed)
    said = str(caught.value)
    assert said.startswith("this task of a 4-task Slurm step has no SLURM_PROCID"), said
    assert "Slurm's --container (/data/tf-slurm.oci) started it without them" in said, said
    assert "srun apptainer run IMAGE PROGRAM" in said, said
    without_container = {k: v for k, v in srun_passed.items() if k != "SLURM_CONTAINER"}
    with pytest.raises(ConfigError, match="passed srun's variables but not slurmstepd's"):
        read_step_env(without_container)
    # A one-task step, a batch script (no step id), an salloc shell: one process, as before.
    assert read_step_env(srun_passed | {"SLURM_STEP_NUM_TASKS": "1"}) is None
    assert read_step_env({"SLURM_JOB_ID": "3", "SLURM_NTASKS": "4"}) is None


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        # TensorFlow's own resolver test cases
        ("n[1-2],m5,o[3-4,6,7-9]", ("n1", "n2", "m5", "o3", "o4", "o6", "o7", "o8", "o9")),
        ("n[0001-0003],m5,o[009-011]", ("n0001", "n0002", "n0003", "m5", "o009", "o010", "o011")),
        # its defects: sorted hosts, one bracket group only, suffix after brackets
        ("n[9-10]", ("n9", "n10")),
        ("n10,n9", ("n10", "n9")),
        ("a[01-02]b[1-2]", ("a01b1", "a01b2", "a02b1", "a02b2")),
        ("n[1-3]-ib", ("n1-ib", "n2-ib", "n3-ib")),
        ("n1,n1", ("n1", "n1")),  # a host listed twice stays twice
    ],
)
def test_nodelist_expands_in_its_own_order(nodelist, hosts):
    env = step_env(nodelist=nodelist, tasks_per_node=f"1(x{len(hosts)})")
    assert read_step_env(env).hosts == hosts


def test_tasks_per_node_repeat_syntax():
    env = step_env(nodelist="n[1-4]", tasks_per_node="3(x2),2,1")
    step = read_step_env(env)
    assert step.tasks_per_host == (3, 3, 2, 1)
    assert step.num_tasks == 9


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ""),
        ("block", "block"),
        ("cyclic:block", "cyclic"),
        ("plane,Pack", "plane"),
        ("block:cyclic:fcyclic", "block"),
        ("arbitrary", "arbitrary"),
    ],
)
def test_node_distribution_is_text_before_first_colon_or_comma(value, expected):
    assert node_distribution(value) == expected


def test_optional_variables_are_read():
    env = step_env(
        procid=1,
        SLURM_LOCALID="1",
        SLURMD_NODENAME="n1",
        SLURM_DISTRIBUTION="plane",
        SLURM_DIST_PLANESIZE="2",
        SLURM_GPUS_PER_TASK="1",
        CUDA_VISIBLE_DEVICES="3",
    )
    step = read_step_env(env)
    assert (step.local_id, step.node_name, step.distribution, step.plane_size) == (
        1,
        "n1",
        "plane",
        2,
    )
    assert step.gpus_bound_by_slurm and step.cuda_visible_devices == "3"
    assert (step.job_id, step.step_id) == (4242, 0)


def _error(env) -> str:
    with pytest.raises(ConfigError) as info:
        read_step_env(env)
    return str(info.value)


@pytest.mark.parametrize(
    "name", ["SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"]
)
def test_missing_step_variable_names_it_and_says_use_srun(name):
    env = step_env()
    del env[name]
    message = _error(env)
    assert f"{name} is not set" in message and "srun" in message


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"SLURM_PROCID": "one"}, "SLURM_PROCID='one' is not an integer"),
        ({"SLURM_PROCID": "-1"}, "SLURM_PROCID='-1' is not an integer"),
        ({"SLURM_PROCID": "4"}, "SLURM_PROCID='4' is out of range for a step of 4 tasks"),
        ({"SLURM_JOB_ID": "12a"}, "SLURM_JOB_ID='12a'"),
        ({"SLURM_STEP_ID": "\u0661"}, "SLURM_STEP_ID='\u0661'"),  # non-ASCII digit
        ({"SLURM_LOCALID": "x"}, "SLURM_LOCALID='x'"),
        ({"SLURM_DIST_PLANESIZE": "0"}, "SLURM_DIST_PLANESIZE='0' is not an integer >= 1"),
        ({"SLURM_STEP_NUM_TASKS": "5"}, "adds up to 4 tasks but SLURM_STEP_NUM_TASKS=5"),
        ({"SLURM_STEP_NODELIST": "n[1-2"}, "SLURM_STEP_NODELIST='n[1-2' is not a valid hostlist"),
        ({"SLURM_STEP_NODELIST": "n[2-1]"}, "SLURM_STEP_NODELIST='n[2-1]' is not a valid"),
        ({"SLURM_STEP_NODELIST": ","}, "SLURM_STEP_NODELIST=',' expands to no hosts"),
        ({"SLURM_STEP_NODELIST": "n 1,n2"}, "invalid host name 'n 1'"),
        ({"SLURM_STEP_NODELIST": "n[1-3]"}, "names 3 hosts but SLURM_STEP_TASKS_PER_NODE='2(x2)'"),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x"}, "SLURM_STEP_TASKS_PER_NODE='2(x' is not a tasks"),
        ({"SLURM_STEP_TASKS_PER_NODE": "4,0"}, "gives a node no tasks"),
        ({"SLURM_STEP_TASKS_PER_NODE": "1(x999999999)"}, "repeats more than"),
    ],
)
def test_bad_values_name_the_variable_and_value(overrides, expected):
    assert expected in _error(step_env(**overrides))


# What srun set in the tasks of real steps on the dev cluster's gpu partition (Slurm 24.11,
# 4 placeholder GPUs per node), see tests/e2e/test_gres.py.
@pytest.mark.parametrize(
    ("variables", "bound"),
    [
        # srun --gres=gpu:2 --gpu-bind=single:1 -n2, task 1
        ({"SLURM_TRES_BIND": "gres/gpu:single:1", "CUDA_VISIBLE_DEVICES": "1"}, True),
        # srun --gpus-per-task=1 -n2, task 0: no SLURM_GPUS_PER_TASK in the task
        (
            {
                "SLURM_TRES_BIND": "gres/gpu:per_task:1",
                "SLURM_TRES_PER_TASK": "gres/gpu=1",
                "CUDA_VISIBLE_DEVICES": "0",
            },
            True,
        ),
        # srun --gres=gpu:4 -n2: every task sees the node's 4
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, False),
        ({"SLURM_TRES_BIND": "gres/gpu:none", "CUDA_VISIBLE_DEVICES": "0,1"}, False),
        ({"SLURM_TRES_BIND": "gres/gpu:verbose,map_gpu:1,0", "CUDA_VISIBLE_DEVICES": "1"}, True),
        # Slurm before 21.08: only SLURM_GPUS_PER_TASK
        ({"SLURM_GPUS_PER_TASK": "1", "CUDA_VISIBLE_DEVICES": "3"}, True),
    ],
)
def test_gpus_bound_per_task_as_slurm_exports_it(variables, bound):
    step = read_step_env(step_env(1, "n1", "2", **variables))
    assert step.gpus_bound_by_slurm is bound
