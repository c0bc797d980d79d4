"""Diagnosing by edits of the reference's own source: its syntax tree with one node replaced, compiled again in the
reference's module, so that the edited copy calls the helpers the reference calls. The rooms above it (scalars,
structure, sizes) say which nodes to replace; an edit is named only when it alone computes the learner's outputs
on every failed case.

A finder, `finder(exercise, case)`, gives [(name, sentence, implementation)]: the edited references for one case, each
with a name that is the same in every case and a sentence (its sizes may be the case's). Where the reference is not
at hand (the student distribution), their outcomes are read from the case, precomputed by the same finder
(`edit_outcomes`, autograder.ship), so that the same sentences are said with the reference or without."""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap

from autograder.checks.cases import PASSED, CheckTimeout
from autograder.checks.comparing import same_outputs, your_output
from autograder.checks.running import memo, reference_outcome, run_call, who

MOST_EDITS = 60  # a reference with more sites is not searched further
# An edited reference that loops is left out. Its loops are counted, so that every machine, fast or busy, leaves
# out the same edits; the seconds are only a backstop for an edit that is slow without looping.
MOST_TURNS = 100_000  # turns of the edited code's loops in one call
EDIT_SECONDS = 2


def source_tree(reference):
    """The reference's source as a syntax tree (a function's, or a class's with its forward)."""
    return ast.parse(textwrap.dedent(inspect.getsource(reference)))


class Turns:
    """The loop turns an edited reference has left in its current call (`start` before each call); one past
    MOST_TURNS raises CheckTimeout, as running out of time does."""

    def __init__(self):
        self.left = MOST_TURNS

    def start(self):
        self.left = MOST_TURNS

    def __call__(self):
        self.left -= 1
        if self.left < 0:
            raise CheckTimeout(f"an edited reference ran past {MOST_TURNS} loop turns")


class _Counted(ast.NodeTransformer):
    """Every loop's body starts by taking a turn: `__turn__()`."""

    def _count(self, node):
        self.generic_visit(node)
        node.body.insert(0, ast.Expr(ast.Call(ast.Name("__turn__", ast.Load()), [], [])))
        return node

    visit_For = visit_AsyncFor = visit_While = _count


def compiled(reference, tree, callee=None):
    """The reference with its source replaced by `tree`, compiled in a copy of its module's namespace; or, with
    `callee`, the reference as it is, calling that function of its module with its source replaced by `tree`.
    Its loops count their turns in its attribute `edit_turns` (a Turns)."""
    namespace = dict(vars(sys.modules[reference.__module__]))  # a copy: the module stays as it was
    namespace["__turn__"] = turns = Turns()

    def run(tree, name):
        tree = ast.fix_missing_locations(_Counted().visit(tree))
        exec(compile(ast.unparse(tree), f"<edited {name}>", "exec"), namespace)

    if callee is not None:
        run(tree, callee.__name__)
        tree = source_tree(reference)
    run(tree, reference.__name__)
    namespace[reference.__name__].edit_turns = turns
    return namespace[reference.__name__]


