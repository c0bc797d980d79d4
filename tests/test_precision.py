"""The precision of the course's training commands (course_lib.training), on faked devices.

torch.cuda.is_bf16_supported() is True on a T4 or a V100, which emulate bfloat16; the course picks bfloat16 by
the compute capability instead (8.0 or later), float16 with the gradient scaler below it. No GPU is needed:
torch.cuda's functions are replaced by fakes of the devices' properties.
"""
import pytest
import torch

from course_lib import training
from course_lib.training import amp_choice, amp_dtype, describe_precision, precision

GPUS = {  # name: (device name, compute capability, bfloat16 in hardware)
    "A100": ("NVIDIA A100-SXM4-40GB", (8, 0), True),
    "H100": ("NVIDIA H100 80GB HBM3", (9, 0), True),
    "L4": ("NVIDIA L4", (8, 9), True),
    "T4": ("Tesla T4", (7, 5), False),
    "V100": ("Tesla V100-SXM2-16GB", (7, 0), False),
}


def fake_gpu(monkeypatch, name, capability):
    """torch.cuda as a device of this name and compute capability that says it supports bfloat16 (as a T4 does)."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_bfloat16_only_where_the_gpu_multiplies_it_in_hardware(monkeypatch, gpu):
    name, capability, hardware = GPUS[gpu]
    fake_gpu(monkeypatch, name, capability)
    cuda = torch.device("cuda")
    for cpu in (False, True):  # cpu=True changes nothing on a GPU
        assert amp_dtype(cuda, cpu=cpu) == (torch.bfloat16 if hardware else torch.float16)
    said = describe_precision(cuda, cpu=True)
    assert name in said and f"compute capability {capability[0]}.{capability[1]}" in said, said
    if hardware:
        assert said.startswith("under bfloat16 autocast (") and "scaler" not in said, said
    else:
        assert said.startswith("under float16 autocast with a gradient scaler (") and "no bfloat16 units" in said, said
    assert describe_precision(cuda, enabled=False) == "in float32 (autocast turned off)"


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_the_scaler_is_on_exactly_under_float16(monkeypatch, gpu):
    name, capability, hardware = GPUS[gpu]
    fake_gpu(monkeypatch, name, capability)
    made = []

    class Scaler:  # a real GradScaler("cuda") would look for a GPU; this one records how it was made
        def __init__(self, device, enabled=True):
            made.append((device, enabled))

    monkeypatch.setattr(torch.amp, "GradScaler", Scaler)
    autocast, scaler = precision(torch.device("cuda"), cpu=True)
    assert made == [("cuda", not hardware)]  # bfloat16 keeps float32's range: nothing to scale
    made.clear()
    precision(torch.device("cuda"), enabled=False)  # --no-bf16: float32, nothing to scale
    assert made == [("cuda", False)]


def test_a_t4_like_devices_scaler_scales_the_loss_and_unscales_before_the_step(monkeypatch):
    # precision() on a T4-like device, its GradScaler made on the CPU: one optimizer_step multiplies the loss by
    # the scale (65536 at first) before backward(), divides the gradients again before clipping, and updates
    # the weights as float32 SGD would
    fake_gpu(monkeypatch, *GPUS["T4"][:2])
    real = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device, enabled=True: real("cpu", enabled=enabled))
    _, scaler = precision(torch.device("cuda"), cpu=True)
    assert scaler.is_enabled() and scaler.get_scale() == 65536.0
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 3), torch.randn(5, 4)
    twin = torch.nn.Linear(4, 3)
    twin.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    training.optimizer_step(model(x).square().mean(), model, optimizer, scaler, clip=1e9)
    twin(x).square().mean().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-5, atol=1e-7)  # unscaled
        assert torch.allclose(p, q.detach() - 0.1 * q.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("has", [True, False])
def test_cpu_paths_are_unchanged(monkeypatch, has):
    # a CPU: float32 for notebook 08's command; bfloat16 for the GPT's where the CPU has bfloat16 matrix units.
    # No CUDA function is asked, however the fakes would answer
    def no_gpu(*args, **kwargs):
        raise AssertionError("asked a GPU's properties on a CPU")

    for name in ("get_device_capability", "get_device_name", "is_bf16_supported"):
        monkeypatch.setattr(torch.cuda, name, no_gpu)
    monkeypatch.setattr(training, "cpu_bf16", lambda: has)
    cpu = torch.device("cpu")
    assert amp_dtype(cpu) is None
    assert amp_dtype(cpu, cpu=True) == (torch.bfloat16 if has else None)
    assert describe_precision(cpu) == "in float32 (a model this small trains faster in float32 on a CPU)"
    assert describe_precision(cpu, cpu=True) == ("under bfloat16 autocast (this CPU multiplies bfloat16 in hardware)"
                                                 if has else "in float32 (this CPU has no bfloat16 matrix units)")
    autocast, scaler = precision(cpu, cpu=True)
    assert not scaler.is_enabled()
    with autocast():
        y = torch.ones(2, 3) @ torch.ones(3, 2)
    assert y.dtype == (torch.bfloat16 if has else torch.float32)
    assert amp_choice(torch.device("mps"))[0] is None and amp_dtype(torch.device("mps"), cpu=True) is None


FIRST_LINES = {  # device: (the dates command's first line, the GPT command's)
    "cpu": ("training on cpu in float32 (a model this small trains faster in float32 on a CPU)",
            "training on cpu in float32 (this CPU has no bfloat16 matrix units)"),
    "T4": ("training on cuda under float16 autocast with a gradient scaler (Tesla T4, compute capability 7.5, has no "
           "bfloat16 units)",) * 2,
    "H100": ("training on cuda under bfloat16 autocast (NVIDIA H100 80GB HBM3, compute capability 9.0, multiplies "
             "bfloat16 in hardware)",) * 2,
}


@pytest.mark.parametrize("device", sorted(FIRST_LINES))
def test_the_commands_say_the_precision_in_their_first_line(monkeypatch, capsys, device):
    # both commands print describe_precision's phrase before they train; their fit faked, the GPUs too
    import course_lib.gpt_training as gpt_training
    import solutions_lib.train as dates_train

    monkeypatch.setattr(training, "cpu_bf16", lambda: False)
    if device == "cpu":
        monkeypatch.setattr(training, "default_device", lambda: torch.device("cpu"))  # on a GPU machine too
    else:
        fake_gpu(monkeypatch, *GPUS[device][:2])
        monkeypatch.setattr(training, "default_device", lambda: torch.device("cuda"))

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(dates_train, "fit", stop)
    with pytest.raises(Stop):
        dates_train.main(["--no-progress"])
    assert capsys.readouterr().out.splitlines()[0] == FIRST_LINES[device][0]
    monkeypatch.setattr(gpt_training, "fit", stop)
    parser, args = gpt_training.arguments(["train", "--no-progress"], "prog")
    with pytest.raises(Stop):
        gpt_training.train_command(parser, args, None, start=0.0)
    assert capsys.readouterr().out.splitlines()[0] == FIRST_LINES[device][1]


# ---------------------------------------------------------------- one rule, everywhere a learner trains

import json
import re

from conftest import ROOT, course_code

LOCAL_RULE = re.compile(r"torch\.autocast\(|GradScaler\(|is_bf16_supported|get_device_capability"
                        r"|(?<![=!<>])=\s*torch\.(bfloat16|float16)\b")  # a dtype chosen, not compared
ALLOWED = {  # (file, text): not a choice of precision
    ("solutions_lib/training.py", "torch.amp.GradScaler(enabled=False)"),  # train_step's scaler that scales nothing
    ("solutions/08_training_a_transformer/08_training_a_transformer.ipynb", "torch.amp.GradScaler(enabled=False)"),
    ("course_lib/modern.py", 'torch.autocast("cpu", enabled=False)'),  # attention in float32 under a CPU's autocast
}
FLOAT32_EVERYWHERE = "in float32 on every machine"  # the comment of a loop that keeps float32 by design, and why


def code_sources():
    """(file, cell index or None, code) of the code a learner reads or runs (conftest.course_code), but the rule's own."""
    return ((file, cell and cell[0], code) for file, cell, code in course_code() if file != "course_lib/training.py")


