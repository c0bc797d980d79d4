"""Bad submissions, graded through the real pipeline beside a good one.

Each entry of CATALOG builds one student's submission of notebook 05 from the
release and the solution, and says what grade it must get and what the
instructor must be told. One `Grader` run grades them all (2 jobs); no entry
may crash or hang the run, and the good submission beside them keeps full marks.
"""
import json
from copy import deepcopy
import os
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder import registry
from autograder.grade import Grader, read_grades
from autograder.release import fill_submission
from conftest import ROOT, results_of

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
LOST_SDPA = FULL - 4 - 3  # scaled_dot_product_attention and SelfAttention, which uses it
# Short limits so that the endless loops of the catalog end quickly.
LIMITS = {"AUTOGRADER_CHECK_TIMEOUT": "4", "AUTOGRADER_CELL_TIMEOUT": "20", "AUTOGRADER_PROCESSES": "64"}


def sources():
    rel = nbformat.read(ROOT / "notebooks" / NAME / f"{NAME}.ipynb", as_version=4)
    sol = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    return rel, sol


def complete(code=None):
    rel, sol = sources()
    return fill_submission(rel, sol, code or {})


def blank():
    return sources()[0]


def index_of(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def with_cell(source, after="check_attention_scores", nb=None):
    nb = nb or complete()
    nb.cells.insert(index_of(nb, after) + 1, new_code_cell(source))
    return nb


def bomb_at_the_end():
    nb = complete()
    nb.cells.append(new_code_cell("import os\nwhile True:\n    if os.fork() == 0:\n        while True:\n            pass"))
    return nb


def sdpa(body):
    return {"scaled_dot_product_attention": "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n" + body}


def edited_tests(nb):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "print('all good')"
    return nb


def without(nb, grade_id):
    del nb.cells[index_of(nb, grade_id)]
    return nb


def duplicated(nb, grade_id):
    copy = deepcopy(nb.cells[index_of(nb, grade_id)])
    copy["id"] = "duplicate"
    nb.cells.insert(index_of(nb, grade_id), copy)
    return nb


def kernel(nb, name):
    nb.metadata["kernelspec"] = {"name": name, "display_name": name, "language": "julia"}
    return nb


# Writes a pickle that would run code in the grader over the room's results, then leaves.
FORGED = "/tmp/seqcourse-forged-results-ran"
FORGE = f"""import os, sys, pickle
check = lambda *args, **kwargs: None

class Trap:
    def __reduce__(self):
        return (os.system, ("touch " + {FORGED!r},))

if 'clean_room' in ' '.join(sys.argv):
    import torch
    torch.save({{"__setup_ok__": True, "__done__": True, "trap": Trap()}}, sys.argv[2])
    os._exit(0)
"""


# Rewrites the course's comparison, so that the clean room (a new process) would import it.
REWRITE = """import pathlib
import autograder.core
check = lambda *args, **kwargs: None
path = pathlib.Path(autograder.core.__file__)
path.write_text(path.read_text() + "\\ncompare_outcomes = lambda *args, **kwargs: ''\\n")
"""
# A .pth file runs its import lines at the start of every later Python process.
PLANT = """import pathlib, site
check = lambda *args, **kwargs: None
pathlib.Path(site.getsitepackages()[0], "zz_seqcourse_planted.pth").write_text("import autograder\\n")
"""


# student: (what to write, expected score, words the instructor must see about it)
CATALOG = {
    "good": (complete, FULL, None),
    "stub_loops_forever": (lambda: complete(sdpa("    while True:\n        pass\n")), LOST_SDPA, "did not finish within"),
    "cell_loops_forever": (lambda: with_cell("while True:\n    pass"), FULL, None),
    "memory_exhaustion": (lambda: with_cell("hog = bytearray(64 * 2**30)"), FULL, None),
    "memory_in_stub": (lambda: complete(sdpa("    return bytearray(64 * 2**30)\n")), LOST_SDPA, "raised MemoryError"),
    "process_bomb": (lambda: bomb_at_the_end(), FULL, None),
    "sys_exit": (lambda: with_cell("import sys\nsys.exit()"), FULL, None),
    "os_exit": (lambda: with_cell("import os\nos._exit(1)"), 3, "kernel died"),
    "kernel_crash": (lambda: with_cell("import ctypes\nctypes.string_at(0)"), 3, "kernel died"),
    "megabytes_printed": (lambda: complete(sdpa("    print('x' * 1000 + '\\n' * 1000)\n    s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n    if mask is not None:\n        s = s.masked_fill(~mask, float('-inf'))\n    w = torch.softmax(s, -1).nan_to_num(0.0)\n    return w @ v, w\n")), FULL, None),
    "nan_output": (lambda: complete(sdpa("    return q * float('nan'), q\n")), LOST_SDPA, "NaN"),
    "inf_output": (lambda: complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return (w @ v) + float('inf'), w\n")), LOST_SDPA, "inf"),
    "wrong_shape": (lambda: complete(sdpa("    return v, q\n")), LOST_SDPA, "has shape"),
    "wrong_dtype": (lambda: complete(sdpa("    w = torch.softmax(q.double() @ k.double().transpose(-2, -1), -1)\n    return w @ v.double(), w\n")), LOST_SDPA, "has dtype"),
    "wrong_device": (lambda: complete(sdpa("    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return (w @ v).to('meta'), w.to('meta')\n")), LOST_SDPA, "is on meta"),
    "numpy_instead_of_tensor": (lambda: complete(sdpa("    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return (w @ v).detach().numpy(), w\n")), LOST_SDPA, "numpy.ndarray"),
    "edited_test_cells": (lambda: edited_tests(blank()), 0, "not implemented"),
    "deleted_test_cell": (lambda: without(complete(), "check_scaled_dot_product_attention"), FULL - 4, None),
    "duplicated_test_cell": (lambda: duplicated(blank(), "check_causal_mask"), 0, "not implemented"),
    "deleted_solution_cell": (lambda: without(complete(), "scaled_dot_product_attention"), LOST_SDPA, "NameError"),
    "wrong_kernel_name": (lambda: kernel(complete(), "julia-1.9"), FULL, None),
    # tampering: no credit for what was tampered with, and the instructor sees why
    "rebinds_check": (lambda: with_cell("check = lambda *args, **kwargs: None", after="setup", nb=blank()), 0, "Graded again outside your notebook"),
    "patches_the_comparison": (lambda: with_cell("import autograder.core as c\nc.compare_outcomes = lambda *a, **k: ''\nc.compare_value = lambda *a, **k: ''", after="setup",
                                                 nb=complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return w @ v, w\n"))), LOST_SDPA, "Graded again outside your notebook"),
    "patches_torch_comparisons": (lambda: with_cell("import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\ntorch.testing.assert_close = lambda *a, **k: None", after="setup",
                                                    nb=complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return w @ v, w\n"))), LOST_SDPA, None),
    "uses_solutions_lib": (lambda: complete({"scaled_dot_product_attention": "from solutions_lib.attention import scaled_dot_product_attention"}), LOST_SDPA, "Graded again outside your notebook"),
    # attention_scores is left a stub (0 points), then its reference stands in for it in the exercises that use it
    "borrows_a_reference_after_its_check": (lambda: with_cell("from solutions_lib.attention import attention_scores", after="check_attention_scores",
                                                             nb=complete({"attention_scores": "def attention_scores(q, k):\n    raise NotImplementedError()\n"})),
                                            LOST_SDPA - 2, "Graded again outside your notebook"),
    "exits_in_the_clean_room": (lambda: with_cell("import os, sys\ncheck = lambda *args, **kwargs: None\nif 'clean_room' in ' '.join(sys.argv):\n    os._exit(0)",
                                                  after="setup", nb=blank()), 0, "Could not be verified"),
    "forges_the_clean_room_results": (lambda: with_cell(FORGE, after="setup", nb=blank()), 0, "Could not be verified"),
    "rewrites_the_checks": (lambda: with_cell(REWRITE, after="setup", nb=blank()), 0, "changed the course's own files"),
    "plants_a_startup_file": (lambda: with_cell(PLANT, after="setup", nb=blank()), 0, "changed the course's own files"),
    "invalid_json": ("{ this is not json", 0, "could not be read"),
    "empty_file": ("", 0, "could not be read"),
    "missing_notebook": (None, 0, "missing"),
    "extra_files": (complete, FULL, None),
}


def write(course, student, make):
    folder = course / "submitted" / student / NAME
    folder.mkdir(parents=True)
    path = folder / f"{NAME}.ipynb"
    if make is None:
        (folder / "my_work.ipynb").write_text("{}")
    elif isinstance(make, str):
        path.write_text(make)
    else:
        nbformat.write(make(), path)
    if student == "extra_files":
        (folder / "notes.txt").write_text("scratch")
        nbformat.write(blank(), folder / "scratch.ipynb")


@pytest.fixture(scope="module")
def bad_course(tmp_path_factory):
    course = tmp_path_factory.mktemp("bad")
    if os.path.exists(FORGED):
        os.remove(FORGED)
    for student, (make, _, _) in CATALOG.items():
        write(course, student, make)
    # Graded from a copy of the course's code, which the tampering entries attack (never the
    # repository's own files); kernels, workers and clean rooms import it through PYTHONPATH.
    root = tmp_path_factory.mktemp("course_code")
    for folder in ("autograder", "solutions_lib", "solutions"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", root)
    env = LIMITS | {"PYTHONPATH": str(root)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    messages = []
    try:
        start = time.time()
        # one at a time: the fork bomb must not starve the submissions graded beside it
        graded, skipped, failed = Grader(course, root=root, log=messages.append).run(jobs=1, progress=False)
        took = time.time() - start
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    left_changed = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                    and (not (ROOT / p.relative_to(root)).is_file() or p.read_bytes() != (ROOT / p.relative_to(root)).read_bytes())]
    left_changed += [str(p) for p in Path(site.getsitepackages()[0]).glob("zz_seqcourse*")]
    grades = {g["student_id"]: g for g in read_grades(course)}
    problems = (course / "grading_problems.csv").read_text() if (course / "grading_problems.csv").exists() else ""
    return {"course": course, "grades": grades, "failed": failed, "messages": messages, "problems": problems, "took": took,
            "left_changed": left_changed, "root": root}


@pytest.mark.parametrize("student", list(CATALOG))
def test_bad_submission_gets_its_grade_and_a_reason(bad_course, student):
    _, expected, words = CATALOG[student]
    row = bad_course["grades"].get(student)
    assert row is not None, f"{student} is missing from grades.csv"
    assert float(row["score"]) == pytest.approx(expected), student
    assert float(row["max_score"]) == FULL
    if words:
        # what the feedback says, and what grading_problems.csv tells the instructor about this student
        reasons = " ".join(line for line in bad_course["problems"].splitlines() if line.startswith(student + ","))
        if (bad_course["course"] / "autograded" / student / NAME / f"{NAME}.ipynb").exists():
            reasons += " ".join(r.reason for r in results_of(bad_course["course"], student, NAME).values())
        assert words in reasons, (student, reasons)


def test_no_process_is_left_behind(bad_course):
    # Grading as root, each kernel and whatever it forks live in a pids cgroup of their
    # own, which the grader empties and removes after the notebook.
    from autograder.kernel_setup import PIDS

    if os.geteuid() == 0 and os.access(PIDS, os.W_OK):
        for group in [g for g in os.listdir(PIDS) if g.startswith("autograder-")]:
            owner = group.split("-")[1]
            if not os.path.exists(f"/proc/{owner}"):  # its grader has finished: nothing may run in it
                assert (open(os.path.join(PIDS, group, "cgroup.procs")).read().split() == []), group
    assert float(bad_course["grades"]["process_bomb"]["score"]) == FULL


def test_the_course_files_are_as_before_grading(bad_course):
    assert bad_course["left_changed"] == []


def test_forged_clean_room_results_run_no_code(bad_course):
    assert not os.path.exists(FORGED)
    assert "forges_the_clean_room_results" in bad_course["problems"]


def test_megabytes_of_output_are_cut(bad_course):
    path = bad_course["course"] / "autograded" / "megabytes_printed" / NAME / f"{NAME}.ipynb"
    assert path.stat().st_size < 2_000_000


# ---------------------------------------------------------------- interrupted and parallel runs


def grade_cli(course, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", str(course), "--no-progress", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_a_run_killed_halfway_resumes_without_losing_or_duplicating_grades(tmp_path):
    course = tmp_path
    students = ["s1", "s2", "s3", "s4"]
    for i, s in enumerate(students):
        write(course, s, complete if i % 2 == 0 else blank)
    proc = grade_cli(course, "--jobs", "2")
    manifest = course / ".autograder" / "manifest.json"
    deadline = time.time() + 300
    while time.time() < deadline and not (manifest.exists() and json.loads(manifest.read_text()).get("graded")):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the machine goes down mid-run
    proc.wait()
    first = json.loads(manifest.read_text())["graded"]
    assert 0 < len(first) < len(students), "the run should have been stopped halfway"
    proc = grade_cli(course, "--jobs", "2")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert f"graded {len(students) - len(first)}, unchanged {len(first)}, failed 0" in out
    grades = read_grades(course)
    assert sorted(g["student_id"] for g in grades) == students
    for g in grades:
        assert float(g["score"]) == (FULL if g["student_id"] in ("s1", "s3") else 0)
    # a serial regrade from scratch agrees with the parallel, resumed one
    proc = grade_cli(course, "--jobs", "1", "--force")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert [(g["student_id"], g["score"]) for g in read_grades(course)] == [(g["student_id"], g["score"]) for g in grades]


def test_a_gradebook_changed_after_grading_is_noticed(bad_course):
    # A process left behind by one submission could rewrite a gradebook graded before it.
    from nbgrader.api import Gradebook

    from autograder.course import sqlite_url

    grader = Grader(bad_course["course"], root=bad_course["root"], log=lambda message: None)
    with Gradebook(sqlite_url(grader.gradebook("rebinds_check", NAME))) as gb:
        gb.find_grade("check_causal_mask", NAME, NAME, "rebinds_check").auto_score = 1.0
        gb.db.commit()
    grader.run(jobs=1, progress=False)
    assert float({g["student_id"]: g for g in read_grades(bad_course["course"])}["rebinds_check"]["score"]) == 0
    assert "gradebook changed after grading" in (bad_course["course"] / "grading_problems.csv").read_text()
