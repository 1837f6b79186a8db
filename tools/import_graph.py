"""The repository's import graph, read from the source with `ast` (nothing is imported).

    python -m tools.import_graph            # the circles, one a line
    python -m tools.import_graph --edges    # every edge `importer -> imported`

Every `.py` file below the root is a module (hidden folders and `__pycache__`
left out); an `import` or `from ... import` anywhere in a file counts,
including those inside functions (lazy imports), and relative imports are
resolved. `from package import name` is an edge to `package.name` when that is
a module of the repository and to `package` otherwise. Only edges between
modules of the repository are kept. tests/test_import_graph.py holds the rules
checked on this graph.
"""

import argparse
import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {"__pycache__"}


def module_files(root=ROOT):
    """{module name: path} of every Python file below `root`."""
    root = pathlib.Path(root)
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in SKIPPED_DIRS for p in parts[:-1]):
            continue
        names = list(parts[:-1])
        if parts[-1] != "__init__.py":
            names.append(parts[-1][:-3])
        if names:
            found[".".join(names)] = path
    return found


def imported_names(source, module, is_package=False):
    """Every module name that `source` (the text of `module`) imports, with the
    `from x import y` pairs spelled `x.y` as candidates beside `x`.

    Returns:
        list of (name, candidates): candidates are tried in order, the first that is
        a known module is the edge.
    """
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, [alias.name]) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                found.append((base, [f"{base}.{alias.name}" if base else alias.name, base]))
    return found


def build_graph(files):
    """{module: set of modules of `files` it imports} for {module: path or source text}."""
    graph = {}
    for module, where in files.items():
        if isinstance(where, pathlib.Path):
            source, is_package = where.read_text(encoding="utf-8"), where.name == "__init__.py"
        else:
            source, is_package = where, False
        edges = set()
        for _, candidates in imported_names(source, module, is_package):
            target = next((name for name in candidates if name in files), None)
            name = candidates[-1]
            while target is None and "." in name:  # `import a.b.c` of a folder without module
                name = name.rpartition(".")[0]
                target = name if name in files else None
            if target is not None and target != module:
                edges.add(target)
        graph[module] = edges
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan), each a sorted
    tuple, in sorted order."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(start):
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(tuple(sorted(component)))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def repository_graph(root=ROOT):
    """The import graph of every module below `root`."""
    return build_graph(module_files(root))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m tools.import_graph",
        description="The circles of the repository's import graph, one a line.")
    parser.add_argument("--edges", action="store_true",
                        help="print every edge `importer -> imported` instead")
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    graph = repository_graph()
    if args.edges:
        for module in sorted(graph):
            for target in sorted(graph[module]):
                print(f"{module} -> {target}")
        return 0
    for circle in circles(graph):
        print(" <-> ".join(circle))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
