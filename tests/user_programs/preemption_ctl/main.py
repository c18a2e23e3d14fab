"""A custom training loop under MultiWorkerMirroredStrategy that survives preemption with
TensorFlow's PreemptionCheckpointHandler, as its API documentation shows: the handler
restores the latest checkpoint when it is made and, on the platform's notice (SIGTERM off
Google's platforms), has every worker save at one agreed step and exit. Knows nothing of the
kit.

    main.py CHECKPOINT_DIR [TOTAL_STEPS]

The chief prints "starting at step N" and "step N" after each step, and "done at step N".
"""

import sys

import numpy as np
import tensorflow as tf

checkpoint_dir = sys.argv[1]
total_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
batch = 64

strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
chief = resolver.task_type in (None, "chief") or (
    resolver.task_type == "worker" and resolver.task_id == 0
)

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(4096, 1))).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(batch)

with strategy.scope():
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)]
    )
    model.build((None, 16))
    optimizer = tf.keras.optimizers.SGD(0.01)
    step = tf.Variable(0, dtype=tf.int64, name="step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        resolver, checkpoint, checkpoint_dir
    )

iterator = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = (
                tf.reduce_mean(tf.square(model(features) - labels)) / strategy.num_replicas_in_sync
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


if chief:
    print(f"starting at step {int(step.numpy())}", flush=True)
while step.numpy() < total_steps:
    loss = handler.run(train_step, iterator)
    step.assign_add(1)
    if chief:
        print(f"step {int(step.numpy())} loss {float(loss):.4f}", flush=True)
if chief:
    print(f"done at step {int(step.numpy())}", flush=True)
