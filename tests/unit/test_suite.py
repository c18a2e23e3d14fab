"""tests/suite.py, what `make test` ends with: the table of layers and the disk it used."""

from __future__ import annotations

import os

from tests import suite


def test_disk_peak_counts_what_was_written_and_removed_meanwhile(tmp_path):
    disk = suite.Disk([tmp_path, tmp_path / "."])
    assert len(disk.paths) == 1  # one file system, counted once
    big = tmp_path / "layer.bin"
    with big.open("wb") as f:
        f.write(os.urandom(1 << 20) * 64)  # 64 MiB
        f.flush()
        os.fsync(f.fileno())
    disk.note()
    big.unlink()
    disk.stop()
    # Other writers on the machine may add to it; nothing takes the 64 MiB away.
    assert disk.peak - disk.start >= 60 * (1 << 20), (disk.start, disk.peak)


def test_the_table_shows_each_layer_its_disk_and_the_slowest_tests(tmp_path):
    disk = suite.Disk([tmp_path])
    disk.stop()
    disk.peak = disk.start + 12_300_000_000
    unit = suite.Layer("test-unit", 87.0, 0, 494, 0, 0, [(10.1, "t::slow")], 100_000_000)
    e2e = suite.Layer("test-e2e", 1250.0, 2, 74, 1, 0, [(168.0, "t::slower")], 12_300_000_000)
    text = suite.table([unit, e2e, suite.Layer("test-soak")], 1337.0, disk)
    lines = text.splitlines()
    assert lines[1].split() == [
        "test-unit",
        "1",
        "min",
        "27",
        "s",
        "494",
        "0",
        "0",
        "+0.1",
        "GB",
        "ok",
    ]
    assert lines[2].split()[-3:] == ["+12.3", "GB", "FAILED"]
    assert lines[3].split() == ["test-soak", "0", "s", "-", "-", "-", "-", "not", "run"]
    assert lines[4].split()[:4] == ["total", "22", "min", "17"] and "+12.3 GB" in lines[4]
    assert "2 min 48 s  t::slower" in text and text.index("t::slower") < text.index("t::slow\n")
    assert "disk: peak 12.3 GB in use beyond the suite's start" in text


def test_a_layer_that_freed_disk_shows_its_sign():
    # a layer whose peak stayed a little below the start showed "+-0.0 GB"
    assert suite.change(-40_000_000) == "+0.0 GB"
    assert suite.change(-300_000_000) == "-0.3 GB"
    assert suite.change(2_700_000_000) == "+2.7 GB"
