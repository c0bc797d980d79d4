"""autograder.checks.relations and .variants: how a wrong tensor relates to the reference's, named only when it holds on
every failed case; and, end to end, the sentence a check adds when no catalogued mistake matches."""
import dataclasses
import math

import pytest
import torch

from autograder import CheckFailed, api, check, registry
from autograder.checks.driver import check_exercise
from autograder.mutants import mutant, swap
from autograder.checks.docstrings import axis_names
from autograder.checks.relations import relate

SHAPES = [(2, 5, 9), (3, 7, 16), (1, 6, 25)]  # B, T, d: d differs between cases, and from 4 (sqrt(4) = 2)
NAMES = ["B", "T", "d"]


def references(seed=0, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes], g


def named(make, shapes=SHAPES, names=NAMES, seed=0):
    """relate() on every case of `shapes`, the learner's output made by make(reference, generator)."""
    wants, g = references(seed, shapes)
    return relate([(make(w, g), w) for w in wants], names)


def shifted(w, k, g, axis=1):
    """w shifted k steps along `axis` (k > 0: late), the entries that come from nowhere random."""
    out = torch.roll(w, k, axis)
    ends = torch.arange(k) if k > 0 else torch.arange(w.shape[axis] + k, w.shape[axis])
    out.index_copy_(axis, ends, torch.randn(out.index_select(axis, ends).shape, generator=g))
    return out


# ---------------------------------------------------------------- each relation, on every case


def test_transposed_and_permuted():
    assert named(lambda w, g: w.transpose(-1, -2)) == "Your output is the reference's transposed (last two axes swapped)."
    square = [(3, 4, 4), (2, 6, 6)]  # the same shape as the reference's
    assert "transposed (last two axes swapped)" in named(lambda w, g: w.transpose(-1, -2).contiguous(), square)
    assert named(lambda w, g: w.transpose(0, 1)) == (
        "Your output is the reference's with axis 0 (B, size 2) and axis 1 (T, size 5) swapped.")
    assert named(lambda w, g: w.permute(2, 0, 1)) == (
        "Your output is the reference's with its axes reordered: yours are (d, B, T) where the reference's are (B, T, d).")
    assert "axis 0 (size 2) and axis 1 (size 5) swapped" in named(lambda w, g: w.transpose(0, 1), names=None)


@pytest.mark.parametrize("k,steps,yours,theirs", [(1, "one step", "second", "first"), (-1, "one step", "first", "second"),
                                                  (2, "two steps", "third", "first"), (-2, "two steps", "first", "third")])
def test_shifted(k, steps, yours, theirs):
    said = named(lambda w, g: shifted(w, k, g))
    assert said == (f"Your output is the reference's shifted {steps} along axis 1 (T, size 5): "
                    f"your {yours} entry there is the reference's {theirs}.")


def test_reversed():
    assert named(lambda w, g: w.flip(1)) == "Your output is the reference's reversed along axis 1 (T, size 5)."


@pytest.mark.parametrize("scale,words", [
    (lambda s: 2, "times 2."), (lambda s: 0.5, "times 1/2."), (lambda s: -1, "times -1."),
    (lambda s: math.sqrt(s[-1]), "times sqrt(d) (3 in the first failing case)."),
    (lambda s: 1 / math.sqrt(s[-1]), "times 1/sqrt(d) (0.3333 in the first failing case)."),
    (lambda s: s[-1], "times d (9 in the first failing case)."),
    (lambda s: 1 / s[-1], "times 1/d (0.1111 in the first failing case)."),
    (lambda s: 1 / s[1], "times 1/T (0.2 in the first failing case)."),
    (lambda s: 0.37268, "times a constant, 0.3727."),
])
def test_scaled(scale, words):
    assert named(lambda w, g: w * scale(w.shape)) == f"Your output is the reference's {words}"


def test_offset_by_a_constant_or_per_index():
    assert named(lambda w, g: w + 0.25) == "Your output is the reference's plus a constant, 0.25."
    bias = lambda w, g: w + torch.randn(w.shape[-1], generator=g)  # noqa: E731
    assert named(bias) == ("Your output is the reference's plus a constant for each index of axis 2 (d, size 9), "
                           "as a bias added or left out would make.")


def test_normalised_along_another_axis():
    wants, _ = references()
    pairs = [(w.softmax(1), w.softmax(-1)) for w in wants]
    assert relate(pairs, NAMES) == ("Your output is normalised along axis 1 (T, size 5), where the reference's is "
                                    "normalised along axis 2 (d, size 9): each sums to 1 there.")


