"""Shared, expensive fixtures: each notebook is released once and every
submission is graded by real nbgrader once per test run; the tests read the results."""
import json
import os
import shutil
import subprocess
import symtable
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
import torch

from autograder import registry
from autograder.course import CACHE, assignments
from autograder.grading.grade import Grader, read_grades
from autograder.release import DEMO_STUDENTS, demo_submissions, fill_submission, mistake_source, release
from autograder.results import notebook_results

ROOT = Path(__file__).resolve().parent.parent
# COURSE_ASSIGNMENTS=01_rnn_lstm,02_markov_to_attention limits the notebook tests, and every test
# parametrised over exercises (exercises() below), to those notebooks; course-wide tests still run.
ASSIGNMENTS = [a for a in assignments(ROOT) if a in os.environ.get("COURSE_ASSIGNMENTS", a).split(",")]
COMPLETE, BLANK, TWO_MISTAKES = DEMO_STUDENTS


def exercises():
    """The registry's exercises of ASSIGNMENTS, in course order: what per-exercise tests are parametrised over."""
    return [ex for ex in registry.all_exercises() if ex.notebook in ASSIGNMENTS]


# `make test` runs on two workers (pytest-xdist). A file's tests stay on one worker, so that its
# module fixtures are built once, and the files that read graded_course share one, so that every
# notebook is graded once per run.
SHARES_GRADED_COURSE = {"test_demo.py", "test_grading.py", "test_site.py"}
# The files that keep a worker longest, longest first: the workers take them first, and the many short files
# last, so that both finish together. Worker seconds of each file in a fresh clone's make test (2 quiet cores,
# 2026-11-29, `make test PYTEST_ADDOPTS=--junitxml=J` summed by file): 704, 460 (the graded course's three
# files), 207, 157, 153, 129 (36 then, and the GPT recipe's 93 s on one thread since), 101, 71, 65, 63, 60, 52,
# 51, 48, 45. Both workers then ended within 2 s of each other (a clone of 14d3e7e).
LONGEST_FIRST = ["test_bad_submissions.py", "test_demo.py", "test_hub.py", "test_verdict.py", "test_browser.py",
                 "test_train_cli.py", "test_grade_process.py", "test_precision_paths.py", "test_shard.py", "test_term.py",
                 "test_submission_data.py", "test_hub_parts.py", "test_exchange.py", "test_sandbox_memory.py",
                 "test_student_dist.py", "test_new_exercise.py", "test_yours.py", "test_cli.py"]


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and CACHE not in os.environ:
        # what is built from the course's code (each notebook's checks computed in advance, its sandbox view,
        # gradebook templates), built once per run and shared by both workers and every copy of the same code
        os.environ[CACHE] = config._course_cache = tempfile.mkdtemp(prefix="seqcourse-cache-")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # two workers on two cores: a thread each, and in what they start (grading kernels too),
        # or the two workers' thread pools spin against each other
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def pytest_unconfigure(config):
    if getattr(config, "_course_cache", None):
        shutil.rmtree(config._course_cache, ignore_errors=True)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    rank |= {name: rank["test_demo.py"] for name in SHARES_GRADED_COURSE}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        # the method through which xdist's own schedulers group tests (LoadFileScheduling and
        # LoadGroupScheduling override it too): not public API, so constraints.txt pins xdist
        def _split_scope(self, nodeid):
            path = nodeid.split("::", 1)[0]
            return "graded_course" if Path(path).name in SHARES_GRADED_COURSE else path

    return ByFile(config, log)


@pytest.fixture(scope="session")
def released(tmp_path_factory):
    """A fresh release of every assignment, into a temporary folder."""
    dest = tmp_path_factory.mktemp("release")
    release(ROOT, dest=dest, names=ASSIGNMENTS, examples=False)
    return dest


def mistake_plan(name):
    """Submissions of notebook `name` that together carry the first catalogued mistake of every
    exercise, pasted into its solution cell, for nbgrader to grade (tests/grading/test_verdict.py takes every
    mistake through the same comparison in this process).

    A mistake is an edit of the reference, so it calls what the reference calls. An exercise's mistake
    therefore goes into a submission where every exercise it uses, or that uses it, is right: each
    mistake is graded on its own (the charging of a mistake once is tested in test_verdict.py). Such a submission
    leaves out the notebook's demonstrations (graded_cells): they are the complete submission's to run.
    """
    exercises = {ex.name: ex for ex in registry.for_notebook(name)}

    def below(n):
        return set(exercises[n].depends_on).union(*[below(d) for d in exercises[n].depends_on if d in exercises])

    plans = []
    for ex in exercises.values():
        if not ex.mistakes:
            continue
        related = below(ex.name) | {n for n in exercises if ex.name in below(n)}
        plan = next((p for p in plans if not related & set(p)), None)
        if plan is None:
            plans.append(plan := {})
        plan[ex.name] = ex.mistakes[0]
    return plans


