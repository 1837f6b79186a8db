"""experiments/block_times.py: block times recovered from synthetic speeds, bad input named,
and the fit of the FLOPs against the search's cost table."""

import pytest

from experiments import block_times as bt

# Seconds per token of the parts, made up: rest 30, attention 10, dense 14 (afafaf: 102).
FIXED, ATTENTION, DENSE = 30e-6, 10e-6, 14e-6


def _speed(arch):
    return 1.0 / (FIXED + arch.count("a") * ATTENTION + arch.count("f") * DENSE)


def test_known_costs_are_recovered_exactly():
    archs = ["afafaf", "afaf", "af", "aaaaaf", "iaiiii", "aaiiia"]
    fit = bt.fit_block_times([(arch, _speed(arch)) for arch in archs])
    total = FIXED + 3 * ATTENTION + 3 * DENSE
    assert fit == pytest.approx(dict(fixed=FIXED / total, attention=ATTENTION / total,
                                     dense=DENSE / total), rel=1e-9)
    assert fit["fixed"] + 3 * fit["attention"] + 3 * fit["dense"] == pytest.approx(1.0)
    # Three distinct architectures are enough, repeated rows (seeds) change nothing, and the
    # reference need not be among them.
    rows = [(arch, _speed(arch)) for arch in ("iaiiii", "aaafff", "ffffff", "ffffff")]
    assert bt.fit_block_times(rows) == pytest.approx(fit, rel=1e-9)
    other = bt.fit_block_times(rows, reference="aaafaf")
    assert 2 * other["dense"] + 4 * other["attention"] + other["fixed"] == pytest.approx(1.0)


def test_too_few_or_inseparable_architectures_are_named():
    with pytest.raises(ValueError, match=r"needs at least 3 distinct architectures, got 2 "
                       r"\(af, afafaf\): measure more points"):
        bt.fit_block_times([("afafaf", 1000.0), ("af", 2000.0), ("af", 2100.0)])
    with pytest.raises(ValueError, match="got 0"):
        bt.fit_block_times([])
    # Transformer-XLs only: always as many attention as dense blocks.
    with pytest.raises(ValueError,
                       match=r"collinear\): add a point with another attention:dense mix"):
        bt.fit_block_times([(a, _speed(a)) for a in ("afafaf", "afaf", "af", "fafa")])
    for bad in ([("afx", 10.0)] * 3, [("af", 0.0), ("a", 1.0), ("f", 1.0)]):
        with pytest.raises(ValueError, match="give an a/f/i architecture and its tokens/s > 0"):
            bt.fit_block_times(bad)


def test_the_fit_of_the_flops_is_the_search_cost_table():
    from model.transformer_xl.presets import preset_config
    from training.plugins.par_search.costs import candidate_costs

    base = preset_config("wt2_base")
    models = {arch: base.replace(architecture=arch, num_blocks=len(arch))
              for arch in ("afafaf", "afaf", "iaiiii", "aaaaff")}
    relative = bt.relative_flops(models, seq_len=32, batch_size=32)
    assert relative["afafaf"] == 1.0 and relative["iaiiii"] < relative["afaf"] < 1.0
    costs, fixed = candidate_costs(models["afafaf"], 32, models["afafaf"].mem_len, 32)
    speeds = {arch: 1000.0 / relative[arch] for arch in models}  # time follows FLOPs
    result = bt.block_costs({arch: (arch, speeds[arch], relative[arch]) for arch in models})
    assert result["error"] is None and result["points"] == sorted(models)
    for fit in (result["flops"], result["measured"]):
        assert [fit["attention"], fit["dense"], fit["fixed"]] == pytest.approx(
            [costs[0], costs[1], fixed], rel=1e-9)
    text = bt.describe(result)
    assert text.startswith("Time per token against blocks, least squares over the 4 points")
    assert f"the FLOPs model attention {costs[0]:.3f}, dense {costs[1]:.3f}" in text
    failed = bt.block_costs({"afafaf": ("afafaf", 1.0, 1.0)})
    assert failed["measured"] is None and "got 1 (afafaf)" in failed["error"]
    assert bt.describe(failed).startswith("Block times not fitted: fitting 3 times")
