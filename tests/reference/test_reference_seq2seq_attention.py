"""The reference of notebook 03 (score functions, weights, context, decoder,
seq2seq model) and the data helpers it shares with notebook 08 (dates, tokens)."""
import datetime
import math

import pytest
import torch
import torch.nn.functional as F

from solutions_lib import seq2seq_attention as sa
from course_lib.dates import FORMATS, date_pairs, date_splits, date_vocab, format_date
from course_lib.tokens import CharVocab, pad_batch

SIZES = [(1, 1, 4), (2, 5, 8), (3, 7, 16)]


def inputs(B, T, d, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(B, d, generator=g, dtype=dtype, requires_grad=True)
    H = torch.randn(B, T, d, generator=g, dtype=dtype, requires_grad=True)
    return s, H


def explicit(score, s, H):
    """Loop over batch and positions: score(s_b, h_bi) for each pair."""
    return torch.stack([torch.stack([score(s[b], H[b, i]) for i in range(H.size(1))]) for b in range(H.size(0))])


@pytest.mark.parametrize("B,T,d", SIZES)
def test_dot_and_scaled_dot_match_the_formula(B, T, d):
    s, H = inputs(B, T, d)
    assert sa.dot_score(s, H).shape == (B, T)
    torch.testing.assert_close(sa.dot_score(s, H), explicit(torch.dot, s, H))
    torch.testing.assert_close(sa.scaled_dot_score(s, H), explicit(torch.dot, s, H) / math.sqrt(d))


@pytest.mark.parametrize("B,T,d", SIZES)
def test_general_score_is_s_W_h(B, T, d):
    s, H = inputs(B, T, d)
    H = H[..., : max(1, d - 1)]  # d_h differs from d_s
    score = sa.GeneralScore(d, H.size(-1)).double()
    W = score.W.weight  # (d_s, d_h)
    torch.testing.assert_close(score(s, H), explicit(lambda si, hi: si @ W @ hi, s, H))
    with torch.no_grad():
        score.W.weight.copy_(torch.eye(d, H.size(-1)))
    if H.size(-1) == d:
        torch.testing.assert_close(score(s, H), sa.dot_score(s, H))


@pytest.mark.parametrize("B,T,d", SIZES)
def test_additive_score_is_v_tanh_of_W_concat(B, T, d):
    s, H = inputs(B, T, d)
    score = sa.AdditiveScore(d, d, 5).double()
    W_a = torch.cat([score.W2.weight, score.W1.weight], dim=1)  # W_a [s; h_i] = W2 s + W1 h_i
    v = score.v.weight[0]
    torch.testing.assert_close(score(s, H), explicit(lambda si, hi: v @ torch.tanh(W_a @ torch.cat([si, hi])), s, H))


@pytest.mark.parametrize("B,T,d", SIZES)
def test_cosine_score_matches_pytorch(B, T, d):
    s, H = inputs(B, T, d)
    torch.testing.assert_close(sa.cosine_score(s, H), F.cosine_similarity(s.unsqueeze(1), H, dim=-1))
    scaled = sa.cosine_score(3 * s, 0.5 * H)
    torch.testing.assert_close(scaled, sa.cosine_score(s, H))


def test_cosine_score_of_a_zero_vector_is_zero():
    s, H = inputs(2, 3, 4)
    H = H.detach().clone()
    H[0, 1] = 0
    out = sa.cosine_score(s, H)
    assert torch.isfinite(out).all() and out[0, 1] == 0


def test_location_score_ignores_content_and_keeps_first_positions():
    s, H = inputs(3, 4, 6)
    score = sa.LocationScore(6, max_len=10).double()
    out = score(s, H)
    assert out.shape == (3, 4)
    torch.testing.assert_close(out, (s @ score.W.weight.T)[:, :4])
    torch.testing.assert_close(score(s, torch.randn_like(H)), out)


@pytest.mark.parametrize(
    "score",
    [sa.dot_score, sa.scaled_dot_score, sa.cosine_score, sa.GeneralScore(4, 4).double(), sa.AdditiveScore(4, 4, 3).double(), sa.LocationScore(4, 6).double()],
    ids=["dot", "scaled", "cosine", "general", "additive", "location"],
)
def test_score_gradients(score):
    s, H = inputs(2, 5, 4)
    assert torch.autograd.gradcheck(lambda s, H: score(s, H), (s, H))


def test_attention_weights_sum_to_one_and_respect_the_mask():
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = torch.rand(4, 6, generator=g) > 0.4
    mask[:, 0] = True
    alpha = sa.attention_weights(scores, mask)
    torch.testing.assert_close(alpha.sum(-1), torch.ones(4, dtype=torch.float64))
    assert (alpha[~mask] == 0).all()
    torch.testing.assert_close(sa.attention_weights(scores), torch.softmax(scores, dim=-1))
    assert torch.autograd.gradcheck(lambda x: sa.attention_weights(x, mask), (scores.requires_grad_(),))


def test_context_vector_is_the_weighted_sum():
    s, H = inputs(3, 5, 4)
    alpha = torch.softmax(torch.randn(3, 5, dtype=torch.float64), dim=-1).requires_grad_()
    a = sa.context_vector(alpha, H)
    torch.testing.assert_close(a, torch.einsum("bt,btd->bd", alpha, H))
    torch.testing.assert_close(a, torch.bmm(alpha.unsqueeze(1), H).squeeze(1))
    assert torch.autograd.gradcheck(sa.context_vector, (alpha, H))


def test_decoder_step_follows_the_equations():
    torch.manual_seed(0)
    step = sa.AttentionDecoderStep(vocab_size=9, d_emb=4, d_h=6)
    y, s_prev, H = torch.tensor([1, 5]), torch.randn(2, 6), torch.randn(2, 7, 6)
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, 4:] = False
    logits, s, alpha = step(y, s_prev, H, mask)
    s_want = step.cell(step.embedding(y), s_prev)
    e = step.attention(s_want, H).masked_fill(~mask, float("-inf"))
    alpha_want = torch.softmax(e, dim=-1)
    a = (alpha_want.unsqueeze(-1) * H).sum(1)
    torch.testing.assert_close(s, s_want)
    torch.testing.assert_close(alpha, alpha_want)
    torch.testing.assert_close(logits, step.out(torch.cat([a, s_want], dim=-1)))
    assert (alpha[1, 4:] == 0).all()


