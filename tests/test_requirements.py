"""What an exercise's text requires is checked, with points: every sentence of an exercise's text (its
markdown, from the cell of its heading to its check cell, and the docstring of its stub) that says "must" or "raise"
is listed here with the public case that checks it, or why it asks nothing of the learner's code. A new
such sentence fails until it is listed; an entry whose sentence is gone fails too. A sentence asking for
an exception needs a case that expects it (Case.raises), which costs its part's points when it is missing."""
import ast
import re
import sys

import nbformat
import pytest
import torch

from autograder import registry
from autograder.checks import edits
from autograder.checks.driver import check_exercise
from conftest import ROOT

# (exercise, words of the sentence): a public case label that checks it, or ("not a requirement", why)
REQUIREMENTS = {
    ("apply_mask", "so it must broadcast along the columns"): "V=5",
    ("attention_weights", "the padding positions must get weight 0"): "B=3, T=6, mask",
    ("attention_weights", "Masked positions must get weight exactly 0"): "B=3, T=6, mask",
    ("attention_weights", "must become a row of zeros"): "B=3, T=5, mask, one row all masked",
    ("shift_matrix", "For an odd `d_model` raise a `ValueError`"): "k=1, d_model=7: odd, so no such matrix",
    ("shift_matrix", "d_model must be even"): "k=1, d_model=7: odd, so no such matrix",
    ("scaled_dot_product_attention", "some keys must be invisible to some queries"): "B=2, T_q=4, T_k=6, d_k=8, d_v=5, random mask",
    ("merge_heads", "which copies when it must"): ("not a requirement", "advice on reshape against view"),
    ("MultiHeadAttention", "Your module must not assume they are equal"): "B=2, T_q=4, T_k=6, d_model=8, h=2",
    ("shift_right", "decoder input `tgt_in`"): ("not a requirement", "a table whose cells end in 'must' by chance of the split"),
    ("label_smoothed_cross_entropy", "`q` must sum to 1"): "B=2, T=5, V=7, smoothing=0.1",
    ("train_step", "the scaled gradients overflow and the step must be skipped"):
        "B=2, T_src=6, T_tgt=5, d_model=16, h=2, N=1, smoothing=0.1, clip=0.5, float16 autocast + scaler, overflowing",
    ("exact_match", "it raises when there is none"): ("not a requirement", "how list.index behaves, said as a hint"),
    ("merge_pair", "It must not become `[new, new]`"): "'aaaa' with the pair (a, a)",
    ("encode", "must go through the same sequence of states"): "a sentence of its own corpus, 30 merges",
    ("get_batch", "Every window must lie inside the data"): "data of 12 tokens, block_size=11, B=5",
    ("sample_next", "Raise ValueError for settings sample_next cannot use"): ("not a requirement", "given code: check_sampling is written for the learner"),
    ("newton_schulz", "orthogonalising raises the rare directions"): ("not a requirement", "raises as in lifts: what Muon does to an update"),
}
ASKS_FOR_AN_ERROR = re.compile(r"\braise (?:an? )?`?(\w+Error)`?")

