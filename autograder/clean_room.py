"""Grading that student code cannot talk its way around.

In the notebook, a check runs in the learner's own kernel, where a learner can
redefine `check`, patch torch's comparisons or the autograder itself. So after
nbgrader has graded a submission, `recheck` grades it again with the
authoritative comparison in a process that never runs student code:

1. this process draws every case's inputs (hidden ones included) and the
   reference weights, and sends them to
2. a fresh worker process (`python -m autograder.clean_room PAYLOAD RESULT`)
   that runs the notebook's code cells except the test cells, on the grading
   budget, with this notebook's reference implementations made unreachable. It sends
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
    """What the room runs, in the notebook's order: the source of every code cell but the
    test cells (the setup, the course's helper and demo cells, the solutions, any cell
    the learner added), and in place of each test cell ("check", exercise name), the
    moment to check that exercise, as the notebook did."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id", "")
        if meta.get("grade") and not meta.get("solution"):
            if grade_id.startswith("check_"):
                cells.append(("check", grade_id[len("check_"):]))
            continue
        if grade_id == SETUP_ID:
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


def hidden_references(exercises):
    """{module: [names]}: the reference implementations of `exercises`, to hide from the room."""
    hidden = {}
    for ex in exercises:
        module = ex.reference.__module__
        if module.startswith("solutions_lib."):
            hidden.setdefault(module, []).append(ex.reference.__name__)
    return {module: sorted(names) for module, names in hidden.items()}


def _block(hidden):
    """Make the references unreachable: their names leave their modules (helpers such as
    a dataset function stay importable), and the catalogs, which hold every reference and
    near-copies of it, cannot be imported."""
    import importlib

    objects = [getattr(importlib.import_module(module), name, None) for module, names in hidden.items() for name in names]
    for module in [m for name, m in sys.modules.items() if name.split(".")[0] == "solutions_lib" and m is not None]:
        namespace = vars(module)
        for name in [n for n, value in namespace.items() if any(value is o for o in objects)]:
            del namespace[name]  # also where another module imported it
    sys.modules["autograder.assignments"] = None  # `import autograder.assignments...` now raises ImportError


CELL_SECONDS = 30


def work(payload_path, result_path):
    """Run the cells; check each exercise where its test cell stood (the rest at the end),
    saving the results after every check, so that code which ends the room later costs
    only what comes after it, as in the notebook."""
    from autograder.kernel_setup import apply_limits

    payload = torch.load(payload_path, weights_only=False)
    # The same limits as a grading kernel; the grading process sweeps what is left.
    apply_limits(**payload["limits"])
    _block(payload["blocked"])
    exercises = {ex["name"]: ex for ex in payload["exercises"]}
    namespace = {"__name__": "__main__"}
    results = {"__setup_ok__": True}
    for i, item in enumerate(payload["cells"] + [("check", name) for name in exercises]):
        if isinstance(item, tuple):
            if item[1] in exercises and item[1] not in results:
                results[item[1]] = _outcomes(exercises[item[1]], namespace.get(item[1]), payload["timeout"])
                _save(results, result_path)
            continue
        try:
            with core.time_limit(CELL_SECONDS):
                exec(compile(item, "<cell>", "exec"), namespace)
        except BaseException:  # a cell that fails here failed in the notebook too
            if i == 0:  # the locked setup cell must run, or this room proves nothing
                results["__setup_ok__"] = False
                break
        _kill_strays()
        if i == 0:
            _save(results, result_path)  # from here on, a room that ends early ended because of the learner
    results["__done__"] = True
    _save(results, result_path)


def _outcomes(ex, impl, timeout):
    outcomes = []
    for call, grad, weights in ex["cases"]:
        call = core.restored_call(call)
        if impl is None:
            outcomes.append({"error": ("NameError", f"name '{ex['name']}' is not defined")})
            continue
        o = core.run_call(ex["kind"], ex["train_mode"], impl, call, grad, weights, timeout, ex["state_after"])
        if o.error is not None:
            outcomes.append({"error": _picklable(o.error)})
            continue
        grads = o.grads
        if isinstance(grads, core.StudentError):
            grads = {"__error__": str(grads)}
        outcomes.append({"outputs": _detach(o.outputs), "grads": _detach(grads)})
    _kill_strays()
    return outcomes


def _save(results, path):
    import os

    torch.save(results, f"{path}.part")
    os.replace(f"{path}.part", path)


def _detach(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (list, tuple)):
        return (list if isinstance(x, list) else tuple)(_detach(v) for v in x)  # plain, for weights_only
    if isinstance(x, dict):
        return {k: _detach(v) for k, v in x.items()}
    if isinstance(x, (str, int, float, bool, type(None))):
        return x
    return repr(x)  # something that cannot travel: compared as text, so it fails


# ---------------------------------------------------------------- the grader side (never runs learner code)


def recheck(nb, exercises, timeout=600):
    """Grade `exercises` in a clean room: ({exercise name: Report}, problem).

    problem is '' when the room ran. Otherwise it says why not, and it starts
    with NOT_SENT when the course's own inputs could not be sent (nobody's fault
    but the course's: nbgrader's grades stand); any other failure happened while
    the learner's code ran, so nothing could be verified.
    """
    from autograder import registry
    from autograder.core import _reference_module

    payload = {"cells": learner_cells(nb), "exercises": [], "timeout": core.DEFAULT_TIMEOUT_S, "limits": limits(),
               # every reference of the notebook, not only those rechecked: an exercise nbgrader
               # scored 0 could still lend its reference to one that scored
               "blocked": hidden_references([e for name in {ex.notebook for ex in exercises} for e in registry.for_notebook(name)])}
    for ex in exercises:
        cases = []
        for case in ex.cases():
            ref = _reference_module(ex, case)
            cases.append((core.portable_call(case.make()), case.grad, ref.state_dict() if ref is not None else None))
        payload["exercises"].append({"name": ex.name, "kind": ex.kind, "train_mode": ex.train_mode, "state_after": ex.state_after, "cases": cases})
    with tempfile.TemporaryDirectory() as tmp:
        payload_path, result_path = Path(tmp) / "payload.pt", Path(tmp) / "result.pt"
        try:
            torch.save(payload, payload_path)
        except Exception as e:
            return {}, f"{NOT_SENT}: {type(e).__name__}: {e}"
        from autograder.course import tool_env

        from autograder.kernel_setup import sweep

        problem = ""
        try:
            # the notebook's own budget rules apply: small training runs, figures not shown
            env = tool_env() | {"AUTOGRADER_QUICK": "1", "MPLBACKEND": "Agg"}
            proc = subprocess.run([sys.executable, "-m", "autograder.clean_room", str(payload_path), str(result_path)],
                                  env=env, cwd=tmp, timeout=timeout, capture_output=True)
            if proc.returncode != 0:
                problem = f"the notebook's code ended the grading process (exit status {proc.returncode})"
        except subprocess.TimeoutExpired:
            problem = f"the notebook's code did not finish within {timeout} s"
        finally:
            sweep()  # whatever the learner's code forked dies with the room
        try:
            # weights_only: the learner's code could have written this file, so it may hold
            # nothing but tensors and plain values (a pickle could run code here)
            results = torch.load(result_path, weights_only=True) if result_path.exists() else {}
        except Exception as e:
            results, problem = {}, f"its results could not be read ({type(e).__name__})"
    if not results.get("__setup_ok__"):
        return {}, problem or "the notebook's setup cell failed when run again"
    if not problem and not results.get("__done__"):
        problem = "the notebook's code ended the grading process"
    reports = {}
    for ex in exercises:
        outcomes = [_outcome(r) for r in results.get(ex.name, [])]
        if len(outcomes) != len(list(ex.cases())):
            continue
        reports[ex.name] = core.check_exercise(ex, None, hidden=True, outcomes=outcomes)
    return reports, problem


NOT_SENT = "not verified, the course's inputs could not be sent"


def _outcome(r):
    if "error" in r:
        return core.Outcome(error=_unpickle_error(*r["error"]))
    grads = r["grads"]
    if isinstance(grads, dict) and "__error__" in grads:
        grads = core.StudentError(RuntimeError(grads["__error__"]))
    return core.Outcome(outputs=r["outputs"], grads=grads)


