"""The derivation under a speed target (--search_speed_target,
training/plugins/par_search/speed_target.py): the most probable architecture within
1/X of Transformer-XL's FLOPs, against a brute-force enumeration; the report; frozen
blocks; the flags' checks; a tiny search end to end."""

import itertools
import json

import numpy as np
import pytest

from model.transformer_xl import flops
from model.transformer_xl.config import ModelConfig
from training.plugins.par_search.derive import derivation_report, write_derivation
from training.plugins.par_search.speed_target import SpeedTarget

CONFIG = ModelConfig(vocab_size=100, d_model=16, num_heads=2, d_ffn=32, num_blocks=6, mem_len=4)
SEQ_LEN, MEM_LEN, BATCH = 4, 4, 2


def _relative(config, arch):
    """Forward FLOPs per token of `arch` over those of "af" repeated, counted here."""
    def total(a):
        return flops.forward_flops_per_token(config, a, SEQ_LEN, MEM_LEN, batch_size=BATCH)["total"]

    return total(arch) / total("af" * (config.num_blocks // 2))


def _brute_force(config, probs, target, frozen=None):
    """(architecture, log-probability) of the most probable of all C^num_blocks strings
    within 1/target of Transformer-XL's FLOPs (frozen blocks fixed), or None."""
    letters = config.candidates
    best = None
    for choice in itertools.product(range(len(letters)), repeat=config.num_blocks):
        if frozen and any(f is not None and f != k for f, k in zip(frozen, choice)):
            continue
        arch = "".join(letters[k] for k in choice)
        if _relative(config, arch) > 1.0 / target:
            continue
        score = float(np.sum(np.log(probs[np.arange(len(choice)), choice])))
        if best is None or score > best[1]:
            best = (arch, score)
    return best


def _random_probs(rng, num_blocks, num_choices=3):
    """Random probability rows, some of them peaked."""
    return rng.dirichlet(np.full(num_choices, 0.5), size=num_blocks)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_derivation_is_the_most_probable_architecture_within_the_target(seed):
    rng = np.random.default_rng(seed)
    probs = _random_probs(rng, CONFIG.num_blocks)
    ceiling = 1.0 / _relative(CONFIG, "i" * CONFIG.num_blocks)
    for target in (1.0, 1.3, 2.0, 3.5, ceiling):
        expected = _brute_force(CONFIG, probs, target)
        report = SpeedTarget(CONFIG, target, SEQ_LEN, MEM_LEN, BATCH).derivation_report(probs)
        assert report["architecture"] == expected[0], (seed, target)
        assert report["speed_target"]["log_probability"] == pytest.approx(expected[1], abs=1e-9)
        assert report["relative_flops"] <= 1.0 / target
        assert report["relative_flops"] == _relative(CONFIG, report["architecture"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_frozen_blocks_keep_their_choice(seed):
    rng = np.random.default_rng(10 + seed)
    probs = _random_probs(rng, CONFIG.num_blocks)
    # Blocks 1 and 4 frozen to attention, which the unconstrained choice may not be.
    frozen = (None, 0, None, None, 0, None)
    for target in (1.0, 1.4, 1.8):
        expected = _brute_force(CONFIG, probs, target, frozen)
        report = SpeedTarget(CONFIG, target, SEQ_LEN, MEM_LEN, BATCH).derivation_report(
            probs, frozen)
        assert report["architecture"] == expected[0], (seed, target)
        assert report["architecture"][1] == report["architecture"][4] == "a"
        assert report["speed_target"]["frozen_blocks"] == [1, 4]
    # Frozen choices that leave nothing within the target are refused, not overridden.
    with pytest.raises(ValueError, match="frozen blocks"):
        SpeedTarget(CONFIG, 3.0, SEQ_LEN, MEM_LEN, BATCH).derivation_report(
            probs, (0, 0, 0, 0, None, None))


def test_the_report_records_the_target_and_what_it_cost(tmp_path):
    # argmax aaaaff: more FLOPs than Transformer-XL, so a target of 1 binds.
    probs = np.array([[0.7, 0.2, 0.1]] * 4 + [[0.1, 0.6, 0.3]] * 2)
    report = SpeedTarget(CONFIG, 1.0, SEQ_LEN, MEM_LEN, BATCH).derivation_report(probs)
    target = report["speed_target"]
    assert target["argmax"] == "aaaaff" and not target["argmax_meets_target"]
    assert target["argmax_relative_flops"] == _relative(CONFIG, "aaaaff") > 1.0
    assert (target["target"], target["max_relative_flops"]) == (1.0, 1.0)
    chosen = report["architecture"]
    assert chosen == _brute_force(CONFIG, probs, 1.0)[0] and report["relative_flops"] <= 1.0
    log_p = np.log(probs)
    by_hand = [sum(log_p[b, "afi".index(k)] for b, k in enumerate(a)) for a in ("aaaaff", chosen)]
    assert target["argmax_log_probability"] == pytest.approx(by_hand[0])
    assert target["log_probability"] == pytest.approx(by_hand[1])
    assert target["log_probability_given_up"] == pytest.approx(by_hand[0] - by_hand[1])
    assert target["log_probability_given_up"] > 0
    # The rest of the report is the plain report of the derived architecture.
    plain = derivation_report(CONFIG, probs, SEQ_LEN, MEM_LEN, batch_size=BATCH,
                              architecture=chosen)
    assert {k: v for k, v in report.items() if k != "speed_target"} == plain
    from training.plugins.par_search.summaries import speed_target_line

    assert speed_target_line(report) == (
        f"--search_speed_target=1 (at most 1.000 of Transformer-XL's FLOPs): the most probable "
        f"architecture aaaaff ({target['argmax_relative_flops']:.3f}) exceeds it; derived "
        f"{chosen} ({report['relative_flops']:.3f}), "
        f"{target['log_probability_given_up']:.3f} nats less log-probability")
    write_derivation(tmp_path, report)
    saved = json.loads((tmp_path / "architecture.json").read_text())
    assert saved["speed_target"] == target
    assert (tmp_path / "architecture.txt").read_text() == chosen + "\n"


def test_an_argmax_within_the_target_is_derived_as_without_one():
    probs = np.array([[0.2, 0.3, 0.5]] * 3 + [[0.5, 0.3, 0.2]] * 3)  # iiiaaa: 1.38x
    plain = derivation_report(CONFIG, probs, SEQ_LEN, MEM_LEN, batch_size=BATCH)
    report = SpeedTarget(CONFIG, 1.3, SEQ_LEN, MEM_LEN, BATCH).derivation_report(probs)
    assert report["speed_target"]["argmax_meets_target"]
    assert report["speed_target"]["log_probability_given_up"] == 0.0
    assert {k: v for k, v in report.items() if k != "speed_target"} == plain
    assert "speed_target" not in plain  # without the option: the report as it was


def test_without_a_target_nothing_changes(make_config):
    from training.plugins.par_search.config import SearchConfig

    config = make_config()
    assert config.search.search_speed_target == 0
    assert SpeedTarget.for_run(config) is None  # the plug-in derives the argmax
    assert config.search.cost_target == 0.0
    # The cost term's target: --search_cost_target, else the speed target's budget.
    assert SearchConfig(search_speed_target=2.0).cost_target == 0.5
    assert SearchConfig(search_speed_target=2.0, search_cost_target=0.7).cost_target == 0.7


@pytest.mark.parametrize("extra, message", [
    (("--search_speed_target=0.5",), "--search_speed_target=0.5: must be >= 1"),
    (("--search_speed_target=-2",), "--search_speed_target=-2.0: must be >= 1"),
    (("--architecture=afaf", "--search_speed_target=1.5"),
     "--search_speed_target=1.5 picks the architecture a search derives, but the model does "
     "not search (--architecture=afaf): drop --search_speed_target"),
    (("--search_speed_target=100",),
     "--search_speed_target=100 cannot be met: the fastest architecture of the candidates "
     "'afi', iiii, is 17.17x Transformer-XL (0.0582 of its forward FLOPs per token, embedding "
     "and output layer included): give --search_speed_target <= 17.17"),
    (("--num_blocks=3", "--search_speed_target=1.5"), "--num_blocks=3 is odd"),
])
def test_bad_speed_targets_are_one_error_before_any_work(tiny_data, tmp_path, extra, message):
    from runstore.errors import ConfigError
    from tests.helpers.trainers import family_config

    with pytest.raises(ConfigError) as raised:
        family_config(tiny_data, tmp_path / "run", "transformer_xl", "--num_blocks=4", *extra)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not (tmp_path / "run").exists()


def test_an_unreachable_target_exits_with_one_line(tiny_data, tmp_path, run_python):
    done = run_python(["train.py", f"--data_dir={tiny_data}", f"--model_dir={tmp_path / 'run'}",
                       "--preset=tiny", "--search_speed_target=40"], timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: --search_speed_target=40 cannot be met: ")
    assert "give --search_speed_target <= 17.17" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_freezing_keeps_the_target_reachable_and_the_cost_term_aims_at_it(tiny_data, tmp_path):
    from tests.helpers.trainers import family_config, make_trainer

    # Two blocks: "aa" has 1.28 of Transformer-XL's FLOPs, "a" with a free block at most 1.
    config = family_config(tiny_data, tmp_path / "run", "transformer_xl",
                           "--search_speed_target=1", "--search_cost_coef=2",
                           "--freeze_threshold=0.9", "--freeze_window=2")
    trainer = make_trainer(config)
    plugin, model = trainer.plugins[0], trainer.model
    for block in model.blocks:
        block.arch_logits.assign([9.0, 0.0, 0.0])  # attention, decided
    assert plugin.after_step(1) == []
    events = plugin.after_step(2)
    # Block 0 freezes; block 1 frozen to attention too would leave no network within 1.
    assert [(e["frozen_block"], e["frozen_choice"]) for e in events] == [(0, 0)]
    assert plugin.after_step(3) == [] and model.frozen_blocks == (0, None)
    report = plugin.speed_target.derivation_report(np.asarray(model.arch_probabilities),
                                                   model.frozen_blocks)
    assert report["architecture"] == "af" and report["relative_flops"] <= 1.0
    # The cost term penalises the expected cost above 1/X (no --search_cost_target).
    cost = float(plugin.step_values(3)["expected_cost"])
    assert cost > 1.0
    assert float(plugin.extra_losses()[0]) == pytest.approx(2 * (cost - 1.0), rel=1e-5)


@pytest.mark.slow
def test_a_tiny_pipeline_with_a_target_retrains_a_network_within_it(make_config, tmp_path):
    from training.run.loop import train

    results = train(make_config(tmp_path / "run", max_steps=4, sample_tokens=0,
                                eval_max_records=1, arch_warmup_steps=0, then_retrain=True,
                                stop_rule="stable", stop_window=2, search_speed_target=4.0))
    saved = json.loads((tmp_path / "run" / "architecture.json").read_text())
    assert saved["relative_flops"] <= 0.25
    assert saved["speed_target"]["target"] == 4.0
    # The argmax when it is within the target (a short search's usually is not), else not.
    target = saved["speed_target"]
    assert target["argmax_meets_target"] == (saved["architecture"] == target["argmax"])
    assert results["architecture"] == saved["architecture"] == results["derivation"]["architecture"]
    assert results["derivation"]["speed_target"] == saved["speed_target"]
    assert (tmp_path / "run" / "architecture.txt").read_text() == saved["architecture"] + "\n"
    # The second stage trains that network, as a fixed architecture (no target of its own).
    assert results["retrain"]["architecture"] == saved["architecture"]
    retrained = json.loads((tmp_path / "run_retrain" / "config.json").read_text())
    assert retrained["model"]["architecture"] == saved["architecture"]
    assert retrained["search"]["search_speed_target"] == 0.0
