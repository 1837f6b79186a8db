"""Gradient accumulation (--batch_split=K): K micro-batches of rows, one update.

The split step must equal the unsplit one (float32, no dropout): same losses,
gradient norms, weights, optimizer moments and memories after several steps,
for both model families. The micro-batches really are B/K rows (seen by the
model's token NLL at trace time) and the step is traced once.
"""

import numpy as np
import pytest

STEPS = 4
# Per family: the tiny preset, dropout off (SHA-RNN: LAMB, its recipe), L2
# decay and clipping on so that the whole update path is compared.
# Transformer-XL with 2 supernet blocks, not 4: the equivalence does not depend
# on depth, and every block adds tracing time to each trainer.
_FAMILY_FLAGS = {
    "transformer_xl": ["--preset=tiny", "--num_blocks=2", "--dropout=0",
                       "--arch_warmup_steps=0"],
    "sha_rnn": ["--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--dropout=0",
                "--dropout_input=0", "--dropout_hidden=0", "--attn_dropout=0",
                "--optimizer=lamb"],
}
# Extra losses with weights that make them count (span loss, activation
# regularisation): each must be counted once, not K times.
_EXTRA_LOSS_FLAGS = {
    "transformer_xl": ["--attention=adaptive_span", "--span_max=16", "--span_ramp=4",
                       "--span_loss_coef=0.05"],
    "sha_rnn": ["--ar_coef=2.0"],
}
_TRAIN_FLAGS = ["--learning_rate=3e-3", "--clip_norm=0.5", "--weight_decay=0.01",
                "--max_steps=100", "--sample_tokens=0"]


def _config(data_dir, model_dir, family, *extra):
    from absl import flags

    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
        *_FAMILY_FLAGS[family], *_TRAIN_FLAGS, *extra])
    return train_cli.config_from_flags(fv)[0]


def _trainer(config, copy_from=None, record_rows=None):
    import data_utils
    import tensorflow as tf
    from training.trainer import Trainer

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


def _batches(config, count):
    import data_utils

    meta = data_utils.load_meta(config.data_dir)
    return list(data_utils.make_dataset(config.data_dir, "train", meta=meta).take(count))


def _arrays(variables):
    return [np.asarray(v, dtype=np.float64) for v in variables]


def _assert_close(got, want, rel, what):
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.shape == b.shape, (what, i)
        assert np.linalg.norm(a - b) <= rel * max(np.linalg.norm(b), 1e-6), (what, i)


def _optimizer_variables(trainer):
    return [v for o in trainer.optimizers.values() for v in o.variables]


def _split_run(data_dir, root, family, resume):
    """K=1, K=2 and K=4 trainers from the same weights through STEPS same batches.

    With `resume`, the K=2 trainer also saves a checkpoint after step 2, and a
    fresh K=1 trainer restores it and takes the remaining steps.

    Returns:
        dict: config, per-step outputs, each trainer's final weights, optimizer
        variables and state as float64 arrays, rows seen by token_nll, tracing
        counts, the initial weights and (with `resume`) the resumed trainer's.
    """
    config = _config(data_dir, root / "one", family, *_EXTRA_LOSS_FLAGS[family])
    one = _trainer(config)
    rows = {2: [], 4: []}
    split = {k: _trainer(config.replace(model_dir=str(root / f"k{k}"), batch_split=k),
                         copy_from=one, record_rows=rows[k]) for k in rows}
    out = dict(config=config, rows=rows, initial=_arrays(one.model.variables), steps=[])
    batches = _batches(config, STEPS)
    for index, (inputs, targets) in enumerate(batches):
        want = one.train_step(inputs, targets)
        out["steps"].append((want, {k: t.train_step(inputs, targets) for k, t in split.items()}))
        if resume and index == 1:
            split[2].save()  # a checkpoint written with K=2 after 2 steps

    def final(trainer):
        return dict(weights=_arrays(trainer.model.variables),
                    optimizer=_arrays(_optimizer_variables(trainer)),
                    state=_arrays(trainer.global_state()))

    out["one"], out["split"] = final(one), {k: final(t) for k, t in split.items()}
    out["tracing"] = {k: (t._step_fn.experimental_get_tracing_count(),
                          t._forward_backward.experimental_get_tracing_count())
                      for k, t in split.items()}
    if resume:
        second = _trainer(split[2].config.replace(batch_split=1))
        out["restored_step"] = second.restore()
        for batch in batches[2:]:
            second.train_step(*batch)
        out["resumed"] = final(second)
    return out


