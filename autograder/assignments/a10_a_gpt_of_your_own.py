"""Checks for notebook 10: a GPT of your own.

Block and GPT are checked as modules with the reference's weights (random LayerNorm gains
and shifts, so that a misplaced norm shows), without and with a KV cache that already holds
some positions (course_lib.gpt.PrefilledCache). The sampling checks compare draws: the
reference and the learner draw with torch.multinomial from the same seeded generator, over
many rows, so that a wrong distribution shows in some of them. generate runs on
course_lib.gpt.TinyGPT, a small model with random weights, with the learner's KVCache; KVCache
itself is a class the check builds and hands to course_lib.gpt.CacheSteps, which extends it
step by step and returns what it saw. beam_generate runs on TinyGPT in float64 with its logits
halved, flatter distributions where greedy decoding often misses the likeliest continuation.
"""
import torch

from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims, on_the_meta_device, with_random_norms
from course_lib.gpt import CacheSteps, PrefilledCache, TinyGPT  # what the student distribution can load (autograder.fixtures)
from solutions_lib import gpt
from solutions_lib.gpt import data

NOTEBOOK = "10_a_gpt_of_your_own"


# ---------------------------------------------------------------- Block


def _block_case(seed, B, T, d_model, h, d_ff, cached=0, dropout=None, hidden=False):
    """cached: how many positions the cache already holds (0: no cache); the block is layer 1 of 3. dropout: the
    rate, run in training mode right after torch.manual_seed(seed) (Call.seed), in the part "dropout"."""
    def make():
        x = Draw(seed).randn(B, T, d_model)
        if dropout is not None:
            return Call((x,), init=(d_model, h, d_ff, dropout), seed=seed, train=True)
        if not cached:
            return Call((x,), init=(d_model, h, d_ff))
        return Call((x,), {"cache": PrefilledCache(3, B, h, cached, d_model // h, seed), "i": 1}, init=(d_model, h, d_ff))

    label = dims(B=B, T=T, d_model=d_model, h=h, d_ff=d_ff) + (f", a KV cache holding {cached} positions" if cached else "")
    if dropout is not None:
        return Case(label + f", dropout={dropout} in training mode", make, part="dropout", hidden=hidden)
    return Case(label, make, part="with a KV cache" if cached else "no cache", hidden=hidden)


def block_cases():
    return [
        _block_case(1, 2, 5, 8, 2, 16), _block_case(2, 1, 3, 12, 3, 24), _block_case(3, 3, 7, 16, 4, 32),
        _block_case(4, 2, 1, 8, 2, 16, cached=4), _block_case(5, 2, 3, 12, 3, 24, cached=2),
        _block_case(6, 2, 6, 8, 2, 16, hidden=True), _block_case(7, 1, 2, 16, 4, 32, cached=5, hidden=True),
        _block_case(8, 2, 5, 8, 2, 16, dropout=0.3), _block_case(9, 3, 4, 12, 3, 24, dropout=0.2, hidden=True),
        on_the_meta_device(_block_case(10, 2, 5, 8, 2, 16)), on_the_meta_device(_block_case(20, 1, 4, 12, 3, 24), hidden=True),
    ]


# ---------------------------------------------------------------- GPT


def gpt_case(seed, B, T, V, d_model, h, N, block_size, cached=0, dropout=None, hidden=False):
    """Always with targets: the check compares the loss too (a None in place of the loss cannot be compared).
    dropout: the rate, run in training mode right after torch.manual_seed(seed) (Call.seed), in the part "dropout";
    None: dropout=0.1 in eval mode."""
    def make():
        r = Draw(seed)
        idx = r.integers(0, V, B, T)
        sizes = dict(d_model=d_model, h=h, d_ff=2 * d_model, N=N, block_size=block_size, dropout=dropout or 0.1)
        kwargs = {"targets": r.integers(0, V, B, T)}
        if cached:
            kwargs["cache"] = PrefilledCache(N, B, h, cached, d_model // h, seed)
        if dropout is not None:
            return Call((idx,), kwargs, init=(V,), init_kwargs=sizes, seed=seed, train=True)
        return Call((idx,), kwargs, init=(V,), init_kwargs=sizes)

    label = dims(B=B, T=T, V=V, d_model=d_model, h=h, N=N, block_size=block_size)
    label += ", with targets" + (f", a KV cache holding {cached} positions" if cached else "")
    if dropout is not None:
        return Case(label + f", dropout={dropout} in training mode", make, part="dropout", hidden=hidden)
    return Case(label, make, part="with a KV cache" if cached else "logits and loss", hidden=hidden)


def gpt_cases():
    return [
        gpt_case(11, 2, 5, 11, 8, 2, 2, 8), gpt_case(12, 3, 8, 13, 12, 3, 1, 8),
        gpt_case(13, 1, 6, 9, 16, 4, 2, 10),
        gpt_case(14, 2, 2, 11, 8, 2, 2, 8, cached=5), gpt_case(15, 1, 1, 7, 12, 3, 2, 9, cached=8),
        gpt_case(16, 2, 7, 10, 8, 2, 3, 7, hidden=True),
        gpt_case(17, 3, 3, 12, 16, 4, 1, 12, cached=6, hidden=True),
        gpt_case(18, 2, 5, 11, 8, 2, 2, 8, dropout=0.3), gpt_case(19, 3, 4, 9, 12, 3, 1, 6, dropout=0.2, hidden=True),
        # the positions too must be made on idx's device: on the meta device an embedding handed CPU positions raises
        # as on a GPU (autograder.checks.running.layers_keep_to_meta)
        on_the_meta_device(gpt_case(10, 2, 5, 11, 8, 2, 2, 8)), on_the_meta_device(gpt_case(20, 3, 4, 9, 12, 3, 1, 6), hidden=True),
    ]


# ---------------------------------------------------------------- get_batch


def _batch_case(seed, n, block_size, B, V=50, hidden=False):
    """The call runs right after torch.manual_seed(seed + 1000) (Call.seed): code that ignores the generator handed
    over draws from PyTorch's global generator, the same windows every time, and other ones than the generator's."""
    def make():
        r = Draw(seed)
        return Call((r.integers(0, V, n), block_size, B), {"generator": torch.Generator().manual_seed(seed)}, seed=seed + 1000)

    return Case(f"data of {n} tokens, " + dims(block_size=block_size, B=B), make, hidden=hidden, grad=False)


def batch_cases():
    return [
        _batch_case(21, 40, 8, 4), _batch_case(22, 100, 16, 6), _batch_case(23, 12, 11, 5), _batch_case(24, 30, 1, 3),
        _batch_case(25, 64, 10, 8, hidden=True), _batch_case(26, 17, 16, 4, hidden=True),
        on_the_meta_device(_batch_case(27, 30, 6, 4)), on_the_meta_device(_batch_case(28, 20, 5, 3), hidden=True),
    ]


# ---------------------------------------------------------------- nats_per_char


def _nats_case(loss, n_tokens, n_chars, hidden=False, tensor=False):
    # a tensor loss (as a training loop has) must come back a tensor
    shown = f"torch.tensor({loss})" if tensor else f"{loss}"
    return Case(f"loss {shown} nats per token, {n_tokens} tokens, {n_chars} characters",
                lambda: Call((torch.tensor(loss) if tensor else loss, n_tokens, n_chars)), hidden=hidden, grad=False)


def nats_cases():
    return [
        _nats_case(2.0, 500, 1000), _nats_case(1.37, 812, 2000), _nats_case(3.1, 150, 100), _nats_case(0.5, 70, 70),
        _nats_case(1.8, 300, 640, tensor=True), _nats_case(0.93, 64, 131, hidden=True),
    ]


# ---------------------------------------------------------------- markov_nats_per_char


def _chain(r, V, n, order):
    """n tokens of a random Markov chain of the given order over V tokens: a few likely successors per context."""
    tables = torch.softmax(3 * r.randn(*([V] * (order + 1))), dim=-1)
    ids = r.integers(0, V, n)
    draws = torch.rand(n, generator=r.g)
    for t in range(order, n):
        p = tables[tuple(ids[t - order : t].tolist())].cumsum(0)
        ids[t] = int(min((p < draws[t]).sum().item(), V - 1))
    return ids


def _markov_case(seed, V, n_train, n_test, order, k=0.1, chain_order=1, hidden=False):
    def make():
        r = Draw(seed)
        ids = _chain(r, V, n_train + n_test, chain_order)
        return Call((ids[:n_train], ids[n_train:], order, V, int(2.4 * n_test)), {"k": k})

    label = f"V={V}, {n_train} training and {n_test} test tokens, order={order}, k={k}"
    return Case(label, make, part="unigram" if order == 0 else "bigram and trigram", hidden=hidden, grad=False)


def markov_cases():
    return [
        _markov_case(31, 6, 300, 80, 0), _markov_case(32, 5, 400, 100, 1), _markov_case(33, 4, 500, 120, 2, k=0.5, chain_order=2),
        _markov_case(34, 8, 200, 60, 1, k=1.0), _markov_case(35, 7, 250, 70, 0, k=0.01, hidden=True),
        _markov_case(36, 5, 600, 150, 2, k=0.2, chain_order=2, hidden=True),
    ]


# ---------------------------------------------------------------- sample_next


def _sample_case(seed, B, V, part, hidden=False, scale=2.0, **settings):
    def make():
        logits = scale * Draw(seed).randn(B, V)
        return Call((logits,), settings | {"generator": torch.Generator().manual_seed(seed)})

    label = dims(B=B, V=V) + ", " + ", ".join(f"{k}={v}" for k, v in settings.items())
    return Case(label, make, part=part, hidden=hidden, grad=False)


def sample_cases():
    return [
        _sample_case(41, 8, 12, "temperature", temperature=0), _sample_case(42, 200, 10, "temperature", temperature=1.0),
        _sample_case(43, 200, 10, "temperature", temperature=0.5), _sample_case(44, 200, 8, "temperature", temperature=2.0),
        _sample_case(45, 200, 20, "top-k", temperature=1.0, top_k=5), _sample_case(46, 50, 9, "top-k", top_k=1),
        _sample_case(47, 100, 6, "top-k", temperature=0.8, top_k=10),
        _sample_case(54, 6, 40, "top-k", scale=0.5, temperature=2.0, top_k=30),  # B < top_k < V: no size stands for another
        _sample_case(48, 200, 15, "top-p", top_p=0.5), _sample_case(49, 200, 12, "top-p", temperature=1.5, top_p=0.9),
        _sample_case(50, 200, 20, "top-p", temperature=0.7, top_k=8, top_p=0.8),
        _sample_case(51, 150, 14, "temperature", temperature=1.3, hidden=True),
        _sample_case(52, 150, 25, "top-k", temperature=0.9, top_k=3, hidden=True),
        _sample_case(53, 150, 16, "top-p", temperature=1.1, top_p=0.7, hidden=True),
    ]


# ---------------------------------------------------------------- KVCache


def _cache_case(seed, N, B, h, d_k, new, hidden=False):
    label = dims(N=N, B=B, h=h, d_k=d_k) + f", new positions per step {new}"
    return Case(label, lambda: Call((CacheSteps(N, B, h, d_k, new, seed),), init=(N,)), hidden=hidden, grad=False)


def cache_cases():
    return [
        _cache_case(71, 2, 3, 2, 4, [3, 1, 1, 1]), _cache_case(72, 1, 1, 3, 2, [1, 1, 1]),
        _cache_case(73, 3, 2, 1, 5, [4, 2, 1]), _cache_case(74, 2, 3, 2, 3, [2, 1, 1, 1, 1], hidden=True),
    ]


# ---------------------------------------------------------------- generate


COUNTED = "without gradients, each position once"  # the part whose model counts its calls (TinyGPT's counting)
COUNTING = ", the model counting its calls with gradients on and the positions it computes"


def _generate_case(seed, B, T, new, part="greedy", use_cache=True, block_size=12, dropout=0.0, hidden=False, counting=False,
                   **sampling):
    """dropout: a TinyGPT with this dropout, handed over in training mode (as training leaves it), generating right
    after torch.manual_seed(seed) (the part "eval mode"). counting: a TinyGPT that counts its calls with gradients on
    and the positions it computes (the part COUNTED: generate runs without gradients, and its cache computes each
    position once)."""
    def make():
        V = 13
        idx = Draw(seed).integers(0, V, B, T)
        drawn = sampling | {"generator": torch.Generator().manual_seed(seed)} if sampling else {"temperature": 0}
        kwargs = {"use_cache": use_cache} | drawn
        model = TinyGPT(V, block_size=block_size, seed=seed, dropout=dropout, counting=counting)
        return Call((model.train(), idx, new), kwargs, seed=seed if dropout else None)

    label = f"a small model with random weights (block_size={block_size}), prompt " + dims(B=B, T=T)
    label += f", {new} new tokens, use_cache={use_cache}" + "".join(f", {k}={v}" for k, v in sampling.items())
    if dropout:
        label += f", dropout={dropout}, the model handed over in training mode"
    label += COUNTING if counting else ""
    return Case(label, make, part=COUNTED if counting else "eval mode" if dropout else part, hidden=hidden, grad=False)


def generate_cases():
    return [
        _generate_case(61, 3, 4, 6), _generate_case(62, 2, 1, 10), _generate_case(63, 2, 3, 8, use_cache=False),
        _generate_case(64, 2, 5, 15, part="beyond block_size"),
        _generate_case(65, 2, 6, 10, part="beyond block_size", use_cache=False),
        _generate_case(66, 4, 2, 8, part="sampling", temperature=0.9, top_k=5),
        _generate_case(67, 3, 5, 7, hidden=True), _generate_case(68, 1, 9, 9, part="beyond block_size", hidden=True),
        _generate_case(69, 3, 3, 9, part="sampling", temperature=1.2, top_p=0.9, hidden=True),
        _generate_case(70, 3, 4, 6, dropout=0.5), _generate_case(71, 2, 3, 7, dropout=0.5, hidden=True),
        _generate_case(72, 2, 4, 6, counting=True), _generate_case(73, 3, 2, 5, counting=True, hidden=True),
    ]


# ---------------------------------------------------------------- beam_generate


def _flatter_gpt(V, block_size, seed, dropout=0.0, counting=False):
    """TinyGPT in float64 with its logits halved: flatter distributions, where greedy decoding often misses the
    likeliest continuation."""
    model = TinyGPT(V, block_size=block_size, seed=seed, dropout=dropout, counting=counting).double()
    with torch.no_grad():
        model.unembed.mul_(0.5)
    return model


def _beam_case(seed, V, T, new, beam_size, block_size=12, part=None, greedy_worse=False, dropout=0.0, hidden=False,
               counting=False):
    """A small random GPT in float64 (course_lib.gpt.TinyGPT) and a prompt of T tokens. A beam of at least
    V ** (new - 1) hypotheses keeps every continuation but the last token's, so it finds the likeliest of all
    V ** new (the part "every continuation in the beam"; tests/reference/test_reference_beam_gpt.py checks it
    against an exhaustive search, and that greedy decoding finds a less likely one where greedy_worse says so).
    dropout: a model with this dropout, handed over in training mode, searched right after torch.manual_seed(seed)
    (the part "eval mode"). counting: a model that counts its calls with gradients on and the positions it computes
    (the part COUNTED)."""
    def make():
        idx = Draw(seed).integers(0, V, 1, T)
        model = _flatter_gpt(V, block_size, seed, dropout, counting)
        return Call((model.train(), idx, new, beam_size), seed=seed if dropout else None)

    wide = beam_size >= V ** (new - 1)
    part = COUNTED if counting else "eval mode" if dropout else part or ("every continuation in the beam" if wide else "a narrow beam")
    label = (dims(V=V, block_size=block_size) + f", prompt T={T}, {new} new tokens, beam_size={beam_size}"
             + (f" (all {V ** new} continuations)" if wide else "")
             + ("; greedy finds a less likely one" if greedy_worse else "")
             + (f", dropout={dropout}, the model handed over in training mode" if dropout else "") + (COUNTING if counting else ""))
    return Case(label, make, part=part, hidden=hidden, grad=False)


def beam_generate_cases():
    return [
        _beam_case(145, 5, 3, 5, 3, greedy_worse=True),
        _beam_case(150, 4, 2, 3, 16, greedy_worse=True),
        _beam_case(216, 6, 2, 4, 4, greedy_worse=True),
        _beam_case(138, 3, 1, 4, 2, greedy_worse=True),
        _beam_case(153, 5, 3, 6, 3, block_size=5, part="beyond block_size"),
        _beam_case(102, 5, 2, 3, 25, greedy_worse=True, hidden=True),
        _beam_case(133, 4, 2, 5, 3, greedy_worse=True, hidden=True),
        _beam_case(154, 4, 4, 5, 2, block_size=6, part="beyond block_size", hidden=True),
        _beam_case(171, 5, 3, 4, 3, dropout=0.5), _beam_case(172, 4, 2, 5, 3, dropout=0.5, hidden=True),
        _beam_case(173, 4, 3, 4, 3, counting=True), _beam_case(174, 5, 2, 5, 2, counting=True, hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("nats_per_char", data.nats_per_char, points=1, cases=nats_cases),
    Exercise("markov_nats_per_char", data.markov_nats_per_char, points=3, cases=markov_cases,
             parts={"unigram": 1, "bigram and trigram": 2}, depends_on=("nats_per_char",)),
    Exercise("get_batch", data.get_batch, points=2, cases=batch_cases, returns=("x", "y"), parts={"main": 3, "device": 1}),
    Exercise("Block", with_random_norms(gpt.Block), points=3, cases=block_cases, kind="module",
             parts={"no cache": 2, "with a KV cache": 1, "dropout": 0.5, "device": 0.5}),
    Exercise("GPT", with_random_norms(gpt.GPT), points=3, cases=gpt_cases, kind="module",
             parts={"logits and loss": 3, "with a KV cache": 1, "dropout": 0.5, "device": 0.5}, depends_on=("Block",), returns=("logits", "loss")),
    Exercise("sample_next", gpt.sample_next, points=3, cases=sample_cases, parts={"temperature": 1, "top-k": 1, "top-p": 1}),
    Exercise("KVCache", gpt.KVCache, points=2, cases=cache_cases, kind="class",
             returns=("lengths read", "keys extend returned", "values extend returned")),
    Exercise("generate", gpt.generate, points=3, cases=generate_cases, returns=("ids", "state after generate"), state_after=True,
             parts={"greedy": 2, "beyond block_size": 1, "sampling": 1, "eval mode": 0.5, COUNTED: 0.5},
             depends_on=("sample_next", "KVCache")),
    Exercise("beam_generate", gpt.beam_generate, points=3, cases=beam_generate_cases, state_after=True,
             returns=("ids", "score", "state after beam_generate"),
             parts={"every continuation in the beam": 1, "a narrow beam": 2, "beyond block_size": 1, "eval mode": 0.5, COUNTED: 0.5},
             depends_on=("KVCache",)),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("Block", "post_norm"), ("sample_next", "temperature_multiplied")]
