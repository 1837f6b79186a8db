"""Adaptive attention spans (Sukhbaatar et al. 2019) reported as a plug-in.

For a Transformer-XL model with adaptive-span attention: the learned span of
every head in TensorBoard (`spans/layer_NN/head_H`, and the figure of
training/plugins/span_report/plots.py as the image `spans/figure`) at each log interval;
at the end the figure in the run directory (`spans.png`) and the spans with
their mean in metrics.json (`spans`). The span loss itself is one of the
model's `extra_losses`.
"""

import os

import numpy as np

from training.plugins.base import Plugin
from training.plugins.span_report import plots as span_plots


def write_spans(summaries, step, spans):
    """Writes adaptive attention spans `spans/layer_{l:02d}/head_{h}` (train writer).

    Args:
        summaries: the run's `training.report.tensorboard.TrainSummaries`.
        step: global step.
        spans: one [N] array of spans (in tokens) per attention layer.
    """
    summaries.tagged_scalars(step, {
        f"spans/layer_{layer:02d}/head_{head}": float(span) for layer, heads in enumerate(spans)
        for head, span in enumerate(np.asarray(heads, dtype=np.float64).reshape(-1))})


class SpanReport(Plugin):
    """See the module docstring."""

    RUN_FILES = (span_plots.SPANS_PNG,)

    def __init__(self, model):
        self.model = model

    @classmethod
    def create(cls, model, config, horizon):
        if not getattr(model, "spans", None):  # a model with learned attention spans
            return None
        return cls(model)

    def _spans(self):
        return [np.asarray(s, dtype=np.float64) for s in self.model.spans]

    def _figure_args(self):
        return self._spans(), self.model.span_max, self.model.span_ramp

    def on_log(self, step, summaries, model_dir):
        write_spans(summaries, step, self._spans())
        image, _ = span_plots.spans_figure(*self._figure_args())
        summaries.image(step, "spans/figure", image, description=(
            "Learned span per head (bars, by layer) and each head's soft mask."))

    def on_finish(self, results, model_dir, chief):
        spans = self._spans()
        results["spans"] = {"per_layer": [s.tolist() for s in spans],
                            "mean": float(np.mean(np.concatenate(spans))),
                            "max": int(self.model.span_max)}
        if chief:
            span_plots.plot_spans(*self._figure_args(),
                                  os.path.join(model_dir, span_plots.SPANS_PNG))
