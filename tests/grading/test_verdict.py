"""The grading protocol without nbgrader: the cases the grader sends into the sandbox,
what a test cell sends back (autograder.record), and the grader's verdict on it
(autograder.grading.verdict), for the reference, every catalogued mistake, and forgeries."""
import base64
import io
import os
import pickle
import subprocess
import sys

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_output

from autograder.checks import comparing, driver, running, travel
from autograder.checks.cases import DEVICE, CheckTimeout, Outcome
from autograder import record, registry
from autograder.grading import verdict
from autograder.results import notebook_results
from conftest import exercises

EXERCISES = exercises()  # COURSE_ASSIGNMENTS narrows them (tests/conftest.py); course-wide tests read the registry
MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


@pytest.fixture
def grading(tmp_path, monkeypatch):
    """Be the sandbox of one notebook: its cases file written where record.py reads it."""
    def enter(notebook):
        path = tmp_path / f"{notebook}.pt"
        path.write_bytes(verdict.cases_for(notebook))
        monkeypatch.setenv(record.CASES, str(path))
        monkeypatch.setattr(record, "_exercises", None)
    return enter


def check_cell(name, blob=None, outputs=()):
    cell = new_code_cell(f'check("{name}", {name})')
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": f"check_{name}",
                                 "points": registry.get(name).points}
    cell.outputs = list(outputs) + ([new_output("display_data", data={record.MIME: blob})] if blob is not None else [])
    return cell


def graded(*cells):
    nb = verdict.grade_test_cells(nbformat.v4.new_notebook(cells=list(cells)))
    return {r.exercise: r for r in notebook_results(nb)}


def sent(name, impl):
    return record.encode(record.outcomes(name, impl))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda x: x.name)
def test_the_reference_earns_full_marks_through_the_protocol(exercise, grading):
    grading(exercise.notebook)
    r = graded(check_cell(exercise.name, sent(exercise.name, exercise.reference)))[exercise.name]
    assert (r.score, r.status) == (exercise.points, "passed"), r.reason
    assert f"{len(exercise.cases())} cases" in verdict.explain(
        verdict.verdict(exercise, check_cell(exercise.name, sent(exercise.name, exercise.reference)))[0], {})[0][0]


@pytest.mark.parametrize("exercise,mistake", MISTAKES, ids=lambda x: x.name)
def test_each_mistake_is_named_through_the_protocol(exercise, mistake, grading):
    grading(exercise.notebook)
    r = graded(check_cell(exercise.name, sent(exercise.name, mistake.impl)))[exercise.name]
    assert r.score < exercise.points
    assert mistake.says in r.reason


def test_the_cases_file_holds_inputs_and_no_expected_output():
    data = torch.load(io.BytesIO(verdict.cases_for("05_self_attention")), weights_only=False)
    assert set(data) == {ex.name for ex in registry.for_notebook("05_self_attention")}
    for name, ex in data.items():
        assert set(ex) == {"kind", "train_mode", "state_after", "depends_on", "cases", "on_meta"}
        assert len(ex["cases"]) == len(registry.get(name).cases())
        assert ex["on_meta"] == any(case.part == DEVICE for case in registry.get(name).cases())
        for blob, grad, weights in ex["cases"]:
            assert isinstance(blob, bytes) and isinstance(grad, bool)
            assert set(torch.load(io.BytesIO(blob), weights_only=False)) == {"call", "grads"}


LOADED_AFTER = """
import sys
from autograder import record
import solutions_lib.attention as sl


def stub(T, device=None):
    \"\"\"The release's stub.\"\"\"
    # YOUR CODE HERE
    raise NotImplementedError()


record.record(sys.argv[1], stub if sys.argv[2] == "stub" else getattr(sl, sys.argv[1]))
print("torch._dynamo" in sys.modules)
"""


@pytest.mark.parametrize("name,code", [("causal_mask", "reference"), ("causal_mask", "stub"),
                                       ("scaled_dot_product_attention", "reference")])
