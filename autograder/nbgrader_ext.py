"""nbgrader preprocessors of the course (named in nbgrader_config.py)."""
from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output

from nbgrader.preprocessors import Execute


class GuardedExecute(Execute):
    """nbgrader's Execute, but a kernel that dies (os._exit, a crash, the memory
    limit) costs only the cells from there on: they get an error output saying
    why, and the notebook is still graded instead of the whole submission failing."""

    def preprocess(self, nb, resources=None, km=None):
        self._died_in = None
        return super().preprocess(nb, resources, km)

    def preprocess_cell(self, cell, resources, index):
        if self._died_in is not None:
            if cell.cell_type == "code":
                cell.outputs = [_error("KernelDied", f"not run: the kernel died in cell {self._died_in + 1}")]
            return cell, self.resources
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_in = index
            cell.outputs.append(_error("KernelDied", "the kernel died while running this cell (os._exit, a crash, or the memory limit)"))
            self.log.warning("kernel died in cell %d; the remaining cells are marked as not run", index + 1)
            return cell, self.resources


def _error(ename, evalue):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])
