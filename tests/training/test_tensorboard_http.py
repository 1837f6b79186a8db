"""TensorBoard serves the tags TrainSummaries writes.

Writes a tiny run's logs, starts `tensorboard` on 127.0.0.1 as a subprocess
(on a port the system picks, --port 0, read back from its serving message: no
port chosen here can be taken by another test in between) and checks through
its HTTP API (the one the browser front end uses) that the scalar tags, one
scalar series' values and the architecture image are served.
"""

import io
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
from PIL import Image
import pytest

from training.plugins.par_search.summaries import arch_image, write_architecture
from training.report.tensorboard import TrainSummaries

STARTUP_TIMEOUT_S = 90
LOSSES = [6.0, 5.5, 5.1, 4.8]


# TensorBoard's line on stderr once its server is bound, before it serves.
SERVING = re.compile(r"^TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/ \(Press CTRL\+C to quit\)$",
                     re.M)


def write_run(logdir):
    probs = np.array([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    with TrainSummaries(logdir) as s:
        for step, loss in enumerate(LOSSES):
            s.scalars("train", step, {
                "loss": loss, "perplexity": float(np.exp(loss)), "tau": 1.0 - 0.2 * step,
                "lr_weights": 1e-3 * step, "lr_arch": 1e-2,
            })
        s.scalars("valid", 3, {"loss": 5.0, "perplexity": float(np.exp(5.0))})
        write_architecture(s, 0, np.full((3, 3), 1 / 3))
        write_architecture(s, 3, probs)
    return probs


def get_json(base, path, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def wait_for(proc, log_path, ready):
    """Polls until ready(base) is truthy (base: the URL the serving message names, once it
    is printed), TensorBoard dies, or the timeout."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    last_error = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"tensorboard exited with "
                        f"{proc.returncode}:\n{log_path.read_text()[-3000:]}")
        served = SERVING.search(log_path.read_text())
        try:
            result = served and ready(served.group(1))
            if result:
                return result
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError) as err:
            last_error = err
        time.sleep(0.1)  # poll often: the server is usually up within seconds
    pytest.fail(f"tensorboard not ready after {STARTUP_TIMEOUT_S} s ({last_error}):\n"
                f"{log_path.read_text()[-3000:]}")


@pytest.mark.slow
def test_tensorboard_serves_training_tags(tmp_path):
    logdir = tmp_path / "logs"
    probs = write_run(logdir)
    log_path = tmp_path / "tensorboard.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir),
             "--host", "127.0.0.1", "--port", "0", "--load_fast=false"],
            stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        expected_train = {
            f"train/{n}" for n in ("loss", "perplexity", "tau", "lr_weights", "lr_arch")
        }
        expected_arch = {
            f"arch/block_{b:02d}/{c}" for b in range(3) for c in ("attention", "dense", "identity")
        }

        def scalars_loaded(base):
            runs = get_json(base, "/data/runs")
            tags = get_json(base, "/data/plugin/scalars/tags")
            if {"train", "valid"} <= set(runs) and expected_train <= set(tags.get("train", {})):
                return base, tags
            return None

        base, tags = wait_for(proc, log_path, scalars_loaded)
        assert expected_arch <= set(tags["train"])
        assert set(tags["valid"]) == {"valid/loss", "valid/perplexity"}

        series = get_json(base, "/data/plugin/scalars/scalars", run="train", tag="train/loss")
        assert [s[1] for s in series] == [0, 1, 2, 3]
        np.testing.assert_allclose([s[2] for s in series], LOSSES, rtol=1e-6)
        dense = get_json(
            base, "/data/plugin/scalars/scalars", run="train", tag="arch/block_01/dense"
        )
        assert [(s[1], round(s[2], 6)) for s in dense] == [(0, round(1 / 3, 6)), (3, 0.7)]

        image_tags = get_json(base, "/data/plugin/images/tags")
        assert image_tags["train"]["arch/probabilities"]["samples"] == 1
        images = get_json(base, "/data/plugin/images/images", run="train", tag="arch/probabilities")
        assert [im["step"] for im in images] == [0, 3]
        with urllib.request.urlopen(
            f"{base}/data/plugin/images/individualImage?{images[-1]['query']}", timeout=60
        ) as response:
            assert response.headers["Content-Type"] == "image/png"
            png = response.read()
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), arch_image(probs))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