def callees(reference):
    """The functions of the reference's own module that it calls by name (attention_scores, for
    scaled_dot_product_attention): a mistake may lie in what the reference leaves to them."""
    module = vars(sys.modules[reference.__module__])
    names = {n.func.id for n in ast.walk(source_tree(reference)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return [module[n] for n in sorted(names) if inspect.isfunction(module.get(n)) and module[n].__module__ == reference.__module__
            and n != reference.__name__]


class _Replace(ast.NodeTransformer):
    def __init__(self, target, new):
        self.target, self.new = target, new

    def generic_visit(self, node):
        node = super().generic_visit(node)
        return self.new if node is self.target else node


def edited(reference, sites):
    """[(name, sentence, the reference edited)]: `sites(node)` gives [(name, sentence, replacement node)] for a
    node of the reference's tree, or of a function of its module that it calls (a node it may change: it is
    a copy); one edited reference for each, named by its node's place in its tree and its name there (two
    sites may read alike: x + self.dropout(attended))."""
    reference = getattr(reference, "__wrapped__", reference)
    found = []
    for callee in [None] + callees(reference):
        source = callee or reference
        for i, node in enumerate(ast.walk(source_tree(source))):
            for j, _ in enumerate(sites(node)):
                tree = source_tree(source)  # a fresh copy for every edit
                target = list(ast.walk(tree))[i]
                name, says, new = sites(target)[j]
                where = f"{callee.__name__}'s node {i}" if callee else f"node {i}"
                try:
                    found.append((f"{where}: {name}", says, compiled(reference, _Replace(target, new).visit(tree), callee)))
                except Exception:  # an edit that does not compile
                    continue
                if len(found) >= MOST_EDITS:
                    return found
    return found


def computes(exercise, failed):
    """The start of a sentence naming an edit: "Your output is what the reference computes" (with ...), or,
    where the learner's code raised, "Your code raised what the reference raises"."""
    if failed[0][1].error is not None:
        return "Your code raised what the reference raises"
    subject = your_output(exercise, 0, 1) if len(failed[0][1].outputs) == 1 else "Your outputs are"
    return f"{subject} what the reference computes"


def finder_key(finder):
    """The name a finder's outcomes are stored under: "structure.rewirings"."""
    return f"{finder.__module__.rsplit('.', 1)[-1]}.{finder.__name__.lstrip('_')}"


def edit_outcomes(exercise, case, finder, only=None):
    """{name: (sentence, the edited reference's forward-only outcome on `case`)} for the edits `finder` makes
    (those named in `only`, when given), but those that loop (MOST_TURNS). Where the reference is not at hand,
    the precomputed ones: the case's edit_outcomes under the keys (finder_key(finder), name)
    (autograder.reference_data), which hold only the edits whose outcome differs from the reference's: the others
    can never be named."""
    if case.edit_outcomes is not None:
        key = finder_key(finder)
        return {k[1]: v for k, v in case.edit_outcomes.items() if k[0] == key}
    if exercise.reference is None or case.raises is not None:
        return {}
    _, weights = reference_outcome(exercise, case)
    found = {}
    for name, says, impl in memo(case, ("edits", who(exercise), finder), lambda: finder(exercise, case)):
        if only is None or name in only:
            outcome = memo(case, ("edit", who(exercise), finder, name), lambda: _run_edit(exercise, impl, case, weights))
            if not isinstance(outcome.error, CheckTimeout):  # an edit that loops says nothing of the learner's code
                found[name] = (says, outcome)
    return found


def _run_edit(exercise, impl, case, weights):
    if hasattr(impl, "edit_turns"):  # not every finder's implementation is compiled here (scalars.neighbours)
        impl.edit_turns.start()
    return run_call(exercise.kind, exercise.train_mode, impl, case.make(), False, weights, timeout=EDIT_SECONDS,
                    state_after=exercise.state_after)


def the_one(exercise, failed, finder, together=None):
    """The sentence of the one edit of `finder` that computes the learner's outputs, or raises the learner's
    very error, on every failed case, in the first failed case's words, or '' (none, or two with different
    sentences: naming either could be wrong, unless `together(sentences)` says what they have in common)."""
    held, first = None, None
    for case, got in failed:
        want, _ = reference_outcome(exercise, case)
        found = edit_outcomes(exercise, case, finder, held)
        first = found if first is None else first
        matching = {n for n, (_, out) in found.items() if same_outputs(got, out) and not same_outputs(out, want)}
        held = matching if held is None else held & matching
        if not held:
            return ""
    held = _right_where_the_learner_is(exercise, failed, finder, held)
    if not held:
        return ""
    said = {first[n][0] for n in held}
    if len(said) > 1:
        return together(sorted(said)) if together is not None and None not in said else ""
    return said.pop() or ""  # a sentence of None: the first case cannot say it


def _right_where_the_learner_is(exercise, failed, finder, held):
    """The edits of `held` that also compute the reference's outcome on every public case the learner's code passed
    (PASSED, where the driver says which): an edit that goes wrong where the learner is right is not what the learner wrote,
    however well it fits the failed cases (arange(start + T, start) raises where arange(start, T) does, but also where
    start = 0, which arange(start, T) gets right). Where the outcomes are precomputed, an edit absent from a case's
    holds the reference's outcome there."""
    for case in PASSED.get() or ():
        if case.hidden or case.raises is not None or not held:
            continue
        want, _ = reference_outcome(exercise, case)
        found = edit_outcomes(exercise, case, finder, held)
        held = {n for n in held if n not in found or same_outputs(found[n][1], want)}
    return held


def named_by(exercise, failed, finder, kinds, together=None):
    """ "Your output is what the reference computes " + the sentence of the one edit of `finder` that computes the
    learner's outputs (the_one), for an exercise of one of `kinds`; or ''."""
    if exercise.kind not in kinds:
        return ""
    said = the_one(exercise, failed, finder, together)
    return f"{computes(exercise, failed)} {said}" if said else ""
