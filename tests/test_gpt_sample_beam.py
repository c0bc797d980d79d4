"""`python -m solutions_lib.gpt sample --beam K`: the likeliest continuation a beam finds, on the command line."""
import pytest
import torch

from course_lib import gpt_training
from solutions_lib.gpt import beam_generate, generate
from solutions_lib.gpt.train import REFERENCE


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A GPT trained for 8 steps on random characters: what sampling reads."""
    path = tmp_path_factory.mktemp("gpt") / "tiny.pt"
    cfg = gpt_training.Config(tokenizer="char", d_model=16, h=2, d_ff=32, N=1, block_size=16, batch_size=4,
                              max_steps=8, max_seconds=1e9, warmup=1)
    chars = "ROMEO:\n abcdefgh"
    g = torch.Generator().manual_seed(0)
    data = {"tokenizer": gpt_training.Tokenizer("char", chars=chars), "train": torch.randint(0, len(chars), (500,), generator=g),
            "held_out": torch.randint(0, len(chars), (100,), generator=g), "held_out_chars": 100}
    gpt_training.fit(cfg, REFERENCE, checkpoint=str(path), progress=False, log=lambda line: None, data=data)
    return path


def sample(path, capsys, *args):
    gpt_training.main(REFERENCE, ["sample", "--checkpoint", str(path), "--prompt", "ROMEO:", *args])
    return capsys.readouterr()


def test_the_beam_s_text_on_stdout_and_its_log_probability_on_stderr(checkpoint, capsys):
    said = sample(checkpoint, capsys, "--beam", "3", "--tokens", "20")  # past block_size: 6 + 20 > 16
    model, tokenizer = gpt_training.load_for_sampling(str(checkpoint), torch.device("cpu"), REFERENCE)
    ids, score = beam_generate(model, torch.tensor([tokenizer.encode("ROMEO:")]), 20, 3)
    assert said.out == tokenizer.decode(ids[0].tolist()) + "\n"
    assert said.err == f"a beam of 3: log-probability {score:.2f} over 20 tokens, {score / 20:.3f} per token\n"
    greedy = generate(model, torch.tensor([tokenizer.encode("ROMEO:")]), 20, temperature=0)
    assert sample(checkpoint, capsys, "--beam", "1", "--tokens", "20").out == tokenizer.decode(greedy[0].tolist()) + "\n"


@pytest.mark.parametrize("args,says", [
    (["--beam", "0"], "--beam must be at least 1, not 0"),
    (["--beam", "4", "--top-k", "5"], "--beam searches for the likeliest continuation"),
    (["--beam", "4", "--temperature", "0.7"], "give one or the other"),
    (["--beam", "4", "--no-cache"], "give one or the other"),
])
def test_a_beam_with_sampling_settings_or_below_one_is_refused(checkpoint, capsys, args, says):
    with pytest.raises(SystemExit) as stopped:
        sample(checkpoint, capsys, *args)
    assert stopped.value.code == 2 and says in capsys.readouterr().err


def test_a_learner_without_beam_generate_is_told_why(checkpoint, capsys):
    def missing(*args, **kwargs):
        raise gpt_training.Missing("your notebook 10 cannot search with a beam yet: beam_generate (not implemented)")

    parts = gpt_training.Parts(**{**vars(REFERENCE), "beam_generate": missing})
    with pytest.raises(SystemExit) as stopped:
        gpt_training.main(parts, ["sample", "--checkpoint", str(checkpoint), "--beam", "2"])
    assert stopped.value.code == 2 and "cannot search with a beam yet: beam_generate (not implemented)" in capsys.readouterr().err
    gpt_training.main(parts, ["sample", "--checkpoint", str(checkpoint), "--tokens", "5"])  # sampling needs no beam
    assert capsys.readouterr().out.startswith("\n")
