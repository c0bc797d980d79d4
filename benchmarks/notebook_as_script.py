"""Run a notebook's code cells as one Python script, where Jupyter is not installed
(a bare GPU machine, say), printing how long the whole notebook took.

    python benchmarks/notebook_as_script.py solutions/08_training_a_transformer/08_training_a_transformer.ipynb

Figures are drawn with matplotlib's Agg backend and not shown; IPython magics are skipped.
"""
import json
import os
import sys
import time

os.environ.setdefault("MPLBACKEND", "Agg")


def code_of(path):
    cells = json.load(open(path))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            lines += [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            lines.append("")
    return "\n".join(lines)


def main(path):
    start = time.perf_counter()
    exec(compile(code_of(path), path, "exec"), {"__name__": "__main__"})
    print(f"notebook {os.path.basename(path)} ran in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1])
