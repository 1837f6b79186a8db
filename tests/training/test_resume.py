"""Exact resume: a run killed with SIGKILL and restarted equals an uninterrupted one.

Per family, `train.py` is killed with SIGKILL after its checkpoint at step 10
and restarted in a new process; an uninterrupted run of the same flags is the
reference. The Transformer-XL search runs with progressive freezing set to
freeze blocks on both sides of the kill: the frozen set and the freezing
counters are restored, so the restart freezes at the same steps. The
uninterrupted runs of all families share one process, and so do the restarts
(each after all kills): a process per family and role would pay TensorFlow's
start-up again for nothing.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers.families import names, tiny_flags
from tests.helpers.trainers import SPAN_TINY

STEPS = 30
CHECKPOINT_EVERY = 10


# Per family (the registry's): its test run (tiny preset; SHA-RNN with LAMB, its recipe's
# optimizer). Transformer-XL with 3 supernet blocks, not 4 (exact resume does not depend on
# depth, and every block adds tracing time to each of the three runs), with progressive
# freezing: fast architecture learning and a short window freeze blocks before and after
# step 10, so the frozen set and the freezing counters are restored too (a run that freezes
# nothing is this run up to its first freeze: a case of its own would add its three runs).
FREEZING = "transformer_xl"
_TUNING = {FREEZING: ["--num_blocks=3", "--arch_learning_rate=0.3", "--freeze_threshold=0.6",
                      "--freeze_window=3"]}
_FAMILY_FLAGS = {
    **{family: [*tiny_flags(family), *_TUNING.get(family, [])] for family in names()},
    # Variants added on purpose:
    "adaptive_span": SPAN_TINY,
    # The optimizers with slots of their own kinds (Muon: momentum for every weight,
    # Adam's velocity for the non-matrices; Lion: one momentum), decay on.
    "transformer_xl_muon": ["--preset=tiny", "--num_blocks=2", "--optimizer=muon",
                            "--weight_decay=0.01"],
    "transformer_xl_lion": ["--preset=tiny", "--num_blocks=2", "--optimizer=lion",
                            "--weight_decay=0.01"],
}

# Trains each run of argv[1] (JSON list of train.py argument lists) in turn,
# as train.py does: its flags, its config, training.run.loop.train, under
# absl.app (which logs INFO, "resuming ...", to stderr).
_TRAIN_CHILD = r"""
import json, sys
from absl import app, flags
import train as train_cli
from training.run.loop import train

def main(_):
    for args in json.loads(sys.argv[1]):
        fv = train_cli.define_flags(flags.FlagValues())
        fv(["train.py", *args])
        config, overwrite = train_cli.config_from_flags(fv)
        train(config, overwrite=overwrite)

app.run(main, argv=["train_child"])
"""


def _flags(data_dir, model_dir, family):
    # Dropout on, so the restored dropout RNG state matters; log_interval 3 so
    # the checkpoint at step 10 falls inside a logging interval.
    return [*_FAMILY_FLAGS[family], f"--data_dir={data_dir}", f"--model_dir={model_dir}",
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


@pytest.fixture(scope="module")
def resumed_runs(tiny_data, tmp_path_factory, subprocess_env):
    """Both families: uninterrupted runs, and runs killed after step 10 and restarted.

    Returns:
        family -> dict: reference and resumed run directories, whether the
        killed run had written metrics.json, its training log when killed,
        and the restart's stderr.
    """
    from training.run.loop import read_training_log

    root = tmp_path_factory.mktemp("resume")
    env, cwd = subprocess_env, subprocess_env["PYTHONPATH"]
    families = sorted(_FAMILY_FLAGS)
    dirs = {f: (root / f / "reference", root / f / "resumed") for f in families}

    def start(args, **kwargs):
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True, **kwargs)

    # The uninterrupted runs and the runs to be killed go in parallel.
    ref_log = open(root / "references.stderr", "w+", encoding="utf-8")  # not a pipe: no
    references = start(["-c", _TRAIN_CHILD, json.dumps(  # blocking while no one reads it
        [_flags(tiny_data, dirs[f][0], f) for f in families])], stdout=subprocess.DEVNULL,
        stderr=ref_log)
    victims = {f: start(["train.py", *_flags(tiny_data, dirs[f][1], f)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for f in families}
    deadline = time.time() + 600
    alive = dict(victims)
    while alive and time.time() < deadline:
        for family, victim in list(alive.items()):
            state_file = dirs[family][1] / "checkpoint"
            if victim.poll() is not None or (
                    state_file.exists() and f"ckpt-{CHECKPOINT_EVERY}" in state_file.read_text()):
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                del alive[family]
        time.sleep(0.02)
    out = {}
    for family in families:
        victims[family].kill()
        victims[family].wait()
        resumed = dirs[family][1]
        out[family] = dict(reference=dirs[family][0], resumed=resumed,
                           finished=(resumed / "metrics.json").exists(),
                           killed_log=read_training_log(resumed / "training_log.log"))

    restart = start(["-c", _TRAIN_CHILD, json.dumps(
        [_flags(tiny_data, dirs[f][1], f) for f in families])], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    _, restart_err = restart.communicate(timeout=600)
    assert restart.returncode == 0, restart_err[-3000:]
    references.wait(timeout=600)
    with ref_log:
        ref_log.seek(0)
        assert references.returncode == 0, ref_log.read()[-3000:]
    for family in families:
        out[family]["restart_stderr"] = restart_err
    return out


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(_FAMILY_FLAGS))
def test_sigkill_and_restart_equals_uninterrupted_run(resumed_runs, family):
    from training.run.loop import read_training_log

    run = resumed_runs[family]
    reference, resumed = run["reference"], run["resumed"]
    assert not run["finished"], "the run finished before it was killed"
    killed_log = run["killed_log"]
    assert killed_log and killed_log[-1]["step"] >= CHECKPOINT_EVERY - 1
    assert f"resuming {resumed} at step " in run["restart_stderr"]

    ref_all = read_training_log(reference / "training_log.log")
    res_all = read_training_log(resumed / "training_log.log")
    # Freeze events are lines of their own.
    assert ([r for r in res_all if "frozen_block" in r]
            == [r for r in ref_all if "frozen_block" in r])
    if family == FREEZING:
        freezes = [r["step"] for r in ref_all if "frozen_block" in r]
        assert min(freezes) <= CHECKPOINT_EVERY < max(freezes), freezes
    ref_log = [r for r in ref_all if "loss" in r]
    res_log = [r for r in res_all if "loss" in r]
    assert [r["step"] for r in ref_log] == list(range(3, STEPS + 1, 3))
    keys = (("step", "loss", "lr", "tau") if family.startswith("transformer_xl")
            else ("step", "loss", "lr"))
    assert all(set(keys) <= set(row) for row in ref_log)
    for key in keys:
        assert [r[key] for r in res_log] == [r[key] for r in ref_log], key

    # Every saved variable: model, both optimizers, counters, memories.
    ref_vars, res_vars = _variables(reference, STEPS), _variables(resumed, STEPS)
    assert ref_vars.keys() == res_vars.keys()
    assert any(k.startswith("arch_optimizer/") for k in ref_vars) == family.startswith(
        "transformer_xl")
    assert any(k.startswith("state/memories/") for k in ref_vars)
    for name, value in ref_vars.items():
        np.testing.assert_array_equal(res_vars[name], value, err_msg=name)
    # The dropout RNG state is saved and moved on during training.
    seeds = [n for n in ref_vars if ref_vars[n].dtype == np.int64 and ref_vars[n].shape == (2,)]
    assert seeds and any(ref_vars[n][1] > 0 for n in seeds)
