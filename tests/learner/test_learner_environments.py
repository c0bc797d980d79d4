"""Colab, Binder and the student's JupyterLab, short of a browser (tests/learner/test_browser.py has that).

- The Colab cell of every notebook does nothing outside Colab; on a simulated Colab
  it installs the course from the repository's address and leaves torch alone.
- The check API needs none of the grading tools (nbgrader and co.), which Colab lacks.
- The Colab and Binder links come from the one address, autograder.release.colab.REPOSITORY.
- `make lab` gives students JupyterLab without nbgrader's instructor tools.
- Progress bars: text in a terminal, a widget in a Jupyter kernel.
"""
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import types

import nbformat
import pytest

from autograder.release import colab
from autograder import lab
from conftest import ASSIGNMENTS, ROOT

NOTEBOOKS = [ROOT / d / n / f"{n}.ipynb" for d in ("solutions", "notebooks") for n in ASSIGNMENTS]
UPGRADES = {"-U", "--upgrade", "--force-reinstall", "--ignore-installed", "-I"}
OFFLINE_PIP = ["--no-index", "--no-build-isolation"]  # needs setuptools>=77 here, as pyproject.toml asks


def cell(nb, cell_id):
    found = [c for c in nb.cells if c.get("id") == cell_id]
    assert len(found) == 1, f"{len(found)} cells with id {cell_id}"
    return found[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_notebook_opens_with_the_colab_badge_and_install_cell(path):
    nb = nbformat.read(path, as_version=4)
    name = path.stem
    assert nb.cells[0].get("id") == colab.BADGE_CELL_ID and nb.cells[0].source == colab.badge_source(name)
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code.get("id") == colab.INSTALL_CELL_ID and first_code.source == colab.install_source()
    assert "nbgrader" not in first_code.metadata, "the Colab cell is an ordinary cell, neither graded nor locked"
    again = colab.add_colab_cells(nbformat.from_dict(nb), name)
    assert nbformat.writes(again) == nbformat.writes(nb), "run `python -m autograder.release.colab` and `python -m autograder release`"


def run_install_cell(monkeypatch, on_colab, colab_torch=None):
    """Run the released notebooks' install cell here, with subprocess stubbed; returns its commands."""
    calls = []

    def record(cmd, *args, **kwargs):
        calls.append((list(cmd), kwargs))
        return subprocess.CompletedProcess(cmd, 0)

    def forbidden(*args, **kwargs):
        raise AssertionError("the Colab cell must install through subprocess.run only")

    monkeypatch.setattr(subprocess, "run", record)
    if colab_torch:
        real = importlib.metadata.version
        monkeypatch.setattr(importlib.metadata, "version", lambda name: colab_torch if name == "torch" else real(name))
    for name in ("Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, forbidden)
    monkeypatch.setattr("os.system", forbidden)
    if on_colab:
        google = types.ModuleType("google")
        google.colab = types.ModuleType("google.colab")
        monkeypatch.setitem(sys.modules, "google", google)
        monkeypatch.setitem(sys.modules, "google.colab", google.colab)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    sources = {cell(nbformat.read(ROOT / "notebooks" / n / f"{n}.ipynb", as_version=4), colab.INSTALL_CELL_ID).source
               for n in ASSIGNMENTS}
    assert len(sources) == 1, "every notebook has the same Colab cell"
    exec(compile(sources.pop(), "<colab cell>", "exec"), {"__name__": "__main__"})
    return calls


def test_colab_cell_does_nothing_outside_colab(monkeypatch):
    assert run_install_cell(monkeypatch, on_colab=False) == []


def test_colab_cell_installs_from_the_repository_and_keeps_torch(monkeypatch):
    calls = run_install_cell(monkeypatch, on_colab=True)
    assert len(calls) == 1
    cmd, kwargs = calls[0]
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"] and kwargs.get("check") is True
    packages = [a for a in cmd[4:] if not a.startswith("-")]
    assert packages[0] == f"seqcourse @ git+{colab.REPOSITORY}@{colab.BRANCH}"
    # the only torch on the command line is the one already installed, so pip keeps it
    assert packages[1:] == [f"torch=={importlib.metadata.version('torch')}"]
    assert not UPGRADES & set(cmd), cmd


def test_colab_cell_replaces_a_torch_older_than_the_tested_floor(monkeypatch):
    (newer, _), = run_install_cell(monkeypatch, on_colab=True, colab_torch="99.1.0+cu126")
    assert newer[-1] == "torch==99.1.0+cu126"
    monkeypatch.undo()
    (older, _), = run_install_cell(monkeypatch, on_colab=True, colab_torch="2.9.0+cu126")
    assert older[-1] == f"torch>={colab.torch_floor()}"


@pytest.fixture(scope="module")
def package_source(tmp_path_factory):
    """What pip builds the package from: the repository's files (a copy, as pip would clone it)."""
    pytest.importorskip("setuptools", minversion="77")
    src = tmp_path_factory.mktemp("repository") / "seqcourse"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "examples", "notebooks", "solutions", "tests",
        "benchmarks", "test-artifacts", ".pytest_cache"))
    return src


@pytest.fixture(scope="module")
def installed_package(package_source, tmp_path_factory):
    """The package installed from the repository as on Colab (not editable), without the grading tools."""
    target = tmp_path_factory.mktemp("site-packages")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *OFFLINE_PIP, "--target", str(target),
                    str(package_source)], check=True, capture_output=True)
    return target