def test_all_pairs_by_broadcasting():
    g = torch.Generator().manual_seed(1)
    pairs = []
    for B, T, d in [(2, 5, 8), (3, 4, 6), (4, 6, 5)]:
        s, H = torch.randn(B, d, generator=g), torch.randn(B, T, d, generator=g)
        pairs.append((s @ H.transpose(1, 2), (H @ s.unsqueeze(-1)).squeeze(-1)))  # (B, B, T) for (B, T)
    assert relate(pairs, ["B", "T"]) == (
        "Your output is the reference's with an extra axis: every index of axis 0 (B, size 2) is paired with every other, "
        "as broadcasting does, and your entries [i, i] along axes 0 and 1 are the reference's.")
    swapped = [(got.transpose(1, 2), want) for got, want in pairs]  # (B, T, B): the pairs along axes 0 and 2
    assert "your entries [i, i] along axes 0 and 2" in relate(swapped, ["B", "T"])


def test_non_finite_rows():
    def nan_row(w, g):
        out = w.clone()
        out[min(1, len(w) - 1)] = float("nan")
        return out
    assert named(nan_row) == ("Your output is NaN at index 1 of axis 0 (B, size 2) in the first failing case, "
                              "and the reference's everywhere else.")
    everywhere = lambda w, g: w * float("nan")  # noqa: E731
    assert named(everywhere) == ""  # nothing matches: the existing sentence says it all


# ---------------------------------------------------------------- near misses are not named


def noise(w, g, scale=1e-2):
    return w + scale * torch.randn(w.shape, generator=g)


@pytest.mark.parametrize("make", [
    lambda w, g: noise(w.transpose(-1, -2), g),
    lambda w, g: noise(w.flip(1), g),
    lambda w, g: noise(w * 2, g),
    lambda w, g: w * (2 if w.shape[0] == 2 else 3),  # a scale that differs between cases
    lambda w, g: w * (0.4 if w.shape[0] == 2 else 0.41),
    lambda w, g: w + (0.25 if w.shape[0] == 2 else 0.5),  # an offset that differs between cases
    lambda w, g: noise(w + torch.randn(w.shape[-1], generator=g), g),
    lambda w, g: shifted(w, 1, g).index_put_((torch.tensor(0), torch.tensor(3), torch.tensor(0)), torch.tensor(9.0)),
    lambda w, g: shifted(w, 1, g) if w.shape[0] == 2 else w.flip(1),  # each on some cases only
    lambda w, g: torch.where(torch.arange(len(w)).reshape(-1, 1, 1) == 0, float("nan"), noise(w, g)),
], ids=["transpose+noise", "flip+noise", "scale+noise", "scale differs", "scale differs slightly", "offset differs",
        "bias+noise", "shift with a wrong entry", "two relations", "nan row and noise"])
def test_near_misses_are_not_named(make):
    assert named(make) == ""


def test_a_broadcast_with_a_wrong_diagonal_is_not_named():
    g = torch.Generator().manual_seed(2)
    want = torch.randn(3, 5, generator=g)
    got = want.unsqueeze(0).expand(3, 3, 5).clone()
    got[1, 1, 2] += 0.1
    assert relate([(got, want)], ["B", "T"]) == ""


def test_unrelated_outputs_are_never_named():
    g = torch.Generator().manual_seed(3)
    said = []
    for i in range(200):
        shape = [int(n) for n in torch.randint(1, 7, (torch.randint(1, 4, ()).item(),), generator=g)]
        shape[-1] = max(shape[-1], 2)
        wants = [torch.randn(shape, generator=g) for _ in range(2)]
        if i % 4 == 0:  # probabilities both, along the same axis
            pairs = [(torch.randn(shape, generator=g).softmax(-1), w.softmax(-1)) for w in wants]
        elif i % 4 == 1:  # an extra axis, unrelated
            pairs = [(torch.randn(shape[0], *shape, generator=g), w) for w in wants]
        else:
            pairs = [(torch.randn(shape, generator=g), w) for w in wants]
        said += [s for s in [relate(pairs, None)] if s]
    assert said == []


def test_axis_names_come_from_the_references_docstring():
    rnn_forward = registry.get("rnn_forward")
    assert axis_names(rnn_forward, 0, (2, 5, 4)) == ["B", "T", "d_h"]
    assert axis_names(rnn_forward, 1, (2, 4)) == ["B", "d_h"]
    assert axis_names(rnn_forward, 0, (2, 5)) is None  # they do not fit the shape
    assert axis_names(registry.get("lstm_cell"), 0, (2, 4)) is None  # "returns (h_t, c_t), each (B, d_h)": no shape of its own
    assert axis_names(registry.get("dot_score"), 0, (2, 5)) == ["B", "T"]


# ---------------------------------------------------------------- end to end, through the check


def learners(name, old, new):
    """The reference of exercise `name` with one edit, as a learner would write it."""
    ex = registry.get(name)
    return ex, mutant(getattr(ex.reference, "__wrapped__", ex.reference), swap(old, new), f"learner's {name}")


def failure_of(name, fn, monkeypatch):
    monkeypatch.setattr(api, "_passed", {})  # no earlier exercise of this process blamed
    with pytest.raises(CheckFailed) as info:
        check(name, fn)
    return str(info.value)


