"""Figures of learned attention spans (Sukhbaatar et al. 2019, arXiv 1905.07799).

`plot_spans` draws, like the adaptive-span paper's figure, the learned span
of every head grouped by layer (bars, the maximum span as a dashed line, the
mean span in the title), and next to it the soft masks
`m(x) = clamp((R + z - x) / R, 0, 1)` of every head over the key distance x,
which is what each head actually attends with. Matplotlib is used through
its Agg canvas (no pyplot, no display).
"""

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np

SPANS_PNG = "spans.png"


def soft_mask(distance, span, ramp):
    """m(x) = clamp((R + z - x) / R, 0, 1) of the adaptive-span paper."""
    return np.clip((ramp + span - np.asarray(distance, np.float64)) / ramp, 0.0, 1.0)


def spans_figure(spans, span_max, ramp, dpi=100):
    """The figure as an RGB uint8 array [H, W, 3], and the Figure.

    Args:
        spans: one [N] array of spans (tokens) per attention layer.
        span_max: the maximum span S.
        ramp: the soft-mask ramp R.
        dpi: resolution.
    """
    spans = [np.asarray(s, np.float64).reshape(-1) for s in spans]
    if not spans or any(s.size == 0 for s in spans):
        raise ValueError("spans must hold at least one head per layer")
    num_layers, num_heads = len(spans), max(s.size for s in spans)
    fig = Figure(figsize=(11, 3.6), dpi=dpi)
    FigureCanvasAgg(fig)
    bars, masks = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / num_heads
    colors = [f"C{h % 10}" for h in range(num_heads)]
    for layer, heads in enumerate(spans):
        for head, span in enumerate(heads):
            bars.bar(layer - 0.4 + (head + 0.5) * width, span, width=width, color=colors[head])
    bars.axhline(span_max, color="0.3", linestyle="--", linewidth=1, label=f"maximum {span_max}")
    bars.set_xticks(range(num_layers))
    bars.set_xlabel("layer (bars: heads)")
    bars.set_ylabel("learned span (tokens)")
    mean = float(np.mean(np.concatenate(spans)))
    bars.set_title(f"learned spans, mean {mean:.1f} tokens")
    bars.legend(loc="upper left", frameon=False)
    distance = np.linspace(0, span_max + ramp, 400)
    for layer, heads in enumerate(spans):
        shade = 0.25 + 0.75 * layer / max(num_layers - 1, 1)
        for span in heads:
            masks.plot(distance, soft_mask(distance, span, ramp), color=(0.1, 0.3, shade),
                       alpha=0.6, linewidth=1)
    masks.set_xlabel("key distance x (tokens)")
    masks.set_ylabel("mask m(x)")
    masks.set_title("soft masks (darker: lower layer)")
    masks.set_ylim(-0.02, 1.05)
    fig.tight_layout()
    canvas = fig.canvas
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy(), fig


def plot_spans(spans, span_max, ramp, png_path, dpi=100):
    """Writes the spans figure to `png_path` (via a temporary name) and returns the image."""
    from runstore import run_dir

    image, fig = spans_figure(spans, span_max, ramp, dpi)
    with run_dir.atomic_output(png_path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi)
    return image
