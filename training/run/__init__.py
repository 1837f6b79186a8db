"""Running a training: the host loop, the step, devices, checkpoints and faults.

    loop           train(config): sets up a run and drives it.
    host           the host loop: steps, evaluations, logging, callbacks.
    trainer        Trainer: the step, evaluation, sampling, memories.
    micro_batches  a batch split into micro-batches with summed gradients.
    ema            the moving average of the weights that evaluations use (--ema_decay).
    strategy       tf.distribute strategies and row-exact feeding of replicas.
    checkpoint     the Checkpointer: exact-resume checkpoints (model, optimizers,
                   memories, RNG); finding and restoring them is runstore.checkpoints.
    interrupt      Ctrl-C / SIGTERM / preemption: a checkpoint at the step, then exit.
    nonfinite      the messages for a non-finite loss or gradient (--on_nonfinite).
    collapse       a warning when the valid loss falls back to unigram level.
"""
