"""Distributed CIFAR-10 training on Slurm: every task runs this file under tfslurm-entry.

    srun apptainer run tf-slurm.sif [--strategy parameter-server] train.py --data-dir D \
        --output-dir O

The cluster comes from TF_CONFIG only (tfslurm-entry sets it). multi-worker: every task trains
a replica (MultiWorkerMirroredStrategy). parameter-server: tfslurm-entry runs the ps and worker
servers and only the chief runs this file, scheduling steps on the workers (ClusterCoordinator).
The chief (worker 0 in multi-worker) checkpoints, writes TensorBoard summaries and metrics.json;
a run whose output directory holds a checkpoint resumes from it, the global step continuing.
Every task ends with tfslurm_entry.tf.end_of_job, after the chief's last work, so the job ends
together and without TensorFlow error lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from tfslurm_entry.tf import end_of_job

# Keras 3 cannot drive these strategies; tf-keras can (the image sets this too).
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cifar10_data

MULTI_WORKER, PARAMETER_SERVER = "multi-worker", "parameter-server"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--strategy",
        choices=["auto", MULTI_WORKER, PARAMETER_SERVER],
        default="auto",
        help="default: from TF_CONFIG (a 'ps' job means PS)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="holds cifar-10-batches-bin/ (make cifar10-sample writes one)",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        required=True,
        help="checkpoints/, summaries/ and metrics.json; resumed from if present",
    )
    parser.add_argument("--steps", type=int, default=300, help="total global steps")
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="intra/inter-op threads per task")
    parser.add_argument("--log-every", type=int, default=25, help="progress line every N steps")
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument(
        "--preempt-signal",
        default="TERM",
        help="on this signal (Slurm's notice: tfslurm-entry passes it on as SIGTERM): "
        "checkpoint at a step all workers agree on and exit 0; the batch script requeues",
    )
    args = parser.parse_args(argv)
    if not hasattr(signal, f"SIG{args.preempt_signal.upper()}"):
        parser.error(f"--preempt-signal {args.preempt_signal}: no such signal")
    for name in ("steps", "batch_size", "threads", "log_every", "checkpoint_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


class Task:
    """Who this process is, from TF_CONFIG (absent: a single local worker)."""

    def __init__(self) -> None:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
        self.cluster: dict[str, list[str]] = config.get("cluster", {})
        task = config.get("task", {})
        self.type: str = task.get("type", "worker")
        self.index: int = int(task.get("index", 0))
        self.rank = os.environ.get("SLURM_PROCID", "0")
        self.is_chief = self.type == "chief" or (
            "chief" not in self.cluster and self.type == "worker" and self.index == 0
        )
        self.num_workers = max(1, len(self.cluster.get("worker", [])))

    def log(self, message: str) -> None:
        print(f"[rank {self.rank} {self.type} {self.index}] {message}", flush=True)


def unwritable(directory: Path) -> str | None:
    """Why the chief could not write its checkpoints and summaries there; None if it can.
    Checked first: TensorFlow would fail later with a traceback, the other tasks waiting."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            return None
    except OSError as err:
        return err.strerror or str(err)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task = Task()
    try:
        data_dir = cifar10_data.find_data_dir(args.data_dir)
        train_files = cifar10_data.check_files(data_dir, "train")
        test_files = cifar10_data.check_files(data_dir, "test")
    except cifar10_data.DataError as err:
        print(f"train.py: error: {err}", file=sys.stderr)
        return 2
    if task.is_chief and (problem := unwritable(args.output_dir)):
        print(
            f"train.py: error: the chief cannot write to --output-dir {args.output_dir}: "
            f"{problem}; give it a directory the job's user can write on the shared file "
            "system (OUTPUT_DIR in the batch scripts)",
            file=sys.stderr,
        )
        return 2
    strategy_name = args.strategy
    if strategy_name == "auto":
        strategy_name = PARAMETER_SERVER if "ps" in task.cluster else MULTI_WORKER
    if strategy_name == PARAMETER_SERVER and not {"chief", "ps", "worker"} <= set(task.cluster):
        print(
            "train.py: error: parameter-server needs a TF_CONFIG with chief, ps and worker "
            "jobs; start it with `tfslurm-entry --strategy parameter-server`",
            file=sys.stderr,
        )
        return 2
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.random.set_seed(args.seed)
    trainer = Trainer(args, task, strategy_name, data_dir)
    task.log(
        f"{strategy_name}: {task.num_workers} workers, {trainer.num_train} training images "
        f"in {len(train_files)} files, {cifar10_data.count_records(test_files)} test images"
    )
    try:
        trainer.run()
    finally:
        trainer.close()
    # The last TensorFlow call of every task, after the chief's checkpoint, evaluation and
    # metrics: no worker leaves while the chief still works (TensorFlow would report it as
    # crashed), and the chief, which hosts the coordination service, leaves last.
    end_of_job(trainer.strategy)
    return 0


