"""Beta-decay regularisation of the architecture logits (--arch_beta_decay)."""

import json

import numpy as np
import pytest


def _logsumexp(x):
    top = x.max(axis=-1, keepdims=True)
    return (top + np.log(np.exp(x - top).sum(axis=-1, keepdims=True)))[..., 0]


def test_the_term_and_its_gradient_against_numpy(make_config, tmp_path):
    """lambda(step) * mean_b logsumexp(alpha_b), lambda linear from the warm-up's end to the
    planned last step; its gradient on alpha_b is lambda softmax(alpha_b) / num_blocks."""
    import tensorflow as tf

    from model.registry import build_model
    from training.plugins.par_search.plugin import ParSearch

    config = make_config(tmp_path / "run", arch_beta_decay=3.0, arch_warmup_steps=4,
                         max_steps=20)
    model = build_model(config.model)
    search = ParSearch(model, config, horizon=20)
    assert search.arch_warmup_steps == 4
    arch = list(model.variable_groups()["arch"])
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, size=(len(arch), int(arch[0].shape[0])))
    for variable, row in zip(arch, logits):
        variable.assign(row.astype(np.float32))
    for step, ramp in ((0, 0.0), (4, 0.0), (12, 0.5), (20, 1.0), (35, 1.0)):
        model.set_search_state(0.5, step)
        with tf.GradientTape() as tape:
            (term,) = search.extra_losses()
        grads = tape.gradient(term, arch)
        want = 3.0 * ramp * _logsumexp(logits).mean()
        assert float(term) == pytest.approx(want, rel=1e-5, abs=1e-7), step
        softmax = np.exp(logits - _logsumexp(logits)[:, None])
        for grad, row in zip(grads, softmax * 3.0 * ramp / len(arch)):
            np.testing.assert_allclose(np.asarray(grad), row, rtol=1e-5, atol=1e-7)
        assert float(search.step_values(step)["beta_decay"]) == pytest.approx(float(term))
    # Off by default: no term, nothing logged.
    plain = ParSearch(model, make_config(tmp_path / "plain", max_steps=20), horizon=20)
    assert plain.extra_losses() == [] and "beta_decay" not in plain.step_values(1)


@pytest.mark.slow
def test_beta_decay_keeps_the_probabilities_from_peaking(make_config, tmp_path):
    from training.run.loop import read_training_log, train

    common = dict(max_steps=30, log_interval=10, sample_tokens=0, eval_max_records=2,
                  arch_warmup_steps=0, arch_learning_rate=0.05)
    train(make_config(tmp_path / "free", **common))
    train(make_config(tmp_path / "decayed", arch_beta_decay=50.0, **common))

    def last_probs(name):
        data = json.loads((tmp_path / name / "arch_history.json").read_text())
        return np.array(data["entries"][-1]["probs"])

    free, decayed = last_probs("free"), last_probs("decayed")
    # The leading candidates gain less: every block's top probability is lower.
    assert decayed.max(axis=-1).mean() < free.max(axis=-1).mean() - 0.02
    rows = read_training_log(tmp_path / "decayed" / "training_log.log")
    assert all("beta_decay" in r for r in rows)
    # Logged from the first line after the warm-up (lambda > 0 there); its value falls
    # below 0 as the term lowers every logit alike, which the probabilities do not see.
    assert rows[0]["beta_decay"] != 0 and rows[-1]["beta_decay"] < rows[0]["beta_decay"]
    free_rows = read_training_log(tmp_path / "free" / "training_log.log")
    assert all("beta_decay" not in r for r in free_rows)


def test_a_negative_beta_decay_is_refused(make_config):
    from training.setup.config import ConfigError

    with pytest.raises(ConfigError, match="--arch_beta_decay=-1"):
        make_config(arch_beta_decay=-1.0)
