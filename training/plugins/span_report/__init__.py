"""Adaptive attention spans reported as a training plug-in.

    plugin.py   SpanReport: spans in TensorBoard, spans.png, metrics.json
    plots.py    the spans figure (bars per head, soft masks)
"""
