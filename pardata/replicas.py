"""Row-exact feeding of context-batched data to tf.distribute replicas.

Context batching (docs/data.md) makes row b of batch t+1 continue row b of
batch t, so a replica's state is only valid if the replica always sees the
same rows: replica r (its id in the sync group, global across workers) gets
rows `[r*B/R, (r+1)*B/R)` of every global batch `[B, ...]`
(`pardata.records.replica_rows`). The trainer's step and the stream
evaluator (evaluation/stream.py) both feed their rows this way.

Size glossary: B global rows, R replicas.
"""

import tensorflow as tf

from pardata.records import replica_rows


def distribute_rows(strategy, values):
    """Gives each replica its fixed rows of global tensors.

    Args:
        strategy: the strategy.
        values: a nested structure of tensors, each [B, ...] with the same B.

    Returns:
        The same structure of PerReplica values; replica r holds rows
        [r*B/R, (r+1)*B/R). With one replica the input is returned as is.
    """
    replicas = strategy.num_replicas_in_sync
    if replicas == 1:
        return values
    flat = tf.nest.flatten(values)
    batch = int(flat[0].shape[0])

    def value_fn(context):
        lo, hi = replica_rows(batch, context.num_replicas_in_sync,
                              context.replica_id_in_sync_group)
        return tf.nest.map_structure(lambda v: v[lo:hi], values)

    return strategy.experimental_distribute_values_from_function(value_fn)


def gather_rows(strategy, values):
    """Inverse of `distribute_rows`: global tensors from per-replica rows.

    Collective under multi-worker: every worker must call it.

    Args:
        strategy: the strategy.
        values: a nested structure of PerReplica values (or tensors with one
            replica).

    Returns:
        The same structure of tensors [B, ...], rows in replica order.
    """
    if strategy.num_replicas_in_sync == 1:
        return tf.nest.map_structure(
            lambda v: strategy.experimental_local_results(v)[0]
            if isinstance(v, tf.distribute.DistributedValues) else v, values)
    return tf.nest.map_structure(lambda v: strategy.gather(v, axis=0), values)


def last_row(strategy, values):
    """Row B-1 of per-replica rows, as tensors [1, ...] on this host.

    It is the last row of the last replica's local result when this worker
    holds every replica; under multi-worker the last replica may live on
    another worker, so the rows are gathered first (collective: every worker
    must call it).
    """
    flat = tf.nest.flatten(values)
    if flat and isinstance(flat[0], tf.distribute.DistributedValues) and len(
            strategy.experimental_local_results(flat[0])) < strategy.num_replicas_in_sync:
        return tf.nest.map_structure(lambda v: v[-1:], gather_rows(strategy, values))
    return tf.nest.map_structure(
        lambda v: (strategy.experimental_local_results(v)[-1]
                   if isinstance(v, tf.distribute.DistributedValues) else v)[-1:], values)
