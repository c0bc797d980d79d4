"""The course's packages import one way (issue 49): no circle of imports, not even one closed by an import inside
a function; a package imports only itself and the packages below it; and an import inside a function is one of
the few kinds that `LAZY` lists, each with its reason. Anything else goes to the top of its module.

The graph is read from the source with `ast`: every `import` and `from ... import`, at the top of a module (in a
class body, an `if` or a `try` too) or inside a function, resolved to the module of the course it loads
(`from autograder import relations` is autograder.relations). A package's __init__ is a module like any other;
importing a submodule does not count as importing its parent package. Modules loaded by name at run time
(`importlib.import_module`, as autograder.registry loads the catalogues) are not in the graph.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

PACKAGES = ("course_lib", "solutions_lib", "autograder")  # lowest first: each imports only itself and those before it

# The imports a function may make, and why: (the modules that import so, what they import so, the reason).
# An entry covers the modules it names and what starts with what it names (autograder.grading: its modules).
NOT_SHIPPED = "not in the student distribution (autograder/ship.py's SHIPPED), whose copy of this module runs without it"
LAZY = [
    (("autograder.__main__",), ("autograder.release", "autograder.grading", "autograder.new_exercise"),
     "the instructor's commands, each imported by the command that runs it: " + NOT_SHIPPED),
    (("autograder.registry", "autograder.reveal"), ("autograder.assignments", "autograder.mutants"),
     "the catalogues and the reference's edits, used in the repository only: " + NOT_SHIPPED),
    (("autograder.fixtures",), ("course_lib.attention",),
     "the grading sandbox of notebook 05 has no course_lib SelfAttention (autograder.grading.views): only the fixture "
     "built on it imports it, when it is built"),
    (("autograder.api", "autograder.record"), ("IPython", "ipykernel"),
     "there only inside a kernel: the checks also run in plain Python (the tests, record's child process)"),
    (("autograder.record",), ("resource",), "Unix only: a learner's `check` runs on Windows too"),
    (("autograder.results", "autograder.nbgrader_api", "autograder.grading.ids", "autograder.grading.intake"), ("nbgrader",),
     "nbgrader takes about 1.5 s to import, all of it at once, and is not in a learner's environment: these modules "
     "also serve without it (results.py ships to students; the release's helpers, ids' and intake's checks), and "
     "import it in the function that runs or patches it"),
    (("autograder.check_notebook", "autograder.release.site"), ("nbclient", "jupyter_client"),
     "a kernel to run a notebook in (about 1 s to import): only `check` and `site` run one"),
    (("autograder.check_notebook",), ("pytest",), "`check` grades the executed notebook with pytest; nothing else here needs it"),
    (("autograder.release.site",), ("sphinx", "myst_nb"),
     "the `site` extra of pyproject.toml: `make site` installs it, and `build` says so when it is missing"),
]
@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the course's module it loads, or the dotted name of another package's module
    line: int
    in_function: bool

    def __str__(self):
        return f"{self.importer}:{self.line} imports {self.target}" + (" inside a function" if self.in_function else "")


def modules(root, packages):
    """{dotted name: (path, is a package's __init__)} of every module of the packages under `root`."""
    found = {}
    for package in packages:
        for path in sorted((Path(root) / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _known(name, known):
    """The longest prefix of `name` that is a module of `known`, or None."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name, path, is_package, known):
    """Every import in the module `name`, each resolved to what it loads."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), str(path))
    found = []

    def targets(node):
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:  # relative: from the module's package, one level up per extra dot
            package = name.split(".") if is_package else name.split(".")[:-1]
            package = package[:len(package) - (node.level - 1)]
            base = ".".join(package + ([node.module] if node.module else []))
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for target in dict.fromkeys(targets(child)):
                    found.append(Import(name, _known(target, known) or target, child.lineno, in_function))
            else:
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    walk(tree, False)
    return found


def all_imports(root=ROOT, packages=PACKAGES):
    known = modules(root, packages)
    return known, [i for name, (path, is_package) in known.items() for i in imports_of(name, path, is_package, known)]


def cycles(edges):
    """Each circle of a directed graph {node: set of nodes}, as a list of nodes that ends where it starts: one
    circle per strongly connected component (Tarjan's algorithm), the shortest through its first node."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                components.append(component)

    for v in sorted(edges):
        if v not in index:
            connect(v)
    found = []
    for component in components:
        start = min(component)
        paths, seen = [[start]], {start}
        while paths:  # breadth first, within the component: the shortest way back to start
            path = paths.pop(0)
            nxt = sorted(edges.get(path[-1], ()) & component)
            if start in nxt:
                found.append(path + [start])
                break
            for w in nxt:
                if w not in seen:
                    seen.add(w)
                    paths.append(path + [w])
    return sorted(found)


def graph(known, imports):
    edges = {name: set() for name in known}
    for i in imports:
        if i.target in known and i.target != i.importer:
            edges[i.importer].add(i.target)
    return edges


def _covers(prefixes, name):
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def lazy_entry(i):
    """The entry of LAZY that allows this import inside a function, or None."""
    return next((entry for entry in LAZY if i.importer in entry[0] and _covers(entry[1], i.target)), None)


def package_of(module):
    return module.split(".")[0]


# ---------------------------------------------------------------- the course's packages


def test_no_circle_of_imports():
    known, imports = all_imports()
    found = cycles(graph(known, imports))
    assert not found, "circles of imports (inside functions too):\n" + "\n".join(" → ".join(c) for c in found)


def test_packages_import_downward_only():
    known, imports = all_imports()
    upward = [i for i in imports if i.target in known
              and PACKAGES.index(package_of(i.target)) > PACKAGES.index(package_of(i.importer))]
    assert not upward, "imports up across packages (" + " < ".join(PACKAGES) + "):\n" + "\n".join(map(str, upward))


def test_imports_inside_functions_are_the_allowed_few():
    known, imports = all_imports()
    inside = [i for i in imports if i.in_function]
    unexplained = [str(i) for i in inside if lazy_entry(i) is None]
    assert not unexplained, ("imports inside a function that LAZY does not allow (move them to the top of the module; "
                             "one that would close a circle means a piece is in the wrong module):\n" + "\n".join(unexplained))
    used = {(i.importer, prefix) for i in inside for prefix in lazy_entry(i)[1] if _covers([prefix], i.target)}
    unused = [(importer, prefixes) for importers, prefixes, _ in LAZY for importer in importers
              if not any((importer, p) in used for p in prefixes)]
    assert not unused, f"LAZY allows imports that no longer happen: {unused}"


def test_lazy_imports_of_unshipped_modules_are_of_unshipped_modules():
    """An entry whose reason is that the student distribution lacks a module: it does lack it, and the importer ships."""
    tree = ast.parse((ROOT / "autograder" / "ship.py").read_text(encoding="utf-8"))
    shipped = next(ast.literal_eval(node.value) for node in tree.body
                   if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SHIPPED" for t in node.targets))
    shipped_modules = {"autograder." + f.removesuffix(".py") for f in shipped if f != "__init__.py"} | {"autograder"}
    for importers, prefixes, reason in LAZY:
        if NOT_SHIPPED in reason:
            assert all(m in shipped_modules for m in importers), importers
            assert not any(_covers(prefixes, m) for m in shipped_modules), prefixes


def test_the_check_machinery_and_the_formgrader_pages_are_layered():
    """Issue 49's two circles are gone for good: each room of autograder.checks and of autograder.grading.pages
    imports only the rooms its package's docstring lists above it."""
    known, imports = all_imports()
    edges = graph(known, imports)
    for package in ("autograder.checks", "autograder.grading.pages"):
        folder = ROOT.joinpath(*package.split("."))
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8")))
        rooms = [line.split()[0] for line in doc.split("list:", 1)[1].splitlines() if line.startswith("    ") and not line.startswith("     ")]
        assert sorted(rooms) == sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__"), f"{package}'s docstring lists every room, once"
        for i, room in enumerate(rooms):
            uses = {m.removeprefix(package + ".") for m in edges[f"{package}.{room}"] if m.startswith(package + ".")}
            assert uses <= set(rooms[:i]), f"{package}.{room} imports {sorted(uses - set(rooms[:i]))}, not above it"
    assert "autograder.checks.relations" in edges["autograder.checks.driver"]
    assert "autograder.grading.pages.escaping" in edges["autograder.grading.pages.policy"]


# ---------------------------------------------------------------- the checker itself, on a planted package


def plant(tmp_path, files):
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return tmp_path


def test_the_checker_finds_a_circle_closed_inside_a_function(tmp_path):
    root = plant(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "import os\n\ndef f():\n    from pkg import high  # dodges the circle\n    return high\n",
        "pkg/high.py": "from . import low\nfrom pkg.mid import g\n",
        "pkg/mid.py": "import json\n\ndef g():\n    import numpy\n",
        "pkg/sub/__init__.py": "from ..mid import g\n",
    })
    known, imports = all_imports(root, ("pkg",))
    assert set(known) == {"pkg", "pkg.low", "pkg.high", "pkg.mid", "pkg.sub"}
    assert cycles(graph(known, imports)) == [["pkg.high", "pkg.low", "pkg.high"]]
    inside = sorted((i.importer, i.target) for i in imports if i.in_function)
    assert inside == [("pkg.low", "pkg.high"), ("pkg.mid", "numpy")]
    assert ("pkg.sub", "pkg.mid") in {(i.importer, i.target) for i in imports}  # a relative import two levels up
    assert lazy_entry(Import("pkg.mid", "numpy", 4, True)) is None  # nothing outside LAZY is allowed


def test_the_checker_names_each_circle_once():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"g"}, "g": {"f"}}
    assert cycles(edges) == [["a", "b", "c", "a"], ["e", "e"], ["f", "g", "f"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
