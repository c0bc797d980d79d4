"""Beam search on a GPT (notebook 10's beam_generate) against a brute-force scorer of this file's own: every
continuation a tiny model can write, each token scored from the last block_size tokens before it, without a cache."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from autograder import registry
from autograder.assignments.a10_a_gpt_of_your_own import _flatter_gpt
from solutions_lib.gpt import GPT, beam_generate, generate


def brute_force_scores(model, idx, new):
    """{continuation (tuple of new ids): its log-probability after idx (1, T)}, every one of the V ** new."""
    V = model(idx[:, -model.block_size :])[0].size(-1)
    conts = torch.tensor(list(itertools.product(range(V), repeat=new)), dtype=torch.long)
    seqs = torch.cat([idx.expand(len(conts), -1), conts], dim=1)
    total = torch.zeros(len(conts), dtype=torch.float64)
    with torch.no_grad():
        for t in range(idx.size(1), seqs.size(1)):  # token t read from the block_size tokens before it
            window = seqs[:, max(0, t - model.block_size) : t]
            log_p = F.log_softmax(model(window)[0][:, -1].double(), dim=-1)
            total += log_p.gather(-1, seqs[:, t, None]).squeeze(-1)
    return {tuple(c): s for c, s in zip(conts.tolist(), total.tolist())}


def random_setting(seed):
    """A random tiny GPT in float64 (vocabulary 4 to 6, block_size 4 to 12, so some continuations run past it),
    a prompt of 1 to 3 tokens, and 2 to 4 new tokens."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda low, high: int(torch.randint(low, high, (1,), generator=g))
    V, T, new, block_size = draw(4, 7), draw(1, 4), draw(2, 5), draw(4, 13)
    if V == 6 and new == 4:
        new = 3  # 1296 continuations would slow the test for nothing
    return _flatter_gpt(V, block_size, 20_000 + seed), torch.randint(0, V, (1, T), generator=g), V, new


def continuation(ids, idx):
    return tuple(ids[0, idx.size(1) :].tolist())


def test_a_beam_holding_every_prefix_finds_the_brute_force_optimum_on_200_random_models():
    search_errors = past_block_size = 0
    for seed in range(200):
        model, idx, V, new = random_setting(seed)
        scores = brute_force_scores(model, idx, new)
        best = max(scores, key=scores.get)
        ids, score = beam_generate(model, idx, new, V ** (new - 1))
        assert ids.shape == (1, idx.size(1) + new) and ids.dtype == torch.long and torch.equal(ids[:, : idx.size(1)], idx)
        assert continuation(ids, idx) == best, seed
        assert score == pytest.approx(scores[best], abs=1e-9)
        greedy = continuation(generate(model, idx, new, temperature=0), idx)  # under the same scoring, never better
        assert scores[greedy] <= score + 1e-9, seed
        search_errors += scores[greedy] < score - 1e-9
        past_block_size += idx.size(1) + new > model.block_size
    # the 200 models are not all easy, and some of them run past block_size
    assert search_errors >= 20 and past_block_size >= 10, (search_errors, past_block_size)


def test_a_narrow_beam_returns_a_continuation_and_its_own_score_and_a_beam_of_one_decodes_greedily():
    for seed in range(200, 260):
        model, idx, V, new = random_setting(seed)
        scores = brute_force_scores(model, idx, new)
        for beam_size in (1, 2, 3):
            ids, score = beam_generate(model, idx, new, beam_size)
            assert score == pytest.approx(scores[continuation(ids, idx)], abs=1e-9), (seed, beam_size)
        assert torch.equal(beam_generate(model, idx, new, 1)[0], generate(model, idx, new, temperature=0)), seed


class Counting(torch.nn.Module):
    """A model that records the shape of what each call feeds it and whether it came with a cache."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, []
        self.blocks, self.block_size = model.blocks, model.block_size

    def forward(self, idx, targets=None, cache=None):
        self.calls.append((tuple(idx.shape), cache is not None))
        return self.model(idx, targets, cache)


def test_one_model_call_a_step_for_the_whole_beam_with_the_cache_while_it_fits():
    model = Counting(_flatter_gpt(6, 8, 1))
    beam_generate(model, torch.tensor([[1, 2, 3]]), 7, 4)
    assert model.calls[0] == ((1, 3), True)  # the prompt, once
    assert model.calls[1:6] == [((4, 1), True)] * 5  # then the newest token of each live hypothesis, 4 of them
    assert model.calls[6:] == [((4, 8), False)]  # past block_size: the last 8 tokens, without the cache


def test_the_course_gpt_too_and_the_mode_it_found():
    torch.manual_seed(0)
    model = GPT(5, d_model=16, h=2, d_ff=32, N=2, block_size=8).double().train()
    idx = torch.tensor([[3, 1]])
    scores = brute_force_scores(model.eval(), idx, 4)
    ids, score = beam_generate(model.train(), idx, 4, 5**3)
    assert continuation(ids, idx) == max(scores, key=scores.get) and score == pytest.approx(max(scores.values()), abs=1e-9)
    assert model.training


@pytest.mark.parametrize("case", registry.get("beam_generate").cases(), ids=lambda c: c.label)
def test_the_checks_cases_are_what_their_labels_say(case):
    model, idx, new, beam_size = case.make().args
    model.eval()  # what the labels say holds for the model as beam_generate uses it (some cases hand it over in training mode)
    scores = brute_force_scores(model, idx, new)
    V = round(len(scores) ** (1 / new))
    ids, score = beam_generate(model, idx, new, beam_size)
    assert (case.part == "every continuation in the beam") == (beam_size >= V ** (new - 1) and idx.size(1) + new <= model.block_size)
    assert (case.part == "beyond block_size") == (idx.size(1) + new > model.block_size)
    if beam_size >= V ** (new - 1):
        assert continuation(ids, idx) == max(scores, key=scores.get)
    greedy = continuation(generate(model, idx, new, temperature=0), idx)
    assert ("greedy finds a less likely one" in case.label) == (scores[greedy] < score - 1e-6), (scores[greedy], score)
