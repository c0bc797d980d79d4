"""Grading that student code cannot talk its way around.

In the notebook, a check runs in the learner's own kernel, where a learner can
redefine `check`, patch torch's comparisons or the autograder itself. So after
nbgrader has graded a submission, `recheck` grades it again with the
authoritative comparison in a process that never runs student code:

1. this process draws every case's inputs (hidden ones included) and the
   reference weights, and sends them to
2. a fresh worker process (`python -m autograder.clean_room PAYLOAD RESULT`)
   that runs the notebook's code cells except the test cells, on the grading
   budget, with this notebook's reference modules made unimportable. It sends
   back only outputs and gradients;
3. this process compares them with the reference and scores each exercise.

An exercise keeps the lower of the two scores, and the instructor sees why.
"""
from __future__ import annotations

import builtins
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from autograder import core

SETUP_ID = "setup"


def learner_cells(nb):
    """Every code cell but the test cells, in order: the setup, the course's own helper
    and demo cells (solutions may use what they define), the solutions, and any cell the
    learner added. Test cells are left out: checking is this module's job."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            continue
        if meta.get("grade_id") == SETUP_ID:
            cells.insert(0, cell.source)
        else:
            cells.append(cell.source)
    return cells


def limits():
    """The grading kernels' limits (nbgrader_config.py reads the same variables)."""
    import os

    return {
        "memory_mb": int(os.environ.get("AUTOGRADER_MEMORY_MB", "8192")),
        "cpu_seconds": int(os.environ.get("AUTOGRADER_CPU_SECONDS", "900")),
        "file_mb": int(os.environ.get("AUTOGRADER_FILE_MB", "512")),
        "processes": int(os.environ.get("AUTOGRADER_PROCESSES", "256")),
    }


def _picklable(error):
    return (type(error).__name__, str(error))


def _unpickle_error(name, message):
    kind = getattr(core, name, None) or getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, BaseException):
        try:
            return kind(message)
        except Exception:
            pass
    return RuntimeError(message)


# ---------------------------------------------------------------- the worker side (runs learner code)


def _kill_strays():
    """Kill processes a cell left running in this room's pids cgroup (a fork bomb's children)."""
    import os
    import signal

    try:
        with open("/proc/self/cgroup") as fh:
            path = next(line.split(":", 2)[2].strip() for line in fh if ":pids:" in line)
        if "autograder-" not in path:
            return
        with open(f"/sys/fs/cgroup/pids{path}/cgroup.procs") as fh:
            pids = [int(p) for p in fh.read().split()]
    except (OSError, StopIteration, ValueError):
        return
    for pid in pids:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _block(modules):
    for name in modules:
        sys.modules[name] = None  # `import name` now raises ImportError


CELL_SECONDS = 30


def work(payload_path, result_path):
    from autograder.kernel_setup import apply_limits

    payload = torch.load(payload_path, weights_only=False)
    # The same limits as a grading kernel; the grading process sweeps what is left.
    apply_limits(**payload["limits"])
    _block(payload["blocked"])
    namespace = {"__name__": "__main__"}
    results = {"__setup_ok__": True}
    for i, source in enumerate(payload["cells"]):
        try:
            with core.time_limit(CELL_SECONDS):
                exec(compile(source, "<cell>", "exec"), namespace)
        except BaseException:  # a cell that fails here failed in the notebook too
            if i == 0:  # the locked setup cell must run, or this room proves nothing
                results["__setup_ok__"] = False
        _kill_strays()
    for ex in payload["exercises"]:
        impl = namespace.get(ex["name"])
        outcomes = []
        for call, grad, weights in ex["cases"]:
            if impl is None:
                outcomes.append({"error": ("NameError", f"name '{ex['name']}' is not defined")})
                continue
            o = core.run_call(ex["kind"], ex["train_mode"], impl, call, grad, weights, payload["timeout"], ex["state_after"])
            if o.error is not None:
                outcomes.append({"error": _picklable(o.error)})
                continue
            grads = o.grads
            if isinstance(grads, core.StudentError):
                grads = {"__error__": str(grads)}
            outcomes.append({"outputs": _detach(o.outputs), "grads": _detach(grads)})
        results[ex["name"]] = outcomes
    torch.save(results, result_path)


def _detach(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_detach(v) for v in x) if not hasattr(x, "_fields") else type(x)(*(_detach(v) for v in x))
    if isinstance(x, dict):
        return {k: _detach(v) for k, v in x.items()}
    if isinstance(x, (str, int, float, bool, type(None))):
        return x
    return repr(x)  # something that cannot travel: compared as text, so it fails


# ---------------------------------------------------------------- the grader side (never runs learner code)


