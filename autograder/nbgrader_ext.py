"""nbgrader preprocessors of the course (named in nbgrader_config.py)."""
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output

from nbgrader.preprocessors import DeduplicateIds, Execute


class GuardedExecute(Execute):
    """nbgrader's Execute, but a kernel that dies or stops answering (os._exit, a
    crash, a fork bomb at its process limit) costs only the cells from there on: they get an error output saying
    why, and the notebook is still graded instead of the whole submission failing."""

    def preprocess(self, nb, resources=None, km=None):
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
