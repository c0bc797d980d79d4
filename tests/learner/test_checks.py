"""The checks themselves: the reference passes, every catalogued mistake fails
with its own diagnosis (mutation tests), and bad outputs get a clear reason."""
import pytest
import torch

from autograder import CheckFailed, check, registry
from autograder.checks.driver import check_case, check_exercise
from conftest import exercises

EXERCISES = exercises()  # COURSE_ASSIGNMENTS narrows them (tests/conftest.py); course-wide tests read the registry
MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


def ids(x):
    return x.name


@pytest.mark.parametrize("exercise", EXERCISES, ids=ids)
def test_reference_passes_public_and_hidden_cases(exercise):
    report = check_exercise(exercise, exercise.reference, hidden=True)
    assert report.fraction == 1.0, [(r.case.label, r.problem) for r in report.failures()]
    assert any(r.case.hidden for r in report.results), "every exercise needs hidden cases"
    assert any(not r.case.hidden for r in report.results)


@pytest.mark.parametrize("exercise", EXERCISES, ids=ids)
def test_the_learners_process_never_runs_hidden_cases(exercise, monkeypatch, capsys):
    # Under grading the comparison happens outside the sandbox (autograder.grading.verdict); a check
    # in the learner's process compares on the public cases only, even under nbgrader.
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.delenv("AUTOGRADER_CASES", raising=False)
    assert check(exercise.name, exercise.reference) is None
    public = sum(1 for c in exercise.cases() if not c.hidden)
    assert f"{public} cases" in capsys.readouterr().out


@pytest.mark.parametrize("exercise,mistake", MISTAKES, ids=lambda x: x.name)
def test_each_mistake_is_caught_and_named(exercise, mistake):
    report = check_exercise(exercise, mistake.impl, hidden=True)
    assert report.fraction < 1.0, f"{mistake.name} passed the check"
    failure = report.failures()[0]
    assert failure.diagnosis == mistake.says, f"diagnosed as {failure.diagnosis!r}"


@pytest.mark.parametrize("exercise", EXERCISES, ids=ids)
def test_mistakes_differ_from_reference_on_public_cases(exercise):
    # A mistake only the hidden cases catch would leave learners without feedback.
    for mistake in exercise.mistakes:
        assert check_exercise(exercise, mistake.impl).fraction < 1.0, mistake.name


def test_catalog_sentences_are_single_lines():
    for ex, m in [(ex, m) for ex in registry.all_exercises() for m in ex.mistakes]:
        assert "\n" not in m.says and m.says.endswith("."), (ex.name, m.name)


def test_points_and_parts_are_consistent():
    for ex in registry.all_exercises():
        assert ex.points > 0
        parts = {c.part for c in ex.cases()}
        assert parts == set(ex.part_weights()), ex.name


# ---------------------------------------------------------------- bad outputs, clear reasons

SDPA = "scaled_dot_product_attention"


def run_check(fn, name=SDPA):
    """(score or None, printed reason) as a test cell would see them."""
    try:
        return check(name, fn), ""
    except CheckFailed as e:
        return 0.0, str(e)


def stub(q, k, v, mask=None):
    raise NotImplementedError()


@pytest.mark.parametrize(
    "fn,expected",
    [
        (stub, "not implemented yet"),
        (lambda q, k, v, mask=None: (q.detach().numpy(), q.detach().numpy()), "numpy.ndarray, expected a torch.Tensor"),
        (lambda q, k, v, mask=None: q, "expected a tuple of 2"),
        (lambda q, k, v, mask=None: (v[..., :1, :].expand(*q.shape[:-1], v.shape[-1]) * float("nan"), q), "contains NaN"),
        (lambda q, k, v, mask=None: tuple(t.double() for t in registry.get(SDPA).reference(q, k, v, mask)), "dtype torch.float64"),
        (lambda q, k, v, mask=None: tuple(t.detach() for t in registry.get(SDPA).reference(q, k, v, mask)), "carries no gradient"),
        (lambda q, k, v, mask=None: 1 / 0, "raised ZeroDivisionError"),
    ],
    ids=["stub", "numpy", "not a tuple", "nan", "dtype", "detached", "raises"],
)
def test_bad_outputs_get_a_clear_reason(fn, expected):
    score, reason = run_check(fn)
    assert score == 0.0
    assert expected in reason
    assert "\n" not in reason


