# Distributed Training, Tested — the two commands a reader needs:
#   make lab    set up .venv and .venv-mxnet (first time: ~5 min) and open JupyterLab on notebooks/
#   make test   set up the environments if needed and run every test tier (what CI runs)
SHELL := bash
.SHELLFLAGS := -eo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Chapter 07 runs MXNet 1.9.1, which needs NumPy < 1.24: a second environment, registered in .venv
# as the Jupyter kernel "course-mxnet" (its notebooks name that kernel)
MXVENV := .venv-mxnet
MXSTAMP := $(MXVENV)/.installed
MXKERNEL := course-mxnet
MXNET_NOTEBOOKS := notebooks/07_mxnet_legacy.ipynb
# pip prints a warning per package for this machine's local mirror; hide only those lines
# (grouped so that grep finding nothing is fine while pipefail still reports a failing pip)
QUIET_PIP := { grep -v "^WARNING: Location 'file://" || true; }
# Strict nbval: every output compared, after notebooks/sanitize.cfg; CPU profile = stored outputs
NBVAL_COMMON := --nbval-cell-timeout=240 --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider
NBVAL := COURSE_PROFILE=cpu $(PY) -m pytest --nbval --nbval-current-env $(NBVAL_COMMON)
NBVAL_MXNET := COURSE_PROFILE=cpu $(PY) -m pytest --nbval --nbval-kernel-name $(MXKERNEL) $(NBVAL_COMMON)
PORT ?= 8888
# Jupyter refuses to run as root (containers, CI machines) unless told it is intended
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help venv lab test test-unit test-notebooks test-exercises student outputs clean

help:
	@echo "make lab      open JupyterLab (creates .venv and .venv-mxnet first if needed)"
	@echo "make test     run all test tiers (unit, notebooks, exercises, environment)"
	@echo "make student  build student + autograder versions of the exercises into dist/"
	@echo "make outputs  re-execute the notebooks so their stored outputs are current"

$(STAMP): requirements.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (the course is built and tested on Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt 2>&1 | $(QUIET_PIP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | $(QUIET_PIP)
	touch $(STAMP)

$(MXSTAMP): requirements-mxnet.txt pyproject.toml $(STAMP)
	test -x $(MXVENV)/bin/python || $(PYTHON) -m venv $(MXVENV)
	$(MXVENV)/bin/python -m pip install -q -r requirements-mxnet.txt 2>&1 | $(QUIET_PIP)
	$(MXVENV)/bin/python -m pip install -q --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(MXVENV)/bin/python -m ipykernel install --prefix $(abspath $(VENV)) --name $(MXKERNEL) \
	  --display-name "Python 3 (MXNet 1.9.1)" 2>&1 | { grep -v "kernelspec may not be found" || true; }
	touch $(MXSTAMP)

venv: $(STAMP) $(MXSTAMP)

lab: $(STAMP) $(MXSTAMP)
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.root_dir=. \
	  --LabApp.default_url=/lab/tree/notebooks/00_setup_and_hardware.ipynb $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP) $(MXSTAMP)
	$(MAKE) --no-print-directory test-unit test-notebooks test-exercises

test-unit: $(STAMP) $(MXSTAMP)
	$(PY) -m pytest tests -q -p no:cacheprovider --ignore=tests/exercises

test-notebooks: $(STAMP) $(MXSTAMP)
	$(NBVAL) -q notebooks $(addprefix --ignore=,$(MXNET_NOTEBOOKS))
	$(NBVAL_MXNET) -q $(MXNET_NOTEBOOKS)

test-exercises: $(STAMP)
	$(PY) -m pytest tests/exercises -q -p no:cacheprovider

student: $(STAMP)
	$(PY) tools/build_exercises.py exercises dist

outputs: $(STAMP) $(MXSTAMP)
	$(PY) tools/run_notebooks.py notebooks/[0-9]*.ipynb

clean:
	rm -rf dist notebooks/work exercises/work
