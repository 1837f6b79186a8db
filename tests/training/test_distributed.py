"""tf.distribute: mirrored (2 logical CPUs) and multi-worker agree with one device.

Logical devices and collective ops must be configured before TensorFlow
starts, so the distributed sides run in child processes.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

STEPS = 5
# One config for all: no dropout (replicas would draw the same masks for their
# rows, one device draws one mask for all rows), L2 decay, arch warmup.
_TRAIN_FLAGS = ["--learning_rate=3e-3", "--clip_norm=0.5",
                "--weight_decay=0.01", "--arch_warmup_steps=1", "--eval_mem_len=8",
                f"--max_steps={STEPS}", "--log_interval=1", "--eval_max_records=4",
                "--sample_tokens=0", "--deterministic"]
# Per family: its tiny preset, dropout off (SHA-RNN: with LAMB, its recipe).
_FAMILY_FLAGS = {
    "transformer_xl": ["--preset=tiny", "--dropout=0"],
    "sha_rnn": ["--model_family=sha_rnn", "--preset=sha_rnn_tiny", "--dropout=0",
                "--dropout_input=0", "--dropout_hidden=0", "--attn_dropout=0",
                "--optimizer=lamb"],
}

# Child: the same global batches through `default`, `mirrored` (2 replicas)
# and mirrored with --batch_split=2 (gradient accumulation over micro-batches
# of one row per replica) trainers that start from identical weights. Prints
# what to compare as JSON and saves the default trainer's final weights for
# the multi-worker test.
_MIRRORED_CHILD = r"""
import json, sys
from training.strategy import make_strategy
mirrored = make_strategy("mirrored", 2)  # before any TensorFlow op
import numpy as np
import tensorflow as tf
from absl import flags
import data_utils
import train as train_cli
from training.trainer import Trainer

tf.config.experimental.enable_op_determinism()
data_dir, model_dir, weights_file = sys.argv[1:4]
fv = train_cli.define_flags(flags.FlagValues())
fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={model_dir}", *sys.argv[4:]])
config, _ = train_cli.config_from_flags(fv)
meta = data_utils.load_meta(data_dir)
one = Trainer(config, meta, tf.distribute.get_strategy())
two = Trainer(config.replace(strategy="mirrored", num_cpu_replicas=2), meta, mirrored)
split = Trainer(config.replace(strategy="mirrored", num_cpu_replicas=2, batch_split=2), meta,
                mirrored)
for other in (two, split):
    for a, b in zip(other.model.variables, one.model.variables):
        a.assign(b)

def arrays(variables):
    return [np.asarray(v, dtype=np.float64) for v in variables]

def pairs(other):
    return {
        "weights": (arrays(one.model.variables), arrays(other.model.variables)),
        "optimizer": (arrays([v for o in one.optimizers.values() for v in o.variables]),
                      arrays([v for o in other.optimizers.values() for v in o.variables])),
        "memory": (arrays(one.global_state()), arrays(other.global_state())),
    }

report = {"replicas": two.replicas, "steps": []}
for inputs, targets in data_utils.make_dataset(data_dir, "train", meta=meta).take(config.max_steps):
    a, b = one.train_step(inputs, targets), two.train_step(inputs, targets)
    c = split.train_step(inputs, targets)
    row = {"one": a, "two": b, "split": c}
    for name, other in (("", two), ("split_", split)):
        compared = pairs(other)
        row[name + "diff"] = {k: max(float(np.max(np.abs(x - y))) for x, y in zip(*v))
                              for k, v in compared.items()}
        row[name + "scale"] = {k: max(float(np.max(np.abs(x))) for x in v[0])
                               for k, v in compared.items()}
    report["steps"].append(row)