def test_appending_before_the_update_is_named_a_shift(monkeypatch):
    ex, fn = learners("rnn_forward", """        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)
        outputs.append(h_t)""", """        outputs.append(h_t)
        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)""")
    report = check_exercise(ex, fn, hidden=True)
    assert report.failures()[0].diagnosis == ""  # no catalogued mistake
    assert report.failures()[0].relation.startswith("Your outputs are the reference's shifted one step along axis 1 (T, ")
    reason = failure_of("rnn_forward", fn, monkeypatch)
    assert reason.endswith(". Your outputs are the reference's shifted one step along axis 1 (T, size 5): "
                           "your second entry there is the reference's first.")


def test_scores_of_all_pairs_are_named_a_broadcast(monkeypatch):
    ex, fn = learners("dot_score", "(H @ s.unsqueeze(-1)).squeeze(-1)", "s @ H.transpose(1, 2)")
    assert check_exercise(ex, fn, hidden=True).failures()[0].diagnosis == ""
    reason = failure_of("dot_score", fn, monkeypatch)
    assert "the output has shape (2, 2, 5), expected (2, 5). Your output is the reference's with an extra axis: " \
           "every index of axis 0 (B, size 2) is paired with every other" in reason


def test_a_catalogued_mistake_wins(monkeypatch):
    ex = registry.get("dot_score")
    every_query = next(m for m in ex.mistakes if m.name == "every_query")  # H @ s.T: all pairs too, (B, T, B)
    failure = check_exercise(ex, every_query.impl, hidden=True).failures()[0]
    assert failure.diagnosis == every_query.says and failure.relation == ""
    assert "paired" not in failure_of("dot_score", every_query.impl, monkeypatch)


def test_a_mistake_with_no_relation_gets_no_sentence(monkeypatch):
    # sigmoid for tanh: no transform of the reference's output and no change of its inputs computes it,
    # so nothing is named rather than something wrong
    ex, fn = learners("rnn_cell", "torch.tanh(", "torch.sigmoid(")
    failure = check_exercise(ex, fn, hidden=True).failures()[0]
    assert failure.diagnosis == "" and failure.relation == ""
    assert failure_of("rnn_cell", fn, monkeypatch).endswith("(tolerance 1e-05 + 0.0001·|expected|)")


# ---------------------------------------------------------------- the reference on changed inputs


def test_a_weight_used_the_other_way_round_is_named(monkeypatch):
    ex, fn = learners("rnn_cell", "h_prev @ W_hh.T", "h_prev @ W_hh")
    assert check_exercise(ex, fn, hidden=True).failures()[0].diagnosis == ""
    assert failure_of("rnn_cell", fn, monkeypatch).endswith(
        ". Your output is what the reference computes with W_hh transposed: your code uses W_hh the other way round "
        "(W_hh where W_hh.T belongs, or W_hh.T where W_hh does).")


def test_a_bias_left_out_and_two_arguments_swapped_are_named(monkeypatch):
    ex, fn = learners("rnn_cell", "h_prev @ W_hh.T + b_hh)", "h_prev @ W_hh.T)")
    monkeypatch.setattr(ex, "mistakes", ())  # catalogued too (the catalogue wins: test_a_catalogued_mistake_wins)
    assert failure_of("rnn_cell", fn, monkeypatch).endswith(". Your output is what the reference computes without b_hh: a bias left out.")
    _, fn = learners("rnn_cell", "x_t @ W_ih.T + b_ih", "x_t @ W_ih.T + b_hh")  # b_ih twice: not one change of the inputs
    assert "reference computes" not in failure_of("rnn_cell", fn, monkeypatch)


def test_changes_that_compute_the_same_thing_are_not_named():
    from autograder.checks.cases import Outcome
    from autograder.checks.variants import by_variant

    ex, _ = learners("rnn_cell", "h_prev @ W_hh.T", "h_prev @ W_hh")
    case = ex.cases()[0]
    same = Outcome(outputs=(torch.ones(2),))
    want = Outcome(outputs=(torch.zeros(2),))
    two = dataclasses.replace(case, variant_outcomes={"a": ("what a.", same), "b": ("what b.", same)})
    assert by_variant(ex, [(two, same)], [want]) == ""
    one = dataclasses.replace(case, variant_outcomes={"a": ("what a.", same)})
    assert by_variant(ex, [(one, same)], [want]) == "Your output is what a."


def test_nan_where_a_row_had_nothing_to_divide(monkeypatch):
    _, fn = learners("transition_matrix", "counts / totals.clamp_min(1)", "counts / totals")
    reason = failure_of("transition_matrix", fn, monkeypatch)
    assert "Your output is NaN at index 3 of axis 0 (size 8) in the first failing case, and the reference's everywhere " \
           "else: there the reference's entries are 0, where yours divides 0 by 0" in reason


