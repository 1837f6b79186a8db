"""Loading a trained run for inference: its config, tokenizer and one checkpoint's weights.

The run directory is read through the run store (`runstore`): its config
(`runstore.config.RunConfig`), its checkpoints (`runstore.checkpoints`).
A `.keras` package loads into the same `Run` (`serving.packaged`).
"""

import dataclasses
import os

from absl import logging

from model.families import FAMILIES, build_model
from model.interface import check_model
from pardata.errors import DataError
from pardata.meta import META_FILE
from pardata.records import load_built
from runstore import checkpoints, progress, run_dir
from runstore.config import RunConfig
from runstore.run_dir import CONFIG_FILE, DATA_DIR
from serving.decoder import Decoder
from serving.errors import GenerationError


@dataclasses.dataclass
class Run:
    """A trained model ready for inference: the float32 model (any family) with the
    checkpoint's weights, the data's tokenizer, the run's config (`RunConfig`), the
    checkpoint prefix restored, the directory the tokenizer came from and the
    run directory it was loaded from (config.model_dir is where it was trained),
    the build's meta.json, and for a `.keras` package (`serving.packaged`) the
    loaded `PackagedLM` (then checkpoint_path is the file, data_dir and
    model_dir are empty)."""

    model: object
    tokenizer: object
    config: RunConfig
    checkpoint_path: str
    data_dir: str
    model_dir: str = ""
    meta: dict | None = None
    package: object = None
    _decoders: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def default_mem_len(self):
        """int: generation's memory: the run's eval_mem_len, or the model's mem_len if 0
        (a cached decoder needs a memory; evaluation takes eval_mem_len as it is)."""
        return self.config.eval_mem_len or self.model.mem_len

    def decoder(self, mem_len=None):
        """The (cached) `Decoder` for `mem_len` (None: `default_mem_len`)."""
        mem_len = self.default_mem_len if mem_len is None else int(mem_len)
        if mem_len not in self._decoders:
            self._decoders[mem_len] = Decoder(self.model, mem_len)
        return self._decoders[mem_len]


def _no_model(model_dir, why):
    if os.path.isfile(os.path.join(model_dir, META_FILE)):
        return GenerationError(
            f"{model_dir} is a built data directory (it holds {META_FILE}), not a run: pass the "
            f"run directory of a model trained on it (train.py --data_dir={model_dir} "
            "--model_dir=runs/<name>), or a .keras file with --model")
    if os.path.isfile(model_dir):
        return GenerationError(f"{model_dir} is a file, not a run directory: pass a .keras "
                               "file with --model, a run directory with --model_dir")
    return GenerationError(f"no trained model in {model_dir} ({why}): run train.py "
                           f"--model_dir={model_dir} first")


def resolve_checkpoint(model_dir, checkpoint="best"):
    """The checkpoint prefix to restore, or a GenerationError.

    `checkpoint` is "best" (model_dir/best; the newest good checkpoint, with
    a warning, when the run was never evaluated or its best one is damaged),
    "latest" (the newest good one: a damaged newer one is skipped with a
    warning naming its file), or a path: a `ckpt-<step>` prefix (absolute or
    in model_dir) or a directory holding a `checkpoint` file. Every
    checkpoint is read back whole before it is used
    (`runstore.checkpoints.resolve_checkpoint`).
    """
    try:
        path, warnings = checkpoints.resolve_checkpoint(model_dir, checkpoint)
    except checkpoints.NoCheckpoint:
        raise _no_model(model_dir, "no checkpoint") from None
    except checkpoints.CheckpointError as error:
        raise GenerationError(str(error)) from None
    for warning in warnings:
        logging.warning("%s", warning)
    return path


