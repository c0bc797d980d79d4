"""nbgrader settings for the course (read by `nbgrader ...` and `python -m autograder ...`)."""
import os

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

# What one grading kernel may use. A normal submission needs about 1 GiB and
# seconds of CPU; these stop a runaway one inside its own kernel.
# Defaults: 8 GiB, 900 s of CPU, 512 MiB files, 256 processes; each can be changed
# with AUTOGRADER_MEMORY_MB, AUTOGRADER_CPU_SECONDS, AUTOGRADER_FILE_MB, AUTOGRADER_PROCESSES.
from autograder.clean_room import limits  # noqa: E402

LIMITS = limits()

# nbgrader gives 0 to a test cell that writes anything to stderr. The checks
# already print the learner's warnings on stdout; kernel_setup also sends
# warnings raised anywhere else to stdout, so a harmless warning never zeroes
# a test cell while a real error still does. It also applies LIMITS. (The
# first argument is nbgrader's own default for Python kernels.)
c.Execute.extra_arguments = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.exec_lines=import autograder.kernel_setup as _k; _k.route_warnings(); _k.apply_limits(**%r); del _k" % (LIMITS,),
]

# Megabytes of printed output are cut to this many lines per cell.
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# A kernel that dies (os._exit, a crash) costs the cells from there on, not the submission.
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

from autograder.nbgrader_ext import DeduplicateCells, GuardedExecute  # noqa: E402

# A duplicated test cell becomes an ordinary cell instead of failing the submission.
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateCells, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]

c.Autograde.autograde_preprocessors = [
    GuardedExecute,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
