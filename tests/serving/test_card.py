"""The model card of every export (serving/card.py, serving/export.py, PackagedLM.card).

A tiny run trained by the generic trainer is exported: its card states the valid and
test figures of its metrics.json (read here independently) and the model's counted
parameters, the same text is inside the `.keras` file (after a reload) and beside it
(`lm.md`) and, for a SavedModel, in its README.md; exporting the package again keeps
the figures. A run without metrics.json, and a package written before cards, say
"not recorded"; a failed export leaves neither the file nor its card.
"""

import errno
import json
import os
import re
import types
import zipfile

import numpy as np
import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.runs import make_family_run

_FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
# A row of the card's results table: checkpoint, split, tokens and the three figures.
_ROW = re.compile(r"^\| (best|last) \(step ([\d,]+)\)(, exported)? \| (\w+) \| ([\d,]+) \| "
                  r"([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")


def _result_rows(card):
    """(checkpoint, step, split) -> (tokens, perplexity, word perplexity, bits per byte)."""
    rows = {}
    for line in card.splitlines():
        match = _ROW.match(line)
        if match:
            label, step, _, split, tokens, *figures = match.groups()
            rows[label, int(step.replace(",", "")), split] = (
                int(tokens.replace(",", "")), *map(float, figures))
    return rows


def _counted_parameters(model):
    return sum(int(np.prod(v.shape)) for v in model.trainable_weights)


@pytest.fixture(scope="module")
def exported(trained_run, tmp_path_factory):
    """(the loaded run of a tiny trained Transformer-XL, its model_dir, its `.keras` export)."""
    from serving import export
    from serving.runs import load_run

    model_dir = trained_run("transformer_xl")
    run = load_run(model_dir)
    path = tmp_path_factory.mktemp("card") / "lm.keras"
    export.export_keras(run, path)
    return run, model_dir, path


@pytest.mark.slow
def test_the_card_states_the_runs_recorded_figures_and_parameters(exported):
    run, model_dir, path = exported
    card = (path.parent / "lm.md").read_text(encoding="utf-8")
    with open(model_dir / "metrics.json", encoding="utf-8") as f:
        metrics = json.load(f)
    best = metrics["best"]
    rows = _result_rows(card)
    assert {(label, split) for label, _, split in rows} == {("best", "valid"), ("best", "test")}
    for split in ("valid", "test"):
        tokens, perplexity, word_perplexity, bits_per_byte = rows["best", best["step"], split]
        assert tokens == best[split]["tokens"]
        assert perplexity == pytest.approx(best[split]["perplexity"], abs=6e-4)
        assert word_perplexity == pytest.approx(best[split]["word_perplexity"], abs=6e-4)
        assert bits_per_byte == pytest.approx(best[split]["bits_per_byte"], abs=6e-5)
        assert f"{split} perplexity **{best[split]['perplexity']:.3f}**" in card
    parameters = _counted_parameters(run.model)
    assert parameters > 1000
    assert f"| Weights | {parameters:,} parameters, stored in float32" in card
    assert f"{metrics['step']} trained of {metrics['planned_steps']} planned" in card
    assert "checkpoint `best/ckpt-4`, step 4" in card
    assert "Time: the 4 logged steps took about" in card
    assert "not recorded" in card  # the training command: the run does not record it
    # The settings line names the averaging of the weights the figures were evaluated with.
    with open(model_dir / "config.json", encoding="utf-8") as f:
        ema_decay = json.load(f)["ema_decay"]
    settings = next(line for line in card.splitlines() if line.startswith("Main settings: "))
    assert f"ema_decay={json.dumps(ema_decay)}" in settings, settings
    assert card.rstrip().endswith("says little about other text.")


@pytest.mark.slow
def test_the_card_is_inside_the_package_and_beside_it(exported):
    import keras

    import par

    _, _, path = exported
    beside = (path.parent / "lm.md").read_text(encoding="utf-8")
    assert sorted(os.listdir(path.parent)) == ["lm.keras", "lm.md"]
    assert par.load(path).card == beside  # reloaded in this process
    assert keras.saving.load_model(path).card == beside
    with zipfile.ZipFile(path) as archive:
        assert json.loads(archive.read("config.json"))["config"]["card"] == beside


@pytest.mark.slow
def test_exporting_the_package_again_keeps_its_figures(exported, tmp_path, monkeypatch):
    from serving import export
    from serving.packaged import load_package

    _, _, path = exported
    again = export.export_keras(load_package(path), tmp_path / "half.keras", dtype="float16")
    card = (tmp_path / "half.md").read_text(encoding="utf-8")
    assert _result_rows(card) == _result_rows((path.parent / "lm.md").read_text("utf-8"))
    assert "stored in float16" in card and again == str(tmp_path / "half.keras")

    # The SavedModel's card is its README.md (the model's tracing faked: the card is real).
    monkeypatch.setattr(export, "ServingModule",
                        lambda *args: types.SimpleNamespace(signatures=dict))
    monkeypatch.setattr(export.tf.saved_model, "save", lambda module, path, signatures: (
        os.makedirs(path)))
    export.export_saved_model(load_package(path), tmp_path / "saved")
    saved = (tmp_path / "saved" / "README.md").read_text(encoding="utf-8")
    assert _result_rows(saved) == _result_rows(card)
    assert "a TensorFlow SavedModel directory" in saved and "stored in float32" in saved


