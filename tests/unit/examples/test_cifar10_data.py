"""The CIFAR-10 example's loader and synthetic-sample generator (examples/cifar10)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.repo import tool

cifar10_data = tool("examples/cifar10/cifar10_data.py")
make_sample = tool("examples/cifar10/make_sample.py")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    """A small generated sample, shared by the read-only tests: the cifar-10-batches-bin dir."""
    root = tmp_path_factory.mktemp("sample")
    return make_sample.generate(root, train_per_file=300, test=400, seed=0)


def _load(files: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    raw = np.concatenate(
        [np.fromfile(f, np.uint8).reshape(-1, cifar10_data.RECORD_BYTES) for f in files]
    )
    return raw[:, 1:].astype(np.float32), raw[:, 0]


def _write_records(path: Path, records: list[tuple[int, np.ndarray]]) -> None:
    """Hand-made records: label byte, then the (3, 32, 32) CHW planes, exactly as CIFAR-10."""
    path.write_bytes(
        b"".join(bytes([label]) + chw.astype(np.uint8).tobytes() for label, chw in records)
    )


def _fake_dir(root: Path, records_per_file: int = 1) -> Path:
    data_dir = root / cifar10_data.BATCHES_DIR
    data_dir.mkdir(parents=True)
    for name in cifar10_data.TRAIN_FILES + cifar10_data.TEST_FILES:
        (data_dir / name).write_bytes(bytes(cifar10_data.RECORD_BYTES * records_per_file))
    return data_dir


def test_constants_match_the_cifar10_format():
    assert cifar10_data.RECORD_BYTES == 3073 == make_sample.RECORD_BYTES
    assert cifar10_data.TRAIN_FILES == make_sample.TRAIN_FILES
    assert list(cifar10_data.TRAIN_FILES) == [f"data_batch_{i}.bin" for i in range(1, 6)]
    assert list(cifar10_data.TEST_FILES) == ["test_batch.bin"]
    assert len(cifar10_data.CLASSES) == 10
    assert cifar10_data.CLASSES == make_sample.CLASSES


def test_generator_writes_whole_records_with_balanced_labels(sample):
    names = sorted(p.name for p in sample.iterdir())
    assert names == sorted(
        [*cifar10_data.TRAIN_FILES, *cifar10_data.TEST_FILES, "batches.meta.txt", "sample.json"]
    )
    assert (sample / "batches.meta.txt").read_text().split() == list(cifar10_data.CLASSES)
    train = cifar10_data.check_files(sample, "train")
    test = cifar10_data.check_files(sample, "test")
    for f in train:
        assert f.stat().st_size == 300 * 3073
    assert test[0].stat().st_size == 400 * 3073
    assert cifar10_data.count_records(train) == 1500
    assert cifar10_data.count_records(test) == 400
    for f in train + test:
        _, labels = _load([f])
        assert labels.max() <= 9
        counts = np.bincount(labels, minlength=10)
        assert counts.max() - counts.min() <= 1
        assert len(set(labels[:20].tolist())) > 3  # shuffled, not sorted by class


def test_generator_is_deterministic_for_a_seed(tmp_path, sample):
    again = make_sample.generate(tmp_path, train_per_file=300, test=400, seed=0)
    other = make_sample.generate(tmp_path / "other", train_per_file=300, test=400, seed=1)
    name = cifar10_data.TEST_FILES[0]
    assert (again / name).read_bytes() == (sample / name).read_bytes()
    assert (other / name).read_bytes() != (sample / name).read_bytes()


def test_find_data_dir_accepts_the_parent_and_the_batches_dir(tmp_path):
    data_dir = _fake_dir(tmp_path)
    assert cifar10_data.find_data_dir(tmp_path) == data_dir
    assert cifar10_data.find_data_dir(data_dir) == data_dir
    assert cifar10_data.find_data_dir(str(tmp_path)) == data_dir


def test_find_data_dir_names_the_path_and_how_to_get_the_data(tmp_path):
    with pytest.raises(cifar10_data.DataError, match=r"does not exist.*make cifar10-sample"):
        cifar10_data.find_data_dir(tmp_path / "nowhere")
    with pytest.raises(cifar10_data.DataError, match=r"no cifar-10-batches-bin/.*kriz"):
        cifar10_data.find_data_dir(tmp_path)


def test_check_files_missing_directory(tmp_path):
    with pytest.raises(cifar10_data.DataError, match=f"{tmp_path / 'nowhere'} does not exist"):
        cifar10_data.check_files(tmp_path / "nowhere", "train")


def test_check_files_missing_file(tmp_path):
    data_dir = _fake_dir(tmp_path)
    (data_dir / "data_batch_4.bin").unlink()
    with pytest.raises(cifar10_data.DataError, match=r"data_batch_4\.bin is missing"):
        cifar10_data.check_files(data_dir, "train")
    assert len(cifar10_data.check_files(data_dir, "test")) == 1


def test_check_files_truncated_file_shows_path_size_and_multiple(tmp_path):
    data_dir = _fake_dir(tmp_path, records_per_file=2)
    bad = data_dir / "test_batch.bin"
    bad.write_bytes(bytes(3073 * 2 - 100))
    with pytest.raises(cifar10_data.DataError) as err:
        cifar10_data.check_files(data_dir, "test")
    message = str(err.value)
    assert str(bad) in message and "6046 bytes" in message and "3073" in message


def test_check_files_empty_file_and_bad_split(tmp_path):
    data_dir = _fake_dir(tmp_path)
    (data_dir / "data_batch_1.bin").write_bytes(b"")
    with pytest.raises(cifar10_data.DataError, match=r"data_batch_1\.bin is empty"):
        cifar10_data.check_files(tmp_path, "train")
    with pytest.raises(ValueError, match="split"):
        cifar10_data.check_files(data_dir, "validation")


def test_generator_is_idempotent(tmp_path, capsys):
    out = make_sample.generate(tmp_path, train_per_file=20, test=30, seed=5)
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert json.loads((out / "sample.json").read_text())["seed"] == 5
    capsys.readouterr()
    assert (
        make_sample.main([str(tmp_path), "--train-per-file", "20", "--test", "30", "--seed", "5"])
        == 0
    )
    assert "already complete" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes
    assert not list(out.glob("*.tmp"))


def test_generator_rewrites_on_new_parameters_or_bad_sizes(tmp_path, capsys):
    out = make_sample.generate(tmp_path, train_per_file=20, test=30, seed=5)
    make_sample.generate(tmp_path, train_per_file=20, test=40, seed=5)
    assert (out / "test_batch.bin").stat().st_size == 40 * 3073
    (out / "data_batch_2.bin").write_bytes(b"x")
    make_sample.generate(tmp_path, train_per_file=20, test=40, seed=5)
    assert (out / "data_batch_2.bin").stat().st_size == 20 * 3073
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [[], ["out", "--train-per-file", "0"], ["out", "--test", "x"], ["out", "--seed", "-1"]],
)
def test_generator_bad_arguments_exit_2(args, capsys):
    with pytest.raises(SystemExit) as err:
        make_sample.main(args)
    assert err.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_generated_classes_are_learnable_but_not_trivial(sample):
    train_x, train_y = _load(cifar10_data.check_files(sample, "train"))
    test_x, test_y = _load(cifar10_data.check_files(sample, "test"))

    def nearest_mean_accuracy(train: np.ndarray, test: np.ndarray) -> float:
        means = np.stack([train[train_y == c].mean(axis=0) for c in range(10)])
        dist = (test**2).sum(1)[:, None] - 2 * test @ means.T + (means**2).sum(1)[None]
        return float((dist.argmin(axis=1) == test_y).mean())

    pixels = nearest_mean_accuracy(train_x, test_x)
    assert 0.5 < pixels < 0.99
    # The mean colour of an image says little about its class: the pattern has to be learned.
    colour = nearest_mean_accuracy(
        train_x.reshape(-1, 3, 1024).mean(axis=2), test_x.reshape(-1, 3, 1024).mean(axis=2)
    )
    assert colour < 0.3


def test_checks_and_generator_do_not_import_tensorflow(sample):
    code = (
        "import sys, cifar10_data, make_sample\n"
        f"cifar10_data.check_files(cifar10_data.find_data_dir({str(sample)!r}), 'train')\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(cifar10_data.__file__).parent)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_an_output_directory_the_chief_cannot_write_is_one_clear_error(sample, tmp_path):
    """Before TensorFlow starts: without the check the chief died later with a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}  # a lone task: the chief
    env["PYTHONPATH"] = str(Path(cifar10_data.__file__).parent)
    train = Path(cifar10_data.__file__).parent / "train.py"
    result = subprocess.run(
        [
            sys.executable,
            str(train),
            "--data-dir",
            str(sample),
            "--output-dir",
            str(blocker / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"train.py: error: the chief cannot write to --output-dir {blocker / 'out'}: Not a "
        "directory; give it a directory the job's user can write on the shared file system "
        "(OUTPUT_DIR in the batch scripts)"
    ]
