"""tf.distribute strategies: making one from --strategy, thread pools, chief and workers.

Context batching (docs/data.md) makes row b of batch t+1 continue row b
of batch t, so a replica's memory is only valid if the replica always sees the
same rows. The host therefore reads the *global* batch `[B, T]` and gives
replica r (its id in the sync group, global across workers) rows
`[r*B/R, (r+1)*B/R)` (`pardata.replicas.distribute_rows`, shared with the
stream evaluator). Multi-worker runs read the same global batch on every
worker; each worker's replicas take the rows of their global replica ids.

Memories stay per replica (PerReplica values threaded through `strategy.run`)
between steps. For checkpoints they are gathered into global `[B, M, D]`
tensors (`pardata.replicas.gather_rows`) and split again on restore
(`distribute_rows`), so a checkpoint does not depend on the number of replicas
that wrote it.
"""

import os

from absl import logging
import tensorflow as tf

from training.setup.config import STRATEGIES, ConfigError


def make_strategy(name, num_cpu_replicas=None, tpu=""):
    """Creates the tf.distribute strategy named by --strategy.

    Must run before TensorFlow executes any op: logical CPU devices and
    collective ops can only be configured before the runtime starts.

    Args:
        name: "default" (one device), "mirrored" (all local GPUs, or
            num_cpu_replicas logical CPUs), "multi_worker"
            (MultiWorkerMirroredStrategy from TF_CONFIG) or "tpu".
        num_cpu_replicas: with "mirrored", split the first CPU into this many
            logical devices and mirror over them (testing without GPUs).
        tpu: TPU name or address for "tpu" ("" = the local TPU).

    Returns:
        A tf.distribute.Strategy.

    Raises:
        ConfigError: unknown name, missing TF_CONFIG, or a runtime that is
            already initialised.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if num_cpu_replicas:
            return _mirrored_cpu(num_cpu_replicas)
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            logging.info("mirrored strategy over %d GPU(s)", len(gpus))
        else:
            logging.warning("--strategy=mirrored found 0 GPUs: it runs one replica on the CPU "
                            "(as --strategy=default); --num_cpu_replicas=N splits the CPU into "
                            "N replicas for testing")
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            raise ConfigError(
                "--strategy=multi_worker needs the TF_CONFIG environment variable "
                '(e.g. {"cluster": {"worker": ["host1:port", "host2:port"]}, '
                '"task": {"type": "worker", "index": 0}}) on every worker')
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(f"--strategy={name!r}: use one of {STRATEGIES}")


def configure_threads(intra_op_threads=0, inter_op_threads=0):
    """Sets TensorFlow's CPU thread pools (0 keeps TensorFlow's default).

    Must run before TensorFlow executes any op, like `make_strategy`.

    Raises:
        ConfigError: the runtime already runs with other pools (naming the flags).
    """
    threading = tf.config.threading
    wanted = (("intra_op_threads", intra_op_threads, threading.get_intra_op_parallelism_threads,
               threading.set_intra_op_parallelism_threads),
              ("inter_op_threads", inter_op_threads, threading.get_inter_op_parallelism_threads,
               threading.set_inter_op_parallelism_threads))
    for flag, value, get, set_ in wanted:
        if not value or get() == value:
            continue
        try:
            set_(value)
        except RuntimeError as error:
            raise ConfigError(
                f"--{flag}={value}: TensorFlow was initialised before its thread pools could be "
                f"set ({error}); set them before any TensorFlow op runs") from None
    if intra_op_threads or inter_op_threads:
        logging.info("TensorFlow threads: intra-op %s, inter-op %s",
                     intra_op_threads or "default", inter_op_threads or "default")


# Where Linux lists the CPU's instruction-set flags, and the flags that give bfloat16
# arithmetic: x86's AVX512_BF16 and AMX, Arm's BF16 (its "Features" line).
CPUINFO = "/proc/cpuinfo"
BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_bfloat16(cpuinfo=None):
    """True when the CPU lists bfloat16 instructions, False when it lists its flags without
    them, None when it cannot tell (no readable `cpuinfo`, default CPUINFO, or no flags line
    in it)."""
    try:
        with open(cpuinfo or CPUINFO, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    flags = set()
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return bool(flags & BFLOAT16_FLAGS) if flags else None


def _mirrored_cpu(num_replicas):
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * num_replicas)
    except RuntimeError as error:
        raise ConfigError(
            f"--num_cpu_replicas={num_replicas}: TensorFlow was initialised before the "
            f"strategy was created ({error}); create the strategy first") from None
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    logging.info("mirrored strategy over %d logical CPU devices", len(devices))
    # NCCL needs GPUs; reduce on one device, which is exact for two replicas.
    return tf.distribute.MirroredStrategy(
        devices, cross_device_ops=tf.distribute.ReductionToOneDevice())


def num_replicas(strategy):
    """int: replicas in sync over all workers."""
    return strategy.num_replicas_in_sync


def is_chief(strategy):
    """bool: this worker writes files (checkpoints, logs, metrics)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief"):
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and not has_chief


def worker_id(strategy):
    """int: index of this worker (0 without multi-worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 0
    return int(resolver.task_id or 0)


def first_local(strategy, value):
    """The value of the first local replica (for values equal on all replicas)."""
    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def any_worker(strategy, flag):
    """True on every worker when `flag` is true on any of them (collective under
    multi-worker: every worker must call it at the same point)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return bool(flag)
    value = strategy.experimental_distribute_values_from_function(
        lambda context: tf.constant(int(bool(flag)), tf.int32))
    return bool(strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None).numpy() > 0)
