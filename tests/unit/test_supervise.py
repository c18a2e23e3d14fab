"""Server shutdown protocol on real localhost sockets and real child processes (no TensorFlow)."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.fake_slurm import step_env
from tfslurm_entry import supervise
from tfslurm_entry.errors import ConfigError
from tfslurm_entry.resolve import Options, resolve
from tfslurm_entry.slurm_env import read_step_env


@pytest.fixture
def port():
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def wait_in_thread(address, timeout=10.0):
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(out=supervise.wait_for_chief(address, timeout))
    )
    thread.start()
    return thread, result


@pytest.mark.parametrize(("chief_status", "server_status"), [(0, 0), (3, 1), (137, 1)])
def test_servers_get_the_chiefs_end(port, chief_status, server_status):
    announcer = supervise.Announcer(port, expected=2)
    waiters = [wait_in_thread(f"localhost:{port}") for _ in range(2)]
    time.sleep(0.3)
    announcer.finish(chief_status)
    for thread, result in waiters:
        thread.join(5)
        assert result["out"] == (server_status, f"chief ended with exit {chief_status}")


def test_a_server_connecting_after_the_end_still_hears_it(port):
    announcer = supervise.Announcer(port, expected=1)
    finisher = threading.Thread(target=announcer.finish, args=(0,))
    finisher.start()
    time.sleep(0.3)
    assert supervise.wait_for_chief(f"localhost:{port}", 5) == (0, "chief ended with exit 0")
    finisher.join(5)
    assert not finisher.is_alive()


def test_connection_dropped_without_a_word_means_the_chief_died(port):
    with socket.create_server(("", port)) as server:
        thread, result = wait_in_thread(f"localhost:{port}")
        conn, _ = server.accept()
        conn.close()
        thread.join(5)
    assert result["out"][0] == 1 and "closed without an exit status" in result["out"][1]


def test_chief_that_never_comes_up_times_out(port):
    start = time.monotonic()
    status, reason = supervise.wait_for_chief(f"localhost:{port}", 1.0)
    assert status == 1 and f"localhost:{port} did not answer within 1 s" in reason
    assert time.monotonic() - start < 5


CHILD = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(42))
    print("ready", flush=True)
    time.sleep(30)
    sys.exit(int(sys.argv[1]))
""")

RUN_CHIEF = textwrap.dedent("""
    import sys
    from tfslurm_entry.supervise import run_chief
    sys.exit(run_chief([sys.executable, "-c", CHILD, "0"], {}, PORT, 1, print))
""")


def test_run_chief_forwards_signals_and_announces_the_programs_status(port):
    code = RUN_CHIEF.replace("CHILD", repr(CHILD)).replace("PORT", str(port))
    chief = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.getcwd()})  # fmt: skip
    assert chief.stdout.readline().strip() == "ready"
    thread, result = wait_in_thread(f"localhost:{port}")
    time.sleep(0.3)
    chief.send_signal(signal.SIGUSR1)  # Slurm's preemption signal: the program must get it
    assert chief.wait(10) == 42
    thread.join(5)
    assert result["out"] == (1, "chief ended with exit 42")


def test_exit_status_of_a_signalled_program():
    assert supervise.exit_status(-9) == 137
    assert supervise.exit_status(3) == 3


def test_control_address_follows_the_chief_hosts_ports():
    env = read_step_env(step_env(2, "n[1-2]", "3,2"))
    plan = resolve(env, Options(strategy="parameter-server", port_base=5000))
    assert plan.control_address == "n1:5003"
    assert resolve(env, Options(port_base=5000)).control_address is None


def test_control_port_overflow_is_refused():
    env = read_step_env(step_env(0, "n[1-2]", "2(x2)"))
    with pytest.raises(ConfigError, match=r"control port 65536.*65533 or lower"):
        resolve(env, Options(strategy="parameter-server", port_base=65534))
