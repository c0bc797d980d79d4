"""Where and how long the notebooks run: device choice and the grading budget."""
import os

import torch


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
