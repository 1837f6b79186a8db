"""The plan of a run, without TensorFlow: its length, its warm-up caps, its schedule names.

The learning-rate decay, a plug-in's schedules (the PAR search's temperature)
and the warm-ups are planned for the run's *horizon*, its total steps at the
first start (`total_steps`), which a resumed run keeps even when
--max_steps/--epochs change how long it runs (training/run/trainer.py). A warm-up
is capped at a fraction of the horizon (`capped_warmup`), so a short run still
warms up, then trains.

training/setup/config.py (the flags) and training/optimizers/schedules.py (the schedules) both
read `LR_SCHEDULES` from here, and a plug-in may use `capped_warmup` without
importing the config module.
"""

# The learning-rate schedules by name (training/optimizers/schedules.py implements them).
LR_SCHEDULES = ("cosine", "linear", "constant", "inverse_sqrt", "wsd")
# The default share of the steps after the warm-up that --lr_schedule=wsd decays over.
COOLDOWN_FRACTION = 0.2
# The learning-rate warm-up is at most this fraction of the planned steps
# (the default of --warmup_fraction).
WARMUP_FRACTION = 0.1


def total_steps(config, train_records):
    """Number of training steps of the run (max_steps or epochs * records)."""
    return config.max_steps or config.epochs * train_records


def capped_warmup(steps, horizon, fraction):
    """A warm-up length capped at `fraction` of the planned steps.

    `min(steps, floor(fraction * horizon))`: the flag value is a cap, so a
    run shorter than the warm-up it asks for still warms up, then trains.

    Args:
        steps: the requested warm-up (--warmup_steps, --arch_warmup_steps).
        horizon: the run's planned total steps.
        fraction: largest share of the horizon spent warming up.
    """
    return min(int(steps), int(fraction * horizon))

