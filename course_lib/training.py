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


def amp_dtype(dev, cpu=False):
    """bfloat16 on GPUs that support it, else float16 on CUDA; with cpu=True bfloat16 on a CPU with bfloat16
    matrix units (runtime.cpu_bf16); None (full precision) elsewhere."""
    if dev.type == "cpu" and cpu and cpu_bf16():
        return torch.bfloat16
    if dev.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def precision(dev, cpu=False, enabled=True):
    """(autocast, scaler) on `dev`: `with autocast():` runs the forward pass in amp_dtype(dev, cpu) (in float32
    when not enabled); the gradient scaler multiplies the loss only under float16, whose small gradients would
    round to 0."""
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


def mean_loss(losses):
    """The mean of the losses since the last evaluation, kept as 0-dim tensors on the device so that
    no step waits for the GPU to hand one back; nan when there are none."""
    return torch.stack(losses).mean().item() if losses else float("nan")


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