def test_a_graded_kernel_never_loads_torch_dynamo(name, code, tmp_path):
    """PyTorch's meta kernels would load torch._dynamo (over a second of CPU) at their first call: a graded kernel marks
    them beforehand, whatever the check (with a device part or not, written or a stub)."""
    path = tmp_path / "cases.pt"
    path.write_bytes(verdict.cases_for("05_self_attention"))
    done = subprocess.run([sys.executable, "-c", LOADED_AFTER, name, code], capture_output=True, text=True,
                          env=os.environ | {record.CASES: str(path)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "False"


EVERY_DEVICE_CASE = """
import sys
import torch
from autograder import record, registry
from autograder.checks import running
from autograder.inputs import DEVICE

record._mark_meta_kernels()
for ex in registry.all_exercises():
    for case in ex.cases():
        if case.part == DEVICE:
            got = running.run(ex, ex.reference, case)
            assert got.error is None, (ex.name, case.label, got.error)
            assert not any(t.device.type != "meta" for t in running.tensors_in(got.outputs)), (ex.name, case.label)
print("torch._dynamo" in sys.modules)
"""


def test_the_reference_runs_every_device_case_of_the_course_with_the_meta_kernels_marked_and_no_torch_dynamo():
    """The marks stand in for all of PyTorch's meta kernels the course's cases reach: with them, the reference runs
    every case on the meta device without an error and nothing loads torch._dynamo; without them, those cases do."""
    marked = subprocess.run([sys.executable, "-c", EVERY_DEVICE_CASE], capture_output=True, text=True, timeout=600)
    assert marked.returncode == 0, marked.stderr
    assert marked.stdout.split()[-1] == "False"
    unmarked = subprocess.run([sys.executable, "-c", EVERY_DEVICE_CASE.replace("record._mark_meta_kernels()", "")],
                              capture_output=True, text=True, timeout=600)
    assert unmarked.returncode == 0, unmarked.stderr
    assert unmarked.stdout.split()[-1] == "True"


def test_a_stub_is_told_from_written_code_without_running_any_of_it():
    ran = []

    def stub(x):
        """Doc."""
        # YOUR CODE HERE
        raise NotImplementedError()

    class Stub(torch.nn.Module):
        def __init__(self):
            super().__init__()
            raise NotImplementedError()

    class Looks(type):  # a class whose attributes are her code's to answer
        def __getattribute__(cls, name):
            ran.append(name)
            return type.__getattribute__(cls, name)

    class Hers(metaclass=Looks):
        def forward(self):
            raise NotImplementedError()

    class Poses:  # an instance that claims to be a class
        @property
        def __class__(self):
            ran.append("__class__")
            return type

    written = registry.get("causal_mask").reference, registry.get("SelfAttention").reference, lambda x: x + 1
    assert [record._unwritten(x) for x in (stub, Stub, Hers)] == [True] * 3
    assert [record._unwritten(x) for x in (*written, Poses(), None, 3)] == [False] * 6
    assert ran == []


def test_a_stub_is_not_implemented(grading):
    grading("05_self_attention")

    def stub(q, k):
        raise NotImplementedError()

    r = graded(check_cell("attention_scores", sent("attention_scores", stub)))["attention_scores"]
    assert (r.score, r.status) == (0, "not implemented")


def test_a_check_that_never_ran_gets_zero_with_the_cells_error():
    error = new_output("error", ename="NameError", evalue="name 'causal_mask' is not defined", traceback=[])
    r = graded(check_cell("causal_mask", outputs=[error]))["causal_mask"]
    assert r.score == 0 and "NameError: name 'causal_mask' is not defined" in r.reason
    r = graded(check_cell("causal_mask", outputs=[new_output("stream", name="stdout", text="✔ all good")]))["causal_mask"]
    assert r.score == 0 and "did not run" in r.reason


class Trap:
    def __reduce__(self):
        return (os.system, ("touch /tmp/seqcourse-verdict-trap-ran",))


def blob_of(obj):
    buf = io.BytesIO()
    torch.save(obj, buf, pickle_module=pickle)
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("blob", [
    "not base64 at all!",
    base64.b64encode(b"not a torch file").decode(),
    blob_of([Trap()]),
    blob_of({"outputs": 1}),
    blob_of([{"outputs": "x", "grads": [1, 2]}, 7, {"error": 3}]),
    blob_of([{"error": ("exec", "open('/tmp/seqcourse-verdict-trap-ran', 'w')")}, {"error": ("print", "x")}]),
], ids=["text", "bytes", "pickle", "dict", "malformed", "names-a-function"])
def test_forged_results_earn_nothing_and_run_nothing(blob):
    if os.path.exists("/tmp/seqcourse-verdict-trap-ran"):
        os.remove("/tmp/seqcourse-verdict-trap-ran")
    r = graded(check_cell("causal_mask", blob))["causal_mask"]
    assert r.score == 0
    assert not os.path.exists("/tmp/seqcourse-verdict-trap-ran")


def test_the_last_results_sent_count(grading):
    grading("05_self_attention")
    ex = registry.get("causal_mask")
    good, bad = sent("causal_mask", ex.reference), blob_of({"outcomes": [{"outputs": (torch.zeros(1),), "grads": None}], "used": []})
    assert graded(check_cell("causal_mask", good, outputs=[new_output("display_data", data={record.MIME: bad})]))["causal_mask"].score == ex.points
    assert graded(check_cell("causal_mask", bad, outputs=[new_output("display_data", data={record.MIME: good})]))["causal_mask"].score == 0


def test_public_answers_alone_earn_nothing():
    # Every part of every exercise has a hidden case, so results copied from the public
    # precomputed data (which a learner has) cannot pass a part on their own.
    for ex in registry.all_exercises():
        for part in ex.part_weights():
            assert any(c.hidden for c in ex.cases() if c.part == part), (ex.name, part)


def test_an_error_comes_back_as_its_kind():
    for error in [NotImplementedError("x"), CheckTimeout("slow"), MemoryError(), ZeroDivisionError("z")]:
        back = travel.outcome_from_plain(travel.outcome_to_plain(Outcome(error=error))).error
        assert type(back) is type(error) and str(back) == str(error)
    custom = type("MyOwnError", (Exception,), {})
    back = travel.outcome_from_plain(travel.outcome_to_plain(Outcome(error=custom("mine")))).error
    assert comparing.describe_error(back) == "MyOwnError: mine"


# ---------------------------------------------------------------- one mistake is charged once

from conftest import ROOT, judged_in_process  # noqa: E402
USED = [(ex, m) for ex in EXERCISES for m in ex.mistakes
        if any(ex.name in other.depends_on for other in registry.for_notebook(ex.notebook))]


def graded_in_process(notebook, code, only=None):
    """The verdicts, as GradeChecks gives them, on a learner whose notebook holds the lesson's code
    (the reference modules' source) followed by `code`, run in this process."""
    import importlib
    import inspect

    from autograder.ship import closed_over

    lessons = [(closed_over(ex.reference) or [ex.reference])[0] for ex in registry.for_notebook(notebook)]
    namespace = {"__name__": "__main__"}
    for module in sorted({obj.__module__ for obj in lessons}):
        exec(inspect.getsource(importlib.import_module(module)), namespace)
    exec(code, namespace)
    return judged_in_process(notebook, namespace, only)


@pytest.mark.parametrize("exercise,mistake", USED, ids=lambda x: x.name)
def test_a_mistake_in_an_exercise_others_use_is_charged_once(exercise, mistake, grading, monkeypatch):
    from autograder.release import mistake_source

    grading(exercise.notebook)
    reports = graded_in_process(exercise.notebook, mistake_source(exercise.name, mistake))
    assert reports[exercise.name].fraction < 1
    lost = {name: r.score for name, r in reports.items() if r.fraction < 1}
    assert list(lost) == [exercise.name], f"also charged: {lost}"
    for r in reports.values():  # who passed only because the mistake was taken in says so
        assert not r.through or exercise.name in r.through or set(r.through) & set(r.exercise.depends_on)


def test_a_served_call_leaves_the_random_state_as_the_references_call_left_it(grading):
    # dropout in training mode: GPT's blocks draw masks. The replay records torch's random state before and after
    # each call; a request made from the state before gets the state after, which the stand-in sets, so the masks
    # drawn after it are the reference's; and the gradients are computed again with the masks the call drew.
    from autograder.grading import replay

    grading("10_a_gpt_of_your_own")
    ex = registry.get("GPT")
    case = next(i for i, c in enumerate(ex.cases()) if c.part == "dropout")
    calls = [rec for rec in replay.recordings(ex.notebook)["GPT"][case] if rec.dep == "Block" and rec.op == "call"]
    assert calls and all(rec.training and not torch.equal(rec.rng[0]["cpu"], rec.rng[1]["cpu"]) for rec in calls)
    oracle, rec = replay.InProcess(ex.notebook), calls[-1]
    request = {"op": "call", "exercise": "GPT", "case": case, "dep": "Block", "args": (), "kwargs": rec.bound,
               "state": rec.state, "training": True, "params": []}
    elsewhere = {"cpu": torch.ByteTensor(torch.Generator().manual_seed(1).get_state()), "cuda": []}
    assert "rng" not in oracle.ask({**request, "rng": elsewhere})  # drawn from elsewhere: answered as before, state kept
    reply = oracle.ask({**request, "rng": rec.rng[0]})
    assert torch.equal(reply["rng"]["cpu"], rec.rng[1]["cpu"])
    before = torch.get_rng_state()
    record.set_rng_state(reply["rng"])
    assert torch.equal(torch.get_rng_state(), rec.rng[1]["cpu"])
    torch.set_rng_state(before)
    outputs, _, _ = rec.recompute()  # the reference's masks again, and torch's random state left as it was
    assert torch.equal(outputs[0].detach(), reply["result"]) and torch.equal(torch.get_rng_state(), before)
    grads = [torch.ones_like(reply["result"])]
    first, second = (oracle.ask({"op": "vjp", "id": reply["id"], "grads": grads})["grads"] for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second) if a is not None)



def test_a_plain_call_asked_again_is_answered_in_the_sandbox_and_nothing_else_is(monkeypatch):
    # train_bpe asks merge_pair the same about two times in three: the grader marks a function's call that drew no
    # random numbers, changed no argument and returned no tensor, and the stand-in answers it again from a copy
    from autograder.grading import replay

    rec = replay.recordings("09_bpe_tokenization")["train_bpe"][0]
    merges = [r for r in rec if r.dep == "merge_pair" and r.op == "call"]
    assert merges and all(replay.repeatable(r) for r in merges)
    oracle = replay.InProcess("09_bpe_tokenization")
    monkeypatch.setattr(record.Served, "case", 0)
    served = record.Served.stand_in("merge_pair", lambda *a: None, oracle, "train_bpe")
    first = served(*merges[0].bound.values())
    assert oracle.oracle.requests == 1 and first == merges[0].answer["result"]
    first.append("the learner's own change")
    again = served(*merges[0].bound.values())
    assert oracle.oracle.requests == 1 and again == merges[0].answer["result"]  # a copy: her change is not in it
    assert served(*merges[1].bound.values()) == merges[1].answer["result"] and oracle.oracle.requests == 2
    blocks = [r for r in replay.recordings("10_a_gpt_of_your_own")["GPT"][0] if r.dep == "Block" and r.op == "call"]
    scores = [r for r in replay.recordings("05_self_attention")["scaled_dot_product_attention"][0] if r.dep == "attention_scores"]
    assert blocks and scores and not any(replay.repeatable(r) for r in blocks + scores)  # a module; a tensor returned


def test_a_call_looked_up_by_its_exact_form_finds_what_trying_each_call_finds():
    from autograder.grading import replay

    oracle = replay.Oracle("09_bpe_tokenization")
    calls = [r for r in oracle.book["train_bpe"][1] if r.dep == "merge_pair" and r.op == "call"]
    key = ("train_bpe", 1, "merge_pair", "call", "reference")
    assert len(calls) > 100 and replay._exact_index(calls) is not None
    ids, pair, new_id = calls[7].bound.values()
    requests = [{"args": (ids, pair, new_id), "kwargs": {}}, {"args": (tuple(ids), list(pair)), "kwargs": {"new_id": new_id}},
                {"args": (ids, pair, new_id + 1), "kwargs": {}}, {"args": (ids, pair, float(new_id)), "kwargs": {}},
                {"args": (ids, pair), "kwargs": {}}, {"args": (ids, pair, True), "kwargs": {}}]
    for r in requests:
        for start in (0, 7, 8, len(calls) - 1):
            scanned = next((i for i in [*range(start, len(calls)), *range(start)] if oracle._matches(calls[i], r)), None)
            assert oracle._first_match(key, calls, start, r) == scanned, (r, start)
    assert oracle._first_match(key, calls, 8, requests[0]) not in (None, 7)  # asked again: the next call so made, if any
    assert replay._exact([1, (2, "a"), {"k": None}]) == replay._exact(((1, [2, "a"], {"k": None})))
    assert None in (replay._exact([1.0]), replay._exact(torch.zeros(1)), replay._exact({(1, 2): 3}))
    assert replay._exact(True) != replay._exact(1)


def test_a_case_s_inputs_are_made_before_its_calls_are_recorded():
    # the sandbox gets a case's inputs made: the calls that make them (train_bpe's into merge_pair, for the merges
    # of encode's cases) are not the exercise's, no request ever matches them, and recording them cost seconds
    from autograder.grading import replay
    import solutions_lib.bpe as bpe

    ex, real = registry.get("encode"), bpe.merge_pair
    recorded = replay.recordings("09_bpe_tokenization")["encode"]
    for case, calls in zip(ex.cases(), recorded):
        text, merges = case.make().args
        made = []
        with replay.in_place({"merge_pair": lambda *a: made.append(a) or real(*a)}):
            bpe.encode(text, merges)
        assert [list(c.bound.values()) for c in calls] == [list(a) for a in made], case.label
    assert sum(map(len, recorded)) < 2000 and any(recorded)


def test_an_exercise_wrong_on_its_own_is_charged_even_when_an_earlier_one_has_the_same_mistake(grading):
    # sdpa written without the scaling, not through attention_scores, which has that mistake too:
    # its result is what the reference built on attention_scores' mistake gives, but it did not use it.
    from autograder.release import mistake_source

    grading("05_self_attention")
    scores = next(m for m in registry.get("attention_scores").mistakes if m.name == "unscaled")
    sdpa = next(m for m in registry.get("scaled_dot_product_attention").mistakes if m.name == "unscaled")
    code = mistake_source("attention_scores", scores) + "\n\n" + mistake_source("scaled_dot_product_attention", sdpa)
    reports = graded_in_process("05_self_attention", code)
    assert reports["attention_scores"].fraction < 1 and reports["scaled_dot_product_attention"].fraction < 1
    assert reports["scaled_dot_product_attention"].failures()[0].diagnosis == sdpa.says


# ---------------------------------------------------------------- never credited for junk


JUNK_DOWNSTREAM = [(ex, d) for ex in EXERCISES if ex.kind == "function" for d in ex.depends_on]


@pytest.mark.parametrize("exercise,dep", JUNK_DOWNSTREAM, ids=lambda x: x if isinstance(x, str) else x.name)
def test_code_that_only_calls_a_wrong_earlier_exercise_earns_nothing_from_it(exercise, dep, grading):
    # each of the earlier exercise's mistakes in turn (those that raise, too), and a downstream that
    # hands its arguments to it: the reference's answers serve only the calls the reference makes, so
    # it earns what its code computes and nothing more (dot_score's "scaled" mistake IS scaled_dot_score)
    from autograder.release import mistake_source

    grading(exercise.notebook)
    for mistake in registry.get(dep).mistakes:
        junk = f"def {exercise.name}(*args, **kwargs):\n    return {dep}(*args, **kwargs)\n"
        report = graded_in_process(exercise.notebook, mistake_source(dep, mistake) + "\n\n" + junk, only={dep, exercise.name})[exercise.name]
        own = driver.check_exercise(exercise, None, hidden=True, outcomes=[
            running.run_call("function", False, mistake.impl, case.make(), case.grad) for case in exercise.cases()])
        assert report.score == own.score < exercise.points or mistake.name == "scaled", (mistake.name, report.score)


def test_the_grader_serves_only_the_calls_the_reference_makes():
    from autograder.grading import replay

    oracle = replay.Oracle("05_self_attention")
    call = oracle.book["scaled_dot_product_attention"][0][0]
    ask = {"op": "call", "exercise": "scaled_dot_product_attention", "case": 0, "dep": "attention_scores"}
    q, k = call.bound["q"], call.bound["k"]
    assert "result" in oracle.handle(ask | {"args": (q, k), "kwargs": {}})
    assert "result" in oracle.handle(ask | {"args": (), "kwargs": {"k": k, "q": q + 1e-7}})  # within tolerance
    for request in [ask | {"args": (k, q), "kwargs": {}}, ask | {"args": (q + 1, k), "kwargs": {}}, ask | {"case": 99},
                    ask | {"args": (q,), "kwargs": {}}, ask | {"dep": "causal_mask"}, ask | {"exercise": "nope"},
                    {"op": "vjp", "id": 12345, "grads": []}, {"op": "vjp", "id": 0, "grads": [torch.zeros(1)]}, "not a dict", [1, 2]]:
        assert "miss" in oracle.handle(request), request


def test_the_graders_socket_survives_any_bytes(tmp_path):
    import socket
    import struct
    import time

    from autograder import wire
    from autograder.grading import replay

    oracle = replay.Oracle("05_self_attention")
    path = tmp_path / "oracle.sock"
    oracle.serve(path, 2**20)
    try:
        for junk in [b"\x00" * 3, struct.pack("<Q", 2**62), struct.pack("<Q", 5) + b"hello", b"x" * 5000]:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                s.sendall(junk)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(10)
                try:
                    s.recv(1 << 16)  # an answer or the door closing, never a hang or a dead server
                except (ConnectionResetError, socket.timeout):
                    pass
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            data = wire.encode({"op": "wrong", "exercise": "SelfAttention", "used": ["scaled_dot_product_attention"]})
            s.sendall(struct.pack("<Q", len(data)) + data)
            s.settimeout(10)
            (n,) = struct.unpack("<Q", s.recv(8))
            body = b""
            while len(body) < n:
                body += s.recv(n - len(body))
            assert wire.decode(body, 2**20) == {"wrong": ["scaled_dot_product_attention"]}
    finally:
        oracle.close()
        time.sleep(0.1)


def test_the_verdict_of_a_notebook_runs_under_a_time_limit(grading, monkeypatch):
    import time

    grading("05_self_attention")
    cells = [check_cell(n, sent(n, registry.get(n).reference)) for n in ("qkv_projections", "causal_mask", "padding_mask")]
    real = verdict.verdict

    def slow(ex, cell, *args, **kwargs):
        if ex.name == "causal_mask":
            time.sleep(30)
        return real(ex, cell, *args, **kwargs)

    monkeypatch.setattr(verdict, "verdict", slow)
    nb = verdict.grade_test_cells(nbformat.v4.new_notebook(cells=cells), seconds=2)
    results = {r.exercise: r for r in notebook_results(nb)}
    assert results["qkv_projections"].status == "passed"
    for name in ("causal_mask", "padding_mask"):
        assert results[name].score == 0 and "did not finish within its 2 s" in results[name].reason


def test_a_long_reason_keeps_its_likely_mistake_whole():
    from autograder.results import _one_line

    case = "train_step: case [B=3, T=5, " + "x" * 300 + "]: raised AssertionError: " + "y" * 150 + "."
    said = _one_line(f"{case} Likely mistake: you back-propagated the loss itself.")
    assert len(said) <= 401 and said.endswith(" Likely mistake: you back-propagated the loss itself.") and "…" in said
    assert _one_line("short\nreason") == "short reason" and _one_line("z" * 500) == "z" * 400 + "…"


def test_the_reference_s_outcomes_are_computed_once_per_version_of_the_code_and_read_back_the_same(monkeypatch, tmp_path):
    # the first grading process of a version of the course's code runs the reference on every case, hidden ones too,
    # and keeps the outcomes in the grader's cache; the next reads them and runs the reference no more
    from autograder.course import CACHE

    name = "05_self_attention"
    monkeypatch.setenv(CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(verdict, "_cases", {})
    blob = verdict.prepare(ROOT, name)
    [kept] = (tmp_path / "cache" / "grading").glob(f"{name}-*.pt")
    assert blob == verdict.cases_for(name) and not (tmp_path / "cache" / "views").exists()
    key = lambda ex: ("reference", running.who(ex))
    live = {(ex.name, i): case.memo.pop(key(ex)) for ex in registry.for_notebook(name) for i, case in enumerate(ex.cases())}
    assert any(case.hidden for ex in registry.for_notebook(name) for case in ex.cases())
    monkeypatch.setattr(verdict, "_cases", {})  # as in the next process
    monkeypatch.setattr(running, "_reference_outcome", lambda *a: pytest.fail("the reference ran again"))
    assert verdict.prepare(ROOT, name) == blob
    for ex in registry.for_notebook(name):
        for i, case in enumerate(ex.cases()):
            (want, weights), (was, was_weights) = running.reference_outcome(ex, case), live[(ex.name, i)]
            assert comparing.same_value(want.outputs, was.outputs) and comparing.same_value(want.grads, was.grads), (ex.name, case.label)
            assert type(want.error) is type(was.error) and comparing.same_value(weights, was_weights)
    kept.write_bytes(b"cut short by a full disk")  # unreadable: computed again, and written again
    monkeypatch.undo()
    monkeypatch.setenv(CACHE, str(tmp_path / "cache"))
    monkeypatch.setattr(verdict, "_cases", {})
    assert verdict.prepare(ROOT, name) == blob and torch.load(kept, weights_only=False)["cases"] == blob
