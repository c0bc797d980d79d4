"""nbgrader preprocessors of the course (named in nbgrader_config.py).

SandboxedExecute runs a submission in its sandbox (autograder.grading.sandbox), and
GradeChecks writes every check cell's outcome from the comparison on the
grader's side (autograder.grading.verdict), so plain `nbgrader autograde` and
`python -m autograder grade` grade the same way.
"""
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from traitlets import Unicode

from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor


class SandboxedExecute(Execute):
    """nbgrader's Execute, with the kernel inside the submission's sandbox. A kernel that dies or
    stops answering (os._exit, a crash, a resource limit) costs only the cells from there on: they
    get an error output saying why, and the notebook is still graded."""

    root = Unicode("", help="The course repository (nbgrader_config.py sets it).").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        from autograder.grading import sandbox, verdict, views
        from autograder.course import find_root

        sandboxed = sandbox.enabled()
        sandbox.require()
        root = Path(self.root) if self.root else find_root()
        name = resources["nbgrader"]["notebook"]
        folder = Path(resources["metadata"]["path"])
        self._sandbox = sandbox.Sandbox(views.view(root, name) if sandboxed else None, folder, verdict.cases_for(name),
                                        hide=[root, folder.parents[2] if len(folder.parents) > 2 else folder], sandboxed=sandboxed)
        self._died_in = None
        try:
            return super().preprocess(nb, resources, km)
        except Exception as e:
            # a kernel broken by the submission can also fail its own shutdown; the
            # cells already carry their outputs, so grade what ran
            if self._died_in is None:
                raise
            self.log.warning("ignoring %s while stopping a broken kernel", type(e).__name__)
            return nb, resources
        finally:
            self._sandbox.close()

    def create_kernel_manager(self):
        self.km = self._sandbox.kernel_manager()
        return self.km

    def preprocess_cell(self, cell, resources, index):
        if self._died_in is not None:
            if cell.cell_type == "code":
                cell.outputs = [_error("KernelDied", f"not run: the kernel died in cell {self._died_in + 1}")]
            return cell, self.resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except Exception as e:
            # CellTimeoutError reaches here only when the kernel stopped sending output
            # altogether (an ordinary timeout is recorded in the cell by nbclient); any
            # other error here means the kernel can no longer be trusted either.
            self._died_in = index
            how = "died" if isinstance(e, DeadKernelError) else "stopped answering"
            cell.outputs.append(_error("KernelDied", f"the kernel {how} while running this cell (os._exit, a crash, or a resource limit)"))
            self.log.warning("kernel %s in cell %d; the remaining cells are marked as not run", how, index + 1)
            return cell, self.resources


class GradeChecks(NbGraderPreprocessor):
    """Every check cell's outputs, and so its score, from the grader's own comparison."""

    def preprocess(self, nb, resources):
        from autograder.grading.verdict import grade_test_cells

        return grade_test_cells(nb), resources


def _error(ename, evalue):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class DeduplicateCells(DeduplicateIds):
    """nbgrader's DeduplicateIds leaves an empty `nbgrader` dict on a duplicated
    grade cell, which its own schema check then rejects, failing the whole
    submission. A duplicate becomes an ordinary cell instead; the original,
    later in the notebook, keeps its metadata and its grade."""

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.get("metadata", {}).get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources
