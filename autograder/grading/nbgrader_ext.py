"""nbgrader preprocessors of the course (named in nbgrader_config.py).

SandboxedExecute runs a submission in its sandbox (autograder.grading.sandbox), and
GradeChecks writes every check cell's outcome from the comparison on the
grader's side (autograder.grading.verdict), so plain `nbgrader autograde` and
`python -m autograder grade` grade the same way.
"""
import contextlib
import json
import os
import time
from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbformat.v4 import new_output
from traitlets import Unicode

from nbgrader import utils as nbgrader_utils
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor

from autograder.checks import running
from autograder.course import find_root
from autograder.grading import replay, sandbox, verdict, views
from autograder.grading.limits import Limits
from autograder.record import MIME


@contextlib.contextmanager
def setenv(**values):
    """nbgrader's utils.setenv, undone whatever happens inside. nbgrader's own (0.9) restores nothing when
    the notebook's execution raises, and reads the old values by the new ones' names: one failed autograde
    or validate in the formgrader left NBGRADER_EXECUTION set in the instructor's server, so every kernel
    it started afterwards ran the notebooks on the grading budget."""
    old = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def mend_setenv():
    """Have nbgrader's Autograde and Validator use `setenv` (nbgrader_config.py calls this)."""
    nbgrader_utils.setenv = setenv


class SandboxedExecute(Execute):
    """nbgrader's Execute, with the kernel inside the submission's sandbox, under the notebook's budget
    of wall-clock time (Limits.notebook_seconds), keeping bounded outputs only. A kernel that dies or
    stops answering (os._exit, a crash, a resource limit) costs only the cells from there on, and so
    does running out of time: they get an error output saying why, and the notebook is still graded."""

    root = Unicode("", help="The course repository (nbgrader_config.py sets it).").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        sandboxed = sandbox.enabled()
        sandbox.require()
        self.limits = Limits(parent=self)
        self.store_widget_state = False
        # once the last cell has run, nothing the kernel does can count: it is killed with its sandbox, not asked
        # to exit (a graceful exit tears down torch and matplotlib, about 0.7 s of CPU per submission)
        self.shutdown_kernel = "immediate"
        root = Path(self.root) if self.root else find_root()
        name = resources["nbgrader"]["notebook"]
        folder = Path(resources["metadata"]["path"])
        self._sandbox = sandbox.Sandbox(views.view(root, name) if sandboxed else None, folder, verdict.prepare(root, name), self.limits,
                                        hide=[root, folder.parents[2] if len(folder.parents) > 2 else folder], sandboxed=sandboxed)
        # each check cell is judged as soon as it ran, so that the reference's answers are served to a later
        # exercise only where an earlier one it uses is wrong; GradeChecks then writes these verdicts
        self._verdicts = resources.setdefault("autograder_verdicts", {})  # {cell index: (Report or None, why)}
        self._reports = {}
        self._oracle = replay.Oracle(name, self._reports)
        self._oracle.serve(self._sandbox.oracle_socket, self.limits.result_mb * 2**20)
        self._died_in, self._why, self._started, self._kept, self._cell_timeout = None, "", None, 0, self.timeout
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
            self.timeout = self._cell_timeout
            self._oracle.close()
            self._sandbox.close()

    def create_kernel_manager(self):
        self.km = self._sandbox.kernel_manager()
        return self.km

    def preprocess_cell(self, cell, resources, index):
        if self._died_in is None and cell.cell_type == "code":
            self._started = self._started or time.monotonic()
            left = self.limits.notebook_seconds - (time.monotonic() - self._started)
            if left < 1:
                self._died_in, self._why = index, f"not run: the notebook used up its {self.limits.notebook_seconds} s"
                self.log.warning("the notebook used up its %d s in cell %d", self.limits.notebook_seconds, index)
            self.timeout = max(1, min(self._cell_timeout, int(left)))
        if self._died_in is not None:
            if cell.cell_type == "code":
                cell.outputs = [_error("OutOfTime" if "used up" in self._why else "KernelDied", self._why)]
            return cell, self.resources
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except Exception as e:
            # CellTimeoutError reaches here only when the kernel stopped sending output
            # altogether (an ordinary timeout is recorded in the cell by nbclient); any
            # other error here means the kernel can no longer be trusted either.
            self._died_in = index
            how = "died" if isinstance(e, DeadKernelError) else "stopped answering"
            self._why = f"not run: the kernel {how} in cell {index + 1}"
            why = ("os._exit, a crash, or a resource limit" if isinstance(e, DeadKernelError)
                   else "no reply in time, or output the grader does not take: a message over its size limit is dropped")
            cell.outputs.append(_error("KernelDied", f"the kernel {how} while running this cell ({why})"))
            self.log.warning("kernel %s in cell %d (%s); the remaining cells are marked as not run", how, index + 1, type(e).__name__)
            return cell, self.resources
        self._judge(cell, index)
        return cell, resources

    def _judge(self, cell, index):
        ex = verdict.exercise_of(cell)
        if ex is None:
            return
        try:
            with running.time_limit(self.limits.verdict_seconds, verdict.OutOfTime()):
                report, why = verdict.verdict(ex, cell, self._reports, self.limits.result_mb * 2**20,
                                              verdict.learner_source(getattr(self, "nb", None), ex.name))
        except verdict.OutOfTime:
            report, why = None, f"the grader's comparison did not finish within its {self.limits.verdict_seconds} s"
        self._verdicts[index] = (report, why)
        if report is not None:
            self._reports[ex.name] = report

    # ---- outputs, bounded as they arrive: no output over Limits.output_kb, no notebook over Limits.outputs_mb

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is None or not outs or outs[-1] is not out:
            return out
        if MIME in out.get("data", {}):
            meta = self.nb.cells[cell_index].get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):  # a check cell's results: GradeChecks reads, then replaces them
                outs[:-1] = [o for o in outs[:-1] if MIME not in o.get("data", {})]  # the last sending counts
                return out
            del out["data"][MIME]
        kept = self._keep(out)
        if kept is None:
            outs.pop()
        else:
            outs[-1] = kept
        return out

    def _keep(self, out):
        """The output as it is kept (cut where too large), or None once the notebook's outputs are full."""
        cap, room = self.limits.output_kb * 1024, self.limits.outputs_mb * 2**20 - self._kept
        if room <= 0:
            return None
        out = _capped(out, min(cap, room))
        self._kept += _size(out)
        if self._kept >= self.limits.outputs_mb * 2**20:
            return new_output("stream", name="stdout", text=f"[the outputs after this are not kept: the notebook's outputs reached {self.limits.outputs_mb} MB]\n")
        return out

    def _update_display_id(self, display_id, msg):
        data = msg.get("content", {}).get("data", {})
        size = _data_size(data) if isinstance(data, dict) else 0
        if size > self.limits.output_kb * 1024 or self._kept + size > self.limits.outputs_mb * 2**20:
            return  # an update too large is not kept
        self._kept += size
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        return None  # widgets' state is not kept in the autograded notebook


