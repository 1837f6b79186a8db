"""training/ and serving/ use a model only through model/interface.py.

The generic modules may not name anything of one model family: no
Transformer-XL class, memory, architecture-search or span names in their code
(identifiers, attributes, keywords, imports; prose in docstrings is free).
Family-specific research add-ons live in training/plugins/<name>.py.
"""

import ast

import pytest

from tests.helpers import PROJECT_ROOT

ROOT = PROJECT_ROOT
GENERIC = [
    "training/trainer.py", "training/loop.py", "training/checkpoint.py",
    "training/strategy.py", "runstore/metrics.py", *sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "training" / "optimizers").glob("*.py")),
    "training/plugins/__init__.py", *sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "serving").glob("*.py")),
]
FORBIDDEN_NAMES = {
    "TransformerXLLM", "ShaRnnLM", "num_mems", "initial_mems", "mems", "new_mems",
    "arch_variables", "weight_variables", "set_search_state", "span_losses", "spans",
    "derived_architecture", "arch_probabilities", "is_supernet", "d_model", "num_blocks",
    "tau", "arch_optimizer", "weights_optimizer", "architecture",
}
FORBIDDEN_MODULES = (
    "model.transformer_xl.model", "model.transformer_xl.presets", "model.transformer_xl.config",
    "model.transformer_xl.stochastic_block",
    "model.layers.relative_attention", "model.layers.adaptive_span", "model.sha_rnn.model",
    "model.sha_rnn.config", "training.plugins.par_search.derive",
    "training.plugins.par_search.plots", "training.plugins.span_report.plots",
    "training.plugins.par_search", "training.plugins.span_report",
)


def _used_names(tree):
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _imported(tree):
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


@pytest.mark.parametrize("path", GENERIC)
def test_generic_code_names_no_model_family_internals(path):
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    assert not _used_names(tree) & FORBIDDEN_NAMES, sorted(_used_names(tree) & FORBIDDEN_NAMES)
    bad = sorted(m for m in _imported(tree) if m.startswith(FORBIDDEN_MODULES))
    if path == "training/plugins/__init__.py":  # the registry of the plug-ins
        bad = [m for m in bad if not m.startswith("training.plugins.")]
    assert not bad, bad


def test_the_check_sees_a_violation():
    tree = ast.parse("from model.transformer_xl.presets import build_model\n"
                     "x = model.initial_mems(4)\n")
    assert _used_names(tree) & FORBIDDEN_NAMES == {"initial_mems"}
    assert "model.transformer_xl.presets" in _imported(tree)


def test_every_family_implements_the_interface():
    from model.families import FAMILIES
    from model.interface import check_model

    for family in FAMILIES.values():
        preset = family.presets[family.default_preset]
        config = family.preset_config(**{k: v for k, v in {
            "vocab_size": 64, "cutoffs": ()}.items() if k in preset or k == "vocab_size"})
        check_model(family.build(config))