if __name__ == "__main__":
    work(sys.argv[1], sys.argv[2])


def enforce(course, student, name, db_url):
    """After nbgrader: lower any exercise whose clean-room score is lower, in the
    gradebook and in the autograded notebook (so feedback shows why). Returns
    ([(exercise, old score, new score)], problem), problem being '' or why the room
    could not verify the submission (see recheck)."""
    import nbformat
    from nbformat.v4 import new_output
    from nbgrader.api import Gradebook

    from autograder import registry
    from autograder.api import RESULT_MIME, _explain

    path = Path(course) / "autograded" / student / name / f"{name}.ipynb"
    if not path.exists():
        return [], ""
    nb = nbformat.read(path, as_version=4)
    with Gradebook(db_url) as gb:
        scored = {ex.name: gb.find_grade(f"check_{ex.name}", name, name, student).auto_score for ex in registry.for_notebook(name)}
    to_check = [registry.get(ex) for ex, score in scored.items() if score]  # a 0 cannot go lower
    if not to_check:
        return [], ""
    reports, problem = recheck(nb, to_check)
    if problem and not problem.startswith(NOT_SENT):
        # Unverifiable because of the learner's code (it exited, crashed or hung in the room):
        # no points for what nbgrader alone saw, or a tamperer could hide that way.
        reports = {ex.name: reports.get(ex.name) for ex in to_check}
    changed = []
    with Gradebook(db_url) as gb:
        for ex_name, report in reports.items():
            grade = gb.find_grade(f"check_{ex_name}", name, name, student)
            score = 0.0 if report is None else report.score
            if grade.auto_score is None or score >= grade.auto_score - 1e-6:
                continue
            changed.append((ex_name, grade.auto_score, score))
            grade.auto_score = score
            if report is None:
                points = registry.get(ex_name).points
                note = (f"✘ Could not be verified outside your notebook ({problem}): 0/{points:g} points "
                        f"instead of {changed[-1][1]:g}. Make every cell run on its own in a fresh kernel, then resubmit.")
            else:
                points = report.exercise.points
                _, reason = _explain(report)
                note = (f"✘ Graded again outside your notebook, where your code cannot change the check: "
                        f"{score:g}/{points:g} points instead of {changed[-1][1]:g}. {reason}")
            cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"check_{ex_name}")
            data = {"exercise": ex_name, "score": score, "points": points, "status": "regraded", "reason": note}
            cell.outputs = [new_output("stream", name="stdout", text=note + "\n"),
                            new_output("display_data", data={RESULT_MIME: data, "text/plain": ""})]
            if score == 0:
                cell.outputs.append(new_output("error", ename="Regraded", evalue=note, traceback=[note]))
            else:
                cell.outputs.append(new_output("execute_result", data={"text/plain": repr(score)}, execution_count=None))
        gb.db.commit()
    if changed:
        nbformat.write(nb, path)
    return changed, problem


def withhold_all(course, student, name, db_url, changed, root):
    """No points at all for a submission that changed the course's files (autograder.integrity);
    the autograded notebook opens with why. Returns the note for the instructor."""
    import os

    import nbformat
    from nbformat.v4 import new_markdown_cell
    from nbgrader.api import Gradebook

    from autograder import registry

    inside = [os.path.relpath(p, root) if os.path.abspath(p).startswith(os.path.abspath(root) + os.sep) else p for p in changed]
    shown = ", ".join(inside[:3]) + (" ..." if len(inside) > 3 else "")
    note = f"changed the course's own files ({shown}); they were restored and the submission gets no points"
    with Gradebook(db_url) as gb:
        for ex in registry.for_notebook(name):
            gb.find_grade(f"check_{ex.name}", name, name, student).auto_score = 0.0
        gb.db.commit()
    path = Path(course) / "autograded" / student / name / f"{name}.ipynb"
    if path.exists():
        nb = nbformat.read(path, as_version=4)
        nb.cells.insert(0, new_markdown_cell(f"**✘ This submission {note}.**"))
        nbformat.write(nb, path)
    return note