def recheck(nb, exercises, timeout=600):
    """{exercise name: Report} graded in a clean room, or {} when the room could not run."""
    from autograder.core import _reference_module

    payload = {"cells": learner_cells(nb), "exercises": [], "timeout": core.DEFAULT_TIMEOUT_S, "limits": limits(),
               "blocked": sorted({ex.reference.__module__ for ex in exercises if ex.reference.__module__.startswith("solutions_lib.")})}
    for ex in exercises:
        cases = []
        for case in ex.cases():
            ref = _reference_module(ex, case)
            cases.append((case.make(), case.grad, ref.state_dict() if ref is not None else None))
        payload["exercises"].append({"name": ex.name, "kind": ex.kind, "train_mode": ex.train_mode, "state_after": ex.state_after, "cases": cases})
    with tempfile.TemporaryDirectory() as tmp:
        payload_path, result_path = Path(tmp) / "payload.pt", Path(tmp) / "result.pt"
        try:
            torch.save(payload, payload_path)
        except Exception:
            return {}  # inputs that cannot travel: keep nbgrader's grades
        from autograder.course import tool_env

        from autograder.kernel_setup import sweep

        try:
            # the notebook's own budget rules apply: small training runs, figures not shown
            env = tool_env() | {"AUTOGRADER_QUICK": "1", "MPLBACKEND": "Agg"}
            subprocess.run([sys.executable, "-m", "autograder.clean_room", str(payload_path), str(result_path)],
                           env=env, cwd=tmp, timeout=timeout, capture_output=True)
        except subprocess.TimeoutExpired:
            return {}
        finally:
            sweep()  # whatever the learner's code forked dies with the room
        if not result_path.exists():
            return {}
        results = torch.load(result_path, weights_only=False)
    if not results.get("__setup_ok__"):
        return {}
    reports = {}
    for ex in exercises:
        outcomes = [_outcome(r) for r in results.get(ex.name, [])]
        if len(outcomes) != len(list(ex.cases())):
            continue
        reports[ex.name] = core.check_exercise(ex, None, hidden=True, outcomes=outcomes)
    return reports


def _outcome(r):
    if "error" in r:
        return core.Outcome(error=_unpickle_error(*r["error"]))
    grads = r["grads"]
    if isinstance(grads, dict) and "__error__" in grads:
        grads = core.StudentError(RuntimeError(grads["__error__"]))
    return core.Outcome(outputs=r["outputs"], grads=grads)


if __name__ == "__main__":
    work(sys.argv[1], sys.argv[2])


def enforce(root, course, student, name, db_url):
    """After nbgrader: lower any exercise whose clean-room score is lower, in the
    gradebook and in the autograded notebook (so feedback shows why). Returns
    [(exercise, old score, new score)]."""
    import nbformat
    from nbformat.v4 import new_output
    from nbgrader.api import Gradebook

    from autograder import registry
    from autograder.api import RESULT_MIME, _explain

    path = Path(course) / "autograded" / student / name / f"{name}.ipynb"
    if not path.exists():
        return []
    nb = nbformat.read(path, as_version=4)
    with Gradebook(db_url) as gb:
        scored = {ex.name: gb.find_grade(f"check_{ex.name}", name, name, student).auto_score for ex in registry.for_notebook(name)}
    to_check = [registry.get(ex) for ex, score in scored.items() if score]  # a 0 cannot go lower
    if not to_check:
        return []
    reports = recheck(nb, to_check)
    changed = []
    with Gradebook(db_url) as gb:
        for ex_name, report in reports.items():
            grade = gb.find_grade(f"check_{ex_name}", name, name, student)
            if grade.auto_score is None or report.score >= grade.auto_score - 1e-6:
                continue
            changed.append((ex_name, grade.auto_score, report.score))
            grade.auto_score = report.score
            _, reason = _explain(report)
            note = (f"✘ Graded again outside your notebook, where your code cannot change the check: "
                    f"{report.score:g}/{report.exercise.points:g} points instead of {changed[-1][1]:g}. {reason}")
            cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"check_{ex_name}")
            data = {"exercise": ex_name, "score": report.score, "points": report.exercise.points, "status": "regraded", "reason": note}
            cell.outputs = [new_output("stream", name="stdout", text=note + "\n"),
                            new_output("display_data", data={RESULT_MIME: data, "text/plain": ""})]
            if report.score == 0:
                cell.outputs.append(new_output("error", ename="Regraded", evalue=note, traceback=[note]))
            else:
                cell.outputs.append(new_output("execute_result", data={"text/plain": repr(report.score)}, execution_count=None))
        gb.db.commit()
    if changed:
        nbformat.write(nb, path)
    return changed
