"""Adaptive spans as a training artefact: metrics.json, spans.png and TensorBoard."""

import json

import numpy as np
import pytest


def test_soft_mask_matches_the_paper_formula():
    from training.plugins.span_report.plots import soft_mask

    x = np.arange(0, 50)
    span, ramp = 20.0, 8.0
    expected = [min(max((ramp + span - d) / ramp, 0.0), 1.0) for d in x]
    np.testing.assert_allclose(soft_mask(x, span, ramp), expected)
    assert soft_mask(20, span, ramp) == 1.0 and soft_mask(28, span, ramp) == 0.0


def test_spans_figure_draws_every_head():
    from training.plugins.span_report.plots import spans_figure

    image, fig = spans_figure([np.array([3.0, 60.0]), np.array([10.0, 0.0])], 64, 8)
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    bars = fig.axes[0]
    heights = sorted(p.get_height() for p in bars.patches)
    assert heights == [0.0, 3.0, 10.0, 60.0]
    assert "mean 18.2" in bars.get_title()
    assert len(fig.axes[1].lines) == 4  # one soft mask per head
    with pytest.raises(ValueError, match="at least one head"):
        spans_figure([], 64, 8)


@pytest.mark.slow
def test_adaptive_span_run_writes_spans_figure_and_metrics(make_config, tmp_path):
    import tensorflow as tf

    from training.plugins.span_report.plots import SPANS_PNG
    from training.run.loop import train

    config = make_config(max_steps=6, log_interval=3, sample_tokens=0, eval_max_records=2,
                         model_architecture="afaf", model_attention="adaptive_span",
                         model_span_max=16, model_span_ramp=4, model_span_init=0.5,
                         model_mem_len=16, eval_mem_len=16)
    metrics = train(config)
    spans = metrics["spans"]
    assert len(spans["per_layer"]) == 2 and len(spans["per_layer"][0]) == 2  # layers x heads
    assert spans["mean"] == pytest.approx(np.mean(spans["per_layer"]))
    assert 0 < spans["mean"] < 16 and spans["max"] == 16
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["spans"] == spans
    png = tmp_path / "run" / SPANS_PNG
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = list((tmp_path / "run" / "logs" / "train").glob("events.out.tfevents.*"))
    tags = {v.tag for path in events for event in tf.compat.v1.train.summary_iterator(str(path))
            for v in event.summary.value}
    assert {"spans/figure", "spans/layer_00/head_0", "spans/layer_01/head_1"} <= tags
