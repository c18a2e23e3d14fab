# Our copy of mnist_setup.py from TensorFlow's "Multi-worker training with Keras" tutorial.
# Changed: MNIST is not downloaded (no network here): arrays of its shapes and types instead.
import numpy as np
import tensorflow as tf


def load_mnist():
    """Stand-in for tf.keras.datasets.mnist.load_data(): the training half's shapes and types."""
    rng = np.random.default_rng(0)
    x_train = rng.integers(0, 256, size=(60000, 28, 28), dtype=np.uint8)
    y_train = rng.integers(0, 10, size=(60000,), dtype=np.uint8)
    return (x_train, y_train), (None, None)


def mnist_dataset(batch_size):
    (x_train, y_train), _ = load_mnist()
    # The `x` arrays are in uint8 and have values in the [0, 255] range.
    # You need to convert them to float32 with values in the [0, 1] range.
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat().batch(batch_size)
    )
    return train_dataset


def build_and_compile_cnn_model():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.InputLayer(input_shape=(28, 28)),
            tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(128, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.001),
        metrics=["accuracy"],
    )
    return model