def test_endless_loop_is_stopped(monkeypatch):
    import autograder.checks.cases as cases

    monkeypatch.setattr(cases, "DEFAULT_TIMEOUT_S", 0.5)

    def loops(q, k, v, mask=None):
        while True:
            pass

    report = check_exercise(registry.get(SDPA), loops, timeout=0.5)
    assert report.fraction == 0 and "did not finish" in report.failures()[0].problem


def test_partial_credit_prints_the_points_earned_and_returns_nothing(capsys):
    # A returned number would leave a stray `Out: 3.0` in the learner's notebook; under grading the
    # score is written by the grader (autograder.grading.verdict), so the learner's kernel never states it.
    from autograder.api import points_text

    ex = registry.get(SDPA)
    nan_rows = next(m for m in ex.mistakes if m.name == "nan_rows").impl
    assert check(SDPA, nan_rows) is None
    weights = ex.part_weights()
    earned = ex.points * (1 - weights["a query with every key masked"] / sum(weights.values()))
    out = capsys.readouterr().out
    assert f"◐ {SDPA}: {points_text(earned)}/{points_text(ex.points)} points" in out and "softmax of a row of -inf" in out


def test_fractional_points_show_two_decimals_and_the_table_stays_aligned():
    """Parts of relative weights make fractions (7/3 points): the check's line, `check`'s table and `progress` show
    them to at most two decimals, and the table's columns stay aligned (issue 59: "2.3333 / 3")."""
    from autograder.api import points_text
    from autograder.results import CellResult, table

    assert [points_text(x) for x in (7 / 3, 3, 2.5, 0.0, 134, 35 / 12)] == ["2.33", "3", "2.5", "0", "134", "2.92"]
    rows = [CellResult("LayerNorm", 2.0, 2.0, "passed", ""), CellResult("DecoderLayer", 7 / 3, 3.0, "partial", "a reason"),
            CellResult("beam_search", 35 / 12, 3.0, "partial", "another"), CellResult("Transformer", 0.0, 10.0, "failed", "why")]
    lines = table(rows).splitlines()
    assert "2.3333" not in "\n".join(lines) and "2.33 / 3 " in lines[2] and lines[-1].split()[1:] == ["7.25", "/", "18"], lines
    assert len({line.index(" / ") for line in lines[1:]}) == 1, lines  # the header's "points" is centred on the slash
    assert len({line.index(r.status) for line, r in zip(lines[1:], rows)}) == 1, lines


def test_a_failing_public_case_shows_its_inputs_and_where_it_differs(capsys):
    unscaled = next(m for m in registry.get(SDPA).mistakes if m.name == "unscaled").impl
    with pytest.raises(CheckFailed) as info:
        check(SDPA, unscaled)
    lines = info.value.lines
    first = next(c for c in registry.get(SDPA).cases() if not c.hidden)
    call = first.make()
    assert any(line.strip() == f"q: {tuple(call.args[0].shape)} float32" for line in lines), lines
    at = lines.index(next(line for line in lines if "where it differs (expected → yours)" in line))
    # the first differing entries, side by side, with the values of the reference and the learner
    want = registry.get(SDPA).reference(*call.args)[0]
    got = unscaled(*first.make().args)[0]
    index = (got - want).abs().gt(1e-4).nonzero()[0].tolist()
    assert lines[at + 1].split() == f"[{', '.join(map(str, index))}]  {want[tuple(index)].item():.4g} → {got[tuple(index)].item():.4g}".split()


