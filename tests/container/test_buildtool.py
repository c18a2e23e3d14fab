"""containers/buildtool.py's pure parts: the archive address, the lock file format."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("buildtool", ROOT / "containers" / "buildtool.py")
buildtool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(buildtool)


def _apt(tmp_path: Path, sources: dict[str, str], sources_list: str = "") -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in sources.items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    (tmp_path / "sources.list").write_text(sources_list)
    return tmp_path


def test_archive_uri_from_deb822_skips_security_and_disabled(tmp_path):
    apt = _apt(
        tmp_path,
        {
            "a-security.sources": "Types: deb\nURIs: http://sec.example/debian-security\n"
            "Suites: bookworm-security\nComponents: main\n",
            "b-off.sources": "Enabled: no\nTypes: deb\nURIs: http://off.example/debian\n"
            "Suites: bookworm\n",
            "debian.sources": "# comment\nTypes: deb deb-src\n"
            "URIs: http://mirror.example/debian/\n  http://second.example/debian\n"
            "Suites: bookworm bookworm-updates\nComponents: main\n",
        },
    )
    assert buildtool.archive_uri(apt) == "http://mirror.example/debian"


def test_archive_uri_from_sources_list(tmp_path):
    apt = _apt(
        tmp_path,
        {},
        "deb-src http://src.example/debian bookworm main\n"
        "deb [signed-by=/k.gpg] http://sec.example/debian-security bookworm-security main\n"
        "deb [arch=amd64] http://list.example/debian bookworm main # the archive\n",
    )
    assert buildtool.archive_uri(apt) == "http://list.example/debian"


def test_archive_uri_missing_is_an_error(tmp_path):
    with pytest.raises(buildtool.BuildError, match="no Debian archive"):
        buildtool.archive_uri(_apt(tmp_path, {}))


def test_this_host_has_an_archive():
    assert buildtool.archive_uri().startswith(("http://", "https://", "file:/"))


def test_lock_pins_every_entry_with_a_hash():
    entries = buildtool._lock_entries()
    names = {name for name, _, _ in entries}
    assert {"tensorflow-cpu", "tf-keras", "python-hostlist", "pip"} <= names
    versions = dict((name, version) for name, version, _ in entries)
    assert versions["tensorflow-cpu"] == versions["tf-keras"] == "2.21.0"
    assert versions["python-hostlist"] == "2.3.0"
    assert "tensorflow" not in names  # tf-keras's declared dependency must not pull it in
    text = buildtool.LOCK.read_text()
    assert text.count("==") == text.count("--hash=sha256:") == len(entries)
