"""How much a submission may bring in, use and send out while it is graded.

Every number is set in nbgrader_config.py (`c.Limits.<name>`), beside nbgrader's own
settings, so that `python -m autograder grade` and plain nbgrader read the same ones;
an environment variable AUTOGRADER_<NAME> overrides one there (the tests shorten some).
"""
from __future__ import annotations

from traitlets import Integer
from traitlets.config import Configurable

from autograder.course import CourseError
from autograder.nbgrader_api import load_config


def _limit(help):
    return Integer(None, allow_none=True, help=help).tag(config=True)


class Limits(Configurable):
    # files in (autograder.grading.intake): checked before anything copies a submission
    submission_file_mb = _limit("largest file a submission folder may hold")
    submission_folder_mb = _limit("largest total size of a submission folder")
    submission_entries = _limit("most files and folders a submission folder may hold")
    # the sandbox (autograder.grading.sandbox)
    notebook_seconds = _limit("wall-clock budget of a whole notebook, sleeping included; the cells after it are not run")
    check_seconds = _limit("wall-clock limit of one case of a check")
    memory_mb = _limit("address space of each process in the sandbox")
    sandbox_memory_mb = _limit("memory of the whole sandbox, its processes and its in-memory storage (a memory cgroup of "
                               "its own: autograder.grading.sandbox, docs/GRADING.md)")
    cpu_seconds = _limit("CPU time of each process in the sandbox")
    processes = _limit("processes the sandbox may hold at once")
    scratch_mb = _limit("size of the sandbox's only writable storage (its working folder, home and /tmp), kept in memory")
    # what comes out
    result_mb = _limit("largest result a check cell may send the grader")
    verdict_seconds = _limit("wall-clock limit of the grader's comparison for one notebook")
    output_kb = _limit("largest output of a cell kept in the autograded notebook and the feedback")
    outputs_mb = _limit("largest total of a notebook's outputs kept")

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        unset = [name for name in self.trait_names(config=True) if getattr(self, name) is None]
        if unset:
            raise CourseError(f"nbgrader_config.py sets no {', '.join('c.Limits.' + n for n in unset)}")

    @property
    def frame_bytes(self):
        """The largest message part the grader takes from a kernel: a check's results, base64-encoded, and some."""
        return max(self.result_mb * 2**20 * 4 // 3, self.output_kb * 1024) + 2**20


def load(root):
    """The Limits of the course whose nbgrader_config.py is in `root`."""
    return Limits(config=load_config(root))