def test_a_norm_on_the_residual_stream_is_named(monkeypatch):
    ex = registry.get("Block")
    fn = mutant(ex.reference.__wrapped__, swap("x = x + self.dropout(self.attend(self.ln1(x), cache, i))",
                                               "x = self.ln1(x + self.dropout(self.attend(x, cache, i)))")
                & swap("return x + self.dropout(self.ffn(self.ln2(x)))", "return self.ln2(x + self.dropout(self.ffn(x)))"), "learner's Block")
    monkeypatch.setattr(ex, "mistakes", ())  # post_norm is catalogued: here it is named without the catalogue
    assert "Your output is normalised by ln2 along axis 2 (size 8): at every position, (yours - ln2.beta) / ln2.gamma " \
           "has mean 0 and variance 1, and the reference's does not." in failure_of("Block", fn, monkeypatch)


def test_windows_one_token_late_are_named_a_shift(monkeypatch):
    _, fn = learners("get_batch", "starts[:, None] + torch.arange(block_size, device=data.device)",
                     "starts[:, None] + torch.arange(1, block_size + 1, device=data.device)")
    assert failure_of("get_batch", fn, monkeypatch).endswith(
        ". Your x is the reference's shifted one step along axis 1 (block_size, size 8): your first entry there is the reference's second.")


# ---------------------------------------------------------------- where the learner's code raised


def lines_of(name, old, new, monkeypatch):
    """The lines a failed check shows for the reference of `name` with one edit."""
    _, fn = learners(name, old, new)
    monkeypatch.setattr(api, "_passed", {})
    with pytest.raises(CheckFailed) as info:
        check(name, fn)
    return info.value.lines


def test_the_line_that_raised_and_the_shapes_on_it(monkeypatch):
    lines = lines_of("AdditiveScore", "self.W2(s).unsqueeze(1)", "self.W2(s)", monkeypatch)
    assert lines[0].startswith("✘ AdditiveScore: case [B=2, T=5, d_s=6, d_h=6]: raised RuntimeError: The size of tensor a (5)")
    assert lines[1:6] == ["    it raised at this line of your code in forward:",
                          "      hidden = torch.tanh(self.W1(H) + self.W2(s))  # (B, T, d_a)",
                          "    where",
                          "      self.W1(H): (2, 5, 4) float32",
                          "      self.W1: Linear(in_features=6, out_features=4, bias=False)"]
    assert "      H: (2, 5, 6) float32; the docstring says (B, T, d_h)" in lines
    assert "      self.W2(s): (2, 4) float32" in lines and "      s: (2, 6) float32; the docstring says (B, d_s)" in lines


def test_an_index_on_the_wrong_axis_shows_the_sizes(monkeypatch):
    lines = lines_of("permutation_gap", "(f(x[:, perm]) - f(x)[:, perm])", "(f(x[perm]) - f(x)[perm])", monkeypatch)
    assert "IndexError: index 5 is out of bounds for dimension 0 with size 2" in lines[0]
    assert "      x: (2, 6, 8) float32; the docstring says (B, T, d)" in lines
    assert "      perm: (6,) int64, values 0 to 5" in lines


def test_a_dim_is_named_by_the_docstrings_axes(monkeypatch):
    lines = lines_of("KVCache", "torch.cat([self.keys[i], k], dim=2), torch.cat([self.values[i], v], dim=2)",
                     "torch.cat([self.keys[i], k], dim=1), torch.cat([self.values[i], v], dim=1)", monkeypatch)
    assert "      self.keys[i]: (3, 2, 3, 4) float32; the docstring says (B, h, T_cached, d_k)" in lines
    assert lines[-1] == "    dim=1 is axis h of self.keys[i]'s (B, h, T_cached, d_k)"


def test_nothing_is_said_when_the_traceback_never_reaches_the_learners_code():
    from autograder.checks.raised import raised_at

    try:
        torch.zeros(2) + torch.zeros(3)
    except RuntimeError as e:
        assert raised_at(e, None)[1].strip() == "torch.zeros(2) + torch.zeros(3)"  # this test file is nobody's library
    assert raised_at(RuntimeError("made, never raised"), None) == ()


# ---------------------------------------------------------------- what the text requires


def test_a_missing_raise_costs_its_part(monkeypatch):
    _, fn = learners("shift_matrix", """    if d_model % 2:
        raise ValueError("a shift is a linear map of the encoding only for an even d_model")
""", "")
    report = check_exercise(registry.get("shift_matrix"), fn, hidden=True)
    assert report.part_ok("M_k") and not report.part_ok("odd d_model raises") and 0 < report.score < report.exercise.points
    failure = report.failures()[0]
    assert failure.problem.startswith("raised IndexError: ") and failure.problem.endswith(", where the text asks for a ValueError")
    _, fn = learners("shift_matrix", 'raise ValueError("a shift', 'return None  # ("a shift')
    assert check_exercise(registry.get("shift_matrix"), fn).failures()[0].problem == \
        "returned where the text asks it to raise a ValueError (read the docstring: these inputs are not allowed)"


