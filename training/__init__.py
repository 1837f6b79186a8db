"""Training of the PAR Transformer-XL: config, strategies, step, evaluation, logging.

Modules (import what you need; this package imports nothing by itself so that
`training.config` stays usable without loading TensorFlow):
    config       TrainConfig and the checks against data, replicas, model_dir.
    strategy     tf.distribute strategies and row-exact feeding of replicas.
    checkpoint   the Checkpointer: exact-resume checkpoints (model, optimizers,
                 memories, RNG); finding and restoring them is runstore.checkpoints.
    interrupt    Ctrl-C / SIGTERM / preemption: a checkpoint at the step, then exit.
    trainer      Trainer: the step, evaluation, sampling, checkpoints, memories.
    loop         train(config): the host loop, training log, callbacks.
    schedules    learning-rate and Gumbel temperature schedules.
    summaries    TensorBoard writers.
    plots        architecture history and its plots.
    derive       derived architecture and its FLOPs report.
"""
