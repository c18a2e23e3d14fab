"""Parameter-server chief for the integration tests: a custom loop on a ClusterCoordinator.

Run as the chief of a TF_CONFIG cluster whose ps and worker tasks serve already (or soon).
Prints one line ``RESULT {json}`` on stdout: the steps done and where the variables live.

Usage: python ps_chief.py [STEPS]
"""

import json
import math
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import tensorflow as tf
import tf_keras as keras

from tfslurm_entry.tf import end_of_job


def dataset_fn() -> tf.data.Dataset:
    x = tf.random.stateless_normal((256, 4), seed=(1, 2))
    y = tf.matmul(x, tf.constant([[1.0], [-2.0], [0.5], [3.0]])) + 0.25
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.legacy.SGD(learning_rate=0.05)
        step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_count")

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            step_count.assign_add(1)
            return loss

        losses = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    remote_losses = [
        coordinator.schedule(train_step, args=(per_worker_iterator,)) for _ in range(steps)
    ]
    coordinator.join()
    losses = [float(r.fetch()) for r in remote_losses]

    variables = {v.name: v.device for v in [*model.variables, step_count]}
    result = {
        "task_type": resolver.task_type,
        "task_id": resolver.task_id,
        "cluster": resolver.cluster_spec().as_dict(),
        "num_workers": len(resolver.cluster_spec().as_dict().get("worker", [])),
        "model_module": type(model).__module__,
        "steps": int(step_count.numpy()),
        "losses_finite": all(math.isfinite(v) for v in losses),
        "scheduled": len(losses),
        "variable_devices": variables,
    }
    print("RESULT " + json.dumps(result), flush=True)
    end_of_job(strategy)  # nothing to wait for here: the entrypoint stops the servers


if __name__ == "__main__":
    main()
