"""Multi-worker training for the integration tests: a few tf-keras ``model.fit`` steps.

Run with TF_CONFIG set (one process per worker). Prints one line ``RESULT {json}`` on stdout
with what this worker saw and trained, so the test can check that the workers synchronised.

Usage: python multi_worker_fit.py [STEPS_PER_EPOCH]
"""

import json
import os
import sys

# Keras 3 does not support MultiWorkerMirroredStrategy in model.fit: use tf-keras.
os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf
import tf_keras as keras

EPOCHS = 2
GLOBAL_BATCH = 16


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    seen_tf_config = json.loads(os.environ["TF_CONFIG"])

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    # A different seed per worker: equal weights at the end can only come from the strategy
    # broadcasting worker 0's initial values and all-reducing the gradients.
    keras.utils.set_random_seed(100 + resolver.task_id)

    rng = np.random.default_rng(0)  # the same data set everywhere; each worker takes a shard
    x = rng.normal(size=(256, 4)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.25
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .repeat()
        .batch(GLOBAL_BATCH)
        .with_options(options)
    )

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(4,)),
                keras.layers.Dense(8, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    history = model.fit(dataset, epochs=EPOCHS, steps_per_epoch=steps, verbose=0)

    weights = model.get_weights()
    result = {
        "task_type": resolver.task_type,
        "task_id": resolver.task_id,
        "cluster": resolver.cluster_spec().as_dict(),
        "tf_config": seen_tf_config,
        "replicas": strategy.num_replicas_in_sync,
        "model_module": type(model).__module__,
        "iterations": int(model.optimizer.iterations.numpy()),
        "loss": [float(v) for v in history.history["loss"]],
        "weight_sum": float(sum(np.sum(w, dtype="float64") for w in weights)),
        "weight_abs_sum": float(sum(np.sum(np.abs(w), dtype="float64") for w in weights)),
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
