"""tf.distribute: mirrored (2 logical CPUs) and multi-worker agree with one device.

Logical devices and collective ops must be configured before TensorFlow
starts, so the distributed sides run in child processes: one mirrored child
and two multi-worker workers, each taking both model families in turn (a
process per family would pay TensorFlow's start-up again for nothing).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers.families import names, no_dropout_flags, tiny_flags
from tests.helpers.runs import LINES, build_data
from tests.helpers.trainers import SPAN_TINY

STEPS = 5
# One config for all: no dropout (replicas would draw the same masks for their
# rows, one device draws one mask for all rows), L2 decay, arch warmup.
_RATE = 3e-3
_TRAIN_FLAGS = [f"--learning_rate={_RATE:g}", "--clip_norm=0.5",
                "--weight_decay=0.01", "--arch_warmup_steps=1", "--eval_mem_len=8",
                f"--max_steps={STEPS}", "--log_interval=1", "--eval_max_records=4",
                "--sample_tokens=0", "--deterministic"]
# Per family (the registry's): its test run (tiny preset; SHA-RNN: lamb_sharnn, its recipe),
# dropout off. Transformer-XL with 2 supernet blocks, not 4: agreement does not depend on
# depth, and every block adds tracing time to each of the five trainers.
_TUNING = {"transformer_xl": ["--num_blocks=2"]}
_FAMILY_FLAGS = {
    **{family: [*tiny_flags(family), *no_dropout_flags(family), *_TUNING.get(family, [])]
       for family in names()},
    # Variants added on purpose:
    # The adaptive-span reference's optimizer (adagrad_clip) and model options.
    # Its epsilon of 1e-10 turns gradients that are zero up to rounding into
    # full steps of either sign (test_xla.py says more), so the replicas'
    # summation order would show in the weights: epsilon 1e-6 here.
    "adaptive_span": [*SPAN_TINY, "--dropout=0", "--epsilon=1e-6"],
    # Muon (Newton-Schulz on the hidden matrices, Adam on the rest) and Lion.
    "transformer_xl_muon": ["--preset=tiny", "--num_blocks=2", "--dropout=0", "--optimizer=muon"],
    # (Lion on the Transformer-XL too: an LSTM's tracing would double this family's time.)
    "transformer_xl_lion": ["--preset=tiny", "--num_blocks=2", "--dropout=0",
                            "--optimizer=lion"],
}
# The optimizer variants train only (the steps of `default` and `mirrored`): batch split,
# evaluation and the stream evaluator do not see the optimizer (the gradients are summed
# before it, the evaluations read the weights), and their model is the Transformer-XL
# family's, which is checked on all of them.
_STEPS_ONLY = ("transformer_xl_lion", "transformer_xl_muon")
# Optimizers whose step is a sign (see test_mirrored_two_cpu_replicas_equals_default).
_SIGN_UPDATES = ("transformer_xl_lion",)
_FULL_FAMILIES = tuple(sorted(set(_FAMILY_FLAGS) - set(_STEPS_ONLY)))
# The families the multi-worker workers train too. An optimizer's update is the same code
# under either strategy (the gradients arrive summed over replicas or over workers): the
# mirrored trainers check Muon and Lion; the workers' runs check the data, the collective
# and the chief's files, which the optimizer does not change: the registered families and
# the adaptive spans.
_WORKER_FAMILIES = tuple(sorted([*names(), "adaptive_span"]))

# Child: per family (argv[3], JSON family -> [flags, whether in full]), the same global
# batches through `default`, `mirrored` (2 replicas) and, in full, mirrored with
# --batch_split=2 (gradient accumulation over micro-batches of one row per replica)
# trainers that start from identical weights, then (in full) their evaluations, with
# TensorFlow's thread pools set as --intra_op_threads=1 --inter_op_threads=2 set them.
# Prints what to compare as JSON and saves the default trainer's final weights
# (root/<family>/default_weights.npz) for the multi-worker test.
_MIRRORED_CHILD = r"""
import json, os, sys
from training.run.strategy import configure_threads, make_strategy
configure_threads(intra_op_threads=1, inter_op_threads=2)  # before any TensorFlow op
mirrored = make_strategy("mirrored", 2)
import numpy as np
import tensorflow as tf
from absl import flags
import data_utils
from evaluation.stream import StreamEvaluator
import train as train_cli
from training.run.trainer import Trainer

tf.config.experimental.enable_op_determinism()
data_dir, root, family_flags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
meta = data_utils.load_meta(data_dir)

def arrays(variables):
    return [np.asarray(v, dtype=np.float64) for v in variables]

