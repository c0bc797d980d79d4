"""solutions_lib.gpt: the block against PyTorch's pre-norm layer, the model's contract, batches,
nats per character, the Markov baselines, sampling, the KV cache, the tokenizer glue; and the command."""
import copy
import hashlib
import math
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import ROOT
from course_lib.text import DATA, shakespeare, split
from solutions_lib import bpe
from solutions_lib.attention import causal_mask
from solutions_lib.fast import fuse
from solutions_lib.gpt import GPT, Block, KVCache, generate, sample_next
from solutions_lib.gpt.data import cached_merges, evaluate, get_batch, learn_merges, markov_nats_per_char, nats_per_char, tokenize
from solutions_lib.gpt.train import Config, learning_rate
from solutions_lib.transformer import encoder_layer_state_from_pytorch
from test_reference_transformer import draw

TINY = dict(d_model=16, h=2, d_ff=32, N=2, block_size=12)


def tiny_gpt(V=11, seed=0, **sizes):
    torch.manual_seed(seed)
    return GPT(V, **(TINY | sizes)).eval()


def ids(*shape, V=11, seed=1):
    return torch.randint(0, V, shape, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def text():
    """The first 30,000 characters of the shipped text, 90 % / 10 %."""
    return split(shakespeare()[:30000])


# ---------------------------------------------------------------- the model


@pytest.mark.parametrize("B, T, d_model, h, d_ff", [(1, 1, 4, 1, 8), (2, 5, 8, 2, 16), (3, 9, 16, 4, 32)], ids=str)
def test_block_matches_pytorchs_pre_norm_layer_with_a_causal_mask(B, T, d_model, h, d_ff):
    torch.manual_seed(2)
    theirs = nn.TransformerEncoderLayer(d_model, h, d_ff, dropout=0.0, activation="relu", batch_first=True,
                                        norm_first=True, dtype=torch.float64).eval()
    for norm in (theirs.norm1, theirs.norm2):  # make the norms' affine part matter
        nn.init.normal_(norm.weight), nn.init.normal_(norm.bias)
    names = {"self_attn": "attn", "norm1": "ln1", "norm2": "ln2"}
    state = {names.get(k.split(".")[0], k.split(".")[0]) + k[k.index("."):]: v
             for k, v in encoder_layer_state_from_pytorch(theirs).items()}
    ours = Block(d_model, h, d_ff).double().eval()
    ours.load_state_dict(state)
    x = draw(B, T, d_model, seed=3)
    out, ref = ours(x), theirs(x, src_mask=~causal_mask(T), is_causal=True)
    torch.testing.assert_close(out, ref)
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)
    mine = torch.autograd.grad((out * weights).sum(), [x, ours.attn.W_q.weight, ours.ln2.gamma, ours.ffn.W_2.weight])
    pytorch = torch.autograd.grad((ref * weights).sum(), [x, theirs.self_attn.in_proj_weight, theirs.norm2.weight,
                                                          theirs.linear2.weight])
    torch.testing.assert_close(mine[0], pytorch[0])
    torch.testing.assert_close(mine[1], pytorch[1][:d_model])
    torch.testing.assert_close(mine[2], pytorch[2])
    torch.testing.assert_close(mine[3], pytorch[3])


def test_gpt_shapes_submodules_and_tied_output():
    model = tiny_gpt()
    logits, loss = model(ids(3, 7))
    assert logits.shape == (3, 7, 11) and loss is None
    assert model.head.weight is model.tok_embed.weight
    assert model.pos_embed.weight.shape == (TINY["block_size"], TINY["d_model"]) and len(model.blocks) == TINY["N"]
    assert all(isinstance(b, Block) for b in model.blocks) and model.head.bias is None
    names = {name for name, _ in model.named_parameters()}
    assert "head.weight" not in names  # one tensor, counted once
    with pytest.raises(ValueError, match="block_size"):
        model(ids(1, TINY["block_size"] + 1))


