"""A custom loop that survives Slurm's stops with TensorFlow's PreemptionCheckpointHandler;
it knows nothing of the kit. The handler restores the last save when it is made; on the
notice (SIGTERM) every worker saves at one agreed step into CHECKPOINT_DIR and exits 42.

    custom_loop.py CHECKPOINT_DIR [TOTAL_STEPS]
"""

import sys

import numpy as np
import tensorflow as tf

checkpoint_dir = sys.argv[1]
total_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1500

strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
chief = resolver.task_type in (None, "chief") or resolver.task_id == 0

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(4096, 1))).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, "relu"), tf.keras.layers.Dense(1)])
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
        batch, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch) - labels)) / strategy.num_replicas_in_sync
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return strategy.reduce("SUM", strategy.run(step_fn, args=(next(iterator),)), axis=None)


if chief:
    print(f"starting at step {int(step.numpy())}", flush=True)
while step.numpy() < total_steps:
    loss = handler.run(train_step, iterator)  # saves and exits here once Slurm's notice came
    step.assign_add(1)
    if chief:
        print(f"step {int(step.numpy())} loss {float(loss):.4f}", flush=True)
if chief:
    print(f"done at step {int(step.numpy())}", flush=True)
