"""Adaptive attention spans reported as a training plug-in.

    plugin.py   SpanReport: spans in TensorBoard, spans.png, metrics.json
    plots.py    the spans figure (bars per head, soft masks)

`PLUGIN` registers it (training/plugins/__init__.py lists it); it has no
config section. Importing this package does not load TensorFlow.
"""

from training.plugins.base import Plugin, Registration


def _load():
    from training.plugins.span_report.plugin import SpanReport

    return SpanReport


def _report():
    """SpanReport has no class-level hooks: the base class's, which say nothing."""
    return Plugin


PLUGIN = Registration(name="span_report", load=_load, report=_report)
