"""Training of the PAR Transformer-XL: config, strategies, step, evaluation, logging.

Modules (import what you need; this package imports nothing by itself so that
`training.config` stays usable without loading TensorFlow):
    config       TrainConfig (with the registered plug-ins' config sections) and
                 the checks against data, replicas, model_dir.
    plan         the run's plan without TensorFlow: total steps, warm-up caps,
                 the learning-rate schedule names.
    strategy     tf.distribute strategies and row-exact feeding of replicas.
    checkpoint   the Checkpointer: exact-resume checkpoints (model, optimizers,
                 memories, RNG); finding and restoring them is runstore.checkpoints.
    interrupt    Ctrl-C / SIGTERM / preemption: a checkpoint at the step, then exit.
    trainer      Trainer: the step, evaluation, sampling, checkpoints, memories.
    loop         train(config): the host loop, training log, callbacks.
    schedules    learning-rate schedules.
    summaries    TensorBoard writers (plug-ins write their own tags through them).
    optimizers/  one file per optimizer and their registry.
    plugins/     the plug-ins (the PAR search with its temperature, summaries,
                 derivation and plots; the span report) and their registry.
"""
