"""colab.ipynb runs top to bottom (QUICK setting, real WikiText-2) and is committed clean."""

import json
import os
import sys
import time

import nbformat
import pytest

NOTEBOOK = "colab.ipynb"
CELL_TIMEOUT_S = 900


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
    assert nb.metadata.kernelspec.name == "python3"


def test_notebook_has_no_model_code(project_root):
    # The notebook calls the project's scripts and modules; it defines no layers
    # or training steps of its own.
    source = "\n".join(c.source for c in _read(project_root).cells if c.cell_type == "code")
    for forbidden in ("keras.layers", "tf.GradientTape", "class ", "import keras"):
        assert forbidden not in source, forbidden
    for used in (
        "./create_tfrecords.sh",
        "./base_model.sh",
        "generate.py",
        "from training.plugins.par_search import plots",
        "derive.derivation_report",
        "bench.bench_train",
        "generation.load_run",
        "--attention=adaptive_span",
    ):
        assert used in source, used


@pytest.mark.slow
def test_notebook_runs_in_quick_mode(project_root, wikitext2_root, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    nb = _read(project_root)
    index = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    # Like papermill: a cell after the parameters forces the small setting.
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell("QUICK = True"))
    work = tmp_path / "work"
    for name, value in {"DATA_DIR": str(wikitext2_root), "PAR_WORKDIR": str(work),
                        "PAR_NOTEBOOK_CI": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                        "CUDA_VISIBLE_DEVICES": "-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("PROJECT_DIR", raising=False)
    # Kernel "python3" is this interpreter, whatever `python` is on PATH.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    outputs = [project_root / name for name in ("data", "runs", "logs")]
    before = {p: sorted(os.listdir(p)) if p.is_dir() else None for p in outputs}

    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(project_root)}})
    start = time.monotonic()
    client.execute()  # raises CellExecutionError naming the cell if one fails
    elapsed = time.monotonic() - start
    print(f"notebook ran in {elapsed:.0f} s")

    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors

    run = work / "runs" / "wt2_base_supernet_quick"
    for name in ("config.json", "metrics.json", "arch_history.json", "architecture.json",
                 "architecture.txt", "arch_history.png", "arch_history.gif"):
        assert (run / name).is_file(), name
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["step"] == 60
    assert (work / "logs" / "wt2_base_supernet_quick").is_dir()
    assert (work / "data" / "wikitext2" / "meta.json").is_file()
    assert (work / "runs" / "wt2_base_supernet_quick_span" / "metrics.json").is_file()

    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs if o.output_type == "stream")
    generated = (work / "generated.txt").read_text(encoding="utf-8")
    assert generated.startswith("The tower is") and len(generated.split()) > 5
    assert "=== generated text ===\n" + generated in text
    architecture = json.loads((run / "architecture.json").read_text())["architecture"]
    assert f"derived architecture: {architecture}" in text
    assert "derived / Transformer-XL: FLOPs" in text
    assert "spans in tokens" in text
    assert "not starting TensorBoard" in text
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the arch_history PNG and the spans figure
    assert any(o.output_type == "display_data" and "image/gif" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    # Nothing was written into the checkout.
    assert {p: sorted(os.listdir(p)) if p.is_dir() else None for p in outputs} == before