def compare(family, flag_list, full):
    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={root}/{family}/mirrored",
        *flag_list])
    config, _ = train_cli.config_from_flags(fv)
    one = Trainer(config, meta, tf.distribute.get_strategy())
    two = Trainer(config.replace(strategy="mirrored", num_cpu_replicas=2), meta, mirrored)
    others = {"two": two}
    if full:
        others["split"] = Trainer(
            config.replace(strategy="mirrored", num_cpu_replicas=2, batch_split=2), meta,
            mirrored)
    for other in others.values():
        for a, b in zip(other.model.variables, one.model.variables):
            a.assign(b)

    def pairs(other):
        return {
            "weights": (arrays(one.model.variables), arrays(other.model.variables)),
            "optimizer": (arrays([v for o in one.optimizers.values() for v in o.variables]),
                          arrays([v for o in other.optimizers.values() for v in o.variables])),
            "memory": (arrays(one.global_state()), arrays(other.global_state())),
        }

    report = {"replicas": two.replicas, "steps": [],
              "threads": [tf.config.threading.get_intra_op_parallelism_threads(),
                          tf.config.threading.get_inter_op_parallelism_threads()]}
    for inputs, targets in data_utils.make_dataset(data_dir, "train", meta=meta).take(
            config.max_steps):
        row = {"one": one.train_step(inputs, targets)}
        row.update({name: other.train_step(inputs, targets) for name, other in others.items()})
        for name, other in others.items():
            prefix = "" if name == "two" else name + "_"
            compared = pairs(other)
            row[prefix + "diff"] = {k: max(float(np.max(np.abs(x - y))) for x, y in zip(*v))
                                    for k, v in compared.items()}
            row[prefix + "scale"] = {k: max(float(np.max(np.abs(x))) for x in v[0])
                                     for k, v in compared.items()}
            # Elements further apart than the test's tolerance, and all elements.
            row[prefix + "off"] = {
                k: sum(int(np.sum(np.abs(x - y) > 1e-5 * max(row[prefix + "scale"][k], 1.0)))
                       for x, y in zip(*v)) for k, v in compared.items()}
            row[prefix + "size"] = {k: sum(x.size for x in v[0]) for k, v in compared.items()}
        report["steps"].append(row)
    os.makedirs(f"{root}/{family}", exist_ok=True)
    np.savez(f"{root}/{family}/default_weights.npz", *[np.asarray(v) for v in one.model.variables])
    if not full:
        return report
    report["valid"] = [one.evaluate("valid", 6)["nll"], two.evaluate("valid", 6)["nll"]]
    # The whole split: the records, then the tail continuing row B-1 at batch 1.
    report["valid_whole"] = [{k: r[k] for k in ("nll", "tokens", "records")}
                             for r in (one.evaluate("valid"), two.evaluate("valid"))]
    # The evaluator alone on one model: 2 replicas of 2 rows each, or one device (B 4, T 7).
    stream = data_utils.read_stream(data_dir, "valid", meta)
    report["stream"] = {name: StreamEvaluator(two.model, 5, strategy).evaluate(stream, 4, 7).parts()
                        for name, strategy in (("one", None), ("two", mirrored))}
    report["valid_ids"] = meta["splits"]["valid"]["ids"]
    return report

print("REPORT " + json.dumps({family: compare(family, *args)
                              for family, args in sorted(family_flags.items())}))
"""

# A multi-worker worker (TF_CONFIG in its environment): trains each family
# (argv[3]) as train.py does, with train.py's flags, into root/<family>/mw.
# The strategy is made once, before any TensorFlow op, as train.py makes it
# from --strategy=multi_worker.
_WORKER_CHILD = r"""
import json, sys
from training.run.strategy import make_strategy
strategy = make_strategy("multi_worker")
from absl import flags
import train as train_cli
from training.run.loop import train

data_dir, root, family_flags = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for family, flag_list in sorted(family_flags.items()):
    fv = train_cli.define_flags(flags.FlagValues())
    mw = f"{root}/{family}/mw"
    fv(["train.py", f"--data_dir={data_dir}", f"--model_dir={mw}", f"--logdir={mw}/logs",
        "--strategy=multi_worker", *flag_list])
    config, overwrite = train_cli.config_from_flags(fv)
    assert config.strategy == "multi_worker"
    train(config, strategy=strategy, overwrite=overwrite)
