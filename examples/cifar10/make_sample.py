"""Write a synthetic, learnable data set in the exact CIFAR-10 binary format.

    python make_sample.py OUT_DIR [--train-per-file N] [--test N] [--seed S]

writes OUT_DIR/cifar-10-batches-bin/{data_batch_1..5.bin, test_batch.bin, batches.meta.txt}
so the training example runs where the real archive cannot be downloaded. Each class has a
fixed smooth colour pattern (its prototype, drawn from the seed); every image is a randomly
shifted window of its prototype, with random contrast, brightness, colour cast, a random smooth
distractor pattern and pixel noise. A small CNN learns it to well over 80% test accuracy in a
few hundred steps, while the mean colour of an image says next to nothing about its class.

numpy only (no TensorFlow), deterministic for a given seed, atomic writes, idempotent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

# The format is the loader's: one definition of the record layout and file names.
from cifar10_data import (
    BATCHES_DIR,
    CHANNELS,
    CLASSES,
    HEIGHT,
    RECORD_BYTES,
    TEST_FILES,
    TRAIN_FILES,
    WIDTH,
)

FORMAT_VERSION = 1  # bump when the image recipe changes, so old samples get rewritten

# The recipe. Prototypes are PROTO_SIZE x PROTO_SIZE; an image is a 32x32 window at a random
# offset, so MAX_SHIFT = PROTO_SIZE - 32 is the translation a model has to tolerate.
PROTO_SIZE = 40
PROTO_GRID = 5  # control points per side of the smooth prototype pattern
PROTO_AMPLITUDE = 48.0  # pixel-value scale of the prototype pattern
DISTRACTOR_GRID = 4
DISTRACTOR_AMPLITUDE = 48.0  # per-image smooth pattern that belongs to no class
NOISE_STD = 28.0
BRIGHTNESS_STD = 30.0  # per-image offset, the same for all channels
COLOUR_CAST_STD = 20.0  # per-image, per-channel offset
CONTRAST_RANGE = (0.5, 1.3)  # per-image factor on the prototype


def _smooth(rng: np.random.Generator, n: int, grid: int, size: int) -> np.ndarray:
    """``n`` random smooth patterns of shape (3, size, size), zero mean per channel.

    Bilinear upsampling of a coarse random grid: low-frequency structure that a convolution
    can find but that survives no per-channel averaging (the mean is removed).
    """
    coarse = rng.standard_normal((n, CHANNELS, grid, grid))
    pos = np.linspace(0, grid - 1, size)
    lo = np.minimum(np.floor(pos).astype(int), grid - 2)
    frac = pos - lo
    up = np.zeros((size, grid))
    up[np.arange(size), lo] = 1 - frac
    up[np.arange(size), lo + 1] = frac
    fine = np.einsum("ia,ncab,jb->ncij", up, coarse, up)
    fine -= fine.mean(axis=(2, 3), keepdims=True)
    return fine / fine.std(axis=(1, 2, 3), keepdims=True)


def prototypes(seed: int) -> np.ndarray:
    """The 10 class patterns, shape (10, 3, PROTO_SIZE, PROTO_SIZE), fixed by the seed."""
    rng = np.random.default_rng([seed, 10])
    return _smooth(rng, len(CLASSES), PROTO_GRID, PROTO_SIZE) * PROTO_AMPLITUDE


CHUNK = 2000  # images made at once: bounds memory (float64 temporaries) for large files


def make_images(labels: np.ndarray, protos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 images of shape (len(labels), 3, 32, 32) (CHW planes, as the file stores them)."""
    n = len(labels)
    shift = PROTO_SIZE - HEIGHT
    dy = rng.integers(0, shift + 1, n)
    dx = rng.integers(0, shift + 1, n)
    rows = dy[:, None] + np.arange(HEIGHT)  # (n, 32)
    cols = dx[:, None] + np.arange(WIDTH)
    windows = protos[
        labels[:, None, None, None],
        np.arange(CHANNELS)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
    contrast = rng.uniform(*CONTRAST_RANGE, (n, 1, 1, 1))
    offset = (
        128.0
        + rng.normal(0, BRIGHTNESS_STD, (n, 1, 1, 1))
        + rng.normal(0, COLOUR_CAST_STD, (n, CHANNELS, 1, 1))
    )
    distractor = _smooth(rng, n, DISTRACTOR_GRID, HEIGHT) * DISTRACTOR_AMPLITUDE
    noise = rng.normal(0, NOISE_STD, (n, CHANNELS, HEIGHT, WIDTH))
    return np.clip(np.rint(offset + contrast * windows + distractor + noise), 0, 255).astype(
        np.uint8
    )


def make_records(n: int, protos: np.ndarray, rng: np.random.Generator) -> bytes:
    """``n`` records (label byte + R, G, B planes), labels balanced and shuffled."""
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.uint8)
    out = np.empty((n, RECORD_BYTES), np.uint8)
    out[:, 0] = labels
    for start in range(0, n, CHUNK):
        chunk = labels[start : start + CHUNK]
        out[start : start + len(chunk), 1:] = make_images(chunk, protos, rng).reshape(
            len(chunk), -1
        )
    return out.tobytes()


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def expected_sizes(train_per_file: int, test: int) -> dict[str, int]:
    sizes = dict.fromkeys(TRAIN_FILES, train_per_file * RECORD_BYTES)
    sizes.update(dict.fromkeys(TEST_FILES, test * RECORD_BYTES))
    return sizes


