"""Settling finished searches by their supernets' valid NLL (training/plugins/par_search/
settle.py, python -m experiments.settle).

An architecture scored inside a supernet equals the fixed network of that architecture
seeded with the supernet's weights (`retrain.seed_from_search`), scored by a plain loop;
every architecture of one call is traced with its own frozen set and the supernet's own
frozen set comes back; a candidate sabotaged in one block makes exactly the
architectures that use it there worse, and the pick avoids it; the command averages two
supernets (checked by hand on its settle.json); each bad input is one line, nothing
written.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from experiments import settle as command
from tests.helpers.cli import assert_one_error_line
from tests.helpers.runs import make_run
from training.plugins.par_search import settle
from training.plugins.par_search.derive import write_derivation

RECORDS = 5  # valid records scored (of 89)
TRAIN_STEPS = 12


def _finish(run, derived):
    """Makes `run` a finished search: its architecture.json (what a search writes last)."""
    write_derivation(run, {"architecture": derived, "untrained": False})
    return str(run)


@pytest.fixture(scope="module")
def searches(tiny_data, tmp_path_factory):
    """Two finished tiny searches, random weights of different seeds (best: ckpt-7),
    derived afai and aafi."""
    root = tmp_path_factory.mktemp("searches")
    make_run(root / "s0", tiny_data, derived="afai", seeds=(1, 2))
    make_run(root / "s1", tiny_data, derived="aafi", seeds=(3, 4))
    return _finish(root / "s0", "afai"), _finish(root / "s1", "aafi")


def _load_supernet(run):
    from model.families import build_model
    from runstore import checkpoints
    from runstore.config import RunConfig

    config = RunConfig.load(run)
    model = build_model(config.model, dtype="float32")
    prefix, _ = checkpoints.resolve_checkpoint(run, "best")
    checkpoints.restore_model_variables(model, prefix)
    return model, config


def _save_best(model, run, step):
    from runstore.checkpoints import model_checkpoint

    checkpoint = model_checkpoint(model)
    tf.train.CheckpointManager(checkpoint, os.path.join(run, "best"), 1,
                               checkpoint_name="ckpt").save(checkpoint_number=step)


def _train(model, data_dir, steps):
    """`steps` Adam steps of soft search (weights and logits) on the first train records,
    eagerly: tracing the supernet's gradient takes longer than a dozen eager steps."""
    import keras

    from pardata.meta import load_meta
    from pardata.records import make_dataset

    meta = load_meta(str(data_dir))
    optimizer = keras.optimizers.Adam(3e-3)
    variables = model.trainable_variables

    def step(inputs, targets, mems):
        with tf.GradientTape() as tape:
            hidden, new_mems = model(inputs, mems, training=True)
            loss = tf.reduce_mean(model.token_nll(hidden, targets))
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return new_mems

    mems = model.initial_state(meta["batch_size"])
    for inputs, targets in make_dataset(str(data_dir), "train", meta=meta).take(steps):
        mems = step(inputs, targets, mems)


@pytest.fixture(scope="module")
def trained_search(tiny_data, tmp_path_factory):
    """A finished tiny search whose supernet trained TRAIN_STEPS steps (best: ckpt-8)."""
    import keras

    from model.families import build_model

    run = tmp_path_factory.mktemp("trained") / "search"
    config, _, _ = make_run(run, tiny_data)
    keras.utils.set_random_seed(0)
    model = build_model(config.model)
    _train(model, tiny_data, TRAIN_STEPS)
    _save_best(model, run, 8)
    return _finish(run, model.derived_architecture)


def _fixed_network_nll(run, architecture, records):
    """The valid NLL of the fixed `architecture` seeded from the supernet of `run`, by a
    plain loop over the first `records` valid records (no stream evaluator)."""
    from model.families import build_model
    from pardata.meta import load_meta
    from pardata.records import make_dataset
    from runstore.config import RunConfig
    from training.plugins.par_search.retrain import seed_from_search

    config = RunConfig.load(run)
    fixed = build_model(config.model.replace(architecture=architecture), dtype="float32")
    seed_from_search(fixed, run)
    meta = load_meta(config.data_dir)
    mems = fixed.initial_state(meta["splits"]["valid"]["batch_size"], config.eval_mem_len)
    total, count = 0.0, 0
    for inputs, targets in make_dataset(config.data_dir, "valid", meta=meta).take(records):
        hidden, mems = fixed(inputs, mems, training=False, mem_len=config.eval_mem_len)
        total += float(np.sum(fixed.token_nll(hidden, targets).numpy(), dtype=np.float64))
        count += int(np.prod(targets.shape))
    return total / count