def test_seq2seq_ignores_padding():
    """The same sentence, alone and in a batch padded by a longer one, gives the same outputs."""
    torch.manual_seed(0)
    model = sa.Seq2SeqAttention(vocab_size=12, d_emb=5, d_h=7).eval()
    short, long = [4, 5, 6], [7, 8, 9, 10, 11, 3]
    tgt_in = torch.tensor([[1, 4, 5, 6]])
    alone, alpha_alone = model(torch.tensor([short]), tgt_in)
    padded = torch.tensor([short + [0, 0, 0], long])
    both, alpha_both = model(padded, tgt_in.expand(2, -1))
    torch.testing.assert_close(both[0], alone[0])
    torch.testing.assert_close(alpha_both[0, :, :3], alpha_alone[0])
    assert (alpha_both[0, :, 3:] == 0).all()
    assert both.shape == (2, 4, 12) and alpha_both.shape == (2, 4, 6)


def test_greedy_decode_matches_teacher_forcing_on_its_own_output():
    torch.manual_seed(0)
    model = sa.Seq2SeqAttention(vocab_size=10, d_emb=4, d_h=8).eval()
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    ids, alpha = sa.greedy_decode(model, src, max_len=5, bos_id=1, eos_id=2, pad_id=0)
    L = ids.size(1) - 1
    assert 1 <= L <= 5 and ids.shape == (2, 1 + L) and alpha.shape == (2, L, 4)
    assert (ids[:, 0] == 1).all()
    for b in range(2):
        out = ids[b, 1:].tolist()
        n = out.index(2) + 1 if 2 in out else L  # the generated tokens up to <eos>
        assert all(i == 0 for i in out[n:])
        n_src = int((src[b] != 0).sum())
        logits, alpha_tf = model(src[b : b + 1, :n_src], ids[b : b + 1, :n])
        assert logits.argmax(-1)[0].tolist() == out[:n]
        torch.testing.assert_close(alpha[b, :n, :n_src], alpha_tf[0])
        assert (alpha[b, :n, n_src:] == 0).all()


