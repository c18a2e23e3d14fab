"""Keras Model.fit under MultiWorkerMirroredStrategy with the fault tolerance of TensorFlow's
multi-worker Keras tutorial: BackupAndRestore restores the training state at the start, and
with save_before_preemption=True it saves at the end of the batch in flight when the job is
being stopped. Knows nothing of the kit.

    main.py BACKUP_DIR [EPOCHS [STEPS_PER_EPOCH]]

The chief prints "starting at step N" when fit begins (the optimizer's iterations, restored
from the backup), "epoch E ends at step N" after each epoch (a callback with no batch hooks:
verbose=0 and epoch-level logging, as batch jobs log), then "done at step N".
"""

import sys

import numpy as np
import tensorflow as tf

backup_dir = sys.argv[1]
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
steps_per_epoch = int(sys.argv[3]) if len(sys.argv) > 3 else 150

strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
chief = resolver.task_type == "chief" or (resolver.task_type == "worker" and resolver.task_id == 0)

rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(4096, 1))).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096).repeat().batch(64)

with strategy.scope():
    model = tf.keras.Sequential(
        [tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(1)]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    model.build((None, 16))


class Progress(tf.keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        if chief:
            print(f"starting at step {int(self.model.optimizer.iterations.numpy())}", flush=True)

    def on_epoch_end(self, epoch, logs=None):
        if chief:
            print(
                f"epoch {epoch} ends at step {int(self.model.optimizer.iterations.numpy())}",
                flush=True,
            )


callbacks = [
    tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir, save_before_preemption=True),
    Progress(),
]
model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=0)
if chief:
    print(f"done at step {int(model.optimizer.iterations.numpy())}", flush=True)