class Trainer:
    """The training loop shared by both strategies; the strategy decides who runs each step."""

    def __init__(
        self, args: argparse.Namespace, task: Task, strategy_name: str, data_dir: Path
    ) -> None:
        import tensorflow as tf
        import tf_keras as keras

        self.args, self.task, self.data_dir = args, task, data_dir
        self.ps = strategy_name == PARAMETER_SERVER
        self.num_train = cifar10_data.count_records(cifar10_data.check_files(data_dir, "train"))
        if self.ps:
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
            self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)
        else:
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
            self.coordinator = None
        with self.strategy.scope():
            self.model = build_model(keras)
            self.optimizer = keras.optimizers.Adam(args.learning_rate)
            # Slots now, not in the first step: a tf.function that creates variables is traced
            # twice, which every task would pay before its first step.
            self.optimizer.build(self.model.trainable_variables)
            self.train_accuracy = keras.metrics.SparseCategoricalAccuracy()
            # Mirrors optimizer.iterations: a checkpointed, strategy-placed global step.
            self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
        ckpt_dir = args.output_dir / "checkpoints"
        # Under MultiWorkerMirroredStrategy every worker must take part in saving; only the
        # chief writes to the shared output directory, the others to a private scratch dir
        # (under TMPDIR, which tfslurm-entry makes per task and removes when the task ends).
        self.scratch = None if task.is_chief else Path(tempfile.mkdtemp(prefix="ckpt-"))
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(ckpt_dir if task.is_chief else self.scratch), max_to_keep=3
        )
        self.writer = (
            tf.summary.create_file_writer(str(args.output_dir / "summaries"))
            if task.is_chief
            else tf.summary.create_noop_writer()
        )

    # -- data -------------------------------------------------------------------------------

    def dataset_fn(self, input_context):
        """This worker's input pipeline, each element tagged with the pipeline's id.

        multi-worker: worker i reads shard i in a seeded order, so a resumed run can skip the
        batches already trained on. parameter-server: TensorFlow builds one pipeline per worker
        from the same function (input_pipeline_id is always 0), so each shuffles with its own
        random seed and tags itself with a random id; steps go to whichever worker is free.
        """
        import tensorflow as tf

        per_replica = input_context.get_per_replica_batch_size(self.args.batch_size)
        # Shard, shuffle and batch the raw records, then decode whole batches: a record another
        # worker trains on is never decoded here, and the shuffle buffer holds 3 KB records
        # instead of 12 KB images (the same order as shuffling decoded images would give).
        records = cifar10_data.records(self.data_dir, "train")
        if self.ps:
            records = records.shuffle(4096).repeat()
            tag = tf.data.Dataset.random().take(1).cache().repeat()
        else:
            shard = input_context.input_pipeline_id
            records = records.shard(input_context.num_input_pipelines, shard)
            records = records.shuffle(4096, seed=self.args.seed + shard).repeat()
            tag = tf.data.Dataset.from_tensors(tf.constant(shard, tf.int64)).repeat()
        ds = records.batch(per_replica, drop_remainder=True).map(
            tf.autograph.experimental.do_not_convert(cifar10_data.decode),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        # Resume where the previous run stopped instead of replaying its first batches.
        ds = ds.skip(self.skip_batches)
        ds = tf.data.Dataset.zip((ds, tag)).map(
            tf.autograph.experimental.do_not_convert(lambda batch, t: (*batch, t))
        )
        return ds.prefetch(2)

    # -- steps ------------------------------------------------------------------------------

    def step_fn(self, images, labels, shard, stop):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=self.args.batch_size)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
        self.train_accuracy.update_state(labels, logits)
        return loss, fingerprint(images, labels), shard, stop

    def make_train_step(self):
        import tensorflow as tf

        strategy = self.strategy

        # No autograph: the step has no Python control flow on tensors, and converting it (and
        # the model's calls) costs every task CPU before its first step, all tasks at once.
        @tf.function(autograph=False)
        def train_step(iterator, stop):
            loss, digest, shard, stop = strategy.run(self.step_fn, args=(*next(iterator), stop))
            # multi-worker: the stop flags are all-reduced, so every worker leaves at one step.
            stop = strategy.reduce(tf.distribute.ReduceOp.SUM, stop, axis=None)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None), digest, shard, stop

        return train_step

    def local(self, result) -> tuple[float, int, int]:
        """(loss, batch fingerprint, shard) of one step, as plain numbers."""
        if self.ps:
            loss, digest, shard, _ = result.fetch()
        else:
            loss, digest, shard, _ = result
            digest = self.strategy.experimental_local_results(digest)[0]
            shard = self.strategy.experimental_local_results(shard)[0]
        return float(loss), int(digest), int(shard)

    # -- loop -------------------------------------------------------------------------------

    def run(self) -> None:
        import tensorflow as tf

        args, task = self.args, self.task
        self.watch_preemption()
        restarts = os.environ.get("SLURM_RESTART_COUNT")
        if restarts:
            task.log(f"SLURM_RESTART_COUNT={restarts}")
        latest = tf.train.latest_checkpoint(str(args.output_dir / "checkpoints"))
        if latest:
            self.checkpoint.restore(latest)
        start = int(self.optimizer.iterations.numpy())
        if latest:
            task.log(f"resumed from {latest} at step {start}")
        self.skip_batches = 0 if self.ps else start
        if start >= args.steps:
            task.log(f"already at step {start} of {args.steps}: nothing to train")
        train_step = self.make_train_step()
        if self.ps:
            # Without a global seed each worker's shuffle and tag draw their own random seeds
            # when the pipeline starts there; with one, every worker would read the same order.
            tf.random.set_seed(None)
            per_worker = self.coordinator.create_per_worker_dataset(
                lambda: self.strategy.distribute_datasets_from_function(self.dataset_fn)
            )
            iterator = iter(per_worker)
        else:
            iterator = iter(self.strategy.distribute_datasets_from_function(self.dataset_fn))

        seen_shards: set[int] = set()
        t0, last_t, last_step, loss = time.monotonic(), time.monotonic(), start, float("nan")
        pending = []
        for step in range(start + 1, args.steps + 1):
            flag = tf.constant(int(self.preempt_requested))
            if self.ps:
                if self.preempt_requested:  # only the chief runs this loop: no one to ask
                    self.coordinator.join()
                    return self.preempted(int(self.optimizer.iterations.numpy()))
                pending.append(self.coordinator.schedule(train_step, args=(iterator, flag)))
            else:
                pending.append(train_step(iterator, flag))
                if int(pending[-1][3]) > 0:  # some worker was signalled: all stop here
                    return self.preempted(step)
            if step % args.log_every and step % args.checkpoint_every and step != args.steps:
                continue
            if self.ps:
                self.coordinator.join()
            for result in pending:
                loss, digest, shard = self.local(result)
                if shard not in seen_shards:
                    seen_shards.add(shard)
                    task.log(
                        f"input pipeline {shard} first batch after step {start}: "
                        f"fingerprint {digest}"
                    )
            pending.clear()
            now = time.monotonic()
            rate = (step - last_step) * args.batch_size / max(now - last_t, 1e-9)
            eta = (args.steps - step) * args.batch_size / max(rate, 1e-9)
            accuracy = float(self.train_accuracy.result())
            task.log(
                f"step {step}/{args.steps} loss {loss:.3f} accuracy {accuracy:.3f} "
                f"{rate:.0f} images/s ETA {eta:.0f}s"
            )
            with self.writer.as_default(step=step):
                tf.summary.scalar("loss", loss)
                tf.summary.scalar("train_accuracy", accuracy)
                tf.summary.scalar("steps_per_sec", rate / args.batch_size)
            self.train_accuracy.reset_state()
            last_t, last_step = now, step
            if step % args.checkpoint_every == 0 or step == args.steps:
                self.save(step)
        elapsed = time.monotonic() - t0
        if task.is_chief:
            self.finish(start, loss, elapsed)

    def close(self) -> None:
        """Remove this worker's scratch checkpoints, however the run ended."""
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def watch_preemption(self) -> None:
        """Note the preemption signal; the loop acts on it at the next step."""
        self.preempt_requested = False
        signum = getattr(signal, f"SIG{self.args.preempt_signal.upper()}")

        def caught(_signum, _frame) -> None:
            if not self.preempt_requested:
                self.task.log(
                    f"caught SIG{self.args.preempt_signal.upper()}: "
                    "checkpointing at the next step and exiting for a requeue"
                )
            self.preempt_requested = True

        signal.signal(signum, caught)

    def preempted(self, step: int) -> None:
        """Checkpoint the step every worker stopped at (rank 0's verdict then says preempted,
        and the batch script requeues the job).

        No worker exits before it is written: main() ends every task with end_of_job, which
        waits for the chief.
        """
        self.save(step)
        if self.task.is_chief:
            self.task.log(f"preempted at step {step}: checkpoint written")

    def save(self, step: int) -> None:
        path = self.manager.save(checkpoint_number=step)
        if self.task.is_chief:
            self.task.log(f"wrote checkpoint {path}")

    def finish(self, start: int, loss: float, elapsed: float) -> None:
        import tensorflow as tf

        args = self.args
        test = cifar10_data.records(self.data_dir, "test").batch(500).map(cifar10_data.decode)
        correct = total = 0
        for images, labels in test:
            predicted = tf.argmax(self.model(images, training=False), axis=1, output_type=tf.int32)
            correct += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int32)))
            total += int(tf.size(labels))
        step = int(self.optimizer.iterations.numpy())
        metrics = {
            "strategy": PARAMETER_SERVER if self.ps else MULTI_WORKER,
            "workers": self.task.num_workers,
            "start_step": start,
            "global_step": step,
            "test_accuracy": correct / max(total, 1),
            "test_images": total,
            "final_loss": loss,
            "elapsed_s": round(elapsed, 2),
            "images_per_sec": round((step - start) * args.batch_size / max(elapsed, 1e-9), 1),
        }
        with self.writer.as_default(step=step):
            tf.summary.scalar("test_accuracy", metrics["test_accuracy"])
        self.writer.flush()
        out = args.output_dir / "metrics.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(metrics, indent=2) + "\n")
        tmp.replace(out)
        self.task.log(
            f"test accuracy {metrics['test_accuracy']:.3f} on {total} images; "
            f"metrics in {out}, checkpoints in {args.output_dir / 'checkpoints'}, "
            f"summaries in {args.output_dir / 'summaries'}"
        )


def build_model(keras):
    """A small CNN: big enough to learn CIFAR-10-shaped data, small enough for CPUs."""
    return keras.Sequential(
        [
            keras.Input(shape=(32, 32, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )


def fingerprint(images, labels):
    """A cheap per-batch digest, so logs show that workers read different batches."""
    import tensorflow as tf

    weights = tf.range(1, tf.size(labels, out_type=tf.int64) + 1)
    return tf.reduce_sum(tf.cast(labels, tf.int64) * weights) * 1_000_003 + tf.cast(
        tf.reduce_sum(images[:, 0, 0, 0]) * 1000, tf.int64
    )


if __name__ == "__main__":
    sys.exit(main())
