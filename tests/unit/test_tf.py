"""tfslurm_entry.tf without TensorFlow: the leader's wait for the other tasks' ends.

end_of_job itself needs real TensorFlow processes: tests/integration (test_end_of_job_*).
"""

import subprocess
import sys
import threading
import time

from tfslurm_entry.tf import wait_for_others


def test_importing_the_helper_does_not_import_tensorflow():
    code = "import sys, tfslurm_entry.tf; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_the_leader_returns_as_soon_as_the_entrypoint_says_the_others_ended(tmp_path):
    marker = tmp_path / "others-ended"
    threading.Timer(0.5, marker.touch).start()
    start = time.monotonic()
    assert wait_for_others(str(marker), linger=10) is True
    assert 0.4 <= time.monotonic() - start < 3


def test_the_leader_gives_up_after_linger_and_says_so(tmp_path, capsys):
    start = time.monotonic()
    assert wait_for_others(str(tmp_path / "never"), linger=0.3) is False
    assert 0.3 <= time.monotonic() - start < 2
    assert "other tasks still running 0.3 s after the end-of-job barrier" in capsys.readouterr().err


def test_outside_tfslurm_entry_there_is_nothing_to_wait_for():
    start = time.monotonic()
    assert wait_for_others(None, linger=30) is False
    assert time.monotonic() - start < 1
