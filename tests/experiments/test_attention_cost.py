"""experiments/attention_cost.py: the attention/dense cost ratio by memory length.

The FLOPs side is checked against a hand count of one block of each kind; the measured
side through the real fit on a planted machine whose step time is its FLOPs (no
TensorFlow step is timed here: the interleaved sampler is experiments/cost_sweep's,
tested there); bad flags are one line and exit 2.
"""

import json

import pytest

from experiments import attention_cost


def _hand_ratio(mem_len, d=128, heads_dim=128, d_ffn=512, seq_len=32, batch=32):
    """An attention block's forward FLOPs per token over a dense block's, counted by hand:
    q and output over T, k and v over K = M + T keys, the position projection over K shared
    by the batch, three score products; the dense block 2 D F twice."""
    keys = mem_len + seq_len
    attention = (2 * d * heads_dim * 2 + 2 * d * heads_dim * 2 * keys / seq_len
                 + 2 * keys * d * heads_dim / (seq_len * batch) + 3 * 2 * heads_dim * keys)
    return attention / (2 * d * d_ffn * 2)


def _planted(monkeypatch):
    """cost_sweep.measured_networks on a machine whose time per token is the FLOPs model's."""
    from experiments import block_times, cost_sweep

    def measured(models, reference, batch_size, seq_len, precision, rounds, sample_seconds):
        flops = block_times.relative_flops(models, seq_len, batch_size, reference)
        return dict(networks={n: dict(tokens_per_sec=1000.0 / flops[n],
                                      vs_reference=1.0 / flops[n]) for n in models},
                    loadavg_start=0.0, loadavg_end=0.0)

    monkeypatch.setattr(cost_sweep, "measured_networks", measured)


@pytest.mark.parametrize("mem_len", [16, 64, 256])
def test_the_flops_side_is_the_hand_count(mem_len):
    from experiments import block_times

    assert [m.mem_len for m in attention_cost.models_at(mem_len).values()] == [mem_len] * 5

    models = attention_cost.models_at(mem_len)
    flops = block_times.relative_flops(models, attention_cost.SEQ_LEN, attention_cost.BATCH)
    fit = block_times.block_costs({n: (n, 1.0 / flops[n], flops[n]) for n in models})["flops"]
    assert fit["attention"] / fit["dense"] == pytest.approx(_hand_ratio(mem_len), rel=1e-9)


def test_a_planted_machine_gives_the_flops_ratio_and_the_report(monkeypatch, tmp_path, capsys):
    _planted(monkeypatch)
    out = tmp_path / "cost.json"
    assert attention_cost.main(["--mem_lens=16,128", "--rounds=2", f"--out={out}"]) == 0
    result = json.loads(out.read_text())
    assert [row["mem_len"] for row in result["rows"]] == [16, 128]
    for row in result["rows"]:
        ratios = row["attention_over_dense"]
        assert ratios["measured"] == pytest.approx(_hand_ratio(row["mem_len"]), rel=1e-6)
        assert ratios["flops"] == pytest.approx(ratios["measured"], rel=1e-6)
    # Attention is the cheaper block at the preset's memory and the dearer one at 128.
    assert result["rows"][0]["attention_over_dense"]["flops"] < 1 < \
        result["rows"][1]["attention_over_dense"]["flops"]
    table = capsys.readouterr().out
    assert "| 16 | 0.77 | 0.77 |" in table and "| 128 | 1.99 | 1.99 |" in table


@pytest.mark.parametrize("flags, names", [
    (["--mem_lens=16,x"], "--mem_lens=16,x"),
    (["--mem_lens=0"], "--mem_lens=0"),
    (["--rounds=1"], "--rounds=1"),
    (["--sample_seconds=0"], "--sample_seconds=0"),
])
def test_bad_flags_are_one_line_and_nothing_runs(flags, names, capsys, tmp_path):
    out = tmp_path / "never.json"
    assert attention_cost.main([*flags, f"--out={out}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and names in err[0]
    assert not out.exists()