def test_gpt_initialisation_scales_the_residual_projections():
    model = tiny_gpt(V=300, d_model=64, d_ff=256, N=4)
    assert abs(model.tok_embed.weight.std().item() - 0.02) < 0.002
    assert abs(model.blocks[0].attn.W_q.weight.std().item() - 0.02) < 0.002
    for block in model.blocks:
        for W in (block.attn.W_o, block.ffn.W_2):
            assert abs(W.weight.std().item() - 0.02 / math.sqrt(2 * 4)) < 0.002
            assert not W.bias.any()
        assert torch.equal(block.ln1.gamma, torch.ones(64))


def test_gpt_is_causal_and_its_loss_is_cross_entropy():
    model = tiny_gpt()
    x, y = ids(2, 10, seed=4), ids(2, 10, seed=5)
    logits, loss = model(x, y)
    torch.testing.assert_close(loss, F.cross_entropy(logits.reshape(-1, 11), y.reshape(-1)))
    for t in range(10):
        changed = x.clone()
        changed[:, t] = (changed[:, t] + 1) % 11
        other, _ = model(changed)
        torch.testing.assert_close(other[:, :t], logits[:, :t])  # nothing before t moves
        assert not torch.allclose(other[:, t], logits[:, t])


def test_fused_gpt_computes_the_same():
    model = tiny_gpt()
    fused = fuse(copy.deepcopy(model))
    assert type(fused.blocks[0].attn).__name__ == "FusedMultiHeadAttention"
    x = ids(2, 9, seed=6)
    torch.testing.assert_close(fused(x)[0], model(x)[0], atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- data and measures


def test_the_shipped_text_is_char_rnns_and_splits_as_nanogpt():
    readme = (DATA / "README.md").read_text()
    digest = hashlib.sha256((DATA / "tinyshakespeare.txt").read_bytes()).hexdigest()
    assert f"`{digest}`" in readme
    text = shakespeare()
    train, held_out = split(text)
    assert len(text) == 1_115_394 and train + held_out == text and len(train) == int(len(text) * 0.9)
    with pytest.raises(ValueError):
        split(text, 1.0)


def test_get_batch_windows_targets_and_generator():
    data = torch.arange(100) * 3
    x, y = get_batch(data, 8, 64, generator=torch.Generator().manual_seed(7))
    assert x.shape == y.shape == (64, 8) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    starts = x[:, 0] // 3
    assert (starts >= 0).all() and (starts + 8 <= 99).all()  # y's last token is still inside data
    assert torch.equal(x, data[starts[:, None] + torch.arange(8)]) and torch.equal(y, data[starts[:, None] + torch.arange(1, 9)])
    again, _ = get_batch(data, 8, 64, generator=torch.Generator().manual_seed(7))
    assert torch.equal(x, again)
    every = get_batch(data, 8, 2000, generator=torch.Generator().manual_seed(8))[0][:, 0] // 3
    assert every.min() == 0 and every.max() == 100 - 8 - 1  # every window can be drawn
    with pytest.raises(ValueError):
        get_batch(torch.arange(8), 8, 1)


def test_nats_per_char_is_the_total_over_characters():
    assert nats_per_char(2.0, 500, 1000) == pytest.approx(1.0)
    losses = torch.rand(37, dtype=torch.float64) * 5
    assert nats_per_char(losses.mean().item(), 37, 80) == pytest.approx(losses.sum().item() / 80)


def test_evaluate_scores_every_token_once():
    model = tiny_gpt()
    data = ids(41, seed=9)  # 40 predictions; windows side by side (stride 12): 3 of 12, then the last 4 from the last 12 inputs
    total = 0.0
    for start, first in ((0, 0), (12, 0), (24, 0), (28, 8)):
        x, y = data[start : start + 12], data[start + 1 : start + 13]
        total += F.cross_entropy(model(x[None])[0][0][first:], y[first:], reduction="sum").item()
    assert evaluate(model, data, 12, n_chars=100, stride=12, batch_size=2) == pytest.approx(total / 100, rel=1e-5)
    assert not model.training  # tests/test_fair_eval.py: the default stride, against brute force


def test_unigram_without_smoothing_is_the_entropy_of_the_training_tokens():
    data = ids(500, V=7, seed=10)
    p = torch.bincount(data, minlength=7).double() / len(data)
    entropy = -(p[p > 0] * p[p > 0].log()).sum().item()
    assert markov_nats_per_char(data, data, 0, 7, n_chars=len(data), k=0) == pytest.approx(entropy)
    assert markov_nats_per_char(data, data, 0, 7, n_chars=2 * len(data), k=0) == pytest.approx(entropy / 2)


def test_markov_add_k_probability_by_hand():
    train, test = torch.tensor([0, 1, 0, 1, 0, 2]), torch.tensor([0, 1, 2, 2])
    V, k = 3, 0.5
    count = lambda a, c: sum(1 for i in range(5) if train[i] == a and train[i + 1] == c)  # noqa: E731
    context = lambda a: sum(1 for i in range(5) if train[i] == a)  # noqa: E731
    expected = -sum(math.log((count(a, c) + k) / (context(a) + k * V)) for a, c in [(0, 1), (1, 2), (2, 2)]) / 3
    assert markov_nats_per_char(train, test, 1, V, n_chars=3, k=k) == pytest.approx(expected)


def test_longer_contexts_beat_shorter_ones_on_shakespeare(text):
    tokenizer, train, held_out = tokenize(*text, kind="char")
    scores = [markov_nats_per_char(train, held_out, order, tokenizer.V, len(text[1])) for order in (0, 1, 2)]
    assert scores[2] < scores[1] < scores[0] < math.log(tokenizer.V)


# ---------------------------------------------------------------- sampling and the cache


def test_learning_rate_warms_up_then_follows_a_cosine():
    cfg = Config(lr=1e-3, min_lr=1e-4, warmup=10)
    assert learning_rate(0, 0.0, cfg) == pytest.approx(1e-4) and learning_rate(9, 0.0, cfg) == pytest.approx(1e-3)
    assert learning_rate(10, 0.0, cfg) == pytest.approx(1e-3)
    assert learning_rate(10, 0.5, cfg) == pytest.approx(5.5e-4) and learning_rate(10, 1.0, cfg) == pytest.approx(1e-4)


def test_temperature_zero_and_top_k_one_are_argmax():
    logits = torch.randn(6, 20, generator=torch.Generator().manual_seed(11))
    assert torch.equal(sample_next(logits, temperature=0), logits.argmax(-1))
    assert torch.equal(sample_next(logits, top_k=1, generator=torch.Generator().manual_seed(0)), logits.argmax(-1))


def test_top_k_draws_only_the_k_largest():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(12))
    g = torch.Generator().manual_seed(13)
    drawn = torch.stack([sample_next(logits, temperature=2.0, top_k=5, generator=g) for _ in range(200)], 1)
    allowed = logits.topk(5, dim=-1).indices
    assert all(set(drawn[b].tolist()) <= set(allowed[b].tolist()) for b in range(4))