@pytest.mark.slow
def test_an_architecture_in_the_supernet_scores_as_the_fixed_network_seeded_from_it(searches):
    run = searches[0]
    archs = ["aafi", "ffia", "afai", "iaff"]
    result = settle.settle([run], archs, eval_max_records=RECORDS)
    assert result.architectures == tuple(archs)
    got = [result.nll[arch][run] for arch in archs]
    assert len({round(v, 4) for v in got}) == len(archs)  # four different networks
    for arch, value in zip(archs, got):
        assert value == pytest.approx(_fixed_network_nll(run, arch, RECORDS), rel=1e-5), arch
    assert result.tokens == {run: RECORDS * 4 * 16}
    assert result.checkpoints[run].endswith(os.path.join("best", "ckpt-7"))


@pytest.mark.slow
def test_each_architecture_is_traced_anew_and_the_frozen_set_comes_back(searches):
    from evaluation.stream import StreamEvaluator, split_plan
    from pardata.meta import load_meta

    model, config = _load_supernet(searches[0])
    model.set_frozen([None, 2, None, None])  # block 1 frozen to identity by its search
    before, own = model.frozen_blocks, model.derived_architecture
    assert own == "aiai"
    meta = load_meta(config.data_dir)
    args = (config.data_dir, meta, config.eval_mem_len, RECORDS)
    own_nll, _ = settle.architecture_nll(model, own, *args)
    other_nll, _ = settle.architecture_nll(model, "ffff", *args)
    assert model.frozen_blocks == before
    assert abs(other_nll - own_nll) > 1e-3
    plan, _ = split_plan(config.data_dir, "valid", meta, RECORDS)
    result = StreamEvaluator(model, config.eval_mem_len).run(plan)
    assert result.total_nll / result.tokens == pytest.approx(own_nll, rel=1e-6)


@pytest.mark.slow
def test_a_sabotaged_candidate_makes_exactly_its_architectures_worse(trained_search,
                                                                      tmp_path):
    archs = ["afaf", "ffaf", "aiai", "fifi"]
    healthy = settle.settle([trained_search], archs, eval_max_records=8)
    # Sabotage block 0's candidate that the healthy pick uses: its output projection x1000
    # (post-norm: the block's output loses its residual input).
    letter = healthy.pick[0]
    sabotaged = str(tmp_path / "sabotaged")
    shutil.copytree(trained_search, sabotaged)
    model, _ = _load_supernet(sabotaged)
    block = model.blocks[0]
    kernel = (block.attention_layer.output_kernel if letter == "a"
              else block.dense_layer.output_dense.kernel)
    kernel.assign(kernel * 1000.0)
    _save_best(model, sabotaged, 9)
    result = settle.settle([sabotaged], archs, eval_max_records=8)
    assert result.checkpoints[sabotaged].endswith("ckpt-9")
    hit = [arch for arch in archs if arch[0] == letter]
    spared = [arch for arch in archs if arch[0] != letter]
    for arch in spared:  # the sabotaged weights are not computed at all
        assert result.nll[arch][sabotaged] == pytest.approx(
            healthy.nll[arch][trained_search], rel=1e-6), arch
    for arch in hit:
        assert result.nll[arch][sabotaged] > healthy.nll[arch][trained_search] + 0.05, arch
    assert max(result.nll[a][sabotaged] for a in spared) < min(
        result.nll[a][sabotaged] for a in hit)
    assert result.pick[0] != letter
    assert result.pick == min(spared, key=lambda a: healthy.nll[a][trained_search])


