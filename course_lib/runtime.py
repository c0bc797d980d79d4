"""Where and how long the notebooks run: device choice, PyTorch's threads and the grading budget."""
import math
import os
import time
from pathlib import Path

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from tqdm.auto import tqdm

CGROUP = Path("/sys/fs/cgroup")  # where the cgroups are mounted, and this process's own line(s) of them
PROC_CGROUP = Path("/proc/self/cgroup")


def grading():
    """True when a grader executes the notebook (nbgrader, or `python -m autograder check`).

    Training cells then use a small budget, so that a notebook runs in seconds;
    the full teaching run happens when a person runs the notebook.
    """
    return "NBGRADER_EXECUTION" in os.environ or os.environ.get("AUTOGRADER_QUICK") == "1"


def device():
    """CUDA, then Apple's MPS, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cpu_bf16(cpuinfo=Path("/proc/cpuinfo")):
    """True when the CPU multiplies bfloat16 matrices in hardware (x86's AVX512-BF16 or AMX-BF16 on Linux):
    there, bfloat16 autocast makes a small GPT's training step about a quarter faster. Elsewhere it would
    emulate bfloat16, slower than float32, so the course keeps float32."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return bool({"avx512_bf16", "amx_bf16"} & set(line.split(":", 1)[-1].split()))
    except OSError:
        pass
    return False


def usable_cpus(cgroup=None, proc_cgroup=None):
    """How many CPUs this process may really use: its affinity, capped by its cgroup's CPU quota.

    A JupyterHub node shows every kernel all of its cores, while each user's container may have a
    quota of one or two: PyTorch's default (one thread a core) then runs many threads on a CPU or two,
    and a training step gets several times slower. cgroup v2 (cpu.max) and v1 (cpu.cfs_quota_us),
    the process's own group and those above it, the smallest quota wins.
    """
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = min(_quotas(cgroup or CGROUP, proc_cgroup or PROC_CGROUP), default=None)
    return n if quota is None else max(1, min(n, math.floor(quota)))


def _quotas(cgroup, proc_cgroup):
    """Every CPU quota (in CPUs) that applies to this process."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            folders, read = [cgroup], _v2
        elif "cpu" in controllers.split(","):  # v1
            folders, read = [cgroup / controllers, cgroup / "cpu"], _v1
        else:
            continue
        parts = [p for p in path.strip().split("/") if p]
        for root in folders:
            for folder in {root.joinpath(*parts[:k]) for k in range(len(parts) + 1)}:  # the group and those above it
                quota = read(folder)
                if quota is not None:
                    yield quota


def _v2(folder):
    try:
        limit, period = (folder / "cpu.max").read_text().split()[:2]
        return None if limit == "max" else int(limit) / int(period)
    except (OSError, ValueError):
        return None


def _v1(folder):
    try:
        limit, period = int((folder / "cpu.cfs_quota_us").read_text()), int((folder / "cpu.cfs_period_us").read_text())
        return None if limit <= 0 or period <= 0 else limit / period
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- PyTorch's threads

WINDOW = 1.0  # seconds of training between two looks at the CPUs
SPARE = 0.25  # a CPU counts as free while other work uses less than this much of it
SETTING = "SEQCOURSE_THREADS"  # auto (the default), a number of threads, or torch: PyTorch's own choice, untouched


def threads_for(usable, others):
    """PyTorch threads to train with on `usable` CPUs of which other work lately used `others` CPUs' worth.

    PyTorch's threads wait for each other at the end of every operation, spinning: where other work takes a
    CPU from one of them, the rest spin until it is back, and a small model's step gets 4 to 20 times slower,
    while a single thread just shares its CPU (benchmarks/bench_threads.py). So: the CPUs the others leave.
    """
    return max(1, min(usable, math.floor(usable - others + SPARE)))


def others_use(usable, wall, idle, ours):
    """CPUs' worth of the `usable` ones that other work used over `wall` seconds in which the CPUs this
    process may run on were idle for `idle` CPU-seconds and this process ran for `ours` CPU-seconds."""
    return max(0.0, usable - min(usable, (idle + ours) / wall))


def idle_seconds(cpus, stat=Path("/proc/stat")):
    """CPU-seconds that the CPUs numbered `cpus` have been idle since boot (idle and iowait; a virtual machine's
    stolen time counts as other work), or None where /proc/stat cannot tell."""
    try:
        lines = stat.read_text().splitlines()
        idle = {}
        for line in lines:
            name, *ticks = line.split()
            if name[3:].isdigit() and name.startswith("cpu"):
                idle[int(name[3:])] = int(ticks[3]) + int(ticks[4])
        return sum(idle[c] for c in cpus) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, KeyError):
        return None


class Threads:
    """PyTorch's threads, looked at again after an optimizer step once every WINDOW seconds of training:
    the CPUs this process may use (`most`), less those that other work lately took (threads_for).

    Installed as a hook on every optimizer's step, so that it follows the notebooks' own training loops as
    well as the commands'; a training run that starts on a busy machine trains at most its first WINDOW
    seconds on too many threads. Threads that someone else set (torch.set_num_threads) it leaves alone.
    `clock`, `cputime` (this process's CPU seconds) and `idle` (idle_seconds of the CPUs) are the
    machine's, replaced in the tests.
    """

    def __init__(self, most, cpus, say=print, clock=time.perf_counter, cputime=time.process_time, idle=idle_seconds):
        self.most, self.cpus, self.say, self.said = most, cpus, say, False
        self.clock, self.cputime, self.idle = clock, cputime, idle
        self.last, self.chosen = self.reading(), most

    def reading(self):
        return self.clock(), self.cputime(), self.idle(self.cpus)

    def __call__(self, *_):  # optimizer, args, kwargs
        if self.clock() - self.last[0] < WINDOW:
            return
        (then, ours0, idle0), (now, ours1, idle1) = self.last, self.reading()
        self.last = (now, ours1, idle1)
        if idle0 is None or idle1 is None or now - then > 10 * WINDOW:  # no /proc/stat, or a pause between two runs
            return
        others = others_use(self.most, now - then, idle1 - idle0, ours1 - ours0)
        wanted, have = threads_for(self.most, others), torch.get_num_threads()
        if have != self.chosen:  # set by someone else (torch.set_num_threads in a notebook): theirs to choose
            return
        if wanted != have:
            torch.set_num_threads(wanted)
            self.chosen = wanted
            if wanted < have and not self.said:
                self.said = True
                self.say(f"PyTorch threads: {wanted} instead of {have} while other work uses these CPUs ({others:.1f} of "
                         f"{self.most} lately): threads that wait for each other would train several "
                         "times slower. It goes back up when they are free.")


def fit_threads(say=None, setting=None, **where):
    """The course's thread policy, applied once per process when course_lib is imported.

    Under a grader (grading()) one thread: several kernels share the CPUs, and beside other work one thread
    checks notebook 10 in 17 s where two take 48 (14.6 s against 13.2 s on a quiet machine). Elsewhere no more threads than the CPUs this process may use
    (its affinity and CPU quota; never more than it had), said when it lowers them, and while a model trains,
    fewer where other work takes some of them (Threads). `setting`: $SEQCOURSE_THREADS, a number of threads
    or `torch` (PyTorch's own choice: the benchmarks' baseline); returns the Threads hook or None.
    """
    say = say or tqdm.write  # between a progress bar's updates, not inside its line
    setting = (os.environ.get(SETTING, "auto") if setting is None else setting).strip().lower()
    if setting not in ("auto", "torch") and not (setting.isdigit() and int(setting) > 0):
        say(f"{SETTING}={setting!r} is not auto, torch or a number of threads above 0: the course chooses them (auto)")
        setting = "auto"
    if setting == "torch":
        return None
    if setting.isdigit():
        torch.set_num_threads(int(setting))
        return None
    if grading():
        torch.set_num_threads(1)
        return None
    have, usable = torch.get_num_threads(), usable_cpus(**where)
    if usable < have:
        torch.set_num_threads(usable)
        say(f"PyTorch threads: {usable} instead of {have}, the CPUs this process may use (its CPU affinity and cgroup quota)")
    most = torch.get_num_threads()
    if most == 1 or not hasattr(os, "sched_getaffinity"):
        return None
    hook = Threads(most, sorted(os.sched_getaffinity(0)), say)
    hook.handle = register_optimizer_step_post_hook(hook)
    return hook


def unfinished(error):
    """The exercise that raised `error` (a NotImplementedError from a stub): 'get_batch', 'Block', 'KVCache.extend'."""
    tb, frame = error.__traceback__, None
    while tb is not None:  # the innermost frame: the stub's own `raise`
        frame, tb = tb.tb_frame, tb.tb_next
    if frame is None:
        return "an exercise"
    owner, name = frame.f_locals.get("self"), frame.f_code.co_name
    if owner is None or isinstance(owner, type):
        return name
    return type(owner).__name__ if name == "__init__" else f"{type(owner).__name__}.{name}"


def fell_short(steps, seconds, assumed_steps, tokens_per_step, assumed_seconds, where="2 quiet CPU cores"):
    """A sentence saying that a timed run trained far from what the text assumes, or '': under 80 % of its steps
    (a busy or slower machine), or over 1.5 times them (a much faster one: its schedule stretches over so many
    more steps that a small model fits its training tokens more than the text, and ends elsewhere).
    where: the machine the assumed steps were measured on; assumed_steps None: none of this class was measured."""
    if assumed_steps is None:
        return (f"The course has not measured a run on {where} yet, so the text's figures, measured on other machines, "
                "are not this run's; your code is not the cause.")
    if 0.8 * assumed_steps <= steps <= 1.5 * assumed_steps:
        return ""
    got, want = steps * tokens_per_step / seconds, assumed_steps * tokens_per_step / assumed_seconds
    said = (f"This machine trained {steps} steps in {seconds:.0f} s ({got:,.0f} tokens/s); the text assumes about "
            f"{assumed_steps} steps in {assumed_seconds:.0f} s ({want:,.0f} tokens/s, {where}). ")
    if steps < assumed_steps:
        return said + ("A busy or slower machine trains less in the same time, so the figures above are not the text's; "
                       "your code is not the cause.")
    return said + ("A much faster machine trains many more steps in the same time, and a small model then fits its "
                   "training tokens more than the text, so the figures above are not the text's; your code is not the cause.")


def claim(holds, what, short=""):
    """A claim of the text, checked in a full run: `✔ what` when it holds, so that a cell whose every claim holds
    still shows what it checked; an AssertionError naming it when it fails, unless the run fell short of what the
    text assumes (`short`, from fell_short or busy): then it says so and the notebook goes on."""
    if holds:
        print(f"✔ {what}")
        return True
    if short:
        print(f"Not shown on this machine: {what}. {short}")
        return False
    raise AssertionError(f"the text claims {what}, and this run does not show it")


def busy(cpus=None, load=None):
    """A sentence when other work shares the CPUs (the last minute's load above what this process may use
    and then some), or '': timings measured beside other work vary too much to show a claim about them."""
    cpus = cpus or usable_cpus()
    load = os.getloadavg()[0] if load is None and hasattr(os, "getloadavg") else (load or 0.0)
    if load <= cpus + 0.75:
        return ""
    return (f"This machine is busy (a load of {load:.1f} over the last minute, on {cpus} CPU(s) this process may use): "
            "timings taken beside other work vary too much to show it; your code is not the cause.")