report["valid"] = [one.evaluate("valid", 6)["nll"], two.evaluate("valid", 6)["nll"]]
np.savez(weights_file, *[np.asarray(v) for v in one.model.variables])
print("REPORT " + json.dumps(report))
"""


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module", params=sorted(_FAMILY_FLAGS))
def distributed_runs(request, tiny_data, tmp_path_factory, subprocess_env):
    """Runs the mirrored child and two multi-worker train.py workers concurrently."""
    flags = _FAMILY_FLAGS[request.param] + _TRAIN_FLAGS
    root = tmp_path_factory.mktemp("distributed")
    weights = root / "default_weights.npz"
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    commands = [(["-c", _MIRRORED_CHILD, str(tiny_data), str(root / "mirrored"), str(weights),
                  *flags], {})]
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        commands.append((["train.py", f"--data_dir={tiny_data}", f"--model_dir={root / 'mw'}",
                          f"--logdir={root / 'mw' / 'logs'}", "--strategy=multi_worker",
                          *flags], {"TF_CONFIG": json.dumps(tf_config)}))
    procs = [subprocess.Popen([sys.executable, *args], cwd=subprocess_env["PYTHONPATH"],
                              env=dict(subprocess_env, **env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for args, env in commands]
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    line = [l for l in outputs[0][0].splitlines() if l.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):]), weights, root / "mw"


@pytest.mark.slow
def test_mirrored_two_cpu_replicas_equals_default(distributed_runs):
    report, _, _ = distributed_runs
    assert report["replicas"] == 2 and len(report["steps"]) == STEPS
    for step in report["steps"]:
        one, two = step["one"], step["two"]
        assert {"loss", "nll", "grad_norm"} <= set(one)  # and arch_grad_norm for a supernet
        for key in [k for k in one if k in ("loss", "nll") or k.endswith("grad_norm")]:
            # The architecture gradient is a small difference of large terms
            # (candidates compete), summed in another order over replicas:
            # its float32 rounding is absolute, about 1e-7.
            tolerance = dict(abs=1e-6) if key == "arch_grad_norm" else {}
            assert two[key] == pytest.approx(one[key], rel=1e-5, **tolerance), key
        assert one["finite"] and two["finite"]
        # Weights, Adam moments (a doubled gradient sum would show here even
        # though Adam's step hardly changes) and the memories of both replicas.
        for key, diff in step["diff"].items():
            assert diff <= 1e-5 * max(step["scale"][key], 1.0), (key, diff)
    assert report["valid"][1] == pytest.approx(report["valid"][0], rel=1e-6)


@pytest.mark.slow
def test_mirrored_with_batch_split_equals_default(distributed_runs):
    """Two replicas, each running its 2 rows as 2 micro-batches of one row."""
    report, _, _ = distributed_runs
    for step in report["steps"]:
        one, split = step["one"], step["split"]
        for key in [k for k in one if k in ("loss", "nll") or k.endswith("grad_norm")]:
            tolerance = dict(abs=1e-6) if key == "arch_grad_norm" else {}
            assert split[key] == pytest.approx(one[key], rel=1e-5, **tolerance), key
        assert split["finite"]
        for key, diff in step["split_diff"].items():
            assert diff <= 1e-5 * max(step["split_scale"][key], 1.0), (key, diff)


@pytest.mark.slow
def test_multi_worker_two_local_workers_agree_with_default(distributed_runs):
    import tensorflow as tf
    from training.loop import read_training_log

    report, weights, mw = distributed_runs
    # Only the chief wrote; the other worker's scratch checkpoints are gone.
    assert not [n for n in os.listdir(mw) if n.startswith(".worker_")]
    logged = [row["loss"] for row in read_training_log(mw / "training_log.log")]
    np.testing.assert_allclose(logged, [s["one"]["nll"] for s in report["steps"]], rtol=1e-5)
    reader = tf.train.load_checkpoint(str(mw / f"ckpt-{STEPS}"))
    with np.load(weights, allow_pickle=False) as default:
        for i in range(len(default.files)):
            a = reader.get_tensor(f"model/{i}/.ATTRIBUTES/VARIABLE_VALUE")
            b = default[f"arr_{i}"]
            assert np.linalg.norm(a - b) <= 1e-5 * max(np.linalg.norm(b), 1.0), i
    metrics = json.loads((mw / "metrics.json").read_text())
    assert metrics["step"] == STEPS
