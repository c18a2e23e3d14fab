# Our copy of main.py from TensorFlow's "Multi-worker training with Keras" tutorial. Not in the
# tutorial: TUTORIAL_STEPS=N trains N steps per epoch instead of 70 (the test suite's time),
# and FAIL_ON_TASK=N raises on worker N after its first epoch (the tests' failure path).
import json
import os
import time

import mnist_setup
import tensorflow as tf

per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_setup.mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building/compiling need to be within `strategy.scope()`.
    multi_worker_model = mnist_setup.build_and_compile_cnn_model()

callbacks = []
if os.environ.get("FAIL_ON_TASK") == str(tf_config["task"]["index"]):

    def fail(epoch, logs):
        index = tf_config["task"]["index"]
        raise RuntimeError(f"injected failure on worker {index} at {time.time():.1f}")

    callbacks.append(tf.keras.callbacks.LambdaCallback(on_epoch_end=fail))

steps_per_epoch = int(os.environ.get("TUTORIAL_STEPS", 70))
multi_worker_model.fit(
    multi_worker_dataset, epochs=3, steps_per_epoch=steps_per_epoch, callbacks=callbacks
)