def test_a_failing_hidden_case_shows_nothing_of_it():
    from autograder.api import explain
    from autograder.checks.cases import Report, CaseResult

    ex = registry.get(SDPA)
    hidden = next(c for c in ex.cases() if c.hidden)
    result = check_case(ex, next(m for m in ex.mistakes if m.name == "unscaled").impl, hidden)[0]
    assert not result.ok and result.detail == ()
    lines, reason = explain(Report(ex, [result]), {})
    assert "hidden case" in reason and not any("where it differs" in line or "inputs" in line for line in lines)


def test_full_marks_return_none(capsys):
    assert check(SDPA, registry.get(SDPA).reference) is None
    assert "✔" in capsys.readouterr().out


def test_warnings_in_learner_code_go_to_stdout(capsys):
    import warnings

    ref = registry.get(SDPA).reference

    def noisy(q, k, v, mask=None):
        warnings.warn("harmless", UserWarning)
        return ref(q, k, v, mask)

    assert check(SDPA, noisy) is None
    out = capsys.readouterr()
    assert out.err == "" and "harmless" in out.out


def test_unknown_exercise_names_the_known_ones():
    with pytest.raises(KeyError, match="known exercises"):
        check("scaled_dot_attention", stub)


def test_dependency_hint(capsys):
    bad_scores = next(m for m in registry.get("attention_scores").mistakes if m.name == "unscaled").impl
    run_check(bad_scores, "attention_scores")
    unscaled_sdpa = next(m for m in registry.get(SDPA).mistakes if m.name == "unscaled").impl
    _, reason = run_check(unscaled_sdpa)
    with pytest.raises(CheckFailed) as info:
        check(SDPA, unscaled_sdpa)
    assert any("attention_scores" in line and "fix that first" in line for line in info.value.lines)


@pytest.mark.parametrize("exercise,mistake", MISTAKES, ids=lambda x: x.name)
def test_mistake_as_cell_code_is_named(exercise, mistake):
    # Pasted into a notebook (demo, nbgrader tests), a mistake's source runs beside the
    # other exercises' correct code, as the reference module's namespace holds them.
    import math
    import sys

    from autograder.release import mistake_source

    namespace = {"torch": torch, "math": math, "nn": torch.nn, "F": torch.nn.functional}
    namespace |= vars(sys.modules[getattr(exercise.reference, "__wrapped__", exercise.reference).__module__])
    exec(mistake_source(exercise.name, mistake), namespace)
    report = check_exercise(exercise, namespace[exercise.name], hidden=True)
    assert report.failures() and report.failures()[0].diagnosis == mistake.says


@pytest.mark.parametrize(
    "got,want,expected",
    [
        ({"a": 1}, {"a": 1, "b": 2}, "lacks the key(s) 'b'"),
        ({"a": 1, "c": 3}, {"a": 1}, "unexpected key(s) 'c'"),
        ([1, 2], [1, 2, 3], "has 2 items, expected 3"),
        (0.4, 0.6, "is 0.4, expected 0.6"),
        ("ab", "abc", "is 'ab', expected 'abc'"),
        (torch.ones(2), [1.0, 1.0], "is a torch.Tensor, expected a list"),
        (1.0, 1, "expected the integer 1"),
        ({"x": torch.zeros(2)}, {"x": torch.zeros(3)}, "has shape (2,), expected (3,)"),
    ],
)
def test_plain_python_values_are_compared_with_a_reason(got, want, expected):
    from autograder.checks.comparing import compare_value, same_value

    assert expected in compare_value("the output", got, want)
    assert not same_value(got, want)
    assert compare_value("the output", want, want) == "" and same_value(want, want)


def test_following_the_head_axis_hint_passes_the_check():
    # 06's diagnosis of a mask without a head axis says what to write; doing exactly that must pass
    # (the reviewer's first attempt followed an older hint into a failure blamed on split_heads).
    import re

    from autograder.mutants import mutant, source_of, swap

    ex = registry.get("MultiHeadAttention")
    wrong = next(m for m in ex.mistakes if m.name == "mask_not_broadcast")
    advice = re.search(r"mask\.unsqueeze\(-?\d\)", wrong.says).group(0)
    (old, new, _), = wrong.edit.steps
    fixed = new.replace("~mask", f"~{advice}")
    followed = mutant(ex.reference, wrong.edit & swap(new, fixed), "followed the hint")
    assert f"~{advice}" in source_of(followed)
    assert check_exercise(ex, followed).fraction == 1.0


