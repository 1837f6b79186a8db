"""colab.ipynb runs the README's path top to bottom (the quick look, the shipped
WikiText-2, the pretrained model, outputs under runs/) and is committed clean."""

import json
import os
import re
import shlex
import sys
import time

import nbformat
import pytest

from tests.helpers.quick_look import base_model_args, last_flag, readme_quick_look

NOTEBOOK = "colab.ipynb"
CELL_TIMEOUT_S = 900
# The test hook of the parameters cell: the quick look cut to this many steps.
HOOK_STEPS = 20  # enough to search (a capped warm-up, then architecture steps) and derive
# The notebook's own extras (QUICK_SETTINGS, a parameter like QUICK), shortened in the same
# cell: the adaptive-span run and the timing still run every cell's code (train, evaluate,
# load, plot; trace, warm up, time three interleaved rounds), which is what is checked;
# their lengths are not.
EXTRAS = {"span_steps": 10, "timing_steps": 2}


def _read(project_root):
    return nbformat.read(project_root / NOTEBOOK, as_version=4)


def test_committed_notebook_has_no_outputs(project_root):
    nb = _read(project_root)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code
    for cell in code:
        assert cell.execution_count is None and cell.outputs == [], (
            f"{NOTEBOOK} is committed with outputs: clear them (e.g. jupyter nbconvert "
            f"--clear-output --inplace {NOTEBOOK})")
    parameters = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and "QUICK = True" in parameters[0].source
    # The test hook is off for everyone but the test.
    assert "\nQUICK_MAX_STEPS = None\n" in parameters[0].source
    assert nb.metadata.kernelspec.name == "python3"


def test_notebook_has_no_model_code(project_root):
    # The notebook calls the project's scripts and modules; it defines no layers
    # or training steps of its own.
    source = "\n".join(c.source for c in _read(project_root).cells if c.cell_type == "code")
    for forbidden in ("keras.layers", "tf.GradientTape", "class ", "import keras"):
        assert forbidden not in source, forbidden
    for used in (
        "./create_tfrecords.sh",
        '"./base_model.sh", *train_flags',
        '["--quick"] if QUICK else []',
        "generate.py",
        '"pretrained/wt2_base.keras"',
        '(PROJECT / "pretrained" / "README.md")',
        "from training.plugins.par_search import plots",
        "derive.derivation_report",
        "bench.bench_train",
        "generation.load_run",
        "--attention=adaptive_span",
    ):
        assert used in source, used