@pytest.fixture(scope="module")
def split_runs(tiny_data, tmp_path_factory):
    """split_runs(family) -> `_split_run` of that family, computed once per module.

    The Transformer-XL run also resumes its K=2 checkpoint with K=1, for
    `test_resume_with_another_batch_split`.
    """
    runs = {}

    def get(family):
        if family not in runs:
            runs[family] = _split_run(tiny_data, tmp_path_factory.mktemp(f"split_{family}"),
                                      family, resume=family == "transformer_xl")
        return runs[family]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(_FAMILY_FLAGS))
def test_split_step_equals_unsplit_step(split_runs, family):
    run = split_runs(family)
    config = run["config"]
    assert config.batch_size == 4
    for want, got_by_k in run["steps"]:
        for k, got in got_by_k.items():
            keys = [key for key in want if key in ("loss", "nll", "lr", "tau")
                    or key.endswith("grad_norm")]
            assert "grad_norm" in keys and ("arch_grad_norm" in keys) == (
                family == "transformer_xl")
            for key in keys:
                # The architecture gradient is a small difference of large
                # terms: its float32 rounding is absolute, about 1e-7.
                tolerance = dict(abs=1e-6) if key == "arch_grad_norm" else {}
                assert got[key] == pytest.approx(want[key], rel=1e-5, **tolerance), (k, key)
            assert got["finite"]
    one = run["one"]
    for k, trainer in run["split"].items():
        # Weights (architecture logits included), optimizer moments, memories.
        _assert_close(trainer["weights"], one["weights"], 1e-5, f"weights K={k}")
        _assert_close(trainer["optimizer"], one["optimizer"], 1e-5, f"optimizer K={k}")
        _assert_close(trainer["state"], one["state"], 1e-5, f"state K={k}")
        # Micro-batches of B/K rows, the step and the micro-step traced once.
        assert run["rows"][k] == [config.batch_size // k], run["rows"][k]
        assert run["tracing"][k] == (1, 1)
    assert any(np.max(np.abs(a - b)) > 1e-3 for a, b in zip(one["weights"], run["initial"]))


@pytest.mark.slow
def test_mixed_float16_loss_scaling_with_split(tiny_data, tmp_path):
    import keras

    config = _config(tiny_data, tmp_path / "one", "transformer_xl", "--precision=mixed_float16")
    try:
        one = _trainer(config)
        two = _trainer(config.replace(model_dir=str(tmp_path / "two"), batch_split=2),
                       copy_from=one)
        assert isinstance(two.optimizers["weights"], keras.optimizers.LossScaleOptimizer)
        for inputs, targets in _batches(config, 3):
            want, got = one.train_step(inputs, targets), two.train_step(inputs, targets)
            assert got["finite"] and want["finite"]
            # float16 activations: micro-batches round differently.
            assert got["loss"] == pytest.approx(want["loss"], rel=2e-3)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=2e-2)
        scale = [float(t.optimizers["weights"].dynamic_scale) for t in (one, two)]
        assert scale[0] == scale[1]
        _assert_close(_arrays(two.model.variables), _arrays(one.model.variables), 1e-2, "weights")
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
def test_split_runs_with_dropout(tiny_data, tmp_path):
    config = _config(tiny_data, tmp_path / "drop", "transformer_xl", "--dropout=0.1",
                     "--batch_split=4")
    trainer = _trainer(config)
    outs = [trainer.train_step(*batch) for batch in _batches(config, 3)]
    assert all(out["finite"] for out in outs)
    seeds = [v for v in trainer.model.variables if "seed_generator" in v.path]
    assert seeds and any(np.asarray(v)[1] > 0 for v in seeds)


@pytest.mark.slow
def test_resume_with_another_batch_split(split_runs):
    """The state is per row: a checkpoint written with K=2 resumes with K=1.

    The K=2 trainer of the Transformer-XL split run saved after 2 steps; a
    fresh K=1 trainer restored that checkpoint and took the other steps. It
    must end where the K=1 trainer that took all the steps ended.
    """
    run = split_runs("transformer_xl")
    assert run["restored_step"] == 2
    _assert_close(run["resumed"]["weights"], run["one"]["weights"], 1e-5, "weights")
    _assert_close(run["resumed"]["state"], run["one"]["state"], 1e-5, "state")