# Behaviour that an exercise's value shows only on some inputs (issue 50): the words that ask for it, and the
# words a case's label or part must carry to check it, public and hidden (the part of its own: test_checks).
BEHAVIOURS = {
    "training mode": (re.compile(r"\btrain(?:ing)? mode\b|\.train\(\)", re.I), re.compile(r"training mode")),
    "eval mode": (re.compile(r"\beval(?:uation)? mode\b|\.eval\(\)", re.I), re.compile(r"eval mode")),
    "dropout": (re.compile(r"\bdropout\b", re.I), re.compile(r"dropout")),
    "no <eos>": (re.compile(r"\b(?:no|without|never says) `?<eos>`?", re.I), re.compile(r"no <eos>")),
    # a dtype asked for, or one kept from an input (a hint's dtype=S.dtype keeps S's)
    "dtype": (re.compile(r"\bof the given `?dtype|\bmatch `?\w+`?'s dtype|\bdtype and device of\b|\bdtype=`?\w+\.dtype\b", re.I),
              re.compile(r"\bdtype\b")),
    # a device given, or one kept from an input (a hint's device=x.device, "on data's device")
    "device": (re.compile(r"\bon (?:any|`?\w+`?'s) device\b|\bdevice of `?\w+|\bdevice=`?(?:device|\w+\.device)\b|"
                          r"\b(?:created )?on `?\w+\.device\b", re.I), re.compile(r"\bdevice\b")),
    "odd size": (re.compile(r"\bodd `?d_model\b|`?d_model`? is odd", re.I), re.compile(r"\bodd\b")),
    "empty": (re.compile(r"\ban empty (?:source|row)\b|\bevery position of a row is masked|\b(?:dict|beam) is empty\b", re.I),
              re.compile(r"empty|all masked|no pair is left")),
    # generation under torch.no_grad(): a model that counts its calls with gradients on (course_lib.gpt.TinyGPT's counting)
    "without gradients": (re.compile(r"\bwithout gradients?\b|\bno_grad\b", re.I), re.compile(r"\bgradients\b")),
    # what a KV cache is for: a model that counts the positions it computes, so that a cache that recomputes fails
    "a cache's saving": (re.compile(r"\bfeeds? (?:only )?the new(?:est)? tokens? (?:only|alone)\b", re.I),
                         re.compile(r"\bpositions it computes\b")),
    # a Python float asked for: checked on every case by the comparison itself (a tensor where the reference returns a
    # float fails, autograder.checks.comparing.compare_value), test_a_tensor_where_the_text_asks_for_a_float_fails below
    "a Python float": (re.compile(r"\breturns?:? (?:a )?float\b|\((?:a )?float\)|\bPython float\b|\breturn a float\b", re.I), None),
}
# (exercise, behaviour): why no case needs to check it
BEHAVIOURS_NOT_ASKED = {
    ("FeedForward", "eval mode"): "says how the checks run (dropout does nothing in evaluation mode), asks nothing",
    ("beam_search", "empty"): "stopping once the beam is empty saves steps and changes no output: an empty beam adds nothing "
                              "to what is finished",
    # a search decides what to keep by the values of its scores (topk, which hypotheses ended), which the meta device
    # has not: no case on the CPU can run it elsewhere; test_device_code checks that every tensor it makes takes device=
    ("greedy_decode", "device"): "decoding reads the tokens it chose (which rows are done), which no device but a real one "
                                 "has (test_device_code)",
    ("beam_search", "device"): "a search reads its scores' values, which no device but a real one has (test_device_code)",
    ("beam_generate", "device"): "a search reads its scores' values, which no device but a real one has (test_device_code)",
    ("KVCache", "a cache's saving"): "the class stores; what it saves shows in generate, whose counting cases count the "
                                     "positions the model computes with it",
}


def exercise_texts():
    """{exercise: its text in the released notebook}: markdown from its heading to its check cell, and docstrings."""
    texts = {}
    for path in sorted((ROOT / "notebooks").glob("*/*.ipynb")):
        current = None
        for cell in nbformat.read(path, as_version=4).cells:
            heading = re.search(r"### Exercise \d+ · `(\w+)`", cell.source) if cell.cell_type == "markdown" else None
            if heading:
                current = heading.group(1)
                texts[current] = ""
            if current is None:
                continue
            if cell.cell_type == "code" and re.search(r'\bcheck\("', cell.source):
                current = None
            elif cell.cell_type == "markdown":
                texts[current] += cell.source + "\n"  # the heading's cell whole: it explains the exercise
            else:
                texts[current] += "\n".join(re.findall(r'"""(.*?)"""', cell.source, re.S)) + "\n"
    return texts


def requirement_sentences(text):
    return [" ".join(s.split()) for s in re.split(r"(?<=[.;:])\s+", text)
            if re.search(r"\bmust\b|\braises?\b", s, re.I) and "NotImplementedError" not in s]


