"""What the course's training loops share: precision, one optimizer step, processes and checkpoints.

The precision is one rule for every loop, notebooks and commands (amp_choice, precision): bfloat16 autocast where the
hardware multiplies it, float16 with a gradient scaler on GPUs without bfloat16 units, float32 elsewhere; autocast
around the forward pass and the loss only. machine_class names what a run is for the figures the text expects of it.
The reference's command of notebook 08 (dates) and the GPT commands of notebook 10 (`course_lib.gpt_training`:
`python -m autograder.my_gpt` on your own GPT, and the reference's) train with the rest too.
"""
import contextlib
import os

import torch
import torch.distributed as dist
from torch import nn

from course_lib.runtime import cpu_bf16
from course_lib.runtime import device as default_device


FORCE = "SEQCOURSE_PRECISION"  # bfloat16, float16 or float32: every training loop in that precision (default: auto)
FORCED = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": None}


def forced():
    """The precision $SEQCOURSE_PRECISION forces ('bfloat16', 'float16', 'float32'), or None (auto: amp_choice's rule).
    ValueError for anything else. Forcing float16 on a CPU runs a T4's path, autocast and gradient scaler, there."""
    value = os.environ.get(FORCE, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in FORCED:
        raise ValueError(f"{FORCE}={value!r}: use auto, {', '.join(FORCED)}")
    return value


def amp_choice(dev, cpu=False):
    """(dtype, why): the autocast dtype on `dev` (None: full precision, float32) and a phrase saying why.

    The course's one precision rule, for every training loop. bfloat16 on a GPU that multiplies it in hardware,
    compute capability 8.0 or later (A100, A10, L4, RTX 30xx and later, H100, H200). torch.cuda.is_bf16_supported()
    is no guide: it is True on a T4 or a V100 too (Colab's usual GPUs), which emulate bfloat16 far slower than they
    multiply float16, so those get float16, whose narrow range needs the gradient scaler (precision). With cpu=True,
    bfloat16 on a CPU with bfloat16 matrix units (runtime.cpu_bf16); full precision on any other CPU, and on MPS.
    cpu=True is for models whose steps are mostly large matrix products (notebook 10's GPT: a step a quarter
    faster); a smaller model's step is mostly the casts, and stays in float32 (notebook 08's: 56 ms a step in
    float32, 81 to 96 ms under bfloat16 autocast, on 2 cores of an AMD EPYC with AVX512-BF16). Two loops keep
    float32 on every machine, each saying why: notebook 01's small recurrent cells, so that the long-range figures
    its text states (measured in float32) are what every machine shows, and notebook 10's small pre-norm experiment. $SEQCOURSE_PRECISION overrides the rule (forced).
    """
    force = forced()
    if force:
        return FORCED[force], f"{FORCE}={force}"
    if dev.type == "cpu":
        if not cpu:
            return None, "a model this small trains faster in float32 on a CPU"
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


MACHINES = {  # a machine class: the device and the precision it trains in. What each is, for the runs' first lines
    "cpu-bfloat16": "a CPU with bfloat16 matrix units (AVX512-BF16 or AMX: recent AMD EPYC and Intel Xeon)",
    "cpu-float32": "a CPU without bfloat16 units (most laptops; Colab's and Binder's CPUs)",
    "mps-float32": "Apple silicon's GPU",
    "cuda-float16": "an NVIDIA GPU without bfloat16 units (T4, V100: Colab's usual GPUs)",
    "cuda-bfloat16": "an NVIDIA GPU with bfloat16 units (A100, L4, H100, H200)",
}


def amp_dtype(dev, cpu=False):
    """The autocast dtype on `dev` (amp_choice): bfloat16 on GPUs of compute capability 8.0 or later, float16 on
    older CUDA GPUs; with cpu=True bfloat16 on a CPU with bfloat16 matrix units; None (full precision) elsewhere."""
    return amp_choice(dev, cpu)[0]


def chosen(dev, cpu=False, enabled=True):
    """(dtype, why) that precision(dev, cpu, enabled) trains in: amp_choice's, or float32 when not enabled (a
    command's --no-bf16) and no precision is forced."""
    if not enabled and not forced():
        return None, "autocast turned off"
    return amp_choice(dev, cpu)


def machine_class(dev, cpu=False, enabled=True):
    """The class of machine a run on `dev` is, by its device and the precision it trains in: a key of MACHINES, or
    another 'device-dtype' where a precision was forced (cpu-float16: a T4's code path, run on a CPU)."""
    low = chosen(dev, cpu, enabled)[0] or torch.float32
    return f"{dev.type}-{str(low).removeprefix('torch.')}"


def describe_precision(dev, cpu=False, enabled=True):
    """What precision(dev, cpu, enabled) trains in, and why, for a run's first line: e.g.
    'under float16 autocast with a gradient scaler (Tesla T4, compute capability 7.5, has no bfloat16 units)'."""
    low, why = chosen(dev, cpu, enabled)
    if low is None:
        return f"in float32 ({why})"
    scaler = " with a gradient scaler" if low == torch.float16 else ""
    return f"under {str(low).removeprefix('torch.')} autocast{scaler} ({why})"


def precision(dev, cpu=False, enabled=True):
    """(autocast, scaler) on `dev`: `with autocast():` around the forward pass and the loss, never the backward pass,
    runs them in chosen(dev, cpu, enabled)'s dtype; the gradient scaler multiplies the loss only under float16, whose
    small gradients would round to 0. describe_precision(dev, cpu, enabled) says which, and why."""
    low = chosen(dev, cpu, enabled)[0]
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