def test_inputs_are_printed_with_four_significant_digits():
    from autograder.checks.cases import Call
    from autograder.checks.comparing import describe_inputs

    assert describe_inputs(Call((torch.tensor([[-1.391, 0.20346]]), torch.tensor([3, 4]))), ["x", "ids"]) == [
        "x: (1, 2) float32 = [[-1.391, 0.2035]]", "ids: (2,) int64 = [3, 4]"]


def test_a_model_among_the_inputs_is_one_line_not_its_repr():
    from autograder.checks.cases import Call
    from autograder.checks.comparing import describe_inputs

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double().eval()
    assert describe_inputs(Call((model, 5)), ["model", "steps"]) == [
        "model: a Sequential with 26 float64 parameters, in eval mode", "steps: 5"]


def test_a_fitted_constant_needs_more_entries_than_one():
    want = torch.tensor(1.5)
    assert relate([(torch.tensor(2.1), want)]) == ""  # any two numbers differ by a constant factor and offset
    assert relate([(want * 2, want)]) == "Your output is the reference's times 2."
    g = torch.Generator().manual_seed(4)
    losses = [torch.rand((), generator=g) + 1 for _ in range(3)]
    assert relate([(x * 0.37268, x) for x in losses]) == "Your output is the reference's times a constant, 0.3727."


def test_nothing_of_a_hidden_case_is_said():
    ex, fn = learners("rnn_forward", """        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)
        outputs.append(h_t)""", """        outputs.append(h_t)
        h_t = rnn_cell(x[:, t], h_t, W_ih, W_hh, b_ih, b_hh)""")
    hidden = [c for c in ex.cases() if c.hidden]
    only_hidden = type(ex)(**{**vars(ex), "cases": lambda: hidden})
    assert check_exercise(only_hidden, fn, hidden=True).failures()[0].relation == ""


def test_an_axis_of_the_wrong_input_size_is_named_by_the_docstrings_axes():
    ex, fn = learners("sample_next", "return logits.argmax(dim=-1)", "return logits.argmax(dim=0)")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.problem == "the output has shape (12,), expected (8,)"
    assert failure.relation == ("Your output's axis 0 runs along V (size 12) where the reference's runs along B (size 8): "
                                "a sum, a softmax or an index over the wrong axis would do that.")


def test_right_on_every_case_but_one_kind():
    ex, fn = learners("attention_weights", '''    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
''', "")
    ex = type(ex)(**{**vars(ex), "mistakes": ()})
    report = check_exercise(ex, fn)
    assert [r.ok for r in report.results if r.case.part == "no mask"] == [True, True, True]
    assert report.failures()[0].relation == "Your code is right on every case but those labelled with 'mask'."
    assert check_exercise(ex, fn, hidden=True).failures()[0].relation == ""  # a hidden case failed too: nothing said


def test_reading_the_line_that_raised_is_bounded_in_time():
    from autograder.checks.raised import raised_at

    class Endless(torch.nn.Module):
        def forward(self, x):
            while True:
                pass

    layer, x = Endless(), torch.zeros(2)  # noqa: F841 (read from the frame)
    try:
        layer.training and x + torch.zeros(3) + layer(x)
    except RuntimeError as e:
        assert raised_at(e, None, seconds=0.5) == ()


# ---------------------------------------------------------------- the reference's own source edited


def test_a_number_one_step_off_is_named():
    ex, fn = learners("warmup_lr", "step = max(step, 1)", "step = step + 1")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.problem == "the output is 0.00159375, expected 0.0015625"
    assert failure.relation == ("Your warmup_lr(step) is the reference's warmup_lr(step + 1): off by one step "
                                "(is the count 0-based or 1-based?).")


def test_a_formula_grouped_another_way_is_named():
    ex, fn = learners("length_penalty", "((5 + length) / 6) ** alpha", "(5 + length) / 6 ** alpha")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.problem == "the output is 2.04767, expected 1"
    assert failure.relation.startswith(
        "Your output is what the reference's ((5 + length) / 6) ** alpha computes when grouped as (5 + length) / (6 ** alpha), "
        "where the reference's groups it as ((5 + length) / 6) ** alpha")


def test_a_residual_left_out_is_named():
    ex = registry.get("EncoderLayer")
    layer = ex.reference.__wrapped__  # the class (the reference gives its norms random weights)
    fn = mutant(layer, swap("self.norm2(x + self.dropout(self.ffn(x)))", "self.norm2(self.dropout(self.ffn(x)))"), "learner's")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.problem.startswith("the output is off by up to")
    assert failure.relation == ("Your output is what the reference computes with x + self.dropout(self.ffn(x)) as "
                                "self.dropout(self.ffn(x)): the residual connection (its input x added back) is left out.")
    fn = mutant(layer, swap("self.norm2(x + self.dropout(self.ffn(x)))", "x + self.dropout(self.ffn(x))"), "learner's")
    assert "the norm norm2 is left out" in check_exercise(ex, fn).failures()[0].relation