def _tokenizer_dir(model_dir, config):
    """model_dir/data if it holds a build's meta.json, else the config's data_dir."""
    for directory in (os.path.join(model_dir, DATA_DIR), config.data_dir):
        if os.path.isfile(os.path.join(directory, META_FILE)):
            return directory
    raise GenerationError(
        f"cannot find the tokenizer of {model_dir}: neither {os.path.join(model_dir, DATA_DIR)} "
        f"nor data_dir={config.data_dir!r} (from {CONFIG_FILE}) holds a meta.json: copy the "
        f"built data's meta.json and tokenizer files into {os.path.join(model_dir, DATA_DIR)}")


def override_model(config, overrides, model_dir):
    """The run's RunConfig with some model fields changed (checked, named as flags)."""
    fields = {f.name for f in dataclasses.fields(config.model)}
    for name, value in overrides.items():
        if name not in fields:
            owners = [f.name for f in FAMILIES.values()
                      if name in {x.name for x in dataclasses.fields(f.config_class)}]
            raise GenerationError(
                f"--{name}={value!r} does not apply to {model_dir}: its {config.model_family} "
                f"model has no {name} setting (only {', '.join(owners) or 'no'} models have "
                f"one): drop --{name}")
    try:
        return config.replace(model=config.model.replace(**overrides))
    except ValueError as error:
        raise GenerationError(f"--{'/--'.join(overrides)}: {error}") from None


def _note_unfinished(model_dir, path):
    """One warning line when the run is still training (no metrics.json yet): what is
    used, how far the run got and how to finish it (generate, evaluate and export alike)."""
    reached = progress.run_progress(model_dir)
    if not reached.finished:
        step = run_dir.checkpoint_step(path)
        logging.warning("%s is %s: using its checkpoint %s; run its training command again to "
                        "finish it", model_dir, reached.describe(),
                        f"at step {step:,}" if step is not None else path)


def load_run(model_dir, checkpoint="best", model_overrides=None):
    """Loads a trained run: config, tokenizer and the weights of one checkpoint.

    The model is built in float32 whatever the training precision.

    Args:
        model_dir: directory written by train.py.
        checkpoint: "best", "latest" or a path (see `resolve_checkpoint`).
        model_overrides: optional dict of model config fields to change
            before the model is built, settings that leave the weights as
            they are (evaluation's clamp_len, same_length). `Run.config`
            holds the changed config.

    Returns:
        A `Run`.

    Raises:
        GenerationError: no trained model, unreadable config, missing
            tokenizer, a checkpoint that does not fit the config, or an
            override the run's model family does not have (named as a flag).
    """
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise _no_model(model_dir, "no such directory")
    if not os.path.isfile(os.path.join(model_dir, CONFIG_FILE)):
        raise _no_model(model_dir, f"no {CONFIG_FILE}")
    try:
        config = RunConfig.load(model_dir)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GenerationError(f"cannot read {os.path.join(model_dir, CONFIG_FILE)} ({error}): "
                              "restore the file written by train.py") from None
    if model_overrides:
        config = override_model(config, dict(model_overrides), model_dir)
    path = resolve_checkpoint(model_dir, checkpoint)
    _note_unfinished(model_dir, path)
    data_dir = _tokenizer_dir(model_dir, config)
    try:
        meta, tokenizer = load_built(data_dir)
    except DataError as error:
        raise GenerationError(f"cannot load the tokenizer of {model_dir}: {error}") from None
    if tokenizer.vocab_size != config.model.vocab_size:
        raise GenerationError(
            f"the tokenizer in {data_dir} has {tokenizer.vocab_size} ids but the model in "
            f"{model_dir} has vocab_size={config.model.vocab_size}: use the data it was trained on")
    model = check_model(build_model(config.model, dtype="float32"))
    try:
        checkpoints.restore_model_variables(
            model, path, what=f"the model of {os.path.join(model_dir, CONFIG_FILE)}")
    except checkpoints.CheckpointError as error:
        raise GenerationError(str(error)) from None
    return Run(model, tokenizer, config, path, data_dir, model_dir, meta=meta)
