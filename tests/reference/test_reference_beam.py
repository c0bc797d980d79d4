"""Beam search (notebook 08) against a brute-force scorer of this file's own: every target a tiny model can write,
up to max_len tokens, scored by one teacher-forced pass and GNMT's length penalty written out here."""
import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from autograder import registry
from autograder.assignments.a08_training_a_transformer import sequences, tiny_model
from solutions_lib.training import beam_search, greedy_decode, length_penalty
from solutions_lib.transformer import Transformer

BOS, EOS, PAD = 1, 2, 0


def every_target(V, max_len):
    """Every target beam search chooses among: y_1 .. y_L ending with <eos> (L <= max_len, no <eos> before), or
    max_len tokens without <eos>; any other token of the vocabulary, <pad> and <bos> included, is a plain token."""
    plain = [v for v in range(V) if v != EOS]
    ended = [list(body) + [EOS] for L in range(1, max_len + 1) for body in itertools.product(plain, repeat=L - 1)]
    return ended + [list(body) for body in itertools.product(plain, repeat=max_len)]


def brute_force_scores(model, src, targets, alpha):
    """{tuple(target): log p(target | src) / ((5 + L) / 6) ** alpha}, each target teacher-forced behind <bos>."""
    model.eval()
    scores = {}
    with torch.no_grad():
        for L in sorted({len(t) for t in targets}):
            group = [t for t in targets if len(t) == L]
            y = torch.tensor([[BOS] + t for t in group])
            src_b = src.expand(len(group), -1)
            log_p = F.log_softmax(model(src_b, y[:, :-1], (src_b != PAD).unsqueeze(1)), dim=-1)
            total = log_p.gather(-1, y[:, 1:, None]).squeeze(-1).sum(-1)
            scores |= {tuple(t): s / ((5 + L) / 6) ** alpha for t, s in zip(group, total.tolist())}
    return scores


