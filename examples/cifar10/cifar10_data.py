"""CIFAR-10 binary-format loader for the distributed training example.

Reads the standard binary distribution (``cifar-10-batches-bin/``): every record is one label
byte (0-9) followed by 3072 image bytes, the 1024 red, 1024 green and 1024 blue values of a
32x32 image in row-major order. The same format is written by ``make_sample.py``, so the
training script cannot tell a synthetic sample from the real data set.

``find_data_dir`` and ``check_files`` are pure Python: they run (and fail with a clear message)
before TensorFlow is imported, which is slow and noisy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

HEIGHT = 32
WIDTH = 32
CHANNELS = 3
LABEL_BYTES = 1
IMAGE_BYTES = HEIGHT * WIDTH * CHANNELS
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3073
BATCHES_DIR = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILES = ("test_batch.bin",)
CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
SPLITS = {"train": TRAIN_FILES, "test": TEST_FILES}

HOW_TO_GET = (
    "run `make cifar10-sample` (synthetic data in the same format) or download the binary "
    "version from https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz and unpack it here"
)


class DataError(Exception):
    """The data directory or one of its files is unusable; the message says what to do."""


def find_data_dir(path: str | Path) -> Path:
    """Return the ``cifar-10-batches-bin`` directory for ``path``.

    Accepts the directory that contains ``cifar-10-batches-bin/`` (what the tarball unpacks
    into) or that directory itself, so either spelling works on the command line.
    """
    path = Path(path)
    if path.name == BATCHES_DIR and path.is_dir():
        return path
    inner = path / BATCHES_DIR
    if inner.is_dir():
        return inner
    if not path.exists():
        raise DataError(f"CIFAR-10 data directory {path} does not exist: {HOW_TO_GET}")
    raise DataError(
        f"no {BATCHES_DIR}/ directory in {path} (and {path} is not one itself): {HOW_TO_GET}"
    )


def check_files(data_dir: str | Path, split: str) -> list[Path]:
    """Return the files of ``split`` ("train" or "test") after checking their sizes.

    A truncated download otherwise shows up as a silently shortened data set or a cryptic
    TensorFlow error deep inside the input pipeline; here it names the file instead.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, not {split!r}")
    data_dir = Path(data_dir)
    if (data_dir / BATCHES_DIR).is_dir():  # the parent form, as find_data_dir accepts
        data_dir = data_dir / BATCHES_DIR
    if not data_dir.is_dir():
        raise DataError(f"CIFAR-10 data directory {data_dir} does not exist: {HOW_TO_GET}")
    files = []
    for name in SPLITS[split]:
        file = data_dir / name
        if not file.is_file():
            raise DataError(f"CIFAR-10 {split} file {file} is missing: {HOW_TO_GET}")
        size = file.stat().st_size
        if size == 0:
            raise DataError(f"CIFAR-10 {split} file {file} is empty (0 bytes): {HOW_TO_GET}")
        if size % RECORD_BYTES:
            raise DataError(
                f"CIFAR-10 {split} file {file} has {size} bytes, not a multiple of the "
                f"{RECORD_BYTES}-byte record (truncated or not the binary version?): {HOW_TO_GET}"
            )
        files.append(file)
    return files


def count_records(files: Sequence[str | Path]) -> int:
    """Total number of records in ``files`` (sizes already checked by ``check_files``)."""
    return sum(Path(f).stat().st_size // RECORD_BYTES for f in files)


def decode(records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Turn raw records (one, or a batch of any shape) into ``(images, labels)``.

    Images are float32 in [0, 1], shape (..., 32, 32, 3): the file stores three colour planes
    (CHW), Keras convolutions want channels last (HWC). Labels are int32, shape (...). Decode
    whole batches where you can: one op per batch instead of one per image.
    """
    import tensorflow as tf

    raw = tf.io.decode_raw(records, tf.uint8)
    labels = tf.cast(raw[..., 0], tf.int32)
    shape = tf.concat([tf.shape(raw)[:-1], [CHANNELS, HEIGHT, WIDTH]], axis=0)
    chw = tf.reshape(raw[..., LABEL_BYTES:], shape)
    # Cast before transposing: oneDNN transposes uint8 only with AVX-512 and logs an error
    # line (E0000 ... util.cc) on every other CPU when it falls back.
    images = tf.einsum("...chw->...hwc", tf.cast(chw, tf.float32) / 255.0)
    return images, labels


def records(data_dir: str | Path, split: str) -> tf.data.Dataset:
    """The raw records of ``split`` (scalar strings), in file order.

    Shard, shuffle and batch these, then ``map(decode)``: records are 4 times smaller than
    decoded images, and a record a worker's shard drops is never decoded.
    """
    import tensorflow as tf

    files = [str(f) for f in check_files(data_dir, split)]
    return tf.data.FixedLengthRecordDataset(files, RECORD_BYTES)


def dataset(data_dir: str | Path, split: str) -> tf.data.Dataset:
    """Unbatched ``(image, label)`` dataset of ``split``, in file order."""
    import tensorflow as tf

    # decode has no Python control flow: skip autograph's conversion (CPU at every start).
    return records(data_dir, split).map(
        tf.autograph.experimental.do_not_convert(decode), num_parallel_calls=tf.data.AUTOTUNE
    )
