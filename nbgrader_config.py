"""nbgrader settings for the course (read by `nbgrader ...` and `python -m autograder ...`)."""
import os
import sys

c = get_config()  # noqa: F821 (provided by nbgrader)

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = here
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

# The stub a learner starts from.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# A notebook runs in seconds under grading; no cell of a correct submission
# comes near this, while an endless loop at the top level of a cell is stopped
# after it. (A check stops a learner's function after Limits.check_seconds.)
c.Execute.timeout = int(os.environ.get("AUTOGRADER_CELL_TIMEOUT", "120"))
c.Execute.interrupt_on_timeout = True
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:"]  # nbgrader's own default for Python kernels


# Everything that crosses the sandbox's wall is checked and bounded where it crosses
# (autograder.grading.limits); AUTOGRADER_<NAME> overrides a number (the tests shorten some).
def limit(name, value):
    return int(os.environ.get(f"AUTOGRADER_{name.upper()}", value))


# Files in: a submission folder holds plain files and folders only (no link, device or pipe), or is
# refused before anything copies it (autograder.grading.intake).
c.Limits.submission_file_mb = limit("submission_file_mb", 20)
c.Limits.submission_folder_mb = limit("submission_folder_mb", 50)
c.Limits.submission_entries = limit("submission_entries", 200)
# Time: a whole notebook, sleeping included, and each case of a check. A correct notebook
# takes 5 to 30 s; the cells after the budget are not run and earn nothing.
c.Limits.notebook_seconds = limit("notebook_seconds", 300)
c.Limits.check_seconds = limit("check_seconds", 60)
# Each process in the sandbox; its only writable storage is scratch_mb of memory.
c.Limits.memory_mb = limit("memory_mb", 8192)
# The whole sandbox, its processes and its in-memory storage together (a memory cgroup of its own, as root or as an
# account a cgroup is delegated to; in a container without one, the container's limit: docs/GRADING.md). With
# `grade --jobs J`, J sandboxes at once: J times this at most.
c.Limits.sandbox_memory_mb = limit("sandbox_memory_mb", 2048)
c.Limits.cpu_seconds = limit("cpu_seconds", 900)
c.Limits.processes = limit("processes", 256)
c.Limits.scratch_mb = limit("scratch_mb", 512)
# Results out: what a check cell sends (a typed format, autograder.wire), the grader's
# comparison, and the outputs kept in the autograded notebook and the feedback.
c.Limits.result_mb = limit("result_mb", 16)
c.Limits.verdict_seconds = limit("verdict_seconds", 120)
c.Limits.output_kb = limit("output_kb", 512)
c.Limits.outputs_mb = limit("outputs_mb", 8)

# Megabytes of printed output are cut to this many lines per cell.
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# Autograding runs each submission's kernel in a bubblewrap sandbox (autograder.grading.sandbox: no
# reference, no other student, no gradebook, no network; the limits above). The test cells'
# scores come from the comparison outside it
# (GradeChecks), so nbgrader's rule that a test cell writing to stderr gets 0 never applies
# to them. Where the sandbox cannot start, `nbgrader autograde` stops here, before grading
# anything; AUTOGRADER_NO_SANDBOX=1 grades anyway, for trusted work only.
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    IgnorePattern,
    LimitOutput,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
)

from autograder.grading import ids, intake, sandbox  # noqa: E402
from autograder.grading.pages import policy  # noqa: E402
from autograder.grading.pages.inert import Inert  # noqa: E402
from autograder.grading.nbgrader_ext import DeduplicateCells, GradeChecks, SandboxedExecute, mend_setenv  # noqa: E402

# A submission folder with a link, a device, a pipe or anything over the limits is refused before
# anything copies it: by `nbgrader collect` out of the exchange, and by `nbgrader autograde`, which
# then grades it as a notebook that says why (0 points).
intake.guard()
ids.guard()  # a folder under submitted/ whose name is no student id is graded under no name
mend_setenv()  # NBGRADER_EXECUTION is unset again after an autograde or validate that raised
c.ExchangeFactory.collect = "autograder.grading.exchange.Collect"  # ids from owners, times from the file system
c.ExchangeFactory.release_assignment = "autograder.grading.exchange.ReleaseAssignment"  # a sticky, unlistable inbound

if sys.argv[1:2] == ["autograde"] and sandbox.enabled() and sandbox.problem():
    sys.exit(f"[nbgrader_config.py] cannot autograde: {sandbox.problem()}")

c.SandboxedExecute.root = here  # it takes the Execute settings above too

# A duplicated test cell becomes an ordinary cell instead of failing the submission.
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateCells, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]

c.Autograde.autograde_preprocessors = [
    SandboxedExecute,
    GradeChecks,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
    Inert,
]

# Nothing a student wrote, or their code displayed, runs in the browser of whoever views it: the
# autograded notebook is made inert above, and HTMLExporter, which renders both the formgrader's
# submission pages and generate_feedback's pages, makes whatever it renders inert again, so a
# notebook autograded before or elsewhere is too (autograder.grading.pages.inert). Both pages also forbid
# scripts their templates did not write (autograder.grading.pages.policy; the formgrader's through the server
# extension jupyter-config/instructor enables). What nbgrader itself prints there (a student id, a
# path, a comment: a check's reason holds the learner's exception message) is text: on a feedback
# page, guard_feedback adds escaping.FeedbackText after nbgrader's GetGrades, and writes each page with
# its comments as text, the course's policy and no other <meta http-equiv> (autograder.grading.pages.escaping).
c.HTMLExporter.preprocessors = [Inert]
policy.guard_feedback()
