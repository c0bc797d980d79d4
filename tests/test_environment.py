"""environment.yml (conda, Binder) lists the same packages as pyproject.toml."""
import re
import tomllib

import yaml

from conftest import ROOT


def name_of(requirement):
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {name_of(r) for r in project["dependencies"]}
    for extra in project["optional-dependencies"].values():
        wanted |= {name_of(r) for r in extra}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = set()
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            listed |= {name_of(r) for r in dep.get("pip", []) if not r.startswith(("-e", "."))}
        elif not dep.startswith(("python", "pip")):
            listed.add(name_of(dep))
    assert listed == wanted, f"only in environment.yml: {listed - wanted}; only in pyproject.toml: {wanted - listed}"


def test_ci_pins_satisfy_the_package_ranges():
    pins = {name_of(line): line.split("==")[1].strip() for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch" in pins, "CI must pin torch (an unpinned torch pulls a CUDA build)"
    for req in project["dependencies"]:
        assert name_of(req) in pins, f"{req} is not pinned in constraints.txt"