def test_every_must_and_raise_has_a_case():
    texts = exercise_texts()
    assert len(texts) == len(registry.all_exercises()), "every exercise has a heading in its released notebook"
    unlisted = []
    for name, text in texts.items():
        for sentence in requirement_sentences(text):
            if not any(ex == name and words in sentence for ex, words in REQUIREMENTS):
                unlisted.append((name, sentence))
    assert not unlisted, f"list each in REQUIREMENTS with the case that checks it: {unlisted}"
    for (name, words), checked in REQUIREMENTS.items():
        assert any(words in s for s in requirement_sentences(texts[name])), f"{name}: {words!r} is no longer in its text"
        if isinstance(checked, str):
            labels = [c.label for c in registry.get(name).cases() if not c.hidden]
            assert checked in labels, f"{name}: no public case {checked!r} (there are {labels})"


def test_an_exception_the_text_asks_for_is_a_case_with_points():
    for name, text in exercise_texts().items():
        _cases_for_the_errors_asked(name, set(ASKS_FOR_AN_ERROR.findall(text)))


def _cases_for_the_errors_asked(name, asked):
    ex = registry.get(name)
    for error in asked:
        for hidden in (False, True):
            cases = [c for c in ex.cases() if c.raises == error and c.hidden == hidden]
            assert cases, f"{name}: the text asks for a {error}: add a {'hidden' if hidden else 'public'} case with raises={error!r}"
            assert len({c.part for c in ex.cases()}) > 1 and all(
                c.part not in {o.part for o in ex.cases() if o.raises is None} for c in cases), \
                f"{name}: the {error} cases get a part of their own, so a missing raise costs only its share"


def test_the_lint_finds_a_requirement_nobody_listed():
    assert requirement_sentences("Compute it. The rows must sum to 1; for odd d raise a `ValueError`.") == [
        "The rows must sum to 1;", "for odd d raise a `ValueError`."]
    assert ASKS_FOR_AN_ERROR.findall("For an odd `d_model` raise a `ValueError`.") == ["ValueError"]


def behaviours_asked(text):
    """The behaviours (keys of BEHAVIOURS) whose words the text uses."""
    return {name for name, (asks, _) in BEHAVIOURS.items() if asks.search(text)}


def behaviours_unchecked(name, text, cases):
    """The behaviours the text asks for that no public case and no hidden case names in its label or part."""
    def named(behaviour, hidden):
        return any(BEHAVIOURS[behaviour][1].search((c.label + " " + c.part).lower()) for c in cases if c.hidden == hidden)
    return sorted(b for b in behaviours_asked(text) if (name, b) not in BEHAVIOURS_NOT_ASKED
                  and BEHAVIOURS[b][1] is not None and not (named(b, False) and named(b, True)))


def test_every_behaviour_the_text_asks_for_has_a_case():
    unchecked = {name: missing for name, text in exercise_texts().items()
                 if (missing := behaviours_unchecked(name, text, registry.get(name).cases()))}
    assert not unchecked, ("add a public and a hidden case whose label or part names the behaviour (in a part of its "
                           f"own), or list it in BEHAVIOURS_NOT_ASKED with why: {unchecked}")
    for name, behaviour in BEHAVIOURS_NOT_ASKED:
        assert behaviour in behaviours_asked(exercise_texts()[name]), f"{name}: {behaviour!r} is no longer in its text"


def test_the_lint_finds_a_behaviour_nobody_checks():
    from autograder.checks.cases import Call, Case
    text = "Runs in eval mode, without gradients; a prediction with no `<eos>` never matches. Call model.train() first."
    assert behaviours_asked(text) == {"eval mode", "no <eos>", "training mode", "without gradients"}
    assert behaviours_asked("Each later step feeds the newest token alone. returns: float") == {"a cache's saving", "a Python float"}
    plain = [Case("B=2, T=5", lambda: Call()), Case("B=4, T=7", lambda: Call(), hidden=True)]
    assert behaviours_unchecked("planted", "Runs without gradients; each step feeds the newest token alone.", plain) == [
        "a cache's saving", "without gradients"]
    counted = plain + [Case("a model counting its calls with gradients on and the positions it computes", lambda: Call(),
                            part="counted", hidden=hidden) for hidden in (False, True)]
    assert behaviours_unchecked("planted", "Runs without gradients; each step feeds the newest token alone.", counted) == []
    text = "Runs in eval mode; a prediction with no `<eos>` never matches. Call model.train() first."
    assert behaviours_asked("Dropout on the weights.") == {"dropout"}
    plain = [Case("B=2, T=5", lambda: Call()), Case("B=4, T=7", lambda: Call(), hidden=True)]
    assert behaviours_unchecked("planted", text, plain) == ["eval mode", "no <eos>", "training mode"]
    public_only = plain + [Case("B=3, predictions right but with no <eos>", lambda: Call(), part="no <eos>")]
    assert behaviours_unchecked("planted", text, public_only) == ["eval mode", "no <eos>", "training mode"]
    both = public_only + [Case("B=8", lambda: Call(), part="a prediction with no <eos>", hidden=True),
                          Case("dropout=0.5 in eval mode", lambda: Call(), part="modes"),
                          Case("the model handed over in eval mode; training mode after", lambda: Call(), part="modes", hidden=True)]
    assert behaviours_unchecked("planted", text, both) == ["training mode"]


