"""A run's first weights from a trained model (`--init_weights`): fine-tuning.

At the first start of a run with --init_weights, the trainer's freshly built model
takes every weight of the source model (a `.keras` package or a run directory's best
checkpoint, `serving.start_from`), whose config it was built from
(training/setup/flags.py). A resumed run restores its own checkpoint instead and never
reads the source again. The optimizer, the step and the schedules start afresh.
"""

from absl import logging

from runstore.errors import ConfigError
from serving.start_from import SourceError, load_source_model, read_source


def load_init_weights(model, path):
    """Copies the weights of the model at `path` into `model` (same config).

    Args:
        model: the trainer's built model (model/interface.py).
        path: a `.keras` package or a run directory (--init_weights).

    Returns:
        The source's description (`Source.describe()`).

    Raises:
        ConfigError: the source does not load, or its weights do not fit `model`.
    """
    try:
        source = read_source(path)
        weights = load_source_model(source).variables
    except SourceError as error:
        raise ConfigError(str(error)) from None
    targets = model.variables
    shapes = [tuple(v.shape) for v in weights], [tuple(v.shape) for v in targets]
    if shapes[0] != shapes[1]:
        raise ConfigError(f"--init_weights={path}: its {len(weights)} weights do not fit the "
                          f"model's {len(targets)} (other architecture or sizes): train with "
                          "the source's model flags (drop the model flags)")
    for target, value in zip(targets, weights):
        target.assign(value)
    described = source.describe()
    logging.info("step 0: the weights of %s (%s, step %s) loaded (--init_weights)", path,
                 described.get("checkpoint") or source.kind, described.get("step"))
    return described
