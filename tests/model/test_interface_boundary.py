"""training/, serving/, evaluation/ and the entry scripts use a model only through
model/interface.py.

The generic modules (every module of training/, serving/ and evaluation/ outside the plug-in
packages and the plug-in registries, from the import graph: tests/helpers/imports.py)
may not name anything of one model family: no Transformer-XL class, memory,
architecture-search or span names in their code (identifiers, attributes, keywords,
imports; prose in docstrings is free). Family-specific research add-ons live in
training/plugins/<name>/. The imports themselves are checked on the whole graph by
tests/test_import_graph.py.
"""

import ast

import pytest

from tests.helpers import PROJECT_ROOT
from tests.helpers.imports import PENDING, REGISTRIES, is_generic
from tools import import_graph

# Every generic module of training/, serving/ and evaluation/, from the import graph (not a list).
GRAPH_FILES = import_graph.module_files()
GENERIC = sorted(str(path.relative_to(PROJECT_ROOT)) for module, path in GRAPH_FILES.items()
                 if is_generic(module))
# Names of one family still used by generic modules until they move into their
# plug-in (none left: the temperature schedule and the architecture and span
# summaries live in training/plugins/par_search/ and span_report/).
PENDING_NAMES = {}
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


# The same names as string keys (a dict key, getattr's, a flag's name) and the names of
# the families and their stages, which generic code reads only through a family or a
# plug-in hook.
FORBIDDEN_STRINGS = FORBIDDEN_NAMES | {
    "transformer_xl", "sha_rnn", "supernet", "retrain", "clamp_len", "same_length",
    "derivation", "search",
}
# The entry scripts, held to the generic rules as well.
SCRIPTS = ("train.py", "generate.py", "evaluate.py", "export.py", "build_data.py", "par.py",
           "finetune.py")


def _docstrings(tree):
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return {id(n.body[0].value) for n in nodes if n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def _used_strings(tree):
    """String constants (docstrings aside) that are one of FORBIDDEN_STRINGS, also as
    an f-string's literal part that is exactly one."""
    skip = _docstrings(tree)
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip and node.value in FORBIDDEN_STRINGS}


def _imported(tree):
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
            modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return modules


def test_the_generic_files_come_from_the_graph():
    assert {"training/setup/config.py", "training/optimizers/schedules.py",
            "training/report/tensorboard.py", "training/run/loop.py", "training/run/trainer.py",
            "serving/generation.py",
            "serving/decoder.py", "training/plugins/base.py", "evaluation/stream.py",
            "training/report/samples.py"} <= set(GENERIC)
    assert not any(path.startswith(("training/plugins/par_search", "model/")) for path in GENERIC)
    assert "training/plugins/__init__.py" not in GENERIC
    assert len(REGISTRIES) == 1


@pytest.mark.parametrize("path", GENERIC + list(SCRIPTS))
def test_generic_code_names_no_model_family_internals(path):
    tree = ast.parse((PROJECT_ROOT / path).read_text(encoding="utf-8"))
    used = (_used_names(tree) & FORBIDDEN_NAMES) | _used_strings(tree)
    assert used == PENDING_NAMES.get(path, set()), sorted(used)
    module = path[:-3].replace("/", ".")
    bad = sorted(m for m in _imported(tree) if m.startswith(FORBIDDEN_MODULES)
                 and not any(m.startswith(t) or t.startswith(m) for s, t in PENDING if s == module))
    assert not bad, bad


def test_the_check_sees_a_violation():
    tree = ast.parse("from model.transformer_xl.presets import build_model\n"
                     "x = model.initial_mems(4)\n")
    assert _used_names(tree) & FORBIDDEN_NAMES == {"initial_mems"}
    assert "model.transformer_xl.presets" in _imported(tree)
    # A family's name planted in a script as a string key; a docstring may say it.
    planted = ast.parse('"""Trains a transformer_xl."""\n'
                        'def f(results):\n    """Reads "retrain"."""\n'
                        '    return results["retrain"], "sha_rnn"\n')
    assert _used_strings(planted) == {"retrain", "sha_rnn"}


def test_every_family_implements_the_interface():
    from model.families import FAMILIES
    from model.interface import check_model

    for family in FAMILIES.values():
        preset = family.presets[family.default_preset]
        config = family.preset_config(**{k: v for k, v in {
            "vocab_size": 64, "cutoffs": ()}.items() if k in preset or k == "vocab_size"})
        check_model(family.build(config))
