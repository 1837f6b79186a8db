"""ArchHistory JSON round trip and the PNG/GIF plots of it."""

import json

import numpy as np
from PIL import Image
import pytest

from training.plugins.par_search.plots import ARCH_HISTORY_FILE, ArchHistory, plot_arch_history


def make_history(num_entries=5, num_blocks=4):
    rng = np.random.default_rng(0)
    history = ArchHistory()
    for e in range(num_entries):
        logits = rng.normal(size=(num_blocks, 3)) * (1 + e)
        p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
        history.append(100 * e, p.astype(np.float32))
    return history


def test_json_round_trip(tmp_path):
    history = make_history()
    path = history.save(tmp_path)  # a directory gets arch_history.json
    assert path == str(tmp_path / ARCH_HISTORY_FILE)
    data = json.loads((tmp_path / ARCH_HISTORY_FILE).read_text())
    assert data["choices"] == ["attention", "dense", "identity"]
    assert [e["step"] for e in data["entries"]] == [0, 100, 200, 300, 400]
    again = ArchHistory.load(path)
    np.testing.assert_array_equal(again.steps, history.steps)
    np.testing.assert_array_equal(again.probs, history.probs)  # exact, not approx
    assert again.probs.shape == (5, 4, 3)
    steps = [s for s, _ in again]
    assert steps == [0, 100, 200, 300, 400]


def test_append_validation_and_truncate():
    history = make_history(3)
    with pytest.raises(ValueError, match="truncate"):
        history.append(200, np.full((4, 3), 1 / 3))
    with pytest.raises(ValueError, match="4 blocks"):
        history.append(300, np.full((5, 3), 1 / 3))
    with pytest.raises(ValueError, match=r"\[num_blocks, 3\]"):
        history.append(300, np.ones((4,)))
    with pytest.raises(ValueError, match="NaN"):
        history.append(300, np.full((4, 3), np.nan))
    history.truncate(150)  # resume from a checkpoint at step 150
    assert list(history.steps) == [0, 100]
    history.append(200, np.full((4, 3), 1 / 3))
    assert len(history) == 3


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no architecture history"):
        ArchHistory.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ArchHistory.load(bad)
    bad.write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ValueError, match="format_version"):
        ArchHistory.load(bad)


@pytest.mark.slow
def test_png_and_gif(tmp_path):
    history = make_history(num_entries=6, num_blocks=6)
    png, gif = tmp_path / "arch.png", tmp_path / "arch.gif"
    assert plot_arch_history(history, png, gif) == [str(png), str(gif)]
    with Image.open(png) as img:
        img.verify()
    with Image.open(png) as img:
        assert img.format == "PNG" and img.width > 300 and img.height > 200
    with Image.open(gif) as img:
        assert img.format == "GIF" and img.is_animated
        assert img.n_frames == len(history)
        assert img.info.get("loop") == 0
        frames = []
        for i in range(img.n_frames):
            img.seek(i)
            frames.append(np.asarray(img.convert("RGB"), dtype=np.int32))
    # The matrix changes between entries, so consecutive frames must differ.
    assert all(np.abs(a - b).sum() > 0 for a, b in zip(frames, frames[1:]))


def test_long_history_gif_is_subsampled_to_max_frames(tmp_path):
    history = make_history(num_entries=9, num_blocks=2)
    plot_arch_history(history, tmp_path / "a.png", tmp_path / "a.gif", max_frames=4, dpi=40)
    with Image.open(tmp_path / "a.gif") as img:
        assert img.n_frames == 4  # entries 0, 3, 5, 8 (first and last kept)
        img.seek(3)
        last = np.asarray(img.convert("RGB"), dtype=np.int32)
    plot_arch_history(ArchHistory([(800, history.probs[-1])]), tmp_path / "b.png",
                      tmp_path / "b.gif", dpi=40)
    with Image.open(tmp_path / "b.gif") as img:
        np.testing.assert_array_equal(np.asarray(img.convert("RGB"), dtype=np.int32), last)


def test_png_only_and_single_entry(tmp_path):
    history = ArchHistory([(0, np.full((2, 3), 1 / 3))])
    assert plot_arch_history(history, tmp_path / "one.png") == [str(tmp_path / "one.png")]
    assert not (tmp_path / "one.gif").exists()
    with Image.open(tmp_path / "one.png") as img:
        assert img.format == "PNG"
    with pytest.raises(ValueError, match="empty"):
        plot_arch_history(ArchHistory(), tmp_path / "none.png")
