"""Exact resume: a run killed with SIGKILL and restarted equals an uninterrupted one."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

STEPS = 30
CHECKPOINT_EVERY = 10


# Per family: its tiny preset (SHA-RNN with LAMB, its recipe's optimizer).
_FAMILY_FLAGS = {
    "transformer_xl": ["--preset=tiny"],
    "sha_rnn": ["--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--optimizer=lamb"],
}


def _flags(data_dir, model_dir, family):
    # Dropout on, so the restored dropout RNG state matters; log_interval 3 so
    # the checkpoint at step 10 falls inside a logging interval.
    return ["train.py", *_FAMILY_FLAGS[family], f"--data_dir={data_dir}",
            f"--model_dir={model_dir}",
            f"--logdir={model_dir}/logs", f"--max_steps={STEPS}", "--dropout=0.1",
            "--learning_rate=3e-3", "--warmup_steps=5", "--log_interval=3",
            f"--checkpoint_interval={CHECKPOINT_EVERY}", "--eval_interval=20",
            "--eval_max_records=8", "--sample_tokens=0", "--arch_warmup_steps=4",
            "--deterministic"]


def _variables(model_dir, step):
    import tensorflow as tf

    reader = tf.train.load_checkpoint(os.path.join(model_dir, f"ckpt-{step}"))
    names = [n for n in reader.get_variable_to_shape_map() if "OBJECT_GRAPH" not in n]
    return {n: reader.get_tensor(n) for n in names}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(_FAMILY_FLAGS))
def test_sigkill_and_restart_equals_uninterrupted_run(tiny_data, tmp_path, run_python,
                                                      subprocess_env, family):
    from training.loop import read_training_log

    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    env, root = subprocess_env, subprocess_env["PYTHONPATH"]
    # The uninterrupted run and the run to be killed go in parallel.
    ref_proc = subprocess.Popen([sys.executable, *_flags(tiny_data, reference, family)], cwd=root,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    victim = subprocess.Popen([sys.executable, *_flags(tiny_data, resumed, family)], cwd=root, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state_file = resumed / "checkpoint"
    deadline = time.time() + 600
    while time.time() < deadline and victim.poll() is None:
        if state_file.exists() and f"ckpt-{CHECKPOINT_EVERY}" in state_file.read_text():
            break
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (resumed / "metrics.json").exists(), "the run finished before it was killed"
    killed_log = read_training_log(resumed / "training_log.log")
    assert killed_log and killed_log[-1]["step"] >= CHECKPOINT_EVERY - 1

    restart = run_python(_flags(tiny_data, resumed, family))
    assert restart.returncode == 0, restart.stderr[-3000:]
    assert "resuming" in restart.stderr
    _, ref_err = ref_proc.communicate(timeout=600)
    assert ref_proc.returncode == 0, ref_err[-3000:]

    ref_log = read_training_log(reference / "training_log.log")
    res_log = read_training_log(resumed / "training_log.log")
    assert [r["step"] for r in ref_log] == list(range(3, STEPS + 1, 3))
    keys = ("step", "loss", "lr", "tau") if family == "transformer_xl" else ("step", "loss", "lr")
    assert all(set(keys) <= set(row) for row in ref_log)
    for key in keys:
        assert [r[key] for r in res_log] == [r[key] for r in ref_log], key

    # Every saved variable: model, both optimizers, counters, memories.
    ref_vars, res_vars = _variables(reference, STEPS), _variables(resumed, STEPS)
    assert ref_vars.keys() == res_vars.keys()
    assert any(k.startswith("arch_optimizer/") for k in ref_vars) == (family == "transformer_xl")
    assert any(k.startswith("state/memories/") for k in ref_vars)
    for name, value in ref_vars.items():
        np.testing.assert_array_equal(res_vars[name], value, err_msg=name)
    # The dropout RNG state is saved and moved on during training.
    seeds = [n for n in ref_vars if ref_vars[n].dtype == np.int64 and ref_vars[n].shape == (2,)]
    assert seeds and any(ref_vars[n][1] > 0 for n in seeds)