def test_a_size_read_from_another_axis_is_named():
    ex, fn = learners("attention_scores", "d_k = q.size(-1)", "d_k = k.shape[1]")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.problem == "the output is off by up to 0.3775 (tolerance 1e-05 + 0.0001·|expected|)"
    assert failure.relation == ("Your output is what the reference computes with T_k (size 6) where the text's d_k (size 8) "
                                "belongs: a size read from the wrong axis.")


def test_a_mean_over_another_axis_is_named(monkeypatch):
    ex = registry.get("LayerNorm")
    fn = mutant(ex.reference.__wrapped__, swap("x.mean(dim=-1, keepdim=True)", "x.mean(dim=-2, keepdim=True)"), "learner's")
    monkeypatch.setattr(ex, "mistakes", ())
    assert check_exercise(ex, fn).failures()[0].relation == (
        "Your output is what the reference computes with its mean over dim -2 instead of dim -1: a mean over the wrong axis.")


def test_two_edits_that_compute_the_same_thing_are_not_named(monkeypatch):
    from autograder.checks.edits import the_one
    from autograder.checks.running import run_call

    ex, fn = learners("attention_scores", "d_k = q.size(-1)", "d_k = k.shape[1]")
    case = next(c for c in ex.cases() if c.label.startswith("q (1, 5, 16)"))  # T_q = T_k = 5: either is the size read
    monkeypatch.setattr(ex, "cases", lambda: [case])
    assert "where the text's" not in check_exercise(ex, fn).failures()[0].relation
    outcome = run_call(ex.kind, ex.train_mode, fn, case.make(), False)
    assert the_one(ex, [(case, outcome)], lambda ex, case: [("a", "a.", fn)]) == "a."
    assert the_one(ex, [(case, outcome)], lambda ex, case: [("a", "a.", fn), ("a twin", "a.", fn)]) == "a."
    assert the_one(ex, [(case, outcome)], lambda ex, case: [("a", "a.", fn), ("b", "b.", fn)]) == ""


def test_a_catalogue_sentence_quoting_code_the_learner_did_not_write_gives_way_to_what_is_observed():
    ex, fn = learners("attention_scores", "k.transpose(-2, -1)", "k.transpose(1, 2)")  # fine on (B, T, d), not with heads
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.diagnosis == "" and "reverses every axis" not in failure.relation
    assert failure.relation.startswith("Your code is right on every case whose inputs have 3 axes and wrong on every case with 4")
    k_dot_T = next(m for m in ex.mistakes if m.name == "k_dot_T")  # the learner who wrote k.T is told so
    assert check_exercise(ex, k_dot_T.impl).failures()[0].diagnosis == k_dot_T.says


def test_the_grader_reads_the_learner_s_cell_before_quoting_code_of_theirs():
    """Grading has no learner's function to read (impl is None): it finds the cell that defines the exercise in the
    submission, and says no catalogue sentence about a construct that cell does not have."""
    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.checks.running import run_call
    from autograder.grading.verdict import learner_source

    ex, fn = learners("attention_scores", "k.transpose(-2, -1)", "k.transpose(1, 2)")
    k_dot_T = next(m for m in ex.mistakes if m.name == "k_dot_T")
    cases = ex.cases()
    for impl, cell, says_k_T in [(fn, "def attention_scores(q, k):\n    return q @ k.transpose(1, 2)", False),
                                 (k_dot_T.impl, "def attention_scores(q, k):\n    return q @ k.T", True)]:
        nb = new_notebook(cells=[new_code_cell("import torch"), new_code_cell(cell), new_code_cell("check('attention_scores', attention_scores)")])
        source = learner_source(nb, "attention_scores")
        assert source == cell
        outcomes = [run_call(ex.kind, ex.train_mode, impl, c.make(), c.grad) for c in cases]
        failure = check_exercise(ex, None, hidden=True, outcomes=outcomes, source=source).failures()[0]
        assert (failure.diagnosis == k_dot_T.says) == says_k_T, failure
    assert learner_source(new_notebook(cells=[new_code_cell("x = 1")]), "attention_scores") is None


def test_edits_reach_into_the_functions_the_reference_calls():
    ex = registry.get("scaled_dot_product_attention")  # its reference leaves the scores to attention_scores
    source = ("def scaled_dot_product_attention(q, k, v, mask=None):\n    d_k = k.shape[1]\n"
              "    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)\n    if mask is not None:\n"
              "        scores = scores.masked_fill(~mask, float('-inf'))\n"
              "    weights = torch.softmax(scores, dim=-1)\n    if mask is not None:\n        weights = weights.nan_to_num(0.0)\n"
              "    return weights @ v, weights\n")
    namespace = {"math": math, "torch": torch}
    exec(source, namespace)
    failure = check_exercise(ex, namespace["scaled_dot_product_attention"]).failures()[0]
    assert failure.relation == ("Your outputs are what the reference computes with T_k (size 6) where the text's d_k "
                                "(size 8) belongs: a size read from the wrong axis.")


