"""The node's ephemeral port range against the step's ports (task/ephemeral.py)."""

from __future__ import annotations

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.resolve.slurm_env import read_step_env
from tfslurm_entry.task import ephemeral


def sysctl(tmp_path, port_range: str, reserved: str = ""):
    (tmp_path / "ip_local_port_range").write_text(f"{port_range}\n")
    (tmp_path / "ip_local_reserved_ports").write_text(f"{reserved}\n")
    return tmp_path


def plan(port_base=None, **extra):
    env = step_env(0, "n1", "2", **extra)
    return resolve(read_step_env(env), Options(port_base=port_base))


def test_linuxs_default_range_passes_the_default_ports(tmp_path):
    ephemeral.check_ephemeral_range(plan(), sysctl(tmp_path, "32768\t60999"))


def test_a_range_reaching_into_the_default_ports_is_refused_with_the_sysctl(tmp_path):
    with pytest.raises(ConfigError) as err:
        ephemeral.check_ephemeral_range(plan(), sysctl(tmp_path, "15000 65000"))
    message = str(err.value)
    assert "host n1's ephemeral ports 15000-65000 (net.ipv4.ip_local_port_range)" in message
    assert "15000-32767 not reserved" in message
    assert 'sysctl -w net.ipv4.ip_local_port_range="32768 60999"' in message
    assert "sysctl -w net.ipv4.ip_local_reserved_ports=10000-32767" in message


def test_reserving_the_default_range_from_the_kernel_is_enough(tmp_path):
    node = sysctl(tmp_path, "1024 65000", "10000-32767")
    ephemeral.check_ephemeral_range(plan(), node)


def test_chosen_ports_in_the_ephemeral_range_only_warn_once_per_node(tmp_path, capsys):
    ephemeral.check_ephemeral_range(plan(port_base=40000), sysctl(tmp_path, "32768 60999"))
    err = capsys.readouterr().err
    assert "warning: ports 40000-40002 on n1 (--port-base 40000) lie in its ephemeral range" in err
    slurm = plan(SLURM_STEP_RESV_PORTS="40000-40002")
    ephemeral.check_ephemeral_range(slurm, sysctl(tmp_path, "32768 60999"))
    assert "SLURM_STEP_RESV_PORTS=40000-40002" in capsys.readouterr().err


def test_an_unreadable_node_is_not_a_reason_to_refuse(tmp_path):
    ephemeral.check_ephemeral_range(plan(), tmp_path / "missing")
