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

# A notebook runs in about a minute on 2 cores; no single cell of a correct
# submission comes near this, while an endless loop is stopped after it.
c.Execute.timeout = 180
c.Execute.interrupt_on_timeout = True

# nbgrader gives 0 to a test cell that writes anything to stderr. The checks
# already print the learner's warnings on stdout; this also sends warnings
# raised anywhere else in the kernel to stdout, so a harmless warning never
# zeroes a test cell while a real error still does. (The first argument is
# nbgrader's own default for Python kernels.)
c.Execute.extra_arguments = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.exec_lines=import autograder.kernel_setup",
]
