"""`python -m solutions_lib.gpt train | sample`: notebook 10's recipe on the reference's blocks, with fused kernels.

The instructor's and the benchmarks' command; a learner runs the same loop on their own notebook
with `python -m autograder.my_gpt`. The loop, the recipes and the checkpoints: course_lib.gpt_training.
"""
from course_lib import gpt_training
from course_lib.gpt_training import Config, learning_rate, recipe  # noqa: F401  (tests and benchmarks import them from here)
from solutions_lib import START
from solutions_lib.fast import fuse
from solutions_lib.gpt import GPT, beam_generate, generate
from solutions_lib.gpt.data import get_batch, nats_per_char
from solutions_lib.gpt.modern import ModernGPT, split_parameters

# The tokens come from course_lib.gpt's encode, which gives solutions_lib.bpe's ids 4 times faster (1.3 s of the budget)
REFERENCE = gpt_training.Parts(GPT=GPT, get_batch=get_batch, nats_per_char=nats_per_char, generate=generate,
                               beam_generate=beam_generate, build=fuse, ModernGPT=ModernGPT,
                               split_parameters=split_parameters, prog="python -m solutions_lib.gpt")


def load_data(cfg):
    """course_lib.gpt_training.load_data with the reference's BPE."""
    return gpt_training.load_data(cfg, REFERENCE)


def fit(cfg, **options):
    """course_lib.gpt_training.fit on the reference's blocks (its options: checkpoint, resume, start, data, ...)."""
    return gpt_training.fit(cfg, REFERENCE, **options)


def build_model(cfg, V, model_class=None):
    """The reference GPT of cfg's size with fused kernels (or model_class, as built)."""
    return gpt_training.build_model(cfg, V, REFERENCE, model_class)


def main(argv=None):
    gpt_training.main(REFERENCE, argv, start=START)


if __name__ == "__main__":
    main()