def test_no_notebook_or_command_keeps_a_precision_rule_of_its_own():
    found = []
    for where, cell, code in code_sources():
        for line in code.splitlines():
            match = LOCAL_RULE.search(line)
            if match and not any(where == file and text in line for file, text in ALLOWED):
                found.append(f"{where}{'' if cell is None else f', cell {cell}'}: {line.strip()}")
    assert not found, "a precision chosen outside course_lib.training (use precision(dev)):\n" + "\n".join(found)


def autocast_blocks(code):
    """The lines under each `with ... autocast():` of code."""
    lines = code.splitlines()
    for k, line in enumerate(lines):
        if re.search(r"with .*autocast\(\):", line):
            depth, block = len(line) - len(line.lstrip()), []
            for inner in lines[k + 1:]:
                if inner.strip() and len(inner) - len(inner.lstrip()) <= depth:
                    break
                block.append(inner)
            yield "\n".join(block)


def loop_problems(code):
    """What is wrong with the training loops of code (each top-level function, class or statement): the forward
    pass outside the rule's autocast, a backward pass or a step inside it, a step that bypasses the scaler."""
    problems = []
    for block in autocast_blocks(code):
        if re.search(r"\.backward\(|\.step\(|optimizer_step\(|train_step\(", block):
            problems.append("the backward pass or the step runs inside autocast: put only the forward pass and the loss there")
    for chunk in re.split(r"\n(?=def |class |\S)", code):
        trains = "optimizer_step(" in chunk or ".backward()" in chunk and re.search(r"optimizer|\.step\(", chunk)
        if not trains or chunk.startswith(("from ", "import ")) or FLOAT32_EVERYWHERE.lower() in chunk.lower():
            continue
        head = chunk.splitlines()[0][:50]
        if not re.search(r"with (clock\.paused\(\), )?autocast\(\):", chunk):
            problems.append(f"{head}: no `with autocast():` from precision(dev)")
        if "optimizer_step(" not in chunk:  # course_lib.training.optimizer_step steps through the scaler
            if not re.search(r"scaler\.scale\(loss\)\.backward\(\)", chunk):
                problems.append(f"{head}: back-propagate through the scaler, scaler.scale(loss).backward()")
            if not re.search(r"scaler\.step\(optimizer\)", chunk):
                problems.append(f"{head}: step the optimizer through the scaler, scaler.step(optimizer)")
    return problems