def test_swapped_arguments_are_named_and_two_orders_that_compute_alike_are_not_told_apart():
    ex, fn = learners("pair_counts", "zip(ids, ids[1:])", "zip(ids[1:], ids)")
    assert check_exercise(ex, fn).failures()[0].relation == (
        "Your output is what the reference computes with zip(ids, ids[1:]) as zip(ids[1:], ids): its arguments ids "
        "and ids[1:] swapped.")
    ex, fn = learners("train_bpe", "merge_pair(ids, pair, new_id)", "merge_pair(pair, ids, new_id)")
    said = check_exercise(ex, fn).failures()[0].relation
    assert "as merge_pair(ids, new_id, pair) or as merge_pair(pair, ids, new_id), which compute the same here" in said


def test_an_unsqueeze_left_out_is_named_by_the_error_it_raises():
    ex, fn = learners("sinusoidal_positional_encoding", ".unsqueeze(1)", "")
    said = check_exercise(ex, fn).failures()[0].relation
    assert said.startswith("Your code raised what the reference raises with torch.arange(")
    assert "the unsqueeze left out" in said


def test_the_student_distribution_says_what_the_edits_say_from_their_stored_outcomes():
    import warnings

    from autograder import ship
    from autograder.reference_data import exercise_from

    for name, old, new in [("warmup_lr", "step = max(step, 1)", "step = step + 1"),
                           ("KVCache", "self.keys[0].size(2)", "self.keys[0].size(3)")]:
        ex, fn = learners(name, old, new)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stored = exercise_from(ship.exercise_data(ex))
        assert stored.reference is None
        here, there = check_exercise(ex, fn).failures()[0], check_exercise(stored, fn).failures()[0]
        assert there.relation == here.relation and ("off by one" in here.relation or "T_cached" in here.relation)


def test_an_edit_that_loops_is_left_out_by_counting_its_turns_not_by_the_clock(monkeypatch):
    """encode's loop over a word ends at its break; the edit that makes it a continue loops. It is stopped after
    MOST_TURNS turns of its loops, whatever the machine's speed, and names nothing."""
    import ast

    from autograder.checks import edits
    from autograder.checks.cases import CheckTimeout

    monkeypatch.setattr(edits, "EDIT_SECONDS", 30)  # a backstop: past it, the message says seconds, not turns
    ex = registry.get("encode")
    no_break = lambda node: [("continue", "continue.", ast.Continue())] if isinstance(node, ast.Break) else []
    [(name, _, impl)] = edits.edited(ex.reference, no_break)
    case = ex.cases()[0]
    outcome = edits._run_edit(ex, impl, case, None)
    assert isinstance(outcome.error, CheckTimeout) and f"{edits.MOST_TURNS} loop turns" in str(outcome.error)
    assert impl.edit_turns.left < 0
    assert edits.edit_outcomes(ex, case, lambda ex, case: [(name, "continue.", impl)]) == {}
    outcome = edits._run_edit(ex, edits.compiled(ex.reference, edits.source_tree(ex.reference)), case, None)  # no edit
    assert outcome.error is None and outcome.outputs == edits.reference_outcome(ex, case)[0].outputs


# ---------------------------------------------------------------- issue 59: a name only where the output proves it


def test_a_size_read_from_the_heads_is_named_as_the_heads_not_as_len(monkeypatch):
    """KVCache.length reading size(1), the heads axis: on a case where B = h the catalogue's len (the batch) computes the
    same, and was said; the first case has B != h, and a mistake that is wrong where the learner is right is no name."""
    ex, fn = learners("KVCache", "self.keys[0].size(2)", "self.keys[0].size(1)")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.diagnosis == ""
    assert "with h where the text's T_cached belongs" in failure.relation, failure.relation
    assert all(("B=" not in c.label) or c.make().args[0].B != c.make().args[0].h for c in ex.cases() if not c.hidden)


def test_an_edit_that_goes_wrong_where_the_learner_is_right_is_not_named(monkeypatch):
    """arange(start, T) raises as arange(start + T, start) does once a cache holds positions, but is right where start
    is 0, which the swapped arguments are not: not named so; the catalogue names it."""
    ex, fn = learners("GPT", "torch.arange(start, start + T,", "torch.arange(start, T,")
    failure = check_exercise(ex, fn).failures()[0]
    assert "swapped" not in failure.relation and failure.diagnosis == next(m.says for m in ex.mistakes if m.name == "positions_end_at_T")
    monkeypatch.setattr(ex, "mistakes", ())
    assert "swapped" not in check_exercise(ex, fn).failures()[0].relation


def test_top_k_with_no_cap_at_V_is_not_named_a_size_of_B(monkeypatch):
    """topk(top_k) where top_k > V raises as topk(min(top_k, B)) does; a case with B < top_k < V tells them apart."""
    ex, fn = learners("sample_next", "logits.topk(min(top_k, logits.size(-1)), dim=-1)", "logits.topk(top_k, dim=-1)")
    failure = check_exercise(ex, fn).failures()[0]
    assert failure.diagnosis == next(m.says for m in ex.mistakes if m.name == "top_k_uncapped")
    monkeypatch.setattr(ex, "mistakes", ())
    assert "where the text's V" not in check_exercise(ex, fn).failures()[0].relation


