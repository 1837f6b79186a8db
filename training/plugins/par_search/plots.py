"""History of the supernet's architecture probabilities and its plots.

`ArchHistory` records, at chosen steps, the [num_blocks, C] probabilities of
the candidates (the block types of the run's `candidates`, named as in
model/transformer_xl/blocks.py: attention, dense, identity) of every PAR
block (Mandava et al. 2020, arXiv 2009.04534) and saves them as JSON with
their names (no pickle), so a history reads back with the columns its run
had. `plot_arch_history`
draws one panel per block (probability of each choice against the step, the
step the block was frozen at, if any) and, optionally, an animated GIF of
the block-by-choice matrix over training.

Matplotlib is used through its Agg canvas directly, never through pyplot, so
plotting neither needs a display nor changes the backend of a notebook that
imports this module.
"""

import json
import math
import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
import numpy as np
from PIL import Image

from model.transformer_xl import blocks
from runstore import run_dir

ARCH_HISTORY_FILE = "arch_history.json"
_FORMAT_VERSION = 1
_UNKNOWN_COLOR = "#2ca02c"


def _spec(name):
    """The registered BlockSpec called `name`, or None (a history's choice that is not
    registered now is still plotted, with "?" and a fixed colour)."""
    return next((s for s in blocks.specs() if s.name == name), None)


def _letter(name):
    spec = _spec(name)
    return spec.letter if spec else "?"


def _color(name):
    spec = _spec(name)
    return spec.color if spec else _UNKNOWN_COLOR


class ArchHistory:
    """Architecture probabilities over training: a list of (step, probs).

    Steps are strictly increasing; `probs` are float64 arrays [num_blocks, C]
    over `choices`: the candidates' names, the supernet's (its config's
    `candidates`); default: those of a new config, every registered block
    type (attention, dense, identity).
    """

    def __init__(self, entries=(), choices=None):
        self.choices = tuple(blocks.names() if choices is None else choices)
        self._steps = []
        self._probs = []
        for step, probs in entries:
            self.append(step, probs)

    def append(self, step, probs):
        """Adds the probabilities at `step`.

        Raises:
            ValueError: wrong shape, non-finite values, a different number of
                blocks than earlier entries, or a step not after the last one
                (after resuming, call `truncate(resumed_step)` first).
        """
        probs = np.array(probs, dtype=np.float64)
        num = len(self.choices)
        if probs.ndim != 2 or probs.shape[1] != num or probs.shape[0] == 0:
            raise ValueError(f"probabilities must have shape [num_blocks, {num}] (one column "
                             f"per choice: {', '.join(self.choices)}), got {probs.shape}")
        if not np.all(np.isfinite(probs)):
            raise ValueError(f"probabilities at step {step} contain NaN or inf")
        if self._probs and probs.shape != self._probs[0].shape:
            raise ValueError(
                f"history has {self._probs[0].shape[0]} blocks, got {probs.shape[0]} at step {step}"
            )
        step = int(step)
        if self._steps and step <= self._steps[-1]:
            raise ValueError(
                f"step {step} is not after the last recorded step {self._steps[-1]}; "
                "call truncate(step) when resuming a run"
            )
        self._steps.append(step)
        self._probs.append(probs)

    def truncate(self, max_step):
        """Drops entries after `max_step` (e.g. those logged after the checkpoint
        a run resumes from, which the resumed run will log again)."""
        keep = sum(1 for s in self._steps if s <= max_step)
        del self._steps[keep:]
        del self._probs[keep:]

    def __len__(self):
        return len(self._steps)

    def __iter__(self):
        return iter(zip(list(self._steps), [p.copy() for p in self._probs]))

    @property
    def steps(self):
        """int64 array [E] of recorded steps."""
        return np.array(self._steps, dtype=np.int64)

    @property
    def probs(self):
        """float64 array [E, num_blocks, C]."""
        if not self._probs:
            return np.zeros((0, 0, len(self.choices)))
        return np.stack(self._probs)

    def to_json(self):
        """JSON-serialisable dict of the history."""
        return {
            "format_version": _FORMAT_VERSION,
            "choices": list(self.choices),
            "entries": [
                {"step": s, "probs": p.tolist()} for s, p in zip(self._steps, self._probs)
            ],
        }

    @classmethod
    def from_json(cls, data):
        """Inverse of `to_json`; raises ValueError on another format."""
        if not isinstance(data, dict) or data.get("format_version") != _FORMAT_VERSION:
            raise ValueError(f"not an architecture history (format_version {_FORMAT_VERSION})")
        choices = data.get("choices")
        if (not isinstance(choices, list) or not choices
                or not all(isinstance(c, str) for c in choices)):
            raise ValueError(f"architecture history choices {choices!r} are not a list of names")
        try:
            return cls(((entry["step"], entry["probs"]) for entry in data["entries"]), choices)
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed architecture history entry: {err}") from err

    def save(self, path):
        """Writes the history as JSON, atomically (a crash leaves the old file).

        Args:
            path: file path, or a directory to write `arch_history.json` in.

        Returns:
            The path written.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, ARCH_HISTORY_FILE)
        return run_dir.atomic_write(path, json.dumps(self.to_json()))

    @classmethod
    def load(cls, path):
        """Reads a history saved by `save` (file path or its directory).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not an architecture history.
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            path = os.path.join(path, ARCH_HISTORY_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no architecture history at {path}")
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path} is not valid JSON: {err}") from err
        try:
            return cls.from_json(data)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from err


