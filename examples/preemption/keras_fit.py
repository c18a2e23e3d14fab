"""Keras Model.fit that survives Slurm's stops with tf.keras's BackupAndRestore, as TensorFlow's
multi-worker Keras tutorial shows; it knows nothing of the kit. BackupAndRestore restores the
training state at the start; with save_before_preemption=True it saves at the end of the batch
in flight once the notice (SIGTERM) came, and exits 42. tf.keras, not `import keras`: Keras 3's
BackupAndRestore has no save_before_preemption.

    keras_fit.py BACKUP_DIR [EPOCHS [STEPS_PER_EPOCH]]
"""

import sys

import numpy as np
import tensorflow as tf

backup_dir = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
steps_per_epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 150

strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
chief = resolver.task_type in (None, "chief") or resolver.task_id == 0

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(4096, 1))).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(64, "relu"), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")


class Progress(tf.keras.callbacks.Callback):
    """The chief's lines: where fit starts (restored) and each epoch's end, in steps."""

    def say(self, what):
        if chief:
            print(f"{what} {int(self.model.optimizer.iterations.numpy())}", flush=True)

    def on_train_begin(self, logs=None):
        self.say("starting at step")

    def on_epoch_end(self, epoch, logs=None):
        self.say(f"epoch {epoch} ends at step")


backup = tf.keras.callbacks.BackupAndRestore(backup_dir, save_before_preemption=True)
callbacks = [backup, Progress()]
model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=2)
if chief:
    print(f"done at step {int(model.optimizer.iterations.numpy())}", flush=True)
