"""The one stream evaluator, below training and serving.

Modules (import what you need; importing `evaluation` loads nothing):
    errors   EvaluationError, the user-fixable error of an evaluation (no TensorFlow).
    stream   the segment plan of an id stream (its batched records, then the
             tail), `StreamEvaluator` (the compiled per-segment NLL, optionally
             under a tf.distribute strategy and XLA) and `StreamResult`.

`Trainer.evaluate` (metrics.json) and `serving.evaluation.evaluate_run`
(evaluate.py) both score through `stream.StreamEvaluator`, so a checkpoint has
one figure per split. This package imports neither training/ nor serving/
(tests/test_import_graph.py).
"""
