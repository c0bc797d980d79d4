# make demo   set up .venv, then grade the example submissions with nbgrader
# make test   set up .venv, then run every test (make test-fast: the quick ones)
# make lab    open JupyterLab on notebooks/
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PIP    := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: install test test-fast demo lab release clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.10 or newer is needed") if sys.version_info < (3, 10) else None'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch
	$(PIP) install -q -c constraints.txt -e ".[grading,lab,dev]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest --durations=15

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

demo: $(STAMP)
	$(BIN)/python -m autograder demo

release: $(STAMP)
	$(BIN)/python -m autograder release

lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache gradebook.db