@pytest.mark.parametrize("family", ["transformer_xl", "sha_rnn"])
def test_a_run_without_metrics_says_not_recorded(family, tmp_path, word_data):
    from model.families import get_family
    from serving.packaged import package_run
    from serving.runs import load_run

    make_family_run(tmp_path / "run", word_data, family)
    assert not (tmp_path / "run" / "metrics.json").exists()
    run = load_run(tmp_path / "run")
    card = package_run(run).card
    assert "| Result | not recorded (no metrics.json in the run directory" in card
    assert "Time: not recorded." in card and "Steps: not recorded" in card
    assert f"| Weights | {_counted_parameters(run.model):,} parameters" in card
    family_line = f"`{family}`: {get_family(family).description}"
    assert family_line in card
    model = run.config.model.to_dict()
    for name in get_family(family).summary_fields:  # the family's main sizes
        assert f"{name} {json.dumps(model[name])}" in card
    assert "| train | `train.txt` |" in card  # the build's source files (meta.json)


def _without_card(source, target):
    """`source` with its card and records taken out of its config: a package written
    before cards."""
    with zipfile.ZipFile(source) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(entries["config.json"])
    assert "card" in config["config"]
    del config["config"]["card"], config["config"]["records"]
    entries["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def test_a_package_written_before_cards_loads_and_gives_a_card(tmp_path, word_data):
    import par
    from tests.helpers.runs import make_word_package

    lm, run, path = make_word_package(tmp_path, word_data)
    assert lm.records == {"metrics": None, "training_time": None, "command": None}
    _without_card(path, tmp_path / "old.keras")
    old = par.load(tmp_path / "old.keras")
    assert old.records is None and old.tokenizer is not None
    card = old.card
    assert "| Result | not recorded (a package written before model cards) |" in card
    assert f"| Weights | {_counted_parameters(run.model):,} parameters" in card
    assert "checkpoint `best/ckpt-1`, step 1" in card


def test_the_committed_pretrained_package_gives_a_card():
    import par

    card = par.load(PROJECT_ROOT / "pretrained" / "wt2_base.keras").card
    # The figures of pretrained/README.md that the file itself holds.
    assert "| Weights | 2,431,322 parameters, stored in float16, computed in float32 |" in card
    assert "checkpoint `best/ckpt-52500`, step 52,500" in card
    assert '"aaafaf"' in card and "| train | `wiki.train.tokens` | 2,792,123 |" in card
    assert "Valid and test figures: not recorded" in card


@pytest.fixture(scope="module")
def family_run(tmp_path_factory, word_data):
    from serving.runs import load_run

    root = tmp_path_factory.mktemp("card_family_run")
    make_family_run(root / "run", word_data, "transformer_xl")
    return load_run(root / "run")


def test_a_failed_export_leaves_neither_the_package_nor_its_card(family_run, tmp_path,
                                                                 monkeypatch):
    from serving import export
    from serving.packaged import PackagedLM

    def save(self, path):  # a disk that fills up while the package is written
        with open(path, "w") as f:
            f.write("half")
        raise _FULL

    with monkeypatch.context() as patch:
        patch.setattr(PackagedLM, "save", save)
        with pytest.raises(export.ExportError, match="No space left on device"):
            export.export_keras(family_run, tmp_path / "lm.keras")
    assert os.listdir(tmp_path) == []

    real_replace = os.replace

    def replace(source, target):  # the card's rename fails after the package's
        if os.fspath(target).endswith(".md"):
            raise _FULL
        return real_replace(source, target)

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", replace)
        with pytest.raises(export.ExportError, match="No space left on device"):
            export.export_keras(family_run, tmp_path / "lm.keras")
    assert os.listdir(tmp_path) == []


def test_an_existing_card_is_replaced_only_with_overwrite(family_run, tmp_path):
    from serving import export

    (tmp_path / "lm.md").write_text("my notes")
    with pytest.raises(export.ExportError, match=r"lm\.md, the model card export writes "
                       r"beside --export=.*already exists: remove it"):
        export.check_output(tmp_path / "lm.keras", False, name=f"--export={tmp_path}/lm.keras")
    with pytest.raises(export.ExportError, match="already exists"):
        export.export_keras(family_run, tmp_path / "lm.keras")
    assert os.listdir(tmp_path) == ["lm.md"]
    export.export_keras(family_run, tmp_path / "lm.keras", overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["lm.keras", "lm.md"]
    assert (tmp_path / "lm.md").read_text().startswith("# Model card: `run`")


def test_the_card_names_the_command_that_trained_the_run(family_run, tmp_path):
    """train.py records its command line in the run (command.json); the card shows it."""
    from runstore import run_dir
    from serving import export

    argv = ["train.py", "--preset=tiny", "--model_dir=runs/my run"]
    path = os.path.join(family_run.model_dir, run_dir.COMMAND_FILE)
    run_dir.atomic_write_json(path, {"argv": argv, "cwd": "/somewhere"})
    try:
        export.export_keras(family_run, tmp_path / "lm.keras")
    finally:
        os.remove(path)
    card = (tmp_path / "lm.md").read_text(encoding="utf-8")
    assert "Command: `python3 train.py --preset=tiny '--model_dir=runs/my run'`" in card
