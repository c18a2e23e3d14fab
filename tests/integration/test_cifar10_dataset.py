"""The CIFAR-10 example's tf.data input on real TensorFlow: hand-made records read back in HWC
order, scaled to [0, 1], with the element spec the training programs expect (the loader's pure
parts are unit-tested in tests/unit/examples/test_cifar10_data.py)."""

import numpy as np
import pytest

from tests.unit.examples.test_cifar10_data import (
    _fake_dir,
    _load,
    _write_records,
    cifar10_data,
    make_sample,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The unit tests' small generated sample (make_sample.generate, seed 0)."""
    return make_sample.generate(tmp_path_factory.mktemp("sample"), 300, 400, seed=0)


def test_a_record_round_trips_in_hwc_order(tmp_path):
    rng = np.random.default_rng(7)
    first = rng.integers(0, 256, (3, 32, 32), dtype=np.uint8)
    second = np.zeros((3, 32, 32), np.uint8)
    second[0, 1, 2] = 255  # red, row 1, column 2
    second[1, 3, 4] = 128  # green, row 3, column 4
    second[2, 5, 6] = 51  # blue, row 5, column 6
    data_dir = _fake_dir(tmp_path)
    _write_records(data_dir / "test_batch.bin", [(3, first), (9, second)])

    import tensorflow as tf

    got = list(cifar10_data.dataset(tmp_path, "test").as_numpy_iterator())
    assert len(got) == 2
    (image0, label0), (image1, label1) = got
    assert (label0, label1) == (3, 9)
    for image in (image0, image1):
        assert image.shape == (32, 32, 3)
        assert image.dtype == np.float32
    np.testing.assert_array_equal(np.rint(image0 * 255).astype(np.uint8), first.transpose(1, 2, 0))
    assert image1[1, 2, 0] == 1.0
    assert image1[3, 4, 1] == pytest.approx(128 / 255)
    assert image1[5, 6, 2] == pytest.approx(0.2)
    assert np.count_nonzero(image1) == 3
    spec = cifar10_data.dataset(data_dir, "test").element_spec
    assert spec[0].dtype == tf.float32 and spec[1].dtype == tf.int32


def test_decoding_a_batch_of_records_equals_decoding_each(sample):
    """train.py batches raw records and decodes whole batches: same images, same labels."""
    import tensorflow as tf

    one_by_one = list(cifar10_data.dataset(sample, "test").take(7).as_numpy_iterator())
    records = cifar10_data.records(sample, "test").batch(7).take(1)
    images, labels = next(records.map(cifar10_data.decode).as_numpy_iterator())
    assert images.shape == (7, 32, 32, 3) and labels.shape == (7,)
    assert images.dtype == np.float32 and labels.dtype == np.int32
    for i, (image, label) in enumerate(one_by_one):
        assert labels[i] == label
        np.testing.assert_array_equal(images[i], image)
    assert cifar10_data.records(sample, "test").element_spec.dtype == tf.string


def test_dataset_reads_the_generated_sample(sample):
    ds = cifar10_data.dataset(sample, "test")
    images, labels = _load(cifar10_data.check_files(sample, "test"))
    for i, (image, label) in enumerate(ds.take(3).as_numpy_iterator()):
        assert label == labels[i]
        np.testing.assert_allclose(image, images[i].reshape(3, 32, 32).transpose(1, 2, 0) / 255)