def _run_notebook(project_root, tmp_path, monkeypatch, nb, work):
    from nbclient import NotebookClient

    for name, value in {"PAR_WORKDIR": str(work), "PAR_NOTEBOOK_CI": "1",
                        "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1"}.items():
        monkeypatch.setenv(name, value)
    # No DATA_DIR: the notebook unpacks the shipped WikiText-2 under the work directory.
    for name in ("PROJECT_DIR", "DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    # Kernel "python3" is this interpreter, whatever `python` is on PATH.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(project_root)}})
    start = time.monotonic()
    client.execute()  # raises CellExecutionError naming the cell if one fails
    print(f"notebook ran in {time.monotonic() - start:.0f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs if o.output_type == "stream")


def _expected_config(project_root, tmp_path, args):
    """The TrainConfig train.py makes of what base_model.sh passes for `args`."""
    from absl import flags

    import train as train_cli

    fv = train_cli.define_flags(flags.FlagValues())
    fv(["train.py", *base_model_args(project_root, tmp_path, *args)])
    return train_cli.config_from_flags(fv)[0]


def _check_quick_look(project_root, tmp_path, text, work):
    """The notebook ran the README's quick look, changed only by the test hook."""
    from training.setup.config import TrainConfig

    command, readme_run, readme_steps = readme_quick_look(project_root)
    ran = [shlex.split(line[2:]) for line in text.splitlines()
           if line.startswith("$ ./base_model.sh")]
    assert len(ran) == 1, ran
    args = ran[0]
    # The hook's flag comes last, and it is the only length flag the notebook adds.
    assert args[-1] == f"--max_steps={HOOK_STEPS}", args
    unhooked = args[:-1]
    assert args[:2] == shlex.split(command) == ["./base_model.sh", "--quick"]
    assert {a.split("=", 1)[0] for a in unhooked[2:]} <= {
        "--data_dir", "--model_dir", "--logdir", "--strategy"}, unhooked
    # Without the hook the notebook plans the README's steps into the README's run
    # directory (under the work directory).
    run = work / readme_run
    train_args = base_model_args(project_root, tmp_path, *unhooked[1:])
    assert int(last_flag(train_args, "max_steps")) == readme_steps
    assert last_flag(train_args, "model_dir") == str(run)
    # The run it trained is that command plus the hook, and nothing else.
    assert TrainConfig.load(run) == _expected_config(
        project_root, tmp_path, [*unhooked[1:], f"--max_steps={HOOK_STEPS}"])
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == metrics["planned_steps"] == HOOK_STEPS
    assert f"{run.name}: step {HOOK_STEPS} of {HOOK_STEPS} planned" in text
    return run


@pytest.mark.slow
def test_notebook_runs_the_readme_quick_look(project_root, tmp_path, monkeypatch):
    nb = _read(project_root)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    # Like papermill: a cell after the parameters sets the quick setting and the test hook.
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(
        f"QUICK = True\nQUICK_MAX_STEPS = {HOOK_STEPS}\n"
        f"QUICK_SETTINGS = dict(QUICK_SETTINGS, **{EXTRAS!r})"))
    work = tmp_path / "work"
    outputs = [project_root / name for name in ("data", "runs", "logs")]
    before = {p: sorted(os.listdir(p)) if p.is_dir() else None for p in outputs}
    text = _run_notebook(project_root, tmp_path, monkeypatch, nb, work)

    run = _check_quick_look(project_root, tmp_path, text, work)
    for name in ("config.json", "metrics.json", "arch_history.json", "architecture.json",
                 "architecture.txt", "arch_history.png", "arch_history.gif"):
        assert (run / name).is_file(), name
    assert (work / "logs" / run.name).is_dir()
    assert (work / "data" / "wikitext2" / "meta.json").is_file()
    assert (work / "data" / "raw" / "wikitext-2" / "wiki.train.tokens").is_file()
    assert (work / "runs" / (run.name + "_span") / "metrics.json").is_file()
    # Every output is under data/, runs/ and logs/ (generated.txt in the run directory).
    assert sorted(os.listdir(work)) == ["data", "logs", "runs"]
    generated = (run / "generated.txt").read_text(encoding="utf-8")
    assert generated.startswith("The game") and len(generated.split()) > 5
    assert "=== generated text ===\n" + generated in text
    architecture = json.loads((run / "architecture.json").read_text())["architecture"]
    assert f"derived architecture: {architecture}" in text
    assert "derived / Transformer-XL: FLOPs" in text
    assert "spans in tokens" in text
    assert "not starting TensorBoard" in text
    # The pretrained model: the card's figure, read from the card, and its text.
    card = (project_root / "pretrained" / "README.md").read_text(encoding="utf-8")
    figure = re.search(r"\| Result \| test perplexity \*\*([\d.]+)\*\*", card).group(1)
    assert f"pretrained/wt2_base.keras, model card: test perplexity {figure}" in text
    pretrained = text.split("=== generated by the pretrained model ===\n", 1)[1]
    assert pretrained.startswith("The game") and len(pretrained.split()) > 5
    # The next steps name the run it trained.
    assert f"the run trained here: {run}\n" in text
    assert f"--architecture={run} " in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the arch_history PNG and the spans figure
    assert any(o.output_type == "display_data" and "image/gif" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    # Nothing was written into the checkout.
    assert {p: sorted(os.listdir(p)) if p.is_dir() else None for p in outputs} == before