@pytest.mark.slow
def test_the_command_averages_two_supernets_and_picks_the_lowest_mean(searches, tmp_path,
                                                                      capsys):
    out = tmp_path / "settled" / "settle.json"
    code = command.main([f"--runs={searches[0]},{searches[1]}", "--extra=afai,transformer_xl",
                         "--eval_max_records=4", f"--out={out}"])
    assert code == 0
    saved = json.loads(out.read_text())
    runs = list(searches)
    assert saved["runs"] == runs
    assert saved["architectures"] == ["afai", "aafi", "afaf"]  # derived, repeats dropped
    assert saved["derived"] == {runs[0]: "afai", runs[1]: "aafi"}
    assert saved["eval_max_records"] == 4
    nll = saved["nll"]
    for arch in saved["architectures"]:
        assert saved["mean_nll"][arch] == pytest.approx(
            (nll[arch][runs[0]] + nll[arch][runs[1]]) / 2, rel=1e-12)
        assert nll[arch][runs[0]] != nll[arch][runs[1]]  # two different supernets
    means = saved["mean_nll"]
    assert saved["pick"] == min(saved["architectures"], key=lambda a: (means[a],
                                saved["architectures"].index(a)))
    shown = capsys.readouterr().out
    assert f"**{saved['pick']}** (pick)" in shown
    assert f"| {os.path.basename(runs[0])} | {os.path.basename(runs[1])} | mean |" in shown


def test_ties_go_to_the_first_architecture_in_order():
    means = {"aaff": 3.0, "afaf": 2.5, "ffaa": 2.5}
    assert settle.first_lowest(means, ["aaff", "ffaa", "afaf"]) == "ffaa"
    assert settle.first_lowest(means, ["afaf", "ffaa", "aaff"]) == "afaf"
    nll = {"afaf": {"r0": 2.0, "r1": 4.0}}
    assert settle.mean_over_runs(nll, ["r0", "r1"]) == {"afaf": 3.0}


def _edited(source, target, derived=None, **model_fields):
    """A copy of run `source` whose config.json has other model fields (or data_dir)."""
    shutil.copytree(source, target)
    path = os.path.join(target, "config.json")
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    if "data_dir" in model_fields:
        values["data_dir"] = str(model_fields.pop("data_dir"))
    values["model"].update(model_fields)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f)
    if derived:
        _finish(target, derived)
    return str(target)


@pytest.fixture(scope="module")
def bad_runs(searches, short_word_data, tmp_path_factory):
    """Run directories that settle must refuse (copies of the first search, edited)."""
    root = tmp_path_factory.mktemp("bad_runs")
    good = searches[0]
    (root / "empty").mkdir()
    unfinished = shutil.copytree(good, root / "unfinished")
    os.remove(unfinished / "architecture.json")
    return {
        "good": good, "empty": str(root / "empty"), "missing": str(root / "missing"),
        "unfinished": str(unfinished),
        "fixed": _edited(good, root / "fixed", architecture="afai"),
        "wider": _edited(good, root / "wider", d_ffn=128),
        "af": _edited(good, root / "af", derived="afaf", candidates="af"),
        "other_data": _edited(good, root / "other_data", data_dir=short_word_data),
        "root": str(root),
    }


BAD_INPUTS = [
    (["--runs="], "--runs is empty"),
    (["--runs={good}", "--eval_max_records=-1"], "--eval_max_records=-1 must be >= 0"),
    (["--runs={missing}"], "is not a directory"),
    (["--runs={empty}"], "cannot read its config.json"),
    (["--runs={good},{unfinished}"], "holds no architecture.json: its search has not finished"),
    (["--runs={fixed}"], "trained the fixed network 'afai', not a supernet"),
    (["--runs={good},{good}"], "is given twice"),
    (["--runs={good},{wider}"], "are different supernets (d_ffn 64 against 128)"),
    (["--runs={good},{af}"], "are different supernets (candidates 'afi' against 'af')"),
    (["--runs={af}", "--extra=aiaa"], "uses i, not among the supernet's candidates 'af'"),
    (["--runs={good}", "--extra=afa"], "'afa' has 3 blocks but the supernets have 4"),
    (["--runs={good}", "--extra=afxa"], "uses x, not among the supernet's candidates 'afi'"),
    (["--runs={good},{other_data}"], "were trained on different data"),
    (["--runs={good}", "--out={root}"], "is a directory"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_and_writes_nothing(bad_runs, argv, message, tmp_path, capsys):
    out = tmp_path / "settle.json"
    argv = [arg.format(**bad_runs) for arg in argv]
    if not any(arg.startswith("--out=") for arg in argv):
        argv.append(f"--out={out}")
    assert command.main(argv) == 2
    captured = capsys.readouterr()
    assert_one_error_line(captured.out, captured.err, message)
    assert not out.exists() and not os.path.exists(os.path.join(bad_runs["root"],
                                                                "settle.json"))