class _Without(ast.NodeTransformer):
    """The reference's source without what a learner forgets: every keyword `keyword=` of a call, and every
    `.to(...)` whose argument reads `.{keyword}` (x.to(y.dtype), pe.to(dtype) for keyword "dtype")."""

    def __init__(self, keyword):
        self.keyword = keyword

    def visit_Call(self, node):
        self.generic_visit(node)
        node.keywords = [k for k in node.keywords if k.arg != self.keyword]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args and self.keyword in ast.unparse(node.args[0]):
            return node.func.value
        return node


def forgetting(exercise, keyword):
    """The exercise's reference, and every function of its module that it calls, as a learner who forgot `keyword`
    (autograder.checks.edits compiles its edits the same way)."""
    reference = getattr(exercise.reference, "__wrapped__", exercise.reference)
    namespace = dict(vars(sys.modules[reference.__module__]))
    for f in [*edits.callees(reference), reference]:
        tree = ast.fix_missing_locations(_Without(keyword).visit(edits.source_tree(f)))
        exec(compile(ast.unparse(tree), f"<{f.__name__} without {keyword}>", "exec"), namespace)
    return namespace[reference.__name__]


# (exercise, the part its cases check): a learner who forgot what the part asks for. The others' code cannot go wrong
# on a device in a way a CPU sees (test_every_behaviour_the_text_asks_for_has_a_case's BEHAVIOURS_NOT_ASKED), or only by
# moving its output elsewhere (get_batch). Seq2SeqAttention's device cases catch a tensor made on the CPU and handed to a
# layer (layers_keep_to_meta), but its hint's one device=, torch.arange(B, device=src.device), makes an index, and PyTorch
# indexes a tensor on any device with CPU indices: forgetting it is no mistake a device shows.
COUNTED = "without gradients, each position once"  # notebook 10's part whose model counts its calls

FORGOTTEN = {
    **{(name, "device"): lambda ex: forgetting(ex, "device")
       for name in ("causal_mask", "padding_mask", "make_masks", "Block", "Transformer", "skip_pair_votes", "GPT",
                    "LearnedPositionalEmbedding", "apply_rotary", "RotaryAttention", "ModernGPT")},
    # generation with gradients on: every call of the model builds a graph nobody uses
    **{(name, COUNTED): lambda ex: without_no_grad(ex) for name in ("generate", "beam_generate")},
    # notebook 08's searches, on course_lib's Transformer counting its calls of encode and decode with gradients on
    **{(name, "without gradients"): lambda ex: without_no_grad(ex) for name in ("greedy_decode", "beam_search")},
    ("shift_right", "device"): lambda ex: lambda tgt, bos_id=1: _shift_right(tgt, torch.full((len(tgt), 1), bos_id, dtype=tgt.dtype)),
    ("shift_right", "dtype"): lambda ex: lambda tgt, bos_id=1: _shift_right(tgt, torch.full((len(tgt), 1), bos_id, device=tgt.device)),
    **{(name, "dtype"): lambda ex: forgetting(ex, "dtype")
       for name in ("sinusoidal_positional_encoding", "shift_matrix", "PositionalEncoding", "skip_pair_votes")},
}


class _NoNoGrad(ast.NodeTransformer):
    """`with torch.no_grad(): body` as the body alone."""

    def visit_With(self, node):
        self.generic_visit(node)
        if any("no_grad" in ast.unparse(item.context_expr) for item in node.items):
            return node.body
        return node