def is_complete(out: Path, params: dict[str, int]) -> bool:
    """True when a previous run with the same parameters left every file at the right size."""
    try:
        if json.loads((out / "sample.json").read_text()) != params:
            return False
    except (OSError, ValueError):
        return False
    sizes = expected_sizes(params["train_per_file"], params["test"])
    return (out / "batches.meta.txt").is_file() and all(
        (out / name).is_file() and (out / name).stat().st_size == size
        for name, size in sizes.items()
    )


def generate(out_dir: str | Path, train_per_file: int, test: int, seed: int) -> Path:
    """Write the sample under ``out_dir``; return the ``cifar-10-batches-bin`` directory."""
    out = Path(out_dir) / BATCHES_DIR
    params = {
        "format_version": FORMAT_VERSION,
        "train_per_file": train_per_file,
        "test": test,
        "seed": seed,
    }
    if is_complete(out, params):
        print(f"{out}: sample already complete ({json.dumps(params)}), nothing to do")
        return out
    out.mkdir(parents=True, exist_ok=True)
    (out / "sample.json").unlink(missing_ok=True)  # incomplete until all files are written
    protos = prototypes(seed)
    start = time.monotonic()
    for index, (name, size) in enumerate(expected_sizes(train_per_file, test).items()):
        rng = np.random.default_rng([seed, index])
        _write_atomic(out / name, make_records(size // RECORD_BYTES, protos, rng))
        print(
            f"wrote {out / name} ({size // RECORD_BYTES} records, {size} bytes) "
            f"at {time.monotonic() - start:.1f}s",
            flush=True,
        )
    _write_atomic(out / "batches.meta.txt", "".join(f"{c}\n" for c in CLASSES).encode())
    _write_atomic(out / "sample.json", (json.dumps(params, indent=2) + "\n").encode())
    print(f"done in {time.monotonic() - start:.1f}s: {out}")
    return out


def _at_least(minimum: int):
    """An argparse type: a whole number no smaller than `minimum`."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} must be at least {minimum}")
        return value

    return convert


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", metavar="OUT_DIR", help="cifar-10-batches-bin/ goes in here")
    parser.add_argument(
        "--train-per-file",
        type=_at_least(1),
        default=1000,
        metavar="N",
        help="records in each of the 5 training files (default 1000)",
    )
    parser.add_argument(
        "--test",
        type=_at_least(1),
        default=1000,
        metavar="N",
        help="records in test_batch.bin (default 1000)",
    )
    parser.add_argument(
        "--seed",
        type=_at_least(0),
        default=0,
        metavar="S",
        help="fixes the class prototypes and all images (default 0)",
    )
    args = parser.parse_args(argv)
    try:
        generate(args.out_dir, args.train_per_file, args.test, args.seed)
    except OSError as err:
        print(f"make_sample.py: cannot write the sample: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
