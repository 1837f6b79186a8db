"""The cost-aware architecture search (--search_cost_coef, --search_cost_target)."""

import numpy as np
import pytest


def test_candidate_costs_add_up_to_the_model_flops():
    from model.transformer_xl import flops
    from model.transformer_xl.presets import preset_config
    from training.plugins.par_search.costs import candidate_costs, expected_cost

    config = preset_config("tiny", vocab_size=256)
    costs, fixed = candidate_costs(config, seq_len=16, mem_len=8, batch_size=4)
    assert costs[2] == 0.0 and costs[0] > costs[1] > 0  # attention > dense > identity
    for arch in ("afaf", "aaai", "iiii", "ffaf"):
        probs = np.eye(3)[["afi".index(letter) for letter in arch]]
        direct = flops.relative_to_transformer_xl(config, arch, 16, 8, batch_size=4)["total"]
        assert expected_cost(probs, costs, fixed) == pytest.approx(direct, rel=1e-9), arch
    assert expected_cost(np.eye(3)[[0, 1, 0, 1]], costs, fixed) == pytest.approx(1.0)
    mixed = np.full((4, 3), 1 / 3)
    assert expected_cost(mixed, costs, fixed) == pytest.approx(
        fixed + 4 * (costs[0] + costs[1]) / 3)


def test_the_cost_table_and_the_derivation_report_count_alike():
    """The search's expected cost of a settled architecture is the relative FLOPs its
    derivation reports, at the training batch, segment and memory both are given; a
    per-sequence count (B = 1) is another figure."""
    from model.transformer_xl.presets import preset_config
    from training.plugins.par_search.costs import candidate_costs, expected_cost
    from training.plugins.par_search.derive import derivation_report

    config = preset_config("wt2_base", architecture="supernet")
    probs = np.eye(3)[["afi".index(letter) for letter in "aaiiia"]]  # settled on aaiiia
    report = derivation_report(config, probs, seq_len=32, mem_len=16, batch_size=32)
    costs, fixed = candidate_costs(config, seq_len=32, mem_len=16, batch_size=32)
    assert report["architecture"] == "aaiiia"
    assert expected_cost(probs, costs, fixed) == pytest.approx(report["relative_flops"],
                                                               rel=1e-12)
    per_sequence, per_sequence_fixed = candidate_costs(config, 32, 16, batch_size=1)
    assert abs(expected_cost(probs, per_sequence, per_sequence_fixed)
               - report["relative_flops"]) > 0.01
    with pytest.raises(ValueError, match="batch_size must be the batch B"):
        candidate_costs(config, seq_len=32, mem_len=16, batch_size=None)
    with pytest.raises(ValueError, match="batch_size must be the batch B"):
        derivation_report(config, probs, seq_len=32, mem_len=16, batch_size=None)


@pytest.mark.slow
def test_cost_term_moves_the_search_towards_cheaper_blocks(make_config, tmp_path):
    from training.run.loop import train

    common = dict(max_steps=30, log_interval=10, sample_tokens=0, eval_max_records=2,
                  arch_warmup_steps=0, arch_learning_rate=0.05)
    free = train(make_config(tmp_path / "free", **common))
    costly = train(make_config(tmp_path / "costly", search_cost_coef=2.0, **common))
    assert free["derivation"]["relative_flops"] is not None
    cost = {name: run["derivation"]["relative_flops"] for name, run in
            (("free", free), ("costly", costly))}
    history_free = np.array(_probs(tmp_path / "free"))
    history_costly = np.array(_probs(tmp_path / "costly"))
    # The identity candidate (free) gains, attention (the most expensive) loses.
    assert history_costly[-1, :, 2].mean() > history_free[-1, :, 2].mean() + 0.05
    assert history_costly[-1, :, 0].mean() < history_free[-1, :, 0].mean()
    assert cost["costly"] <= cost["free"]
    # The expected cost is logged with every training line.
    from training.run.loop import read_training_log

    rows = read_training_log(tmp_path / "costly" / "training_log.log")
    assert all("expected_cost" in r for r in rows)
    assert rows[-1]["expected_cost"] < rows[0]["expected_cost"]


def _probs(model_dir):
    import json

    data = json.loads((model_dir / "arch_history.json").read_text())
    return [entry["probs"] for entry in data["entries"]]


def test_cost_flags_are_validated(make_config):
    from training.setup.config import ConfigError

    with pytest.raises(ConfigError, match="--search_cost_coef=-1"):
        make_config(search_cost_coef=-1.0)
