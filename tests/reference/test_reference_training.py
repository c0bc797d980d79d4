"""The training recipe of notebook 08 against PyTorch's own pieces."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.dates import date_vocab
from course_lib.tasks import copy_pairs, encode_pairs, letters_vocab, reverse_pairs
from solutions_lib.train import Config, TorchTransformer, load_checkpoint, save_checkpoint, build_model, build_optimizer
from solutions_lib.train import evaluate, fit, moving_average, task_data, trim, update_average
from solutions_lib.training import exact_match, greedy_decode, label_smoothed_cross_entropy, make_masks, shift_right, warmup_lr
from solutions_lib.transformer import Transformer


def test_sanity_tasks_are_seeded_and_correct():
    assert copy_pairs(5, seed=3) == copy_pairs(5, seed=3)
    assert all(s == t for s, t in copy_pairs(20))
    assert all(t == s[::-1] for s, t in reverse_pairs(20))


def test_encode_pairs_ends_targets_with_eos():
    vocab = letters_vocab()
    src, tgt = encode_pairs([("abc", "cba"), ("de", "ed")], vocab)
    assert src.tolist() == [vocab.encode("abc"), vocab.encode("de") + [vocab.pad_id]]
    assert tgt[1].tolist() == vocab.encode("ed", eos=True) + [vocab.pad_id]


def test_shift_right_and_masks():
    tgt = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0]])
    tgt_in = shift_right(tgt, bos_id=1)
    assert tgt_in.tolist() == [[1, 5, 6, 2], [1, 7, 2, 0]]
    src = torch.tensor([[3, 4, 0], [3, 0, 0]])
    src_mask, tgt_mask = make_masks(src, tgt_in)
    assert src_mask.shape == (2, 1, 3) and src_mask[1, 0].tolist() == [True, False, False]
    assert tgt_mask.shape == (2, 4, 4)
    assert not tgt_mask[0].triu(1).any()
    assert tgt_mask[1, 3].tolist() == [True, True, True, False]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_loss_without_smoothing_is_pytorch_cross_entropy(dtype):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 9, dtype=dtype, requires_grad=True)
    target = torch.tensor([[4, 5, 2, 0, 0], [3, 3, 3, 3, 2], [8, 2, 0, 0, 0]])
    ours = label_smoothed_cross_entropy(logits, target, smoothing=0.0)
    theirs = F.cross_entropy(logits.reshape(-1, 9), target.reshape(-1), ignore_index=0)
    torch.testing.assert_close(ours, theirs)
    g1, = torch.autograd.grad(ours, logits)
    g2, = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(g1, g2)


def test_smoothed_loss_is_cross_entropy_against_the_smoothed_distribution():
    torch.manual_seed(1)
    V, eps = 7, 0.2
    logits = torch.randn(2, 3, V, dtype=torch.float64)
    target = torch.tensor([[3, 4, 2], [5, 2, 0]])
    total, n = 0.0, 0
    for b in range(2):
        for t in range(3):
            y = int(target[b, t])
            if y == 0:
                continue
            q = torch.full((V,), eps / (V - 2), dtype=torch.float64)
            q[y], q[0] = 1 - eps, 0.0
            assert math.isclose(q.sum().item(), 1.0)
            total += -(q * logits[b, t].log_softmax(-1)).sum().item()
            n += 1
    assert label_smoothed_cross_entropy(logits, target, eps).item() == pytest.approx(total / n)


def test_warmup_lr_peaks_at_warmup():
    lrs = [warmup_lr(s, 512, 4000) for s in range(0, 20000, 10)]
    assert max(lrs) == pytest.approx(warmup_lr(4000, 512, 4000)) == pytest.approx((512 * 4000) ** -0.5)
    assert warmup_lr(0, 512) == warmup_lr(1, 512)


def test_greedy_decode_stops_and_pads_and_exact_match():
    torch.manual_seed(0)
    model = Transformer(9, 9, d_model=16, h=2, d_ff=32, N=1, dropout=0.0)
    src = torch.tensor([[3, 4, 5], [6, 7, 0]])
    ys = greedy_decode(model, src, max_len=6)
    assert ys.shape[0] == 2 and 2 <= ys.shape[1] <= 7 and (ys[:, 0] == 1).all()
    for row in ys.tolist():
        if 2 in row:
            assert all(x == 0 for x in row[row.index(2) + 1 :])
    pred = torch.tensor([[5, 6, 2, 4], [5, 2, 0, 0], [5, 6, 6, 6]])
    tgt = torch.tensor([[5, 6, 2], [5, 6, 2], [5, 6, 2]])
    assert exact_match(pred, tgt) == pytest.approx(1 / 3)


def test_torch_transformer_wrapper_matches_the_course_masks():
    # nn.Transformer's wrapper: the same model shape and the same interface as ours.
    torch.manual_seed(0)
    model = TorchTransformer(11, 11, d_model=16, h=2, d_ff=32, N=1, dropout=0.0).eval()
    src = torch.tensor([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    src_mask, tgt_mask = make_masks(src, tgt_in)
    logits = model(src, tgt_in, src_mask, tgt_mask)
    assert logits.shape == (2, 3, 11) and torch.isfinite(logits).all()
    # the padded source position does not change the output
    src2 = src.clone(); src2[0, 3] = 10
    torch.testing.assert_close(model(src2, tgt_in, src_mask, tgt_mask)[0], logits[0])


def test_checkpoint_round_trip(tmp_path):
    cfg = Config(task="copy", d_model=16, h=2, d_ff=32, N=1)
    vocab = letters_vocab()
    model = build_model(cfg, vocab)
    optimizer, scheduler = build_optimizer(model, cfg)
    for _ in range(3):
        optimizer.step(); scheduler.step()
    path = tmp_path / "c.pt"
    save_checkpoint(path, model, optimizer, scheduler, 3, cfg, {"step": [3]})
    other = build_model(cfg, vocab)
    opt2, sched2 = build_optimizer(other, cfg)
    step, history = load_checkpoint(path, other, opt2, sched2)
    assert step == 3 and history == {"step": [3]} and sched2.last_epoch == 3
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))


def test_the_moving_average_follows_the_weights_and_survives_a_checkpoint(tmp_path):
    cfg = Config(task="copy", d_model=16, h=2, d_ff=32, N=1, ema=0.9)
    vocab = letters_vocab()
    model = build_model(cfg, vocab)
    average = moving_average(model, cfg.ema)
    before = [p.detach().clone() for p in average.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    update_average(average, model, cfg.ema)
    for a, old, w in zip(average.parameters(), before, model.parameters()):
        torch.testing.assert_close(a, 0.9 * old + 0.1 * w)
        assert not a.requires_grad
    assert moving_average(model, 0.0) is None
    optimizer, scheduler = build_optimizer(model, cfg)
    save_checkpoint(tmp_path / "c.pt", model, optimizer, scheduler, 1, cfg, {}, average)
    other, other_average = build_model(cfg, vocab), build_model(cfg, vocab)
    load_checkpoint(tmp_path / "c.pt", other, ema=other_average)
    assert all(torch.equal(a, b) for a, b in zip(average.state_dict().values(), other_average.state_dict().values()))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))


def test_the_commands_evaluation_scores_what_greedy_decoding_scores():
    # evaluate() scores greedy decoding in one teacher-forced pass; a half-trained model
    # (some targets right, some wrong) must get the score of greedy_decode and exact_match.
    cfg = Config(task="copy", n_train=2000, n_test=200, d_model=32, h=2, d_ff=64, N=1, batch_size=32,
                 max_steps=150, eval_every=10_000, ema=0.0)
    result = fit(cfg, progress=False, log=lambda line: None)
    model, vocab = result["model"], result["vocab"]
    _, _, (src, tgt) = task_data(cfg)
    ys = greedy_decode(model, trim(src), max_len=tgt.size(1), bos_id=vocab.bos_id, eos_id=vocab.eos_id, pad_id=vocab.pad_id)
    greedy = exact_match(ys[:, 1:], tgt, vocab.eos_id)
    assert 0.1 < greedy < 0.9, f"the model should be half trained, exact match {greedy}"
    assert evaluate(model, src, tgt, batch_size=64, pad_id=vocab.pad_id, bos_id=vocab.bos_id) == greedy


def test_date_vocab_covers_iso_dates():
    vocab = date_vocab()
    assert vocab.decode(vocab.encode("2021-03-03", eos=True)) == "2021-03-03"