def _render(fig):
    """RGB uint8 array of a figure drawn on its Agg canvas."""
    canvas = fig.canvas
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def _panels_png(steps, probs, choices, png_path, dpi, freezes):
    num_blocks = probs.shape[1]
    ncols = min(num_blocks, 4)
    nrows = math.ceil(num_blocks / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.3 * nrows + 0.6), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=True)
    for block in range(nrows * ncols):
        ax = axes.flat[block]
        if block >= num_blocks:
            ax.set_visible(False)
            continue
        for k, choice in enumerate(choices):
            ax.plot(steps, probs[:, block, k], color=_color(choice), label=choice,
                    marker="o" if len(steps) == 1 else None)
        final = choices[int(np.argmax(probs[-1, block]))]
        title = f"block {block}: {final}"
        if block in freezes:
            ax.axvline(freezes[block], color="0.2", linestyle=":", linewidth=1)
            title += f" (frozen at {freezes[block]})"
        ax.set_title(title, fontsize=10)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    # With sharex only the bottom row shows tick labels; when the last row is
    # incomplete, the panel above each empty slot must show them instead.
    for col in range(ncols):
        bottom = axes[(num_blocks - 1 - col) // ncols, col]
        bottom.xaxis.set_tick_params(labelbottom=True)
        bottom.set_xlabel("step")
    for ax in axes[:, 0]:
        ax.set_ylabel("probability")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(choices), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    with run_dir.atomic_output(png_path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi)


def _matrix_gif(steps, probs, choices, gif_path, dpi, frame_ms):
    num_blocks = probs.shape[1]
    letters = [_letter(c) for c in choices]
    fig = Figure(figsize=(1.6 + 0.95 * len(choices), 1.0 + 0.42 * num_blocks), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    image = ax.imshow(probs[0], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(choices)), choices)
    ax.set_yticks(range(num_blocks))
    ax.xaxis.tick_top()
    texts = [
        [ax.text(k, b, "", ha="center", va="center", fontsize=8) for k in range(len(choices))]
        for b in range(num_blocks)
    ]
    title = ax.set_xlabel("step 0")

    def label_rows(derived):
        ax.set_yticklabels([f"block {b} ({derived[b]})" for b in range(num_blocks)])

    # Labels have the same width in every frame: lay out once with them.
    label_rows("a" * num_blocks)
    fig.colorbar(image, ax=ax, fraction=0.08, pad=0.04)
    fig.tight_layout()
    frames = []
    for step, p in zip(steps, probs):
        image.set_data(p)
        for b in range(num_blocks):
            for k in range(len(choices)):
                texts[b][k].set_text(f"{p[b, k]:.2f}")
                texts[b][k].set_color("white" if p[b, k] > 0.6 else "black")
        derived = "".join(letters[i] for i in np.argmax(p, axis=1))
        label_rows(derived)
        title.set_text(f"step {step}   {derived}")
        frames.append(Image.fromarray(_render(fig)))
    # Hold the last frame so the final architecture can be read before looping.
    durations = [frame_ms] * (len(frames) - 1) + [max(frame_ms, 2000)]
    with run_dir.atomic_output(gif_path, suffix=".gif") as tmp:
        frames[0].save(
            tmp, save_all=True, append_images=frames[1:], duration=durations, loop=0
        )


def plot_arch_history(history, png_path, gif_path=None, *, dpi=100, frame_ms=200, max_frames=120,
                      freezes=None):
    """Plots architecture probabilities over training.

    Args:
        history: an `ArchHistory` with at least one entry.
        png_path: PNG with one panel per block, P(attention/dense/identity)
            against the step, titled with the block's current argmax.
        gif_path: optional animated GIF, one frame per history entry, of the
            block-by-choice probability matrix (annotated, with the derived
            a/f/i string), looping.
        dpi: resolution of both images.
        frame_ms: display time per GIF frame; the last frame is held >= 2 s.
        max_frames: cap on GIF frames; longer histories are subsampled evenly,
            keeping the first and last entries (every frame adds rendering
            time and file size; None = no cap).
        freezes: optional {block index: step} of frozen blocks, marked in
            their panels.

    Returns:
        The list of paths written.

    Raises:
        ValueError: the history is empty.
    """
    if len(history) == 0:
        raise ValueError("architecture history is empty: nothing to plot")
    steps, probs = history.steps, history.probs
    written = [os.fspath(png_path)]
    _panels_png(steps, probs, history.choices, png_path, dpi, dict(freezes or {}))
    if gif_path is not None:
        if max_frames is not None and len(steps) > max_frames:
            keep = np.unique(
                np.round(np.linspace(0, len(steps) - 1, max(max_frames, 2))).astype(int)
            )
            steps, probs = steps[keep], probs[keep]
        _matrix_gif(steps, probs, history.choices, gif_path, dpi, frame_ms)
        written.append(os.fspath(gif_path))
    return written
