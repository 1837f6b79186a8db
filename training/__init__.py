"""Training of the PAR Transformer-XL, in rooms by concern.

Import what you need; no package here imports anything by itself, so that
`training.setup` stays usable without loading TensorFlow.

    setup/       the run before it starts, without TensorFlow: TrainConfig (with the
                 registered plug-ins' config sections), its checks, recipes, the plan.
    run/         running it: train(config), the host loop, the Trainer's step,
                 strategies, micro-batches, checkpoints, interrupts, non-finite
                 values, collapse.
    report/      what it tells: the end-of-run summary, the training log,
                 TensorBoard writers, the ETA, text samples.
    optimizers/  one file per optimizer and their registry, the parameter groups,
                 learning-rate schedules.
    plugins/     the plug-ins (the PAR search with its temperature, summaries,
                 derivation and plots; the span report) and their registry.
"""