def _key(x):
    if isinstance(x, torch.Tensor):
        if x.device.type == "meta":  # the device cases: a shape and a dtype, no values
            return ("meta tensor", tuple(x.shape), str(x.dtype))
        return ("tensor", tuple(x.shape), str(x.dtype), x.detach().cpu().numpy().tobytes())
    if isinstance(x, (list, tuple)):
        return tuple(_key(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _key(v)) for k, v in x.items()))
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype)):
        return repr(x)
    return object()  # a model, a generator, a cache: no table can be keyed by it


def _table_of_public_cases(exercise):
    """The reference's answers to `exercise`'s public cases, and NotImplementedError for any other input."""
    known = {_key((case.make().args, case.make().kwargs)) for case in exercise.cases() if not case.hidden}

    def answer(*args, **kwargs):
        if _key((args, kwargs)) in known:
            return exercise.reference(*args, **kwargs)
        raise NotImplementedError()
    return answer


def _tabulable(exercise):
    """Whether a function exercise's public inputs are plain values and tensors, the same at every make()."""
    public = [c for c in exercise.cases() if not c.hidden]
    return exercise.kind == "function" and all(_key((c.make().args, c.make().kwargs)) == _key((c.make().args, c.make().kwargs)) for c in public)


TABULABLE = [ex for ex in EXERCISES if _tabulable(ex)]


def test_most_function_exercises_can_be_tabulated():
    tabulable = [ex for ex in registry.all_exercises() if _tabulable(ex)]
    assert len(tabulable) >= 25, [ex.name for ex in tabulable]


@pytest.mark.parametrize("exercise", TABULABLE, ids=ids)
def test_a_part_needs_every_one_of_its_cases(exercise):
    # answers to the public cases from a table, a stub for the rest: the check stops at the first stub,
    # and a part whose hidden case never ran earns nothing
    report = check_exercise(exercise, _table_of_public_cases(exercise), hidden=True)
    assert report.fraction == 0.0, [(r.case.label, r.ok) for r in report.results]
    assert check_exercise(exercise, _table_of_public_cases(exercise)).fraction == 1.0


# Behaviour the text asks for that a function's value shows only on some inputs (issue 50): the model's mode,
# dropout, a prediction with no <eos>, an initialisation. Each is a part of its own, with a public and a hidden case, and the
# learner's code that misses it fails that part alone and is named by its own sentence.
BEHAVIOURS = [
    ("train_step", "no_train_mode", "training mode", "model.train()"),
    ("greedy_decode", "no_eval_mode", "eval mode", "model.eval()"),
    ("MultiHeadAttention", "weights_after_dropout", "dropout", "after dropout"),
    ("exact_match", "no_eos_matches", "a prediction with no <eos>", "no <eos>"),
    ("beam_search", "no_eval_mode", "eval mode", "model.eval()"),
    ("greedy_decode", "gradients_on", "without gradients", "torch.no_grad()"),
    ("beam_search", "gradients_on", "without gradients", "torch.no_grad()"),
    ("FeedForward", "no_dropout", "dropout", "dropout"),
    ("FeedForward", "dropout_after_W_2", "dropout", "W_2"),
    ("EncoderLayer", "no_dropout", "dropout", "dropout"),
    ("EncoderLayer", "dropout_on_the_sum", "dropout", "the sum"),
    ("Encoder", "rate_not_passed", "dropout", "rate"),
    ("DecoderLayer", "no_dropout", "dropout", "dropout"),
    ("Decoder", "rate_not_passed", "dropout", "rate"),
    ("Transformer", "no_embedding_dropout", "dropout", "embeddings"),
    ("Block", "no_dropout", "dropout", "dropout"),
    ("Block", "dropout_on_the_stream", "dropout", "residual stream"),
    ("GPT", "no_embedding_dropout", "dropout", "embeddings"),
    ("GPT", "rate_not_passed", "dropout", "rate"),
    ("generate", "no_eval_mode", "eval mode", "model.eval()"),
    ("beam_generate", "no_eval_mode", "eval mode", "model.eval()"),
    # the initialisation a docstring states, checked on the module as its class builds it (Call.as_built)
    ("RMSNorm", "gain_zeros", "as built", "torch.ones(d)"),
    ("ModernGPT", "residual_not_zeroed", "as built", "nn.init.zeros_"),
]