@pytest.mark.parametrize("name, old, new, mistake", [
    ("sample_next", "min(top_k, logits.size(-1))", "min(top_k + 1, logits.size(-1))", "top_k_one_too_many"),
    ("sample_next", "logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]",
     "logits.sort(dim=-1).values[:, top_k - 1 : top_k]", "top_k_smallest"),
    ("sample_next", "logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]",
     "logits.sort(dim=-1, descending=True).values[:, top_k : top_k + 1]", "top_k_one_too_many"),
    ("beam_generate", "return ys[:1], scores[0].item()", "return ys[:1], scores[0].item() / ys[:, idx.size(1):].size(1)",
     "score_normalised"),
    ("get_batch", "(B,), generator=generator).to(", "(B,)).to(", "generator_ignored"),
    ("exact_match", "p = p[: p.index(eos_id) + 1] if eos_id in p else p + [None]\n        hits += p == t[: t.index(eos_id) + 1]",
     "p = p[: p.index(eos_id)] if eos_id in p else p\n        hits += p == t[: t.index(eos_id)]", "before_eos"),
])
def test_mirror_images_are_named_together(name, old, new, mistake):
    """Where the catalogue names a mistake, its mirror image is named too (k - 1 and k + 1, descending and ascending, a
    score normalised or not), also when the learner writes it otherwise than the catalogue's edit."""
    ex, fn = learners(name, old, new)
    report = check_exercise(ex, fn)
    assert report.fraction < 1 and report.failures()[0].diagnosis == next(m.says for m in ex.mistakes if m.name == mistake)


def test_the_mirror_images_of_top_p_and_bpe_are_named():
    from autograder.assignments.a09_bpe_tokenization import encode_whole_text

    ex = registry.get("sample_next")
    fn = mutant(ex.reference, swap("logits = logits.float() / temperature", "logits = logits.float()")
                & swap("torch.multinomial(logits.softmax(dim=-1), 1,", "torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1,"),
                "learner's")
    assert check_exercise(ex, fn).failures()[0].diagnosis == next(m.says for m in ex.mistakes if m.name == "top_p_before_temperature")
    ex = registry.get("encode")
    assert check_exercise(ex, encode_whole_text).failures()[0].diagnosis == next(m.says for m in ex.mistakes if m.name == "whole_text")


def test_a_generator_among_the_inputs_says_its_seed():
    from autograder.checks.comparing import describe_inputs
    from autograder.checks.cases import Call

    lines = describe_inputs(Call((torch.zeros(3),), {"generator": torch.Generator().manual_seed(3)}), ["x"])
    assert lines == ["x: (3,) float32 = [0, 0, 0]", "generator: a torch.Generator seeded 3"]


def test_the_where_list_shows_the_values_of_the_turn_that_raised():
    """A line that assigns to a name raised before assigning it: the name still holds the last turn's value, which the
    where list leaves out; the names the line reads are this turn's."""
    from autograder.checks.raised import raised_at

    def learner(xs):
        out = None
        for x in xs:
            out = x @ torch.ones(3, 2)
        return out

    try:
        learner([torch.zeros(4, 3), torch.zeros(5, 7)])
    except RuntimeError as e:
        lines = raised_at(e, learner)
    assert "  x: (5, 7) float32" in lines and not any(line.strip().startswith("out:") for line in lines), lines


def test_the_device_part_says_what_it_means(monkeypatch):
    ex = registry.get("get_batch")

    def on_the_cpu(data, block_size, B, generator=None):
        starts = torch.randint(len(data) - block_size, (B,), generator=generator)
        index = starts[:, None] + torch.arange(block_size)
        return data.cpu()[index], data.cpu()[index + 1]

    lines, _ = api.explain(check_exercise(ex, on_the_cpu), {})
    part = next(line for line in lines if "part: device" in line)
    assert "not on the CPU, as on a GPU" in part and "device=" in part and "meta" not in part, part


def test_a_cross_attention_residual_that_adds_the_layers_input_is_named():
    """DecoderLayer whose cross-attention adds back the layer's input x, not the self-attention sublayer's output it
    attended with (issue 59: silent on notebook 07), written with names of the learner's own: it fails, and is named."""
    ex, fn = learners("DecoderLayer", """        x = self.norm1(x + self.dropout(attended))
        attended, _ = self.cross_attn(x, memory, memory, src_mask)
        x = self.norm2(x + self.dropout(attended))""", """        after_self = self.norm1(x + self.dropout(attended))
        crossed, _ = self.cross_attn(after_self, memory, memory, src_mask)
        x = self.norm2(x + self.dropout(crossed))""")
    report = check_exercise(ex, fn)
    assert report.fraction < 1
    assert report.failures()[0].diagnosis == next(m.says for m in ex.mistakes if m.name == "cross_residual_from_input")
