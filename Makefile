# make demo            set up .venv, then grade the example submissions with nbgrader
# make test            set up .venv, then run every test (make test-fast: the quick ones)
# make test-browser    JupyterLab in headless Chromium (apt-get install chromium); screenshots in test-artifacts/
# make lab             JupyterLab on notebooks/, as a student (no nbgrader instructor tools)
# make lab-instructor  JupyterLab on the course, with nbgrader's formgrader, course list and create-assignment
# make hub             a class on this machine through a real JupyterHub (as root): an instructor and 3 students
#                      as Unix accounts, each student walled off: her own origin, disk, /tmp, CPU, memory and
#                      process limits (HUB_ARGS="--students 10 --disk 2G"); run it from a checkout only you can read
# make hub-remove      take the class down (as root, its hub stopped): its accounts and homes, the students' disks
#                      and the class's folder (the same HUB_ARGS="--state DIR"); says what it could not remove
# make site            the course as a static HTML site, solutions hidden, in site/_build/html
#                      (runs every notebook in full; COURSE_SITE_QUICK=1 make site: the grading budget, minutes)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PIP    := $(BIN)/python -m pip --disable-pip-version-check

.PHONY: install test test-fast test-browser demo lab lab-instructor hub hub-remove release site clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11 or newer is needed") if sys.version_info < (3, 11) else None'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch
	$(PIP) install -q -c constraints.txt -e ".[grading,lab,dev,browser,site,tests,hub]"
	touch $(STAMP)

# Two workers, each file's tests on one, the longest files first (tests/conftest.py).
XDIST  := -n 2 --no-loadscope-reorder

test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) --durations=15

test-fast: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) -m "not slow"

# `make test` runs these too, or skips them when Chromium is not installed; here they must run.
test-browser: $(STAMP)
	COURSE_BROWSER_TEST=required $(BIN)/python -m pytest tests/learner/test_browser.py

demo: $(STAMP)
	$(BIN)/python -m autograder demo

release: $(STAMP)
	$(BIN)/python -m autograder release

site: $(STAMP)
	$(BIN)/python -m autograder.release.site

lab: $(STAMP)
	$(BIN)/python -m autograder.lab student notebooks/

lab-instructor: $(STAMP)
	$(BIN)/python -m autograder.lab instructor .

hub: $(STAMP)
	$(BIN)/python -m autograder.hub $(HUB_ARGS)

hub-remove: $(STAMP)
	$(BIN)/python -m autograder.hub --remove $(HUB_ARGS)

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache gradebook.db test-artifacts
