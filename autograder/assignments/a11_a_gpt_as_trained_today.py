"""Checks for notebook 11: a GPT as trained today.

The modules are checked with the reference's weights, every RMSNorm's gain random (so that a gain left out or
misplaced shows) and, in ModernGPT, the projections into the residual stream random too: as built they are zero, and
every block would compute the identity. RotaryAttention and ModernGPT run without and with a KV cache that already holds
some positions (course_lib.gpt.PrefilledCache), their new positions starting at cache.length. apply_rotary gets positions
that start past 0, or skip some, as a (T,) tensor. newton_schulz runs on wide, square and tall matrices, in float32
(outputs only: float32 gradients through the iteration differ between two right implementations by more than the
tolerance) and float64 (outputs and gradients), with 5 steps and others. split_parameters hands back lists of a model's
parameters, which the check compares by name and order (autograder.checks.running.by_name), on course_lib.modern's
VariantGPT with several sets of changes: with biases, LayerNorms and learned positions, or as ModernGPT is.
"""
import torch
from torch import nn

from autograder.assignments.a10_a_gpt_of_your_own import gpt_case  # notebook 10's GPT cases: the same call, sizes and parts
from autograder.checks.cases import Call, Case, Exercise
from autograder.inputs import Draw, dims, on_the_meta_device
from course_lib.gpt import PrefilledCache  # what the student distribution can load (autograder.fixtures)
from course_lib.modern import VariantGPT
from solutions_lib.gpt import modern

NOTEBOOK = "11_a_gpt_as_trained_today"


def with_random_gains(cls, residual=False):
    """A reference factory whose RMSNorms get random gains, N(1, 0.5^2), and, with `residual`, whose projections into
    the residual stream (attn.W_o, ffn.W_2: zero as built) get random weights, N(0, 0.02^2)."""

    def build(*init, **sizes):
        module = cls(*init, **sizes)
        with torch.no_grad():
            for m in module.modules():
                if isinstance(m, modern.RMSNorm):
                    m.weight.normal_(1.0, 0.5)
                if residual and isinstance(m, modern.ModernBlock):
                    m.attn.W_o.weight.normal_(0.0, 0.02)
                    m.ffn.W_2.weight.normal_(0.0, 0.02)
        return module

    build.__name__ = build.__qualname__ = cls.__name__
    build.__wrapped__ = cls  # a catalog's edit applies to the class itself
    return build


def _shape(shape):
    return "(" + ", ".join(map(str, shape)) + ")"


# ---------------------------------------------------------------- RMSNorm


def _rms_case(seed, shape, eps=None, scale=1.0, dtype=torch.float32, part="main", hidden=False, as_built=False):
    """x of `shape` times `scale` (small: eps matters); eps None: the default. as_built: the gain as RMSNorm builds it."""
    def make():
        x = scale * Draw(seed).randn(*shape, dtype=dtype)
        call = Call((x,), init=(shape[-1],), init_kwargs={} if eps is None else {"eps": eps})
        if as_built:
            call.seed, call.as_built = seed, ("weight",)
        return call

    label = f"x of shape {_shape(shape)}" + ("" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}")
    label += f", entries of size {scale:g}" if scale != 1.0 else ""
    label += f", eps={eps:g}" if eps is not None else ""
    label += ", its gain as RMSNorm builds it" if as_built else ""
    return Case(label, make, part=part, hidden=hidden)


def rms_cases():
    return [
        _rms_case(1, (2, 3, 8)), _rms_case(2, (3, 5, 12)), _rms_case(3, (4, 6)), _rms_case(4, (2, 3, 4, 10)),
        _rms_case(5, (3, 4, 7), hidden=True),
        _rms_case(6, (2, 4, 6), scale=1e-3, part="eps"), _rms_case(7, (3, 2, 5), eps=0.1, part="eps"),
        _rms_case(8, (2, 5, 9), scale=1e-2, eps=1e-3, part="eps", hidden=True),
        _rms_case(9, (2, 5, 6), dtype=torch.float64, part="float64"),
        _rms_case(10, (3, 4), scale=1e-3, dtype=torch.float64, part="float64"),
        _rms_case(11, (4, 2, 7), dtype=torch.float64, part="float64", hidden=True),
        _rms_case(12, (2, 3, 6), part="as built", as_built=True), _rms_case(13, (3, 2, 9), part="as built", as_built=True, hidden=True),
    ]