def without_no_grad(exercise):
    """The exercise's reference as a learner who forgot torch.no_grad()."""
    reference = getattr(exercise.reference, "__wrapped__", exercise.reference)
    namespace = dict(vars(sys.modules[reference.__module__]))
    tree = ast.fix_missing_locations(_NoNoGrad().visit(edits.source_tree(reference)))
    exec(compile(ast.unparse(tree), f"<{reference.__name__} without no_grad>", "exec"), namespace)
    return namespace[reference.__name__]


def _shift_right(tgt, bos):
    """shift_right with a <bos> column made by the learner, not by full_like (torch.full: int64 on the CPU unless told)."""
    return torch.cat([bos, tgt[:, :-1]], dim=1)


@pytest.mark.parametrize("name, part", sorted(FORGOTTEN))
def test_a_dtype_or_device_case_tells_the_learner_who_forgot_it(name, part):
    """The part's public and hidden cases fail, and no other part does: the case tells right from wrong on exactly that,
    and says so (the device cases run on the meta device: a CPU sees a tensor made without device=)."""
    ex = registry.get(name)
    report = check_exercise(ex, FORGOTTEN[name, part](ex), hidden=True)
    failed = {(r.case.part, r.case.hidden) for r in report.results if not r.ok}
    assert failed == {(part, False), (part, True)}, failed
    said = next(r for r in report.results if not r.ok and not r.case.hidden).problem
    words = {"device": ("meta", "device="), "dtype": ("has dtype",), COUNTED: ("gradients on", "torch.no_grad()"),
             "without gradients": ("gradients on", "torch.no_grad()")}[part]
    assert all(w in said for w in words), said


def test_a_cache_that_saves_nothing_fails_its_part():
    """generate that makes a new KVCache at every step computes the same tokens; the model it runs counts the positions
    it computes, and the part that counts them fails, alone, with the catalogue's sentence."""
    ex = registry.get("generate")
    remade = next(m for m in ex.mistakes if m.name == "cache_made_every_step")
    report = check_exercise(ex, remade.impl, hidden=True)
    assert {(r.case.part, r.case.hidden) for r in report.results if not r.ok} == {(COUNTED, False), (COUNTED, True)}
    first = report.failures()[0]
    assert "positions the model computed" in first.problem and first.diagnosis == remade.says


def _tensored(x):
    """x with every Python float in it a 0-d tensor."""
    if type(x) is float:
        return torch.tensor(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_tensored(v) for v in x)
    if isinstance(x, dict):
        return {k: _tensored(v) for k, v in x.items()}
    return x


def test_a_tensor_where_the_text_asks_for_a_float_fails():
    """Every exercise whose text asks for a Python float: a learner who returns a 0-d tensor in its place fails a public
    case, told that a float is asked for (the comparison checks the type on every case)."""
    asked = [name for name, text in exercise_texts().items()
             if BEHAVIOURS["a Python float"][0].search(text) and (name, "a Python float") not in BEHAVIOURS_NOT_ASKED]
    assert {"beam_generate", "nats_per_char", "exact_match", "warmup_lr"} <= set(asked), asked
    for name in asked:
        ex = registry.get(name)
        reference = ex.reference

        def learner(*args, **kwargs):
            return _tensored(reference(*args, **kwargs))

        report = check_exercise(ex, learner)
        said = [r.problem for r in report.results if not r.ok]
        assert any("expected a Python float" in p for p in said), (name, said)


def test_the_device_part_counts_only_once_the_values_are_right():
    """A meta tensor has no values: code that returns the right shape on the right device but the wrong numbers runs
    the device cases right, and earns nothing for them."""
    ex = registry.get("get_batch")

    def zeros(data, block_size, B, generator=None):
        return torch.zeros(B, block_size, dtype=data.dtype, device=data.device), torch.zeros(B, block_size, dtype=data.dtype, device=data.device)

    report = check_exercise(ex, zeros, hidden=True)
    assert [r.ok for r in report.results if r.case.part == "device"] == [True, True]
    assert not report.part_ok("device") and report.fraction == 0