@pytest.mark.parametrize("top_p", [0.3, 0.6, 0.9])
def test_top_p_keeps_the_smallest_set_that_reaches_p(top_p):
    logits = torch.tensor([[2.0, 0.5, 1.0, -1.0, 0.0, 1.5], [0.0, 3.0, 0.1, 0.2, -2.0, 1.0]])
    probs = logits.softmax(-1)
    g = torch.Generator().manual_seed(14)
    drawn = torch.stack([sample_next(logits, top_p=top_p, generator=g) for _ in range(300)], 1)
    for b in range(2):
        kept, mass = [], 0.0
        for i in probs[b].argsort(descending=True).tolist():  # the most probable first, until the mass reaches p
            kept.append(i)
            mass += probs[b, i].item()
            if mass >= top_p:
                break
        assert set(drawn[b].tolist()) == set(kept)


def test_sampling_is_reproducible_and_rejects_bad_settings():
    logits = torch.randn(3, 10, generator=torch.Generator().manual_seed(15))
    first = sample_next(logits, temperature=0.7, top_p=0.9, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, sample_next(logits, temperature=0.7, top_p=0.9, generator=torch.Generator().manual_seed(1)))
    for bad in ({"temperature": -1}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}):
        with pytest.raises(ValueError):
            sample_next(logits, **bad)


