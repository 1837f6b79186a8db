"""The dependency direction of docs/development.md, checked on the import graph of every module.

tools/import_graph.py reads every `.py` file of the repository with `ast` (imports
inside functions included) and keeps the edges between its modules. On that graph:

- no circle (strongly connected component), but the ones allow-listed by name below;
- `serving` imports nothing of `training`; the run store, the samplers and the
  stream evaluator (`evaluation`) import neither;
- generic training code and serving import no model family module
  (`model.transformer_xl.*`, `model.sha_rnn.*`: they go through `model.interface` and
  the registry `model.families`) and no plug-in module (`training.plugins.<name>.*`),
  except the plug-in registries' own files.
"""

import pytest

from tests.helpers.imports import ALLOWED_CIRCLES, PENDING, boundary_problems
from tools import import_graph


@pytest.fixture(scope="module")
def graph():
    return import_graph.repository_graph()


def test_the_graph_holds_every_module_and_lazy_imports(graph):
    assert len(graph) > 150
    assert "serving.generation" in graph and "training.run.loop" in graph and "train" in graph
    # training/run/checkpoint.py imports the plug-in registry inside clear_run only.
    assert "training.plugins" in graph["training.run.checkpoint"]


def test_no_import_circle(graph):
    circles = set(import_graph.circles(graph))
    new = sorted(circles - ALLOWED_CIRCLES)
    assert not new, "import circles: " + "; ".join(" <-> ".join(c) for c in new)


def test_allowed_circles_and_pending_imports_still_exist(graph):
    # An exception that no longer applies is removed from this file.
    assert ALLOWED_CIRCLES <= set(import_graph.circles(graph))
    assert all(target in graph[module] for module, target in PENDING)


def test_dependency_direction(graph):
    problems = boundary_problems(graph)
    assert not problems, "\n".join(problems)


def test_the_checks_fail_on_a_planted_circle_and_planted_imports():
    files = {
        "serving.a": "from serving import b\n",
        "serving.b": "def f():\n    import serving.a  # lazy\n    from training.run import loop\n",
        "training": "",
        "training.run.loop": "from training.plugins.par_search import plugin\n",
        "training.plugins": "from training.plugins.par_search.plugin import ParSearch\n",
        "training.plugins.par_search": "",
        "training.plugins.par_search.plugin": "from ..span_report import plugin\n",
        "training.plugins.span_report": "",
        "training.plugins.span_report.plugin": "import model.sha_rnn.model\n",
        "runstore.run_dir": "from training.setup.config import ConfigError\n",
        "model.sha_rnn.model": "",
    }
    graph = import_graph.build_graph(files)
    assert import_graph.circles(graph) == [("serving.a", "serving.b")]
    assert graph["training.plugins.par_search.plugin"] == {"training.plugins.span_report.plugin"}
    assert sorted(p.split(":")[0] for p in boundary_problems(graph)) == [
        "runstore.run_dir -> training",  # training.setup.config unknown: its package is the edge
        "serving.b -> training.run.loop",
        "training.plugins.par_search.plugin -> training.plugins.span_report.plugin",
        "training.run.loop -> training.plugins.par_search.plugin",
    ]
    files["runstore.x"] = "from serving import a\n"
    files["evaluation.x"] = "from training.run import loop\n"
    problems = boundary_problems(import_graph.build_graph(files))
    assert any(p.startswith("runstore.x -> serving.a") for p in problems)
    assert any(p.startswith("evaluation.x -> training.run.loop") for p in problems)
