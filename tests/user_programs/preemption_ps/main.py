"""ParameterServerStrategy with a custom training loop on a ClusterCoordinator, as in
TensorFlow's parameter server training tutorial, made to survive preemption the way TensorFlow
leaves to the program for this strategy (PreemptionCheckpointHandler does not support it):
a SIGTERM handler sets a flag; the loop then waits for the steps it scheduled, saves a
checkpoint of the variables (which live on the parameter servers) and exits 42. At the start it
restores the latest checkpoint. Knows nothing of the kit.

    main.py CHECKPOINT_DIR [TOTAL_STEPS]

The chief prints "starting at step N", "step N" after each group of steps, "saved at step N"
when it saved on the notice, and "done at step N".
"""

import signal
import sys

import numpy as np
import tensorflow as tf

checkpoint_dir = sys.argv[1]
total_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 600
steps_per_loop = 10
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(True))

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

with strategy.scope():
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)]
    )
    model.build((None, 16))
    optimizer = tf.keras.optimizers.SGD(0.01)
    step = tf.Variable(0, dtype=tf.int64, name="step")
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=2)
manager.restore_or_initialize()
print(f"starting at step {int(step.numpy())}", flush=True)


def dataset_fn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4096, 16)).astype("float32")
    y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(4096, 1))).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(64)


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(features) - labels))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return strategy.run(step_fn, args=(next(iterator),))


while step.numpy() < total_steps and not stop:
    for _ in range(steps_per_loop):
        coordinator.schedule(train_step, args=(iterator,))
    coordinator.join()
    step.assign_add(steps_per_loop)
    print(f"step {int(step.numpy())}", flush=True)
if stop:
    manager.save()
    print(f"saved at step {int(step.numpy())}", flush=True)
    sys.exit(42)
print(f"done at step {int(step.numpy())}", flush=True)
