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
# after it. (A check stops a learner's function after AUTOGRADER_CHECK_TIMEOUT
# seconds, 60 by default, long before this.)
c.Execute.timeout = int(os.environ.get("AUTOGRADER_CELL_TIMEOUT", "180"))
c.Execute.interrupt_on_timeout = True
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:"]  # nbgrader's own default for Python kernels

# Megabytes of printed output are cut to this many lines per cell.
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# Autograding runs each submission's kernel in a bubblewrap sandbox (autograder.grading.sandbox: no
# reference, no other student, no gradebook, no network; limits on memory, CPU time, file size
# and processes, set by AUTOGRADER_MEMORY_MB, AUTOGRADER_CPU_SECONDS, AUTOGRADER_FILE_MB and
# AUTOGRADER_PROCESSES). The test cells' scores come from the comparison outside it
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

from autograder.grading import sandbox  # noqa: E402
from autograder.grading.nbgrader_ext import DeduplicateCells, GradeChecks, SandboxedExecute  # noqa: E402

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
]
