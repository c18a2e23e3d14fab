"""containers/buildtool.py's pure parts: the archive address, the lock file format."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench.repo import ROOT

pytestmark = pytest.mark.container

_spec = importlib.util.spec_from_file_location("buildtool", ROOT / "containers" / "buildtool.py")
buildtool = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = buildtool  # dataclasses look their module up while it executes
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
    text = buildtool.CPU.lock.read_text()
    assert text.count("==") == text.count("--hash=sha256:") == len(entries)


def test_gpu_lock_is_the_cpu_lock_with_tensorflows_cuda_build():
    """The variants differ only in TensorFlow's build and NVIDIA's CUDA wheels (`make lock
    VARIANT=gpu` keeps the CPU lock's pins): same numpy, protobuf, tf-keras in both images."""
    cpu = {name: (version, sha) for name, version, sha in buildtool._lock_entries()}
    gpu = {n: (v, sha) for n, v, sha in buildtool._lock_entries(buildtool.VARIANTS["gpu"].lock)}
    assert gpu["tensorflow"][0] == cpu.pop("tensorflow-cpu")[0] == "2.21.0"
    added = {name for name in gpu if name not in cpu}
    assert added - {"tensorflow"} and all(n.startswith("nvidia-") for n in added - {"tensorflow"})
    assert {"nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-nccl-cu12"} <= added
    assert {name: gpu[name] for name in cpu} == cpu


def test_a_build_out_of_disk_says_where_and_what_frees_it(capsys):
    """docker build's own words are one line deep in a layer's output; the failure must name
    Docker's data root and the commands that free space."""
    failing = ["sh", "-c", "echo 'write /opt/venv/x.so: no space left on device'; exit 1"]
    with pytest.raises(buildtool.BuildError) as caught:
        buildtool.run_build(failing, "image")
    message = str(caught.value)
    assert "ran out of disk space in Docker's data root" in message
    assert "GB free" in message or "free space unknown" in message
    assert "docker image prune" in message
    assert "no space left on device" in capsys.readouterr().out  # the build's line still shows


def test_any_other_build_failure_gives_its_exit_status():
    with pytest.raises(buildtool.BuildError, match="exit status 3"):
        buildtool.run_build(["sh", "-c", "echo 'Step 1/2 : RUN false'; exit 3"], "image")


def test_a_sif_is_up_to_date_only_if_it_is_the_one_built_from_these_inputs(tmp_path):
    sif, record = tmp_path / "tf-slurm.sif", tmp_path / "tf-slurm.sif.inputs"
    assert not buildtool.sif_up_to_date(sif, record, "k1")  # nothing built yet (a fresh clone)
    sif.write_bytes(b"SIF")
    assert not buildtool.sif_up_to_date(sif, record, "k1")  # a SIF nobody recorded
    record.write_text(f"k1\n{buildtool._sif_stamp(sif)}\n")
    assert buildtool.sif_up_to_date(sif, record, "k1")
    assert not buildtool.sif_up_to_date(sif, record, "k2")  # another image, .def or options
    sif.write_bytes(b"another SIF")  # replaced by hand
    assert not buildtool.sif_up_to_date(sif, record, "k1")
    sif.unlink()
    assert not buildtool.sif_up_to_date(sif, record, "k1")


def test_the_oci_bundle_runs_on_the_nodes_network_with_its_devices_and_the_sites_paths():
    config = buildtool.oci_config(["PATH=/opt/venv/bin:/usr/bin"], ["/shared"])
    namespaces = {ns["type"] for ns in config["linux"]["namespaces"]}
    assert namespaces == {"pid", "mount"}  # the node's network and hostname; crun's own userns
    assert "uidMappings" not in config["linux"]  # one bundle for every user (crun maps)
    binds = {m["destination"]: m for m in config["mounts"] if m["type"] == "bind"}
    assert set(binds) == {*buildtool.OCI_NODE_BINDS, "/shared"}
    assert "ro" in binds["/etc/hosts"]["options"] and "ro" not in binds["/shared"]["options"]
    assert config["process"]["env"] == ["PATH=/opt/venv/bin:/usr/bin"]
    assert config["root"] == {"path": "rootfs", "readonly": True}


@pytest.mark.parametrize("bind", ["relative", "/dev"])
def test_an_oci_bind_that_is_not_a_new_absolute_path_is_refused(tmp_path, bind):
    with pytest.raises(buildtool.BuildError, match="OCI_BINDS"):
        buildtool.oci_bundle("tf-slurm:latest", tmp_path / "b.tar", [bind])
