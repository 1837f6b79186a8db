"""The optimizer registry through the trainer, and weight decay by role.

Weight decay must move exactly `model.weight_decay_variables()`: kernels,
projections and embedding tables, never biases, norm scales and offsets, the
relative biases u and v (per layer or the shared pair), adaptive spans,
architecture logits or SHA-RNN gate vectors. The step test makes the loss's
gradient exactly zero (the token NLL times a gate variable set to 0), so that
only weight decay can move a weight: L2 optimizers (adam, adagrad) then see
the gradient `wd * w` of the decayed weights only and move them by about `lr`
against their sign; decoupled ones (adamw, lamb) shrink them by exactly
`lr * wd * w` and leave the rest untouched. lamb_sharnn follows its
reference instead: it decays every weight, inside its trust ratio.
"""

import re

import numpy as np
import pytest

from tests.helpers.families import names, no_dropout_flags, tiny_flags

LR, WD = 1e-2, 0.5
# Per family (the registry's): its test run, dropout off, and what this test tunes. The
# Transformer-XL: the supernet with adaptive spans and one shared pair u, v; 2 blocks, not
# the tiny preset's 4: every block has every role, and adds tracing time.
_TUNING = {
    "transformer_xl": ["--num_blocks=2", "--attention=adaptive_span", "--span_max=16",
                       "--span_ramp=4", "--nountie_rel_bias", "--arch_warmup_steps=0"],
}
_FAMILY_FLAGS = {family: [*tiny_flags(family), *no_dropout_flags(family),
                          *_TUNING.get(family, [])] for family in names()}
# Flags of further cases of a family (beside its own run, no flags).
_VARIANTS = {"transformer_xl": [["--untie_rel_bias"], ["--attention=relative"]]}
# Independent of model/interface.py: the last path component of a weight that
# must never be decayed, and of one that must be.
NOT_DECAYED = re.compile(r"^(.*_)?bias$|^(gamma|beta|span|s_q|s_k|s_v|arch_logits)$")
DECAYED = re.compile(r"(kernel|projection|embeddings)$")


def _config(data_dir, model_dir, family, *extra):
    from absl import flags

    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}",
        *_FAMILY_FLAGS[family], f"--learning_rate={LR}", f"--weight_decay={WD}",
        "--warmup_steps=0", "--clip_norm=1.0", "--max_steps=100", "--sample_tokens=0", *extra])
    return train_cli.config_from_flags(fv)[0]


def _leaf(variable):
    return variable.path.split("/")[-1]


@pytest.mark.parametrize("family,flags", [
    (family, flags) for family in names() for flags in [[], *_VARIANTS.get(family, [])]])
def test_decayed_set_is_chosen_by_role(tiny_data, tmp_path, family, flags):
    from model.families import build_model

    config = _config(tiny_data, tmp_path, family, *flags)
    model = build_model(config.model)
    decayed = {id(v) for v in model.weight_decay_variables()}
    groups = model.variable_groups()
    weights = groups["weights"]
    assert decayed <= {id(v) for v in weights}
    for variable in weights:
        leaf = _leaf(variable)
        assert bool(NOT_DECAYED.match(leaf)) != bool(DECAYED.search(leaf)), variable.path
        assert (id(variable) in decayed) == bool(DECAYED.search(leaf)), variable.path
    leaves = {_leaf(v) for v in weights if id(v) not in decayed}
    if family == "transformer_xl":
        assert {"content_bias", "position_bias", "gamma", "beta"} <= leaves
        assert ("span" in leaves) == ("--attention=relative" not in flags)
        shared = [v for v in weights if _leaf(v) == "content_bias"]
        assert len(shared) == (1 if "--untie_rel_bias" not in flags else
                               config.model.num_blocks)
        assert groups["arch"] and not decayed & {id(v) for v in groups["arch"]}
    elif family == "sha_rnn":
        assert {"s_q", "s_k", "s_v", "bias", "gamma", "beta"} <= leaves
        assert "recurrent_kernel" in {_leaf(v) for v in weights if id(v) in decayed}


@pytest.mark.slow
@pytest.mark.parametrize("family,optimizer", [
    ("transformer_xl", "adam"), ("transformer_xl", "adamw"), ("transformer_xl", "lamb"),
    ("transformer_xl", "adagrad"), ("sha_rnn", "lamb"), ("sha_rnn", "adam"),
    ("sha_rnn", "lamb_sharnn")])
