"""The rules of the dependency direction, shared by the tests that check them on the
import graph (tests/test_import_graph.py) and on the names generic code uses
(tests/model/test_interface_boundary.py). The graph is tools/import_graph.py's."""

from model.families import FAMILIES

# The registered families' packages (`Family.package`), from the registry: not a list.
FAMILY_MODULES = tuple(family.package for family in FAMILIES.values())
PLUGIN_PACKAGES = "training.plugins."
# The plug-in registry, the only generic file that names the plug-ins.
REGISTRIES = {
    "training.plugins": "the registry of the plug-ins (training/plugins/__init__.py)",
}
GENERIC_PLUGIN_FILES = {"training.plugins.base", *REGISTRIES}
# Packages that training and serving share: they import neither.
BELOW_BOTH = ("runstore", "samplers", "evaluation")
# Circles allowed by name (none: every circle, lazy imports included, is an error).
ALLOWED_CIRCLES = set()
# Imports that break the rule today and are named here until they move (none left).
PENDING = set()


def is_family(module):
    return any(module == m or module.startswith(m + ".") for m in FAMILY_MODULES)


def is_plugin(module):
    return module.startswith(PLUGIN_PACKAGES) and module not in GENERIC_PLUGIN_FILES


def plugin_package(module):
    return ".".join(module.split(".")[:3]) if is_plugin(module) else None


def is_generic(module):
    """training/, serving/ and evaluation/ code that must know no family and no plug-in."""
    top = module.split(".")[0]
    return top in ("training", "serving", "evaluation") and not is_plugin(module) and (
        module not in REGISTRIES)


def boundary_problems(graph):
    """Edges that break the dependency direction, as 'importer -> imported: why' lines."""
    problems = []
    for module, targets in sorted(graph.items()):
        top = module.split(".")[0]
        for target in sorted(targets):
            target_top = target.split(".")[0]
            if top == "serving" and target_top == "training":
                problems.append(f"{module} -> {target}: serving imports nothing of training")
            if top in BELOW_BOTH and target_top in ("training", "serving"):
                problems.append(f"{module} -> {target}: {top} is below training and serving")
            if is_generic(module) and (module, target) not in PENDING:
                if is_family(target):
                    problems.append(f"{module} -> {target}: a model family module (use "
                                    "model.interface and model.families)")
                elif is_plugin(target):
                    problems.append(f"{module} -> {target}: a plug-in module (only the "
                                    "registries name the plug-ins)")
            if is_plugin(module) and is_plugin(target) and (
                    plugin_package(module) != plugin_package(target)):
                problems.append(f"{module} -> {target}: a plug-in imports another plug-in")
    return problems
