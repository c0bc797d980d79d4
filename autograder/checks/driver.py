"""The driver of a check: each case run and compared, and what failed diagnosed, by a catalogued mistake or
else by how the learner's output relates to the reference's, with the line where the learner's code raised.

The top room of autograder.checks: `check` in a notebook (autograder.api), the grader's comparison
(autograder.grading.verdict) and `new-exercise --check` put it to work.
"""
from __future__ import annotations

from autograder.checks.cases import DEFAULT_TIMEOUT_S, DEVICE, PASSED, CaseResult, CheckTimeout, Report, WeightMismatch, raised
from autograder.checks.catalogue import diagnose, quotes_unwritten
from autograder.checks.comparing import compare_outcomes, describe_error, describe_inputs, first_differences, same_outputs
from autograder.checks.labels import by_rank, only_on
from autograder.checks.raised import raised_at
from autograder.checks.relations import explain
from autograder.checks.running import parameter_names, reference_outcome, run_call


def check_case(exercise, impl, case, timeout=DEFAULT_TIMEOUT_S, got=None):
    """Compare the learner's `impl` with the reference on one case: (CaseResult, outcome).

    `got`, when given, is the learner's outcome computed elsewhere (in the grading sandbox).
    """
    want, weights = reference_outcome(exercise, case)
    if got is None:
        got = run_call(exercise.kind, exercise.train_mode, impl, case.make(), case.grad, weights, timeout, exercise.state_after)
    stopped = _unfinished(case, got)
    if stopped is not None:
        return stopped, got
    if case.raises is not None:
        return _check_raised(case, got, impl, exercise.kind), got
    if want.error is not None:  # expected to fail (autograder.grading.verdict: the reference built on a learner's mistake)
        return CaseResult(case, same_outputs(got, want), "" if same_outputs(got, want) else f"raised {describe_error(want.error)} elsewhere"), got
    if got.error is not None:
        e = got.error
        if isinstance(e, WeightMismatch):
            return CaseResult(case, False, f"its weights could not be loaded: {e}"), got
        where = ()
        if not case.hidden and impl is not None:
            where = raised_at(e, impl)
        return CaseResult(case, False, f"raised {describe_error(e)}{_on_meta(case, e)}", detail=where), got
    problem = compare_outcomes(got, want, exercise.returns)
    if not problem:
        return CaseResult(case, True), got
    detail = () if case.hidden else tuple(["inputs:"] + [f"  {line}" for line in describe_inputs(case.make(), parameter_names(impl, exercise.kind))] + first_differences(got, want, exercise.returns))
    return CaseResult(case, False, problem, detail=detail, reference=want), got


def _on_meta(case, error):
    """What a device case's error means, where it is one: code that reads its inputs' values, or mixes devices."""
    if case.part != DEVICE or "meta" not in str(error):
        return ""
    return (" (this case hands your code its inputs on another device than the CPU, PyTorch's meta device, as a GPU "
            "would: a tensor your code makes without device= lands on the CPU, away from them, and using the two together "
            "raises, as it would on a GPU; the meta device has shapes but no values, so reading a value, .item() or a "
            "Python loop over a tensor, raises too, where the hint's vectorised form does not)")


def _unfinished(case, got):
    """The result of a case the learner's code did not finish: a stub, or past the time limit; else None."""
    if isinstance(got.error, NotImplementedError) and not _on_meta(case, got.error):  # PyTorch's "no data" on meta is no stub
        return CaseResult(case, False, "not implemented yet (the stub still raises NotImplementedError)", not_implemented=True)
    if isinstance(got.error, CheckTimeout):
        return CaseResult(case, False, str(got.error), timed_out=True)
    return None


def _check_raised(case, got, impl, kind):
    """A case on which the exercise's text requires an exception."""
    if raised(got, case.raises):
        return CaseResult(case, True)
    inputs = () if case.hidden else tuple(["inputs:"] + [f"  {line}" for line in describe_inputs(case.make(), parameter_names(impl, kind))])
    if got.error is not None:
        return CaseResult(case, False, f"raised {describe_error(got.error)}, where the text asks for a {case.raises}", detail=inputs)
    return CaseResult(case, False, f"returned where the text asks it to raise a {case.raises} (read the docstring: these inputs are not allowed)", detail=inputs)


def check_exercise(exercise, impl, hidden=False, timeout=DEFAULT_TIMEOUT_S, outcomes=None, source=None):
    """Run every case (the hidden ones too when `hidden`) and return a Report.

    `outcomes`, when given, holds the learner's outcome of each case, in order,
    computed in another process; `impl` is then unused.
    """
    results, failed = [], []
    cases = [c for c in exercise.cases() if hidden or not c.hidden]
    for i, case in enumerate(cases):
        result, outcome = check_case(exercise, impl, case, timeout, got=None if outcomes is None else outcomes[i])
        results.append(result)
        if result.not_implemented or result.timed_out:
            return Report(exercise, results, planned=tuple(cases))
        if not result.ok:
            failed.append((case, outcome))
    if failed:
        passed = PASSED.set(tuple(r.case for r in results if r.ok))
        try:
            _diagnose(exercise, impl, source, results, failed)
        finally:
            PASSED.reset(passed)
    return Report(exercise, results, planned=tuple(cases))


def _diagnose(exercise, impl, source, results, failed):
    """The name for what failed, a catalogued mistake's sentence or a relation, written into the failed results."""
    mistake = diagnose(exercise, failed)
    if mistake is not None and quotes_unwritten(mistake, impl, source):
        mistake = None  # its sentence quotes code the learner did not write: say what is observed instead
    if mistake is not None:
        for r in results:
            r.diagnosis = "" if r.ok else mistake.says
    else:
        plain = [(i, f) for i, f in enumerate(failed) if f[0].raises is None]  # a missing raise has no relation
        wants = [r.reference for r in results if not r.ok]
        relation = explain(exercise, [f for _, f in plain], [wants[i] for i, _ in plain], impl) \
            or by_rank(results) or only_on(results)
        for r in results:
            r.relation = "" if r.ok else relation
