"""What the notebooks import besides the learner's own code, and the one package of the course
that ships to students as it is (`python -m autograder release --student-dist`):

- data and tasks generated in code: `dates`, `tasks`, `tokens`;
- `plotting`, and `runtime` (the device, PyTorch's threads, and the small budget training cells use
  under grading); importing the package fits PyTorch's threads to the CPUs the process may use;
- `text`: Tiny Shakespeare (data/, with its provenance), for notebook 10;
- `ngram`: the counting models that notebook 10 compares its GPT with: Jelinek-Mercer's interpolated n-gram, and
  interpolated Kneser-Ney, the strongest;
- `training` (what the training commands share) and `gpt_training` (notebook 10's recipe and loop, on
  building blocks handed in: `python -m autograder.my_gpt` runs it on the learner's own);
- the earlier notebooks' building blocks for the later ones: `attention` (05), `multihead` (06),
  `positional` (04), `transformer` (07, for 08). The learner's own blocks, where their checks pass, come
  from `autograder.yours`, which reads the catalogue and the saved notebooks.

The building blocks have the interface of the lesson's pieces (the same arguments, parameter
names and return values) but are built on PyTorch's own modules and functions, not on the
lesson's code, so that a learner stuck on one notebook can go on with the next without being
handed its answers (the reference solutions never ship). tests/learner/test_student_dist.py checks each
building block against the reference.
"""

from course_lib.runtime import fit_threads as _fit_threads

_threads = _fit_threads()  # the hook that adjusts them while a model trains, or None