@pytest.mark.parametrize("name,mistake,part,words", BEHAVIOURS, ids=lambda x: str(x))
def test_a_behaviour_the_text_asks_for_fails_its_own_part(name, mistake, part, words):
    ex = registry.get(name)
    wrong = next(m for m in ex.mistakes if m.name == mistake)
    assert words in wrong.says
    assert check_exercise(ex, ex.reference, hidden=True).fraction == 1.0
    public = check_exercise(ex, wrong.impl)
    assert public.failures() and all(r.case.part == part and r.diagnosis == wrong.says for r in public.failures())
    graded = check_exercise(ex, wrong.impl, hidden=True)
    assert {r.case.part for r in graded.failures()} == {part}
    assert {r.case.hidden for r in graded.failures()} == {False, True}, "a public and a hidden case tell them apart"
    lost = ex.parts[part] + ex.parts.get("device", 0)  # the device part counts once every other part does (Report.part_ok)
    assert graded.fraction == pytest.approx(1 - lost / sum(ex.parts.values()))


def test_a_case_with_dropout_in_training_mode_is_reproducible():
    # the seed travels with the call (Call.seed), pickled into the grading sandbox too
    import dataclasses
    import io
    from autograder.checks import travel
    from autograder.checks.running import run_call
    ex = registry.get("MultiHeadAttention")
    case = next(c for c in ex.cases() if c.part == "dropout" and "training mode" in c.label)
    torch.manual_seed(0)
    weights = ex.reference(*case.make().init).state_dict()
    blob = io.BytesIO()
    torch.save(travel.portable_call(case.make()), blob)
    outcomes = [run_call(ex.kind, ex.train_mode, ex.reference, call, False, weights) for call in (
        case.make(), travel.restored_call(torch.load(io.BytesIO(blob.getvalue()), weights_only=False)))]
    torch.manual_seed(123)  # whatever the state before, the call draws the same masks
    outcomes.append(run_call(ex.kind, ex.train_mode, ex.reference, case.make(), False, weights))
    assert all(torch.equal(o.outputs[0], outcomes[0].outputs[0]) for o in outcomes)
    restored = travel.restored_call(torch.load(io.BytesIO(blob.getvalue()), weights_only=False))
    assert (restored.seed, restored.train) == (case.make().seed, True)  # real fields of Call, pickled with it
    off = run_call(ex.kind, ex.train_mode, ex.reference, dataclasses.replace(case.make(), seed=0, train=False), False, weights)
    assert not torch.equal(off.outputs[0], outcomes[0].outputs[0])


def test_an_initialisation_is_checked_on_the_learners_own_class_whatever_it_carries():
    # Call.as_built unwraps the reference's factory only: a class that names the reference as its __wrapped__ is
    # still built as itself, and its zero gain fails the part "as built" alone
    from solutions_lib.gpt.modern import RMSNorm

    class Mine(RMSNorm):
        __wrapped__ = RMSNorm

        def __init__(self, d, eps=1e-6):
            super().__init__(d, eps)
            torch.nn.init.zeros_(self.weight)

    report = check_exercise(registry.get("RMSNorm"), Mine, hidden=True)
    assert report.failures() and {r.case.part for r in report.failures()} == {"as built"}