def test_cached_generation_equals_full_recomputation():
    model = tiny_gpt(V=13, seed=16)
    prompt = ids(2, 3, V=13, seed=17)
    cached = generate(model, prompt, 8, use_cache=True, temperature=0)  # 11 tokens, within block_size 12
    full = generate(model, prompt, 8, use_cache=False, temperature=0)
    assert cached.shape == (2, 11) and torch.equal(cached[:, :3], prompt)
    assert torch.equal(cached, full)
    # the cache holds every position's keys, and feeding one token at a time gives the full logits
    cache = KVCache(TINY["N"])
    steps = torch.cat([model(cached[:, t : t + 1], cache=cache)[0] for t in range(11)], dim=1)
    torch.testing.assert_close(steps, model(cached)[0], atol=1e-5, rtol=1e-4)
    assert cache.length == 11 and cache.keys[1].shape == (2, TINY["h"], 11, TINY["d_model"] // TINY["h"])


def test_cached_generation_beyond_block_size_and_with_sampling():
    model = tiny_gpt(V=13, seed=18)
    prompt = ids(1, 5, V=13, seed=19)
    longer = generate(model, prompt, 20, temperature=0)  # 25 tokens > block_size 12
    assert torch.equal(longer, generate(model, prompt, 20, use_cache=False, temperature=0))
    a = generate(model, prompt, 20, temperature=0.9, top_k=5, generator=torch.Generator().manual_seed(2))
    b = generate(model, prompt, 20, use_cache=False, temperature=0.9, top_k=5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b)


# ---------------------------------------------------------------- tokens


def test_learned_merges_are_notebook_09s(text):
    sample = text[0][:6000]
    assert learn_merges(sample, 256 + 40) == bpe.train_bpe(sample, 256 + 40)
    assert learn_merges("ab ab", 300) == bpe.train_bpe("ab ab", 300)  # runs out of pairs


def test_tokenize_trains_on_the_training_part_and_caches_the_merges(text, tmp_path, capsys):
    train_text, held_out_text = text[0][:5000], text[1]
    tokenizer, train, held_out = tokenize(train_text, held_out_text, 256 + 30, folder=tmp_path)
    assert capsys.readouterr().out == f"learning 30 BPE merges on 5,000 characters: the first run only, kept in {tmp_path}\n"
    assert tokenizer.merges == bpe.train_bpe(train_text, 256 + 30) and tokenizer.V == 256 + 30
    assert tokenizer.decode(held_out.tolist()) == held_out_text and train.dtype == torch.long
    assert len(list(tmp_path.iterdir())) == 1
    assert cached_merges(train_text, 256 + 30, tmp_path) == tokenizer.merges  # read back from the file
    assert capsys.readouterr().out == ""  # and says nothing
    chars, train_c, held_out_c = tokenize(*text, kind="char")
    assert chars.V == len(set(text[0])) and chars.decode(held_out_c.tolist()) == text[1]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        chars.encode("Zürich")


def test_course_lib_stand_ins_agree_with_the_reference(text):
    # notebook 10 runs on these where the learner's own 07 and 09 functions are not at hand
    import course_lib.gpt as standin
    from solutions_lib.transformer import FeedForward, LayerNorm

    sample = text[0][:6000]
    assert standin.train_bpe(sample, 256 + 40) == bpe.train_bpe(sample, 256 + 40) == standin.learn_merges(sample, 256 + 40)
    merges = standin.learn_merges(text[0], 256 + 60)
    odd = text[1] + " naïve 🙂 日本語\t\n"
    assert standin.encode(odd, merges) == bpe.encode(odd, merges)
    ids = torch.randint(0, 256 + 60, (300,), generator=torch.Generator().manual_seed(20)).tolist()
    assert standin.decode(ids, merges) == bpe.decode(ids, merges)
    for theirs, ours, x in [(standin.LayerNorm(8), LayerNorm(8), draw(2, 5, 8, seed=21)),
                            (standin.FeedForward(8, 16), FeedForward(8, 16), draw(2, 5, 8, seed=22))]:
        ours, theirs = ours.double().eval(), theirs.double().eval()
        for p in ours.parameters():
            nn.init.normal_(p)
        theirs.load_state_dict(ours.state_dict())
        torch.testing.assert_close(theirs(x), ours(x))


def test_the_check_fixtures_use_a_cache_as_gpt_does():
    from course_lib.gpt import PrefilledCache, TinyGPT

    model = TinyGPT(13, seed=23)
    prompt = ids(2, 4, V=13, seed=24)
    cached, full = generate(model, prompt, 20, temperature=0), generate(model, prompt, 20, use_cache=False, temperature=0)
    assert torch.equal(cached, full) and len(set(cached[0, 4:].tolist())) > 2  # past block_size 12, and not one token over and over
    with pytest.raises(ValueError, match="block_size"):
        model(ids(1, 13, V=13))
    gpt = tiny_gpt(V=13, seed=25)
    cache = PrefilledCache(TINY["N"], 2, TINY["h"], 5, TINY["d_model"] // TINY["h"], seed=26)
    logits, _ = gpt(ids(2, 3, V=13, seed=27), cache=cache)
    assert logits.shape == (2, 3, 13) and cache.length == 8 and cache.values[1].shape == (2, TINY["h"], 8, 8)


# ---------------------------------------------------------------- the command

CLI_TINY = ["--d-model", "16", "--h", "2", "--N", "1", "--d-ff", "32", "--block-size", "16", "--batch-size", "8",
            "--max-steps", "6", "--warmup", "2", "--no-progress"]


def _run(*args, timeout=300, cache=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    if cache:
        env["SEQCOURSE_CACHE"] = str(cache)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_gpt_cli_trains_resumes_and_samples(tmp_path):
    ckpt = tmp_path / "gpt.pt"
    run = _run("-m", "solutions_lib.gpt", "train", "--tokenizer", "char", *CLI_TINY, "--checkpoint", str(ckpt))
    assert run.returncode == 0, run.stdout + run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("held-out ") and " nats per character after " in last, last
    assert " s of training, " in last and last.endswith(" s from the command's start"), last
    assert torch.load(ckpt, weights_only=False)["step"] == 6
    again = _run("-m", "solutions_lib.gpt", "train", "--resume", str(ckpt), "--max-steps", "9", "--checkpoint", str(ckpt),
                 "--no-progress")
    assert again.returncode == 0, again.stdout + again.stderr
    state = torch.load(ckpt, weights_only=False)
    assert state["step"] == 9 and state["history"]["step"] == [6, 9]
    sample = _run("-m", "solutions_lib.gpt", "sample", "--checkpoint", str(ckpt), "--prompt", "ROMEO:", "--tokens", "20",
                  "--temperature", "0.8", "--top-k", "5")
    assert sample.returncode == 0, sample.stdout + sample.stderr
    assert sample.stdout.startswith("ROMEO:") and len(sample.stdout) == len("ROMEO:") + 20 + 1  # one character a token
    bad = _run("-m", "solutions_lib.gpt", "sample", "--checkpoint", str(ckpt), "--prompt", "Zürich")
    assert bad.returncode == 2 and "outside the vocabulary" in bad.stderr
    missing = _run("-m", "solutions_lib.gpt", "sample", "--checkpoint", str(tmp_path / "none.pt"))
    assert missing.returncode == 2 and "no checkpoint at" in missing.stderr


@pytest.mark.slow
def test_gpt_cli_under_torchrun_with_two_cpu_processes(tmp_path):
    ckpt = tmp_path / "ddp.pt"
    run = _run("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "solutions_lib.gpt", "train",
               "--tokenizer", "bpe", "--vocab-size", "264", *CLI_TINY, "--checkpoint", str(ckpt), timeout=600,
               cache=tmp_path / "cache")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".json"]  # one file, whichever process wrote last
    assert "2 process(es)" in run.stdout and "V = 264" in run.stdout
    assert run.stdout.count("nats per character after") == 1  # only process 0 reports
    assert torch.load(ckpt, weights_only=False)["step"] == 6
