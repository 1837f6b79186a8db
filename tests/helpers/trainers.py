"""Tiny trainers from train.py's flags, and close-enough comparisons of arrays.

Shared by the tests that compare two ways of taking the same training steps
(gradient accumulation, XLA).
"""

import collections

import numpy as np

from tests.helpers.families import names, no_dropout_flags, tiny_flags

# Per family (the registry's): its test run (tiny preset; SHA-RNN: lamb_sharnn, its
# recipe), dropout off, L2 decay and clipping on so that the whole update path is compared.
# Transformer-XL with 2 supernet blocks, not 4: the equivalence does not depend on depth,
# and every block adds tracing time to each trainer.
_TUNING = {"transformer_xl": ["--num_blocks=2", "--arch_warmup_steps=0"]}


def family_flags(family):
    """train.py flags of `family`'s tiny trainer (a family registered at run time too)."""
    return [*tiny_flags(family), *no_dropout_flags(family), *_TUNING.get(family, [])]


FAMILY_FLAGS = {family: family_flags(family) for family in names()}
# Extra losses with weights that make them count (span loss, activation
# regularisation): each must be counted once, not K times. None for a family not named.
EXTRA_LOSS_FLAGS = collections.defaultdict(list, {
    "transformer_xl": ["--attention=adaptive_span", "--span_max=16", "--span_ramp=4",
                       "--span_loss_coef=0.05"],
    "sha_rnn": ["--ar_coef=2.0"],
})
_TRAIN_FLAGS = ["--learning_rate=3e-3", "--clip_norm=0.5", "--weight_decay=0.01",
                "--max_steps=100", "--sample_tokens=0"]


def family_config(data_dir, model_dir, family, *extra):
    from absl import flags

    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    # TensorBoard logs beside the run (an --logdir in `extra` wins): the default,
    # logs/<run> under the working directory, is the repository's logs/ for a test.
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
        f"--logdir={model_dir}_logs", *family_flags(family), *_TRAIN_FLAGS, *extra])
    return train_cli.config_from_flags(fv)[0]


def make_trainer(config, copy_from=None, record_rows=None):
    import tensorflow as tf

    import data_utils
    from training.run.trainer import Trainer

    trainer = Trainer(config, data_utils.load_meta(config.data_dir), tf.distribute.get_strategy())
    if copy_from is not None:
        for a, b in zip(trainer.model.variables, copy_from.model.variables):
            a.assign(b)
    if record_rows is not None:  # rows of every token_nll call traced
        token_nll = trainer.model.token_nll

        def recording(hidden, targets):
            record_rows.append(int(targets.shape[0]))
            return token_nll(hidden, targets)

        trainer.model.token_nll = recording
    return trainer


def first_batches(config, count):
    import data_utils

    meta = data_utils.load_meta(config.data_dir)
    return list(data_utils.make_dataset(config.data_dir, "train", meta=meta).take(count))


def as_arrays(variables):
    return [np.asarray(v, dtype=np.float64) for v in variables]


def assert_close(got, want, rel, what):
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, (what, i)
        assert np.linalg.norm(a - b) <= rel * max(np.linalg.norm(b), 1e-6), (what, i)


class Stopped(Exception):
    """Raised by `StopAfter`: the run died (as a kill would end it)."""


class StopAfter:
    """A training-loop callback that kills the run after the logged step `step`."""

    def __init__(self, step):
        self.step = step

    def on_train_log(self, step, logs):
        if step >= self.step:
            raise Stopped()

    def on_evaluate(self, split, step, results):
        pass

    def on_train_end(self, results):
        pass


# train.py flags of --preset=adaptive_span_small at test size: learned key
# positions, PyTorch's initialisation and the reference's Adagrad (adagrad_clip).
SPAN_TINY = ["--preset=adaptive_span_small", "--num_blocks=2", "--d_model=16", "--d_ffn=32",
             "--num_heads=2", "--span_max=16", "--mem_len=16", "--span_ramp=4"]