def test_only_decay_moves_weights_then_training_moves_all(tiny_data, tmp_path, family,
                                                          optimizer):
    import keras
    import tensorflow as tf

    import data_utils
    from training.optimizers import DECOUPLED, IN_UPDATE, L2, get_optimizer
    from training.optimizers.lamb_sharnn import LambSharnn
    from training.run.trainer import Trainer

    config = _config(tiny_data, tmp_path, family, f"--optimizer={optimizer}")
    meta = data_utils.load_meta(config.data_dir)
    trainer = Trainer(config, meta, tf.distribute.get_strategy())
    from training.optimizers.fused_adam import FusedAdam, FusedAdamW

    expected_class = {"adam": FusedAdam, "adamw": FusedAdamW,
                      "lamb": keras.optimizers.Lamb, "adagrad": keras.optimizers.Adagrad,
                      "lamb_sharnn": LambSharnn}
    assert type(trainer.optimizers["weights"]) is expected_class[optimizer]
    spec = get_optimizer(optimizer)
    weights_group = trainer.groups[0]
    decayed = {v.path for v in trainer.model.weight_decay_variables()}
    # L2 is added by the trainer for L2 optimizers only (never twice).
    assert weights_group.l2 == (WD if spec.decay == L2 else 0.0)
    assert {v.path for v in weights_group.l2_variables} == decayed

    gate = tf.Variable(0.0, trainable=False)
    token_nll, extra_losses = trainer.model.token_nll, trainer.model.extra_losses
    trainer.model.token_nll = lambda hidden, targets: gate * token_nll(hidden, targets)
    trainer.model.extra_losses = lambda hidden: [gate * x for x in extra_losses(hidden)]

    batches = list(data_utils.make_dataset(config.data_dir, "train", meta=meta).take(4))
    trainable = trainer.model.trainable_variables
    before = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    out = trainer.train_step(*batches[0])
    assert out["finite"] and out["loss"] == 0.0 and out["grad_norm"] == 0.0
    after = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    moved = {p for p in before if not np.array_equal(before[p], after[p])}
    if spec.decay == IN_UPDATE:
        # The reference's rule: every weight is decayed (those still zero
        # cannot move); with no gradient the update is wd * w and the trust
        # ratio min(||w||, 10) / (wd ||w||), floored at 0.25.
        nonzero = {p for p, w in before.items() if np.any(w != 0)}
        assert moved == nonzero, (sorted(moved ^ nonzero))
        assert decayed < nonzero  # more than the role-chosen set
        for path in nonzero:
            w = before[path]
            norm = np.linalg.norm(w)
            ratio = max(min(norm, 10.0) / (WD * norm), 0.25)
            np.testing.assert_allclose(after[path] - w, -LR * ratio * WD * w, rtol=1e-4,
                                       atol=1e-9, err_msg=path)
        decayed = set()
    else:
        assert moved == decayed, (sorted(moved - decayed), sorted(decayed - moved))
    for path in decayed:
        w, delta = before[path], after[path] - before[path]
        if spec.decay == DECOUPLED:  # w <- w - lr * wd * w
            np.testing.assert_allclose(delta, -LR * WD * w, rtol=1e-4, atol=1e-9,
                                       err_msg=path)
        else:  # the gradient is wd * w: a normalised first step of about lr
            nonzero = w != 0
            assert np.all(np.sign(delta[nonzero]) == -np.sign(w[nonzero])), path
            big = np.abs(WD * w) > 1e-3
            np.testing.assert_allclose(np.abs(delta[big]), LR, rtol=2e-2, err_msg=path)

    # With the loss back, every optimizer trains every weight.
    gate.assign(1.0)
    outs = [trainer.train_step(*batch) for batch in batches[1:]]
    assert all(o["finite"] and o["loss"] > 0 for o in outs)
    final = {v.path: np.asarray(v, dtype=np.float64) for v in trainable}
    # (Spans may sit at their clamp bound 0, pushed there by the span loss.)
    still = [p for p in before if p not in decayed and not p.endswith("/span")
             and np.array_equal(after[p], final[p])]
    assert not still, still
