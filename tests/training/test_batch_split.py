"""Gradient accumulation (--batch_split=K): K micro-batches of rows, one update.

The split step must equal the unsplit one (float32, no dropout): same losses,
gradient norms, weights, optimizer moments and memories after several steps,
for both model families. The micro-batches really are B/K rows (seen by the
model's token NLL at trace time) and the step is traced once.
"""

import numpy as np
import pytest

from tests.helpers.trainers import (
    EXTRA_LOSS_FLAGS,
    FAMILY_FLAGS,
    as_arrays,
    assert_close,
    family_config,
    first_batches,
    make_trainer,
)

STEPS = 4

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
    config = family_config(data_dir, root / "one", family, *EXTRA_LOSS_FLAGS[family])
    one = make_trainer(config)
    rows = {2: [], 4: []}
    split = {k: make_trainer(config.replace(model_dir=str(root / f"k{k}"), batch_split=k),
                         copy_from=one, record_rows=rows[k]) for k in rows}
    out = dict(config=config, rows=rows, initial=as_arrays(one.model.variables), steps=[])
    batches = first_batches(config, STEPS)
    for index, (inputs, targets) in enumerate(batches):
        want = one.train_step(inputs, targets)
        out["steps"].append((want, {k: t.train_step(inputs, targets) for k, t in split.items()}))
        if resume and index == 1:
            split[2].save()  # a checkpoint written with K=2 after 2 steps

    def final(trainer):
        return dict(weights=as_arrays(trainer.model.variables),
                    optimizer=as_arrays(_optimizer_variables(trainer)),
                    state=as_arrays(trainer.global_state()))

    out["one"], out["split"] = final(one), {k: final(t) for k, t in split.items()}
    out["tracing"] = {k: (t._step_fn.experimental_get_tracing_count(),
                          t._forward_backward.experimental_get_tracing_count())
                      for k, t in split.items()}
    if resume:
        second = make_trainer(split[2].config.replace(batch_split=1))
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
@pytest.mark.parametrize("family", sorted(FAMILY_FLAGS))
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
        assert_close(trainer["weights"], one["weights"], 1e-5, f"weights K={k}")
        assert_close(trainer["optimizer"], one["optimizer"], 1e-5, f"optimizer K={k}")
        assert_close(trainer["state"], one["state"], 1e-5, f"state K={k}")
        # Micro-batches of B/K rows, the step and the micro-step traced once.
        assert run["rows"][k] == [config.batch_size // k], run["rows"][k]
        assert run["tracing"][k] == (1, 1)
    assert any(np.max(np.abs(a - b)) > 1e-3 for a, b in zip(one["weights"], run["initial"]))


@pytest.mark.slow
def test_mixed_float16_loss_scaling_with_split(tiny_data, tmp_path):
    import keras

    config = family_config(
        tiny_data, tmp_path / "one", "transformer_xl", "--precision=mixed_float16"
    )
    try:
        one = make_trainer(config)
        two = make_trainer(config.replace(model_dir=str(tmp_path / "two"), batch_split=2),
                       copy_from=one)
        assert isinstance(two.optimizers["weights"], keras.optimizers.LossScaleOptimizer)
        for inputs, targets in first_batches(config, 3):
            want, got = one.train_step(inputs, targets), two.train_step(inputs, targets)
            assert got["finite"] and want["finite"]
            # float16 activations: micro-batches round differently.
            assert got["loss"] == pytest.approx(want["loss"], rel=2e-3)
            assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=2e-2)
        scale = [float(t.optimizers["weights"].dynamic_scale) for t in (one, two)]
        assert scale[0] == scale[1]
        assert_close(
            as_arrays(two.model.variables), as_arrays(one.model.variables), 1e-2, "weights"
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.slow
def test_split_runs_with_dropout(tiny_data, tmp_path):
    config = family_config(tiny_data, tmp_path / "drop", "transformer_xl", "--dropout=0.1",
                     "--batch_split=4")
    trainer = make_trainer(config)
    outs = [trainer.train_step(*batch) for batch in first_batches(config, 3)]
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
    assert_close(run["resumed"]["weights"], run["one"]["weights"], 1e-5, "weights")
    assert_close(run["resumed"]["state"], run["one"]["state"], 1e-5, "state")