def _size(out):
    if out.get("output_type") == "stream":
        return len(out.get("text", ""))
    if out.get("output_type") == "error":
        return sum(len(str(x)) for x in out.get("traceback", [])) + len(str(out.get("evalue", "")))
    return _data_size(out.get("data", {})) + len(json.dumps(out.get("metadata", {})))


def _data_size(data):
    """The characters of a display's data, each representation counted."""
    return sum(_one_size(v) for v in data.values())


def _one_size(value):
    return len(value) if isinstance(value, str) else len(json.dumps(value))


def _capped(out, cap):
    """An output of at most about `cap` characters: text cut with a note, a too large picture or display left out."""
    note = f"[cut by the grader: an output may keep {cap // 1024} kB]"
    kind = out.get("output_type")
    if kind == "stream" and len(out.get("text", "")) > cap:
        out["text"] = out["text"][:cap] + "\n" + note + "\n"
    elif kind == "error" and _size(out) > cap:
        out["evalue"] = str(out.get("evalue", ""))[:cap // 2]
        out["traceback"] = [str(x)[:cap // 4] for x in out.get("traceback", [])[:3]] + [note]
    elif kind in ("display_data", "execute_result") and _size(out) > cap:
        data = out.get("data", {})
        kept = {k: v for k, v in data.items() if _one_size(v) <= cap // 2}
        if _data_size(kept) > cap:
            kept = {}
        out["data"] = kept or {"text/plain": note}
        out["metadata"] = {}
    return out


class GradeChecks(NbGraderPreprocessor):
    """Every check cell's outputs, and so its score, from the grader's own comparison."""

    def preprocess(self, nb, resources):
        limits = Limits(parent=self)
        known = resources.get("autograder_verdicts", {})  # judged as the cells ran (SandboxedExecute)
        return verdict.grade_test_cells(nb, limits.verdict_seconds, limits.result_mb * 2**20, known), resources


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
