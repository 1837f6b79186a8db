"""Adaptive attention spans (Sukhbaatar et al. 2019) reported as a plug-in.

For a Transformer-XL model with adaptive-span attention: the learned span of
every head in TensorBoard (`spans/layer_NN/head_H`) at each log interval, and
the final spans with their mean in metrics.json (`spans`). The span loss
itself is one of the model's `extra_losses`.
"""

import numpy as np

from training.plugins import Plugin


class SpanReport(Plugin):
    """See the module docstring."""

    def __init__(self, model):
        self.model = model

    @classmethod
    def create(cls, model, config, horizon):
        if getattr(model, "family", None) != "transformer_xl" or not model.spans:
            return None
        return cls(model)

    def _spans(self):
        return [np.asarray(s, dtype=np.float64) for s in self.model.spans]

    def on_log(self, step, summaries, model_dir):
        summaries.spans(step, self._spans())

    def on_finish(self, results, model_dir, chief):
        spans = self._spans()
        results["spans"] = {"per_layer": [s.tolist() for s in spans],
                            "mean": float(np.mean(np.concatenate(spans)))}