class _Scripted:
    """A stand-in model whose decoder emits script[:, t] at step t and alpha = one-hot(t)."""

    def __init__(self, script, T_src):
        self.script, self.T_src, self.fed = torch.tensor(script), T_src, []

    def encode(self, src):
        B = src.size(0)
        return torch.zeros(B, self.T_src, 1), torch.zeros(B, dtype=torch.long), src != 0

    def decoder(self, y, t, H, mask):
        self.fed.append(y.tolist())
        logits = F.one_hot(self.script[:, t[0]], 10).float()
        return logits, t + 1, F.one_hot(t % self.T_src, self.T_src).float()


def test_greedy_decode_pads_after_eos_and_stops_when_all_ended():
    model = _Scripted([[5, 2, 7, 7, 7], [6, 6, 2, 7, 7]], T_src=3)
    ids, alpha = sa.greedy_decode(model, torch.ones(2, 3, dtype=torch.long), max_len=5)
    assert ids.tolist() == [[1, 5, 2, 0], [1, 6, 6, 2]]
    assert model.fed == [[1, 1], [5, 6], [2, 6]]  # each step feeds the token generated last
    assert alpha.shape == (2, 3, 3) and alpha[0].argmax(-1).tolist() == [0, 1, 2]
    ids, alpha = sa.greedy_decode(_Scripted([[5, 6, 7], [5, 6, 7]], T_src=3), torch.ones(2, 3, dtype=torch.long), max_len=2, bos_id=4)
    assert ids.tolist() == [[4, 5, 6], [4, 5, 6]] and alpha.shape == (2, 2, 3)  # no <eos>: max_len tokens
    ids, alpha = sa.greedy_decode(model, torch.ones(2, 3, dtype=torch.long), max_len=0)
    assert ids.tolist() == [[1], [1]] and alpha.shape == (2, 0, 3)


# ---------------------------------------------------------------- data


def test_date_pairs_are_deterministic_and_correct():
    pairs = date_pairs(300, seed=5)
    assert pairs == date_pairs(300, seed=5) and pairs != date_pairs(300, seed=6)
    for source, target in pairs:
        day = datetime.date.fromisoformat(target)
        assert datetime.date(1950, 1, 1) <= day <= datetime.date(2049, 12, 31)
        assert source in {format_date(day, f) for f in FORMATS}


def test_formats_examples():
    day = datetime.date(2021, 3, 3)
    assert {f: format_date(day, f) for f in FORMATS} == {f: f for f in FORMATS}


def test_splits_share_no_day():
    train, test = date_splits(2000, 500, seed=0)
    assert len(train) == 2000 and len(test) == 500
    assert not {t for _, t in train} & {t for _, t in test}
    assert (train, test) == date_splits(2000, 500, seed=0)


def test_vocab_round_trip_and_specials():
    vocab = date_vocab()
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    for source, target in date_pairs(200, seed=1):
        assert vocab.decode(vocab.encode(source)) == source
        ids = vocab.encode(target, bos=True, eos=True)
        assert ids[0] == vocab.bos_id and ids[-1] == vocab.eos_id and vocab.decode(ids) == target
    assert vocab.decode([vocab.stoi["7"], vocab.eos_id, vocab.stoi["1"]]) == "7"


def test_pad_batch():
    vocab = CharVocab.from_texts(["abc"])
    ids, lengths = pad_batch([vocab.encode("abc"), vocab.encode("a"), []])
    assert ids.dtype == torch.long and ids.shape == (3, 3)
    assert lengths.tolist() == [3, 1, 0]
    assert (ids[1, 1:] == 0).all() and (ids[2] == 0).all()
    assert vocab.decode(ids[0]) == "abc"