def test_the_loop_checker_finds_the_mistakes_it_looks_for():
    old_08 = "def train(model):\n    for step in range(9):\n        with autocast():\n            train_step(model)\n"
    assert loop_problems(old_08) == ["the backward pass or the step runs inside autocast: put only the forward pass and the loss there"]
    plain = "for x in data:\n    loss = model(x)\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    assert len(loop_problems(plain)) == 3
    good = ("for x in data:\n    with autocast():\n        loss = model(x)\n    scaler.scale(loss).backward()\n"
            "    scaler.step(optimizer)\n    scaler.update()\n")
    assert loop_problems(good) == []
    assert loop_problems(good.replace("        loss = model(x)\n    scaler", "        loss = model(x)\n        scaler")) != []


def test_every_training_loop_runs_its_forward_pass_under_the_rules_autocast_and_steps_through_its_scaler():
    found, loops = [], 0
    for where, cell, code in code_sources():
        loops += sum("optimizer_step(" in c or ".backward()" in c and "optimizer" in c for c in re.split(r"\n(?=def |class |\S)", code))
        found += [f"{where}{'' if cell is None else f', cell {cell}'}: {problem}" for problem in loop_problems(code)]
    assert not found, "\n".join(found)
    assert loops >= 9, loops  # 01, 03, 08's train_step (notebook and reference), 10's three, the commands of 08 and 10


@pytest.mark.parametrize("gpu", ["T4", "H100"])
def test_notebook_08s_training_cell_gives_a_t4_float16_and_the_scaler(monkeypatch, capsys, gpu):
    # the cell's own code, on a faked GPU: a T4 trains under float16 with the scaler, an H100 under bfloat16 without it
    name, capability, hardware = GPUS[gpu]
    fake_gpu(monkeypatch, name, capability)
    made = []

    class Scaler:  # a real GradScaler("cuda") would look for a GPU
        def __init__(self, device, enabled=True):
            made.append((device, enabled))

    monkeypatch.setattr(torch.amp, "GradScaler", Scaler)
    cells = json.loads((ROOT / "solutions" / "08_training_a_transformer" / "08_training_a_transformer.ipynb").read_text())["cells"]
    cell = next("".join(c["source"]) for c in cells if "".join(c["source"]).startswith("dev = device()"))
    from course_lib.runtime import device

    scope = {"device": device, "precision": precision, "describe_precision": describe_precision,
             "machine_class": training.machine_class, "QUICK": True}
    exec(cell.split("\n\n\ndef ")[0], scope)
    assert scope["dev"].type == "cuda" and made == [("cuda", not hardware)]
    with scope["autocast"]():
        assert torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == (torch.bfloat16 if hardware else torch.float16)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"machine class cuda-{'bfloat16' if hardware else 'float16'}"), first
