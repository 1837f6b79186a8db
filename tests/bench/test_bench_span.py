"""bench/bench_span.py: adaptive span (learned spans) against a fixed span, on a tiny run."""

import json

import numpy as np
import pytest

from bench import bench_span as bs

SPANS = [[4.0, 10.0], [30.0, 2.0]]  # tokens, 2 attention layers x 2 heads
SPAN_MAX, RAMP = 512, 8


def fake_run(root, attention="adaptive_span", spans=SPANS):
    """A finished run's config.json and metrics.json (spans as span_report writes them)."""
    from model.transformer_xl.presets import preset_config
    from training.setup.config import TrainConfig

    model = preset_config("tiny", architecture="afaf", attention=attention, span_max=SPAN_MAX,
                          span_ramp=RAMP, mem_len=SPAN_MAX)
    run = root / f"run_{attention}"
    run.mkdir()
    # Big enough that the attention's tensors pass the allocator statistics' size floor.
    TrainConfig(data_dir="unused", model_dir=str(run), model=model, batch_size=8,
                seq_len=64).save()
    metrics = {"step": 10}
    if spans is not None:
        metrics["spans"] = {"per_layer": spans, "mean": float(np.mean(spans)), "max": SPAN_MAX}
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


def test_kept_memory_matches_the_layer(tmp_path):
    """kept_memory (the table's figure) against what the model's layer really keeps."""
    import tensorflow as tf

    from model.families import build_model
    from training.setup.config import TrainConfig

    config = TrainConfig.load(str(fake_run(tmp_path)))
    model = build_model(config.model)
    bs.set_spans(model, SPANS)
    mem = tf.zeros([1, SPAN_MAX, config.model.d_model])
    for layer, spans in zip(model.attention_layers, SPANS):
        np.testing.assert_allclose(layer.spans.numpy(), spans, rtol=1e-6)
        kept = bs.kept_memory(spans, RAMP, SPAN_MAX)
        assert layer._select_memory(mem).shape[1] == kept
    assert [bs.kept_memory(s, RAMP, SPAN_MAX) for s in SPANS] == [18, 38]  # max span + ramp
    assert bs.kept_memory([120.0], RAMP, SPAN_MAX) == 128
    assert bs.kept_memory([510.0], RAMP, SPAN_MAX) == SPAN_MAX  # never more than the memory


@pytest.mark.slow
def test_quick_run_measures_three_networks(tmp_path, capsys):
    out = tmp_path / "bench_span.json"
    run = fake_run(tmp_path)
    assert bs.main([f"--run_dir={run}", "--rounds=2", "--sample_seconds=0.05",
                    f"--out={out}"]) == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert set(rows) == {bs.LEARNED, bs.FIXED, bs.MAXIMUM}
    assert result["spans"] == SPANS and result["batch_size"] == 8 and result["seq_len"] == 64
    assert rows[bs.LEARNED]["mean_span"] == pytest.approx(np.mean(SPANS))
    assert rows[bs.MAXIMUM]["mean_span"] == SPAN_MAX and rows[bs.FIXED]["mean_span"] is None
    assert rows[bs.LEARNED]["kept_memory"] == [18, 38]
    assert rows[bs.FIXED]["kept_memory"] == rows[bs.MAXIMUM]["kept_memory"] == [SPAN_MAX] * 2
    for row in rows.values():
        assert row["tokens_per_sec"] > 0 and len(row["samples_s"]) == 2 and row["peak_bytes"] > 0
    assert rows[bs.FIXED]["vs_fixed"] == 1.0 and rows[bs.FIXED]["peak_vs_fixed"] == 1.0
    # Keys 32 or 48 + 64 instead of 512 + 64 per query: the attention's tensors shrink, and the
    # allocator's peak with them (a count of bytes, not a timing).
    assert rows[bs.LEARNED]["peak_bytes"] < rows[bs.FIXED]["peak_bytes"]
    assert rows[bs.LEARNED]["peak_bytes"] < rows[bs.MAXIMUM]["peak_bytes"]
    assert "| adaptive span (learned) | 12 | 18, 38 |" in result["markdown"]


def test_user_errors_exit_1_with_one_message(tmp_path, capsys):
    cases = [
        (tmp_path / "missing", "has no config.json"),
        (fake_run(tmp_path, attention="relative"), "is not an adaptive-span run"),
        (fake_run(tmp_path, spans=None), "has no learned spans"),
    ]
    for run, message in cases:
        assert bs.main([f"--run_dir={run}", f"--out={tmp_path / 'out.json'}"]) == 1
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out.json").exists()
    with pytest.raises(SystemExit) as exit_:
        bs.main(["--run_dir=x", "--rounds=0"])
    assert exit_.value.code == 1 and "--rounds=0 must be >= 1" in capsys.readouterr().err