# ---------------------------------------------------------------- apply_rotary


def _rotary_case(seed, B, h, T, d_k, start=0, positions=None, base=None, dtype=torch.float32, part="main", hidden=False):
    """x (B, h, T, d_k); positions start .. start + T - 1, or the list `positions`; base None: the default."""
    def make():
        x = Draw(seed).randn(B, h, T, d_k, dtype=dtype)
        at = torch.tensor(positions) if positions is not None else torch.arange(start, start + T)
        return Call((x, at), {} if base is None else {"base": base})

    label = dims(B=B, h=h, T=T, d_k=d_k) + ("" if dtype == torch.float32 else f", {str(dtype).removeprefix('torch.')}")
    label += f", positions {', '.join(map(str, positions))}" if positions is not None else f", positions {start}..{start + T - 1}"
    label += f", base={base:g}" if base is not None else ""
    return Case(label, make, part=part, hidden=hidden)


def rotary_cases():
    return [
        _rotary_case(21, 2, 3, 5, 8, start=3), _rotary_case(22, 1, 2, 4, 6), _rotary_case(23, 3, 1, 6, 4, start=10),
        _rotary_case(24, 2, 4, 3, 10, positions=[0, 4, 9]), _rotary_case(25, 3, 2, 7, 6, start=5, hidden=True),
        _rotary_case(26, 2, 3, 5, 8, start=1, dtype=torch.float64, part="float64"),
        _rotary_case(27, 1, 4, 6, 12, start=4, dtype=torch.float64, part="float64", hidden=True),
        _rotary_case(28, 2, 3, 4, 8, start=2, base=100.0, part="base"),
        _rotary_case(29, 3, 2, 5, 6, start=6, base=500.0, part="base", hidden=True),
        on_the_meta_device(_rotary_case(30, 2, 3, 5, 8, start=3)),
        on_the_meta_device(_rotary_case(31, 3, 2, 4, 6, start=1), hidden=True),
    ]


# ---------------------------------------------------------------- RotaryAttention