"""


# The valid text of `distributed_data`: lines of WikiText-2 valid (word_data's: 600 to 720).
VALID_LINES = (600, 620)


@pytest.fixture(scope="module")
def distributed_data(tmp_path_factory, wikitext2_root):
    """`word_data` (the same train text: the same vocabulary and training batches) with a
    sixth of its valid text: 21 records and a 63-token tail, not 89 records. Every family's
    evaluations score the whole split on one device and on two replicas (and the stream
    evaluator in 28-token segments): the agreement does not depend on the length, the time
    does."""
    import data_utils

    data = build_data(tmp_path_factory.mktemp("distributed_data"), wikitext2_root, "word",
                      dict(LINES, valid=VALID_LINES))
    meta = data_utils.load_meta(str(data))
    valid = meta["splits"]["valid"]
    # More records than the 6 of the capped evaluation, a tail after them, and one after the
    # stream evaluator's segments (B 4, T 7).
    transitions = valid["ids"] - 1
    record = meta["batch_size"] * meta["seq_len"]
    assert valid["records"] > 6 and transitions > record * valid["records"] and transitions % 28
    return data


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module")
def distributed_runs(distributed_data, tmp_path_factory, subprocess_env):
    """Runs the mirrored child (every family, _FULL_FAMILIES in full) and two multi-worker
    workers (_WORKER_FAMILIES) concurrently.

    Returns:
        family -> (the mirrored child's report, the default trainer's weights
        file, the multi-worker run directory).
    """
    family_flags = {family: flags + _TRAIN_FLAGS for family, flags in _FAMILY_FLAGS.items()}
    worker_flags = {family: family_flags[family] for family in _WORKER_FAMILIES}
    mirrored_flags = {family: [flags, family in _FULL_FAMILIES]
                      for family, flags in family_flags.items()}
    root = tmp_path_factory.mktemp("distributed")
    cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
    commands = [(_MIRRORED_CHILD, {}, mirrored_flags)]
    for index in range(2):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        commands.append((_WORKER_CHILD, {"TF_CONFIG": json.dumps(tf_config)}, worker_flags))
    procs = [subprocess.Popen([sys.executable, "-c", code, str(distributed_data), str(root),
                               json.dumps(families)], cwd=subprocess_env["PYTHONPATH"],
                              env=dict(subprocess_env, **env), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for code, env, families in commands]
    outputs = [p.communicate(timeout=900) for p in procs]
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    line = [x for x in outputs[0][0].splitlines() if x.startswith("REPORT ")][-1]
    reports = json.loads(line[len("REPORT "):])
    assert sorted(reports) == sorted(_FAMILY_FLAGS)
    return {family: (report, root / family / "default_weights.npz", root / family / "mw")
            for family, report in reports.items()}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(_FAMILY_FLAGS))
def test_mirrored_two_cpu_replicas_equals_default(distributed_runs, family):
    report, _, _ = distributed_runs[family]
    assert report["replicas"] == 2 and len(report["steps"]) == STEPS
    assert report["threads"] == [1, 2]  # --intra_op_threads=1 --inter_op_threads=2 took effect
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
            if family in _SIGN_UPDATES and key == "weights":
                # Lion steps by the sign of its momentum: a gradient that is zero up to
                # rounding (a bias feeding a layer norm, which cancels it) takes a full
                # step of either sign, whichever order the replicas' sum took. A few
                # such elements may differ, by at most the 2 learning rates of a flip
                # per step; the moments (no sign) and the memories must still agree.
                assert step["off"][key] <= 1e-3 * step["size"][key], (key, step["off"])
                assert diff <= 2 * _RATE * len(report["steps"]), (key, diff)
                continue
            assert diff <= 1e-5 * max(step["scale"][key], 1.0), (key, diff)


@pytest.mark.slow
@pytest.mark.parametrize("family", _FULL_FAMILIES)
def test_mirrored_evaluation_equals_default(distributed_runs, family):
    """The default and the mirrored trainer after their steps (weights that agree: the test
    above), each evaluated: 6 records, then the whole split."""
    report, _, _ = distributed_runs[family]
    assert report["valid"][1] == pytest.approx(report["valid"][0], rel=1e-6)
    # The whole split, tail included, on either strategy.
    whole_one, whole_two = report["valid_whole"]
    assert whole_one["tokens"] == whole_two["tokens"] == report["valid_ids"] - 1
    assert whole_one["records"] == whole_two["records"]
    assert whole_two["nll"] == pytest.approx(whole_one["nll"], rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", _FULL_FAMILIES)
def test_stream_evaluator_on_two_replicas_equals_one_device(distributed_runs, family):
    """The same weights: replica r scores rows [2r, 2r+2) of the batched segments, the
    tail continues row 3 (the last replica's last row) at batch 1 on one device."""
    report, _, _ = distributed_runs[family]
    one, two = report["stream"]["one"], report["stream"]["two"]
    transitions = report["valid_ids"] - 1
    assert one["batched"]["segments"] == two["batched"]["segments"] == transitions // 28
    assert one["tail"]["tokens"] == two["tail"]["tokens"] == transitions % 28 > 0
    for part in ("batched", "tail"):
        assert two[part]["tokens"] == one[part]["tokens"]
        assert two[part]["total_nll"] == pytest.approx(one[part]["total_nll"], rel=1e-6), part


@pytest.mark.slow
@pytest.mark.parametrize("family", _FULL_FAMILIES)
def test_mirrored_with_batch_split_equals_default(distributed_runs, family):
    """Two replicas, each running its 2 rows as 2 micro-batches of one row."""
    report, _, _ = distributed_runs[family]
    for step in report["steps"]:
        one, split = step["one"], step["split"]
        for key in [k for k in one if k in ("loss", "nll") or k.endswith("grad_norm")]:
            tolerance = dict(abs=1e-6) if key == "arch_grad_norm" else {}
            assert split[key] == pytest.approx(one[key], rel=1e-5, **tolerance), key
        assert split["finite"]
        for key, diff in step["split_diff"].items():
            assert diff <= 1e-5 * max(step["split_scale"][key], 1.0), (key, diff)


@pytest.mark.slow
@pytest.mark.parametrize("family", _WORKER_FAMILIES)
def test_multi_worker_two_local_workers_agree_with_default(distributed_runs, family):
    import tensorflow as tf

    from training.run.loop import read_training_log

    report, weights, mw = distributed_runs[family]
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
