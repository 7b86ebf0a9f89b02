# Two commands for learners:   make lab   |   make test
# One for instructors:         make course   (run every notebook headless, report times)
# On a ModelArts MindSpore image: make modelarts | make modelarts-course  (docs/instructors.md)
# Grading a class: make grade DIR=submissions/  (python -m course_lib.grade; docs/instructors.md)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
KERNEL := mindspore-course
STAMP  := $(VENV)/.course-installed
# Settings shared by the test run, the course run and output recording (tools/).
HEADLESS_ENV := COURSE_HEADLESS=1 GLOG_v=3 HF_HUB_OFFLINE=1 PYTHONHASHSEED=0 \
                MPLBACKEND=module://matplotlib_inline.backend_inline
LAB_ARGS ?=
# JupyterLab refuses to start as root (usual in containers) unless given --allow-root.
USER_ID ?= $(shell id -u)
ROOT_ARGS := $(if $(filter 0,$(USER_ID)),--allow-root)
# The python of the ModelArts image's MindSpore environment (`conda activate` it first).
MODELARTS_PYTHON ?= python

.PHONY: lab test unit notebooks course kernel venv record base clean-venv modelarts modelarts-course \
        browser grade

venv: $(STAMP)

# Rebuilt only when the lock or the package definition changes: a second `make` is a no-op.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	@touch $@

kernel: $(VENV)/share/jupyter/kernels/$(KERNEL)/kernel.json

$(VENV)/share/jupyter/kernels/$(KERNEL)/kernel.json: $(STAMP)
	$(BIN)/python -m ipykernel install --sys-prefix --name $(KERNEL) \
	    --display-name "MindSpore 课程 (Python 3.11)"

lab: venv kernel
	cd notebooks && ../$(BIN)/jupyter lab $(ROOT_ARGS) $(LAB_ARGS)

# Unit tests + every notebook under nbval, at CI scale, in one pytest run, after `make browser`
# (headless Chromium for the HTML gradebook test; as root it installs Debian's chromium).
# nbval runs copies of the notebooks with a learner's right answer after each exercise cell
# (tools/learner_notebooks.py): the course's cells as they are, then the answer, which must pass.
# Two pytest workers (pytest-xdist), each file (test module or notebook) whole on one worker;
# the notebooks (the longest files) are handed out first, the unit tests fill in around them.
LEARNER_BOOK := build/learner-notebooks
TEST_WORKERS ?= 2
test: venv kernel browser
	$(BIN)/python tools/learner_notebooks.py $(LEARNER_BOOK)
	$(HEADLESS_ENV) COURSE_SCALE=ci $(BIN)/python -m pytest $(LEARNER_BOOK) tests \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 -q \
	    -n $(TEST_WORKERS) --dist loadfile

unit: venv
	$(HEADLESS_ENV) COURSE_SCALE=ci $(BIN)/python -m pytest tests -q

notebooks: venv
	$(BIN)/python tools/learner_notebooks.py $(LEARNER_BOOK)
	$(HEADLESS_ENV) COURSE_SCALE=ci $(BIN)/python -m pytest $(LEARNER_BOOK) \
	    --nbval-lax --nbval-current-env --nbval-cell-timeout=900 -q

# Instructors: execute all notebooks in order at the learner's scale (COURSE_SCALE=full
# unless set) and print each notebook's wall time.
course: venv kernel
	$(HEADLESS_ENV) $(BIN)/python tools/run_course.py

# Instructors on a ModelArts preset MindSpore image: install the course into the image's own
# environment without touching its MindSpore (refuses if pip would change it), register the
# kernel; then run every chapter there like `make course`.
modelarts:
	$(MODELARTS_PYTHON) tools/modelarts.py install

modelarts-course:
	$(HEADLESS_ENV) $(MODELARTS_PYTHON) tools/run_course.py

# Maintainers: re-execute notebooks and store all their outputs (the book read without
# running), stamped per cell for tests/test_notebook_records.py. Full scale unless SCALE=ci.
#   make record                 (every notebook, ~54 min on 2 cores)
#   make record NB=notebooks/00_setup_and_tour.ipynb
NB    ?= $(sort $(wildcard notebooks/[0-9][0-9]_*.ipynb))
SCALE ?= full
record: venv kernel
	$(HEADLESS_ENV) $(BIN)/python tools/record_notebook.py --scale $(SCALE) $(NB)

# Maintainers: rebuild the shipped base in data/base/ from scratch (full-scale recipe of
# course_lib.zoo, about 11 min on 2 cores: 645-664 s in RESULTS.md); then update its SHA-256 and perplexity in
# data/README.md (tests/test_shipped_base.py checks them).
base: venv
	$(HEADLESS_ENV) $(BIN)/python -m course_lib.zoo build-base

# Instructors: grade a class (docs/instructors.md), e.g. make grade DIR=submissions/
DIR ?= notebooks
grade: venv
	$(HEADLESS_ENV) $(BIN)/python -m course_lib.grade $(DIR) --out gradebook.csv --html gradebook.html

# tests/test_grade.py opens the HTML gradebook in headless Chromium (skipped without one, a
# failure under CI). A no-op when found; as root with apt-get it installs Debian's chromium;
# otherwise it says how (and fails only under CI, where the test would fail anyway).
BROWSERS := chromium chromium-browser google-chrome
browser:
	@if command -v $(BROWSERS) >/dev/null 2>&1; then echo "headless Chromium: found"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else echo "no Chromium: tests/test_grade.py skips its HTML test (sudo apt-get install chromium)"; \
	    test -z "$$CI"; fi

clean-venv:
	rm -rf $(VENV)
