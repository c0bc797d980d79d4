"""Random inputs for the checks, drawn at check time from fixed seeds."""
import dataclasses

import torch

from autograder.checks.cases import DEVICE, Case

META = "meta"


class Draw:
    """A seeded source of tensors: Draw(seed).randn(2, 3) is the same on every machine."""

    def __init__(self, seed):
        self.g = torch.Generator().manual_seed(seed)

    def randn(self, *shape, dtype=torch.float32):
        return torch.randn(shape, generator=self.g, dtype=torch.float64).to(dtype)

    def integers(self, low, high, *shape):
        return torch.randint(low, high, shape, generator=self.g)

    def mask(self, *shape, p_allowed=0.7):
        """A random boolean mask (True = allowed) with at least one allowed key per row."""
        m = torch.rand(shape, generator=self.g) < p_allowed
        first = self.integers(0, shape[-1], *shape[:-1])
        return m | torch.nn.functional.one_hot(first, shape[-1]).bool()


def dims(**sizes):
    """A readable case label: dims(B=2, T=5) -> 'B=2, T=5'."""
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def with_random_norms(cls):
    """A reference factory whose LayerNorms (the modules with parameters gamma and beta) get random
    gamma and beta, so that a norm misplaced or left out shows in the outputs."""

    def build(*init, **sizes):
        module = cls(*init, **sizes)
        with torch.no_grad():
            for m in module.modules():
                if all(isinstance(getattr(m, name, None), torch.nn.Parameter) for name in ("gamma", "beta")):
                    m.gamma.normal_(1.0, 0.5)
                    m.beta.normal_(0.0, 0.5)
        return module

    build.__name__ = build.__qualname__ = cls.__name__
    build.__wrapped__ = cls  # a catalog's edit applies to the class itself
    return build


def on_meta(call):
    """The call with its tensors (and, through Call.device, a module exercise's module) on PyTorch's meta device, where
    a tensor has a shape, a dtype and a device but no values."""
    def move(x):
        return x.to(META) if isinstance(x, torch.Tensor) else x

    return dataclasses.replace(call, args=tuple(map(move, call.args)), kwargs={k: move(v) for k, v in call.kwargs.items()},
                               device=META if call.init is not None else call.device)


def on_the_meta_device(case, hidden=False):
    """A case of the part "device": `case`'s inputs on the meta device. Code that makes a tensor without the device of
    its inputs makes it on the CPU, and a CPU sees that: the output is on the wrong device, or mixing the two raises."""
    return Case(case.label + ", on the meta device", lambda: on_meta(case.make()), part=DEVICE, hidden=hidden, grad=False)
