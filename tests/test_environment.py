"""environment.yml (conda, Binder) lists the same packages as pyproject.toml; Binder's scripts work."""
import os
import re
import subprocess
import tomllib
from pathlib import Path

import yaml

from conftest import ROOT

# Extras that only the repository's own tests need: not in the learners' environment.
TEST_ONLY_EXTRAS = {"browser", "site", "tests", "hub"}  # tools of the tests, `make site` and `make hub`, not of a learner


def name_of(requirement):
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {name_of(r) for r in project["dependencies"]}
    assert TEST_ONLY_EXTRAS <= set(project["optional-dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if name not in TEST_ONLY_EXTRAS:
            wanted |= {name_of(r) for r in extra}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            # pip options (--extra-index-url ...) and local paths are not packages
            listed |= {name_of(r) for r in dep.get("pip", []) if not r.startswith(("-", "."))}
        elif not dep.startswith(("python", "pip")):
            listed.add(name_of(dep))
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject.toml: {wanted - listed}"
    # Binder has no GPU: a CUDA build of torch would add gigabytes to the image
    pip_options = [r for dep in env["dependencies"] if isinstance(dep, dict) for r in dep.get("pip", []) if r.startswith("-")]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip_options


def test_ci_pins_satisfy_the_package_ranges():
    pins = {name_of(line): line.split("==")[1].strip() for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch" in pins, "CI must pin torch (an unpinned torch pulls a CUDA build)"
    for req in project["dependencies"]:
        assert name_of(req) in pins, f"{req} is not pinned in constraints.txt"


def test_the_torch_floor_is_the_torch_the_tests_run_on():
    # The version range is a promise: its oldest torch is the one CI installs, and the one running now.
    import torch

    pins = {name_of(line): line.split("==")[1].strip() for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor, = [r.split(">=")[1] for r in project["dependencies"] if name_of(r) == "torch"]
    assert floor == pins["torch"].split("+")[0] == torch.__version__.split("+")[0]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert f"torch>={floor}" in [r for dep in env["dependencies"] if isinstance(dep, dict) for r in dep["pip"]]


def test_binder_builds_the_course_package_and_starts_the_students_lab(tmp_path):
    post_build = (ROOT / "postBuild").read_text()
    assert os.access(ROOT / "postBuild", os.X_OK) and os.access(ROOT / "start", os.X_OK)
    assert re.search(r"^python -m pip install .*--no-deps -e \.$", post_build, flags=re.M), post_build
    for script in ("postBuild", "start"):
        subprocess.run(["bash", "-n", str(ROOT / script)], check=True)
    # repo2docker runs `start COMMAND...`: the command gets the students' configuration first
    env = dict(os.environ, JUPYTER_CONFIG_PATH="/elsewhere")
    out = subprocess.run([str(ROOT / "start"), "sh", "-c", "echo $JUPYTER_CONFIG_PATH"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout.strip()
    first, rest = out.split(":", 1)
    assert Path(first).resolve() == (ROOT / "jupyter-config" / "student").resolve() and rest == "/elsewhere", out
    assert not (ROOT / "binder").exists() and not (ROOT / ".binder").exists(), (
        "repo2docker would read binder/ instead of environment.yml, postBuild and start")