def _attention_case(seed, B, T, d_model, h, start=0, qk_norm=True, cached=0, hidden=False):
    """x (B, T, d_model), its positions start .. start + T - 1; cached: how many positions the cache already holds
    (then start = cached), the module layer 1 of 3."""
    def make():
        x = Draw(seed).randn(B, T, d_model)
        kwargs = {"cache": PrefilledCache(3, B, h, cached, d_model // h, seed), "i": 1} if cached else {}
        return Call((x, torch.arange(start, start + T)), kwargs, init=(d_model, h), init_kwargs={"qk_norm": qk_norm})

    label = dims(B=B, T=T, d_model=d_model, h=h) + f", positions {start}..{start + T - 1}, qk_norm={qk_norm}"
    label += f", a KV cache holding {cached} positions" if cached else ""
    part = "with a KV cache" if cached else "QK-norm" if qk_norm else "without QK-norm"
    return Case(label, make, part=part, hidden=hidden)


def attention_cases():
    return [
        _attention_case(41, 2, 5, 12, 3, start=3), _attention_case(42, 3, 4, 16, 2), _attention_case(43, 1, 6, 24, 4, start=2),
        _attention_case(44, 1, 3, 20, 2, start=5, hidden=True),
        _attention_case(45, 2, 5, 12, 3, start=1, qk_norm=False), _attention_case(46, 3, 6, 24, 2, start=4, qk_norm=False),
        _attention_case(47, 1, 4, 12, 2, start=2, qk_norm=False, hidden=True),
        _attention_case(48, 2, 1, 12, 3, start=6, cached=6), _attention_case(49, 3, 4, 16, 2, start=5, cached=5),
        _attention_case(50, 1, 2, 24, 4, start=7, cached=7, hidden=True),
        on_the_meta_device(_attention_case(51, 2, 5, 12, 3, start=3)),
        on_the_meta_device(_attention_case(52, 3, 4, 16, 2, start=1), hidden=True),
    ]


# ---------------------------------------------------------------- ReLU2FeedForward


def _ffn_case(seed, B, T, d_model, d_ff, train=False, hidden=False):
    """train: the module in training mode, right after torch.manual_seed(seed) (Call.seed), where notebook 07's dropout
    inside the network would drop some of the hidden layer (the part "no dropout inside")."""
    def make():
        x = Draw(seed).randn(B, T, d_model)
        return Call((x,), init=(d_model, d_ff), seed=seed, train=True) if train else Call((x,), init=(d_model, d_ff))

    label = dims(B=B, T=T, d_model=d_model, d_ff=d_ff) + (", in training mode" if train else "")
    return Case(label, make, part="no dropout inside" if train else "main", hidden=hidden)


def ffn_cases():
    return [_ffn_case(61, 2, 5, 8, 20), _ffn_case(62, 3, 4, 12, 7), _ffn_case(63, 1, 6, 10, 16),
            _ffn_case(64, 2, 3, 10, 24, hidden=True),
            _ffn_case(65, 3, 5, 8, 20, train=True), _ffn_case(66, 2, 4, 12, 16, train=True, hidden=True)]


# ---------------------------------------------------------------- ModernGPT


def residual_as_built(case, N):
    """`case` with every block's attn.W_o and ffn.W_2 as ModernGPT builds them (zero: each block starts as the
    identity), the other weights the reference's."""
    def make():
        call = case.make()
        call.as_built = tuple(f"blocks.{i}.{name}.weight" for i in range(N) for name in ("attn.W_o", "ffn.W_2"))
        call.seed = 7
        return call

    label = case.label + ", the projections into the residual stream as ModernGPT builds them"
    return Case(label, make, part="as built", hidden=case.hidden)


def gpt_cases():
    return [
        residual_as_built(gpt_case(82, 2, 5, 11, 24, 4, 2, 8), N=2), residual_as_built(gpt_case(83, 3, 4, 9, 12, 3, 3, 6), N=3),
        residual_as_built(gpt_case(84, 1, 6, 13, 16, 2, 1, 7, hidden=True), N=1),
        gpt_case(71, 3, 5, 11, 24, 4, 2, 8), gpt_case(72, 3, 7, 13, 12, 2, 1, 9), gpt_case(73, 1, 6, 9, 8, 2, 3, 10),
        gpt_case(74, 3, 2, 11, 24, 4, 2, 9, cached=5), gpt_case(75, 1, 3, 7, 16, 2, 3, 12, cached=8),
        gpt_case(76, 2, 5, 10, 24, 3, 3, 7, hidden=True),
        gpt_case(77, 3, 4, 13, 24, 2, 2, 13, cached=6, hidden=True),
        gpt_case(78, 3, 5, 11, 24, 4, 2, 8, dropout=0.3), gpt_case(79, 2, 4, 9, 24, 3, 1, 6, dropout=0.2, hidden=True),
        # the positions too must be made on idx's device: apply_rotary's angles mix them with the queries' device
        on_the_meta_device(gpt_case(80, 3, 5, 11, 24, 4, 2, 8)), on_the_meta_device(gpt_case(81, 2, 4, 9, 24, 3, 1, 6), hidden=True),
    ]


# ---------------------------------------------------------------- newton_schulz


def _ns_case(seed, m, n, steps=5, scale=1.0, zero=False, dtype=torch.float32, part="wide and square", hidden=False):
    """G (m, n) ~ N(0, scale^2), or zero. Gradients in float64 only: in float32 two right implementations' gradients
    through the iteration differ by more than the tolerance (their outputs stay well within it)."""
    def make():
        G = torch.zeros(m, n, dtype=dtype) if zero else scale * Draw(seed).randn(m, n, dtype=dtype)
        return Call((G,), {"steps": steps})

    label = f"G of shape ({m}, {n})" + ("" if dtype == torch.float32 else f" {str(dtype).removeprefix('torch.')}")
    label += ", all zero" if zero else f", entries of size {scale:g}" if scale != 1.0 else ""
    return Case(label + f", steps={steps}", make, part=part, hidden=hidden, grad=dtype == torch.float64 and not zero)


def ns_cases():
    return [
        _ns_case(91, 4, 7), _ns_case(92, 6, 6), _ns_case(93, 5, 9, scale=0.01), _ns_case(94, 3, 8, scale=100.0, hidden=True),
        _ns_case(95, 8, 3, part="tall"), _ns_case(96, 10, 6, scale=0.01, part="tall"), _ns_case(97, 9, 4, part="tall", hidden=True),
        _ns_case(98, 4, 10, steps=7, part="steps"), _ns_case(99, 3, 8, steps=1, part="steps"),
        _ns_case(100, 9, 4, steps=3, part="steps"), _ns_case(101, 5, 7, steps=2, part="steps", hidden=True),
        _ns_case(102, 4, 9, dtype=torch.float64, part="float64"), _ns_case(103, 7, 4, steps=10, dtype=torch.float64, part="float64"),
        _ns_case(104, 6, 6, steps=3, scale=0.01, dtype=torch.float64, part="float64", hidden=True),
        _ns_case(105, 3, 5, zero=True, part="G = 0"), _ns_case(106, 6, 2, zero=True, part="G = 0", hidden=True),
    ]


# ---------------------------------------------------------------- split_parameters


def _split_case(seed, V, d_model, h, N, changes, untied=False, hidden=False):
    """course_lib.modern's VariantGPT with `changes`, built from torch.manual_seed(seed); untied: its head given a matrix
    of its own."""
    def make():
        torch.manual_seed(seed)
        model = VariantGPT(V, d_model=d_model, h=h, d_ff=2 * d_model, N=N, block_size=8, changes=changes)
        if untied:
            model.head.weight = nn.Parameter(model.tok_embed.weight.detach().clone())
        return Call((model,))

    label = f"a VariantGPT ({dims(V=V, d_model=d_model, h=h, N=N)}) with changes {', '.join(changes) or 'none'}"
    return Case(label + (", its head untied" if untied else ""), make, hidden=hidden, grad=False)


MODERN = ("rms_norm", "rope", "qk_norm", "relu2", "zero_init")  # VariantGPT as ModernGPT is


def split_cases():
    return [
        _split_case(111, 11, 8, 2, 2, MODERN), _split_case(112, 9, 12, 3, 1, ()), _split_case(113, 13, 8, 2, 3, ("rope", "relu2")),
        _split_case(114, 10, 8, 2, 1, MODERN, untied=True),
        _split_case(115, 7, 12, 2, 2, ("rms_norm", "qk_norm"), hidden=True),
    ]


# ---------------------------------------------------------------- the exercises


EXERCISES = [
    Exercise("RMSNorm", with_random_gains(modern.RMSNorm), points=2, cases=rms_cases, kind="module",
             parts={"main": 2, "eps": 1, "float64": 0.5, "as built": 0.5}),
    Exercise("apply_rotary", modern.apply_rotary, points=3, cases=rotary_cases,
             parts={"main": 3, "float64": 0.5, "base": 0.5, "device": 0.5}),
    Exercise("RotaryAttention", with_random_gains(modern.RotaryAttention), points=3, cases=attention_cases, kind="module",
             parts={"QK-norm": 2, "without QK-norm": 1, "with a KV cache": 1, "device": 0.5},
             depends_on=("RMSNorm", "apply_rotary")),
    Exercise("ReLU2FeedForward", modern.ReLU2FeedForward, points=1, cases=ffn_cases, kind="module",
             parts={"main": 2, "no dropout inside": 1}),
    Exercise("ModernGPT", with_random_gains(modern.ModernGPT, residual=True), points=3, cases=gpt_cases, kind="module",
             parts={"logits and loss": 3, "as built": 1, "with a KV cache": 1, "dropout": 0.5, "device": 0.5},
             depends_on=("RMSNorm", "apply_rotary", "RotaryAttention", "ReLU2FeedForward"), returns=("logits", "loss")),
    Exercise("newton_schulz", modern.newton_schulz, points=3, cases=ns_cases,
             parts={"wide and square": 2, "tall": 1, "steps": 1, "float64": 0.5, "G = 0": 0.5}),
    Exercise("split_parameters", modern.split_parameters, points=2, cases=split_cases, returns=("hidden list", "other list")),
]

# The demo's third student makes these two mistakes (exercise, mistake name).
DEMO_MISTAKES = [("apply_rotary", "rotated_backwards"), ("split_parameters", "embedding_in_muon")]