def test_colab_command_resolves_to_the_course_package_alone(monkeypatch, tmp_path, package_source):
    """pip's own resolver, offline, on the cell's command with the repository's address replaced
    by a copy of it: it installs seqcourse and nothing else (torch, numpy, ... are already there)."""
    (cmd, _), = run_install_cell(monkeypatch, on_colab=True)
    monkeypatch.undo()
    local = [f"seqcourse @ {package_source.as_uri()}" if a.startswith("seqcourse @ ") else a for a in cmd]
    report = tmp_path / "report.json"
    subprocess.run(local + ["--dry-run", *OFFLINE_PIP, "--report", str(report)], check=True, capture_output=True, cwd=tmp_path)
    installs = [i["metadata"]["name"] for i in json.loads(report.read_text())["install"]]
    assert installs == ["seqcourse"]


BLOCK_GRADING_TOOLS = """
import importlib.abc, sys
BLOCKED = {"nbgrader", "nbclient", "nbconvert", "nbformat", "jupyter_client", "jupyterlab", "pytest"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
sys.meta_path.insert(0, Block())
"""


def test_check_api_works_without_nbgrader(tmp_path, installed_package):
    code = BLOCK_GRADING_TOOLS + """
import autograder
print("from:", autograder.__file__)
from autograder import CheckFailed, check
from solutions_lib.attention import causal_mask
assert check("causal_mask", causal_mask) is None

def stub(T, device=None):
    raise NotImplementedError()
try:
    check("causal_mask", stub)
except CheckFailed as e:
    print("stub:", e)
print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED))
"""
    env = dict(os.environ, PYTHONPATH=str(installed_package))
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"from: {installed_package / 'autograder' / '__init__.py'}" in out.stdout
    assert "✔ causal_mask" in out.stdout
    assert "stub: causal_mask is not implemented yet" in out.stdout
    assert "loaded: []" in out.stdout


def test_readme_links_come_from_the_repository_address():
    readme = (ROOT / "README.md").read_text()
    for name in ASSIGNMENTS:
        assert f"]({colab.colab_url(name)})" in readme, f"README: no Colab link for {name}"
    assert f"]({colab.binder_url()})" in readme, "README: no Binder badge"
    assert colab.binder_url().endswith("urlpath=lab/tree/notebooks")
    others = set(re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", readme)) - {colab.REPOSITORY}
    assert not others, f"README names another repository: {others}"


def page_config(role):
    return json.loads((lab.config_dir(role, ROOT) / "labconfig" / "page_config.json").read_text())["disabledExtensions"]


def server_extensions(role):
    return json.loads((lab.config_dir(role, ROOT) / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]


INSTRUCTOR_PLUGINS = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list", "@jupyter/nbgrader:create-assignment"}
INSTRUCTOR_SERVER_EXTENSIONS = {"nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list", "autograder.grading.pages.policy"}


NEWS = "@jupyterlab/apputils-extension:announcements"  # JupyterLab's news, fetched from the internet: off for both


def test_student_and_instructor_lab_configurations():
    assert page_config("student") == dict.fromkeys(INSTRUCTOR_PLUGINS, True) | {NEWS: True}
    assert page_config("instructor") == dict.fromkeys(INSTRUCTOR_PLUGINS, False) | {NEWS: True}
    assert server_extensions("student") == dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, False)
    assert server_extensions("instructor") == dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, True)
    # the plugins exist under these names in the installed nbgrader
    pkg = ROOT / ".venv" / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader"
    if pkg.is_dir():
        code = "".join(p.read_text(errors="replace") for p in (pkg / "static").glob("*.js"))
        for plugin in INSTRUCTOR_PLUGINS:
            assert f'"{plugin}"' in code, plugin


def test_lab_configuration_is_per_run():
    env = lab.lab_env("student", ROOT, env={"JUPYTER_CONFIG_PATH": "/mine"})
    assert env["JUPYTER_CONFIG_PATH"].split(":") == [str(lab.config_dir("student", ROOT).resolve()), "/mine"]
    assert "JUPYTER_CONFIG_DIR" not in env, "the user's own configuration folder stays as it is"


@pytest.mark.skipif(not shutil.which("make"), reason="make is not installed")
def test_make_lab_starts_the_students_lab():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed-stamp", "lab", "lab-instructor"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "-m autograder.lab student notebooks/" in out
    assert "-m autograder.lab instructor ." in out


def test_progress_bars_are_text_in_a_terminal(tmp_path):
    code = "from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='training'):\n    pass"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert re.search(r"training: 100%\|█+\| 3/3", out.stderr), out.stderr


def test_course_progress_bars_use_tqdm_auto():
    """tqdm.auto picks the widget in Jupyter and text in a terminal; plain tqdm would print text in both."""
    sources = [p.read_text() for p in (ROOT / "solutions_lib").glob("*.py")] + [p.read_text() for p in (ROOT / "autograder").glob("*.py")]
    sources += [c.source for n in ASSIGNMENTS
                for c in nbformat.read(ROOT / "solutions" / n / f"{n}.ipynb", as_version=4).cells]
    imports = [line.strip() for src in sources for line in src.splitlines() if re.match(r"\s*(from|import) tqdm\b", line)]
    assert imports and all(line.startswith("from tqdm.auto import") for line in imports), imports


@pytest.mark.slow
def test_progress_bars_are_widgets_in_a_jupyter_kernel(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nb.cells = [nbformat.v4.new_code_cell("from tqdm.auto import tqdm\nfor _ in tqdm(range(3), desc='training'):\n    pass")]
    NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), outputs
    assert not [o for o in outputs if o.get("name") == "stderr"], "tqdm fell back to text (is ipywidgets installed?)"
