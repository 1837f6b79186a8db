"""A run's setup, without TensorFlow: the config, its checks, recipes and plan.

    config   TrainConfig (with the registered plug-ins' config sections).
    checks   the config's checks against the data, the replicas and a model_dir.
    recipes  named sets of flag values (--recipe).
    plan     the run's plan: total steps, warm-up caps, schedule names.
"""
