"""What the course's training commands share: precision, one optimizer step, processes and checkpoints.

The reference's command of notebook 08 (dates) and the GPT commands of notebook 10
(`course_lib.gpt_training`: `python -m course_lib.my_gpt` on your own GPT, and the reference's)
all train with these.
"""
import contextlib
import os

import torch
import torch.distributed as dist
from torch import nn

from course_lib.runtime import cpu_bf16
from course_lib.runtime import device as default_device


def amp_choice(dev, cpu=False):
    """(dtype, why): the autocast dtype on `dev` (None: full precision, float32) and a phrase saying why.

    bfloat16 on a GPU that multiplies it in hardware, compute capability 8.0 or later (A100, A10, L4, RTX 30xx
    and later, H100, H200). torch.cuda.is_bf16_supported() is no guide: it is True on a T4 or a V100 too (Colab's
    usual GPUs), which emulate bfloat16 far slower than they multiply float16, so those get float16, whose narrow
    range needs the gradient scaler (precision). With cpu=True, bfloat16 on a CPU with bfloat16 matrix units
    (runtime.cpu_bf16); full precision on any other CPU, and on MPS.
    """
    if dev.type == "cpu":
        if not cpu:
            return None, "autocast on a GPU only"
        if cpu_bf16():
            return torch.bfloat16, "this CPU multiplies bfloat16 in hardware"
        return None, "this CPU has no bfloat16 matrix units"
    if dev.type != "cuda":
        return None, f"no autocast on {dev.type}"
    major, minor = torch.cuda.get_device_capability(dev)
    gpu = f"{torch.cuda.get_device_name(dev)}, compute capability {major}.{minor}"
    if major >= 8:
        return torch.bfloat16, f"{gpu}, multiplies bfloat16 in hardware"
    return torch.float16, f"{gpu}, has no bfloat16 units"


def amp_dtype(dev, cpu=False):
    """The autocast dtype on `dev` (amp_choice): bfloat16 on GPUs of compute capability 8.0 or later, float16 on
    older CUDA GPUs; with cpu=True bfloat16 on a CPU with bfloat16 matrix units; None (full precision) elsewhere."""
    return amp_choice(dev, cpu)[0]


def describe_precision(dev, cpu=False, enabled=True):
    """What precision(dev, cpu, enabled) trains in, and why, for a run's first line: e.g.
    'under float16 autocast with a gradient scaler (Tesla T4, compute capability 7.5, has no bfloat16 units)'."""
    if not enabled:
        return "in float32 (autocast turned off)"
    low, why = amp_choice(dev, cpu)
    if low is None:
        return f"in float32 ({why})"
    scaler = " with a gradient scaler" if low == torch.float16 else ""
    return f"under {str(low).removeprefix('torch.')} autocast{scaler} ({why})"


def precision(dev, cpu=False, enabled=True):
    """(autocast, scaler) on `dev`: `with autocast():` runs the forward pass in amp_dtype(dev, cpu) (in float32
    when not enabled); the gradient scaler multiplies the loss only under float16, whose small gradients would
    round to 0. describe_precision(dev, cpu, enabled) says which, and why."""
    low = amp_dtype(dev, cpu) if enabled else None
    scaler = torch.amp.GradScaler(dev.type, enabled=low == torch.float16)
    return ((lambda: torch.autocast(dev.type, dtype=low)) if low else contextlib.nullcontext), scaler


def optimizer_step(loss, model, optimizer, scaler, clip):
    """Back-propagate `loss`, clip the gradient norm of `model` at `clip`, and update the parameters."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()


class RunningLoss:
    """The mean training loss since the last reading, summed on the loss's device into one tensor: no step waits
    for a GPU to hand its loss back, and no step leaves a tensor behind. (Keeping every step's 0-dim loss in a
    list pins glibc's heap between the steps' large buffers on a CPU: the GPT command grew by 4 MB a step, to
    18 GB in four minutes.)"""

    def __init__(self):
        self.total, self.count = None, 0

    def add(self, loss):
        if self.total is None:
            self.total = torch.zeros((), device=loss.device)
        self.total += loss.detach()
        self.count += 1

    def read(self):
        """The mean since the last read (nan when no step was added), and start again."""
        mean = (self.total / self.count).item() if self.count else float("nan")
        if self.total is not None:
            self.total.zero_()
        self.count = 0
        return mean


def distributed():
    """(rank, world size); starts the process group under torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0, 1
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def process_device(rank):
    """This process's device: under torchrun on GPUs, the one of its local rank."""
    dev = default_device()
    if dev.type == "cuda" and dist.is_initialized():
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    return dev


def load_checkpoint(path, model, optimizer=None, scheduler=None, map_location="cpu", ema=None):
    """Restore a checkpoint into model (and optimizer, scheduler, ema); returns (step, history)."""
    state = torch.load(path, map_location=map_location, weights_only=False)
    model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if ema is not None:
        ema.load_state_dict(state.get("ema") or state["model"])
    return state["step"], state["history"]