def random_setting(seed):
    """A random tiny model (vocabulary 4 to 6, sharper or flatter, ending sooner or later), source, max_len and alpha."""
    g = torch.Generator().manual_seed(seed)
    V, max_len = int(torch.randint(4, 7, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
    if V == 6 and max_len == 4:
        max_len = 3  # 781 targets would slow the test for nothing
    scale, eos_bias, alpha = (float(torch.empty(()).uniform_(a, b, generator=g)) for a, b in ((0.5, 3.0), (-1.5, 1.5), (0.0, 1.5)))
    model = tiny_model(10_000 + seed, V, eos_bias=eos_bias, scale=scale)
    src = torch.randint(3, V, (1, int(torch.randint(1, 5, (1,), generator=g))), generator=g)
    return model, src, V, max_len, alpha


def test_length_penalty():
    for alpha in (0.0, 0.6, 1.0, 2.5):
        assert length_penalty(1, alpha) == pytest.approx(1.0)  # a one-token target is not penalised
        lps = [length_penalty(L, alpha) for L in range(1, 30)]
        assert all(b >= a for a, b in zip(lps, lps[1:]))  # longer targets are divided by more (alpha >= 0)
        for L, lp in enumerate(lps, 1):
            assert lp == pytest.approx(math.exp(alpha * math.log((5 + L) / 6)))
    assert length_penalty(11, 0.0) == 1.0


def test_every_target_is_counted_as_the_catalog_counts():
    for V in (4, 5, 6):
        for max_len in (1, 2, 3, 4):
            targets = every_target(V, max_len)
            assert len(targets) == len({tuple(t) for t in targets}) == sequences(V, max_len)


def test_a_beam_holding_every_target_finds_the_brute_force_optimum_on_200_random_models():
    search_errors = 0
    for seed in range(200):
        model, src, V, max_len, alpha = random_setting(seed)
        scores = brute_force_scores(model, src, every_target(V, max_len), alpha)
        best = max(scores, key=scores.get)
        ys, score = beam_search(model, src, len(scores), max_len, alpha)
        assert ys.dim() == 2 and ys.size(0) == 1 and ys.dtype == torch.long and ys[0, 0] == BOS
        assert tuple(ys[0, 1:].tolist()) == best, (seed, ys, best)
        assert score == pytest.approx(scores[best], abs=1e-9)
        # greedy's target, under the same scoring, is never better
        greedy = tuple(greedy_decode(model, src, max_len)[0, 1:].tolist())
        assert scores[greedy] <= score + 1e-9, seed
        search_errors += scores[greedy] < score - 1e-9
    # the 200 models are not all easy: greedy misses the best target on many of them
    assert search_errors >= 20, search_errors


def test_a_narrow_beam_returns_a_target_and_its_own_score():
    for seed in range(200, 260):
        model, src, V, max_len, alpha = random_setting(seed)
        scores = brute_force_scores(model, src, every_target(V, max_len), alpha)
        for beam_size in (1, 2, 3):
            ys, score = beam_search(model, src, beam_size, max_len, alpha)
            target = tuple(ys[0, 1:].tolist())
            assert target in scores, (seed, beam_size, target)  # ends at its first <eos>, or has max_len tokens
            assert score == pytest.approx(scores[target], abs=1e-9)


def test_a_beam_of_one_is_greedy_decoding():
    for seed in range(260, 300):
        model, src, V, max_len, alpha = random_setting(seed)
        assert torch.equal(beam_search(model, src, 1, max_len, alpha)[0], greedy_decode(model, src, max_len)), seed


class Counting(torch.nn.Module):
    """A model that counts its calls and the hypotheses each decoder call gets."""

    def __init__(self, model):
        super().__init__()
        self.model, self.encodes, self.decodes = model, 0, []

    def encode(self, src, src_mask=None):
        self.encodes += 1
        return self.model.encode(src, src_mask)

    def decode(self, memory, tgt, src_mask=None, tgt_mask=None):
        self.decodes.append(tgt.size(0))
        return self.model.decode(memory, tgt, src_mask, tgt_mask)


def test_the_encoder_runs_once_and_the_decoder_once_a_step_for_the_whole_beam():
    model, src, V, max_len, alpha = random_setting(7)
    counting = Counting(model)
    beam_search(counting, src, 4, max_len, alpha)
    assert counting.encodes == 1
    assert 1 <= len(counting.decodes) <= max_len and counting.decodes[0] == 1 and max(counting.decodes) <= 4


def test_the_course_transformer_of_notebook_07_too():
    torch.manual_seed(0)
    model = Transformer(5, 5, d_model=16, h=2, d_ff=32, N=2, dropout=0.0).double()
    src = torch.tensor([[3, 4, 3, 0]])  # padded: the mask hides the last position
    scores = brute_force_scores(model, src, every_target(5, 3), 0.6)
    ys, score = beam_search(model, src, sequences(5, 3), 3, 0.6)
    assert tuple(ys[0, 1:].tolist()) == max(scores, key=scores.get) and score == pytest.approx(max(scores.values()), abs=1e-9)


@pytest.mark.parametrize("case", registry.get("beam_search").cases(), ids=lambda c: c.label)
def test_the_checks_cases_are_what_their_labels_say(case):
    call = case.make()
    model, src, beam_size, max_len = call.args
    model.eval()  # what the labels say holds for the model as beam_search uses it (some cases hand it over in training mode)
    alpha = call.kwargs["alpha"]
    scores = brute_force_scores(model, src, every_target(model.out.out_features, max_len), alpha)
    ys, score = beam_search(model, src, beam_size, max_len, alpha)
    assert (case.part == "every target in the beam") == (beam_size >= len(scores))
    if beam_size >= len(scores):
        assert tuple(ys[0, 1:].tolist()) == max(scores, key=scores.get)
    greedy = tuple(greedy_decode(model, src, max_len)[0, 1:].tolist())
    assert ("greedy finds a worse target" in case.label) == (scores[greedy] < score - 1e-6), (scores[greedy], score)
