"""A tiny multi-worker training job: every task runs this file, TF_CONFIG tells it its role.

Learns y = x . w + b on synthetic data with tf-keras under MultiWorkerMirroredStrategy;
worker 0 prints progress and the final result.
"""

import argparse
import json
import os
import time

# Keras 3 cannot run model.fit under MultiWorkerMirroredStrategy; tf-keras can.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf
import tf_keras as keras

from tfslurm_entry.tf import end_of_job


class Progress(keras.callbacks.Callback):
    """One line per epoch with loss, examples/s and elapsed time (worker 0 only)."""

    def __init__(self, batch: int, steps: int) -> None:
        super().__init__()
        self.batch, self.steps, self.start = batch, steps, time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        elapsed = time.monotonic() - self.start
        rate = (epoch + 1) * self.steps * self.batch / elapsed
        print(
            f"epoch {epoch + 1}: loss {logs['loss']:.4f}, {rate:.0f} examples/s, "
            f"{elapsed:.1f} s elapsed",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="steps in all")
    parser.add_argument("--batch", type=int, default=32, help="global batch size")
    args = parser.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    is_chief = strategy.cluster_resolver.task_id == 0
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.25
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(args.batch)
    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    epochs, per_epoch = 5, max(1, args.steps // 5)
    history = model.fit(
        data,
        epochs=epochs,
        steps_per_epoch=per_epoch,
        verbose=0,
        callbacks=[Progress(args.batch, per_epoch)] if is_chief else [],
    )
    if is_chief:
        print(
            "RESULT "
            + json.dumps(
                {
                    "replicas": strategy.num_replicas_in_sync,
                    "final_loss": history.history["loss"][-1],
                    "weights": [round(float(v), 3) for v in model.get_weights()[0].ravel()],
                }
            ),
            flush=True,
        )
    end_of_job(strategy)  # every task, last: the job ends together and without error lines


if __name__ == "__main__":
    main()
