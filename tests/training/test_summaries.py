"""TrainSummaries and the plug-ins' summaries written through it (the PAR search's
architecture, the adaptive spans): write events, read them back, check tags, values and image."""

import glob
import io
import os

import numpy as np
from PIL import Image
import pytest
import tensorflow as tf

from training.plugins.par_search.summaries import arch_image, write_architecture
from training.plugins.span_report.plugin import write_spans
from training.report.tensorboard import TrainSummaries


def read_events(directory):
    """Maps tag -> list of (step, value) where value is the decoded tensor."""
    events = {}
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    assert files, f"no event file in {directory}"
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                events.setdefault(value.tag, []).append(
                    (
                        event.step,
                        tf.make_ndarray(value.tensor),
                        value.metadata.plugin_data.plugin_name,
                    )
                )
    return events


PROBS = np.array(
    [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5], [1.0, 0.0, 0.0]], dtype=np.float32
)


def test_scalars_per_split(tmp_path):
    with TrainSummaries(tmp_path) as s:
        s.scalars("train", 1, {"loss": 5.0, "tau": 0.9, "word_perplexity": None})
        s.scalars("train", 2, {"loss": tf.constant(4.5), "lr_weights": np.float32(1e-3)})
        s.scalars("valid", 2, {"perplexity": 120.5})
        s.scalars("test", 7, {"bits_per_byte": 1.25})
    train = read_events(tmp_path / "train")
    assert [(st, float(v)) for st, v, _ in train["train/loss"]] == [(1, 5.0), (2, 4.5)]
    assert train["train/tau"][0][0] == 1 and float(train["train/tau"][0][1]) == pytest.approx(0.9)
    assert float(train["train/lr_weights"][0][1]) == pytest.approx(1e-3)
    assert train["train/loss"][0][2] == "scalars"
    assert "train/word_perplexity" not in train  # None values are skipped
    valid = read_events(tmp_path / "valid")
    assert list(valid) == ["valid/perplexity"] and float(valid["valid/perplexity"][0][1]) == 120.5
    assert read_events(tmp_path / "test")["test/bits_per_byte"][0][:1] == (7,)


def test_architecture_scalars_and_image(tmp_path):
    with TrainSummaries(tmp_path) as s:
        write_architecture(s, 3, PROBS)
    ev = read_events(tmp_path / "train")
    assert float(ev["arch/block_00/attention"][0][1]) == pytest.approx(0.7)
    assert float(ev["arch/block_01/dense"][0][1]) == pytest.approx(0.8)
    assert float(ev["arch/block_02/identity"][0][1]) == pytest.approx(0.5)
    assert ev["arch/block_03/attention"][0][0] == 3
    assert len([t for t in ev if t.startswith("arch/block_")]) == 4 * 3
    step, tensor, plugin = ev["arch/probabilities"][0]
    assert (step, plugin) == (3, "images")
    width, height, png = tensor  # the images plugin stores [w, h, png...]
    assert (int(width), int(height)) == (3 * 24, 4 * 24)
    img = np.asarray(Image.open(io.BytesIO(png)))
    assert img.shape == (96, 72, 3) and img.dtype == np.uint8
    np.testing.assert_array_equal(img, arch_image(PROBS))


def test_arch_image_colors_follow_probability():
    img = arch_image(PROBS, cell=10)
    centre = img[5::10, 5::10].astype(int)  # one pixel in the middle of each cell
    assert centre.shape == (4, 3, 3)
    np.testing.assert_array_equal(centre[3, 0], [8, 48, 107])  # p = 1: darkest
    np.testing.assert_array_equal(centre[3, 1], [255, 255, 255])  # p = 0: white
    brightness = centre.sum(-1)
    assert brightness[0, 0] < brightness[0, 1] < brightness[0, 2]
    with pytest.raises(ValueError, match=r"\[num_blocks, 3\]"):
        arch_image(np.ones((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        arch_image(np.full((2, 3), np.nan))


def test_spans_text_and_bad_split(tmp_path):
    s = TrainSummaries(tmp_path)
    write_spans(s, 5, [np.array([10.0, 200.0]), tf.constant([0.0, 1024.0])])
    s.text(5, "samples/valid", "the cat sat")
    s.flush()
    ev = read_events(tmp_path / "train")
    assert float(ev["spans/layer_00/head_1"][0][1]) == 200.0
    assert float(ev["spans/layer_01/head_1"][0][1]) == 1024.0
    assert len([t for t in ev if t.startswith("spans/")]) == 4
    assert ev["samples/valid"][0][1].item() == b"the cat sat"
    with pytest.raises(ValueError, match="valid"):
        s.scalars("dev", 1, {"loss": 1.0})
    s.close()
    assert not os.path.exists(tmp_path / "valid")  # writers are created on first use