def graded_cells(nb):
    """`nb` with the cells nbgrader knows and the given code they read (the cells that define the names they read, and
    so on): its text and the rest of its demonstrations go, which train models in notebooks 08, 10 and 11 (a learner
    may delete them too)."""
    kept = nbformat.from_dict(nb)
    code = [c for c in kept.cells if c.cell_type == "code"]
    need = set().union(*(_reads(c.source) for c in code if c.metadata.get("nbgrader")))
    given = [c for c in code if not c.metadata.get("nbgrader")]
    keep = set()
    while True:
        more = {i for i, c in enumerate(given) if i not in keep and _defines(c.source) & need}
        if not more:
            break
        keep |= more
        need |= set().union(*(_reads(given[i].source) for i in more))
    wanted = {id(given[i]) for i in keep}
    kept.cells = [c for c in kept.cells if c.metadata.get("nbgrader") or id(c) in wanted]
    return kept


def _table(source):
    try:
        return symtable.symtable(source, "cell", "exec")
    except SyntaxError:
        return None


def _reads(source):
    """The global names a cell's code reads: at its top level, or inside its functions and classes."""
    def reads(table):
        names = {s.get_name() for s in table.get_symbols()
                 if s.is_referenced() and (s.is_global() or table.get_type() != "function" and not s.is_local())}
        return names.union(*(reads(t) for t in table.get_children()))

    table = _table(source)
    return reads(table) if table else set()


def _defines(source):
    table = _table(source)
    return {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()} if table else set()


@pytest.fixture(scope="session")
def graded_course(released, tmp_path_factory):
    """A course folder graded once by `Grader` (real nbgrader, 2 jobs). Per assignment:
    the example submissions of the demo (complete, blank, two mistakes), made from
    this run's fresh release, and the submissions that carry every catalogued mistake (mistake_plan).
    The two mistakes' submission leaves out the demonstrations (graded_cells): the complete one runs them,
    and in notebooks 08, 10 and 11 they train."""
    course = tmp_path_factory.mktemp("course")
    plan = {}
    for name in ASSIGNMENTS:
        rel = nbformat.read(released / name / f"{name}.ipynb", as_version=4)
        sol = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
        subs = demo_submissions(ROOT, name, released / name / f"{name}.ipynb")
        subs[TWO_MISTAKES] = graded_cells(subs[TWO_MISTAKES])
        for k, mistakes in enumerate(mistake_plan(name)):
            code = {ex: mistake_source(ex, m) for ex, m in mistakes.items()}
            subs[f"mistakes{k:02d}"] = graded_cells(fill_submission(rel, sol, code))
            plan[(f"mistakes{k:02d}", name)] = mistakes
        for student, nb in subs.items():
            out = course / "submitted" / student / name / f"{name}.ipynb"
            out.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, out)
    graded, skipped, failed = Grader(course, root=ROOT, log=lambda *a: None).run(jobs=2, progress=False)
    return {"course": course, "failed": failed, "graded": graded, "plan": plan, "grades": read_grades(course)}


SOLUTION_NOTEBOOKS = sorted(ROOT.glob("solutions/*/*.ipynb"))
COURSE_MODULES = sorted([*ROOT.glob("solutions_lib/**/*.py"), *ROOT.glob("course_lib/**/*.py")])


def course_code():
    """(file, cell, source) of the code a learner reads or runs: every module of solutions_lib and course_lib (cell
    None) and every code cell of the solution notebooks (cell: its index and id)."""
    for path in COURSE_MODULES:
        yield str(path.relative_to(ROOT)), None, path.read_text()
    for path in SOLUTION_NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield str(path.relative_to(ROOT)), (i, cell.get("id", "?")), "".join(cell["source"])


def clone(dest):
    """A copy of this working tree's files (git's tracked and untracked ones, not the ignored), into `dest`: a course
    that a test may change, and grade from one snapshot whatever is edited here meanwhile."""
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, names.decode().split("\0")):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / name, dest / name)
    return dest


def in_clone(repo, *args):
    """`python -m autograder ARGS` run on a clone: its own code and catalogs, not this tree's."""
    return subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], cwd=repo, capture_output=True, text=True,
                          timeout=900, env=os.environ | {"PYTHONPATH": str(repo)})


def results_of(course, student, name):
    path = Path(course) / "autograded" / student / name / f"{name}.ipynb"
    return {r.exercise: r for r in notebook_results(nbformat.read(path, as_version=4))}



def judged_in_process(notebook, namespace, only=None):
    """{exercise: Report} as the grader judges a learner whose notebook ran into `namespace`, in this
    process: what each check sends (autograder.record, the reference's answers served by an in-process
    autograder.grading.replay oracle), judged by autograder.grading.verdict. record.CASES must be set.
    `only`: the exercises to judge (default all)."""
    from autograder.checks import travel
    from autograder import record
    from autograder.grading import replay, verdict

    reports = {}
    for ex in [ex for ex in registry.for_notebook(notebook) if only is None or ex.name in only]:
        sent = record.outcomes(ex.name, namespace.get(ex.name), namespace, oracle=replay.InProcess(notebook, reports))
        found = verdict._padded(ex, [travel.outcome_from_plain(d) for d in sent["outcomes"]])
        replayed = None if sent["replayed"] is None else verdict._padded(ex, [travel.outcome_from_plain(d) for d in sent["replayed"]])
        reports[ex.name] = verdict.judge(ex, found, reports, sent["used"], replayed)
    return reports
