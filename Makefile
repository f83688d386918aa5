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
# The portability check. `make outputs` writes the stored outputs with this machine's own kernels;
# the notebook tier compares them under notebooks/capped-kernels.env: PyTorch's ATen, oneDNN
# (PyTorch, TensorFlow, MXNet), MKL and OpenBLAS capped to SSE4 (no AVX), TensorFlow's oneDNN path
# on where the CPU has no AVX-512 (there its default is off) and one OpenMP thread (Binder's quota). Each
# changes the last bits of floats, so an output that depends on the CPU fails here, on every
# machine, not on the next one. torch.compile gets its own cache folder: a kernel cached under
# another CPU capability fails to compile ("'at::vec' has not been declared"). On a CPU with AVX-512
# TensorFlow runs Eigen instead of oneDNN (TF_ENABLE_ONEDNN_OPTS=0): there its oneDNN bf16 kernels
# need AVX-512, and capped to SSE4 the process aborts ("could not create a primitive descriptor").
TF_ONEDNN_CAPPED := $(if $(shell grep -m1 -o -w avx512f /proc/cpuinfo 2>/dev/null),0,1)
CAPPED_KERNELS := $(shell grep -v '^\#' notebooks/capped-kernels.env | grep -v '^TF_ENABLE_ONEDNN_OPTS=') \
  TF_ENABLE_ONEDNN_OPTS=$(TF_ONEDNN_CAPPED) TORCHINDUCTOR_CACHE_DIR=$(abspath build/inductor-capped-kernels)
# Strict nbval: every output compared, after notebooks/sanitize.cfg. The stored outputs are the CPU
# profile's, written with the GPUs hidden (tools/run_notebooks.py): hide them here too. A cell may take
# 600 s: capped to SSE4 and one thread, chapter 04's fp16 training cell (fp16 emulated) ran past 240 s
# on a slow 2-vCPU machine (2026-12-07); hangs are bounded by the launchers' own timeouts, not this
NBVAL_COMMON := --nbval-cell-timeout=600 --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider
CPU_ONLY := COURSE_PROFILE=cpu CUDA_VISIBLE_DEVICES=
NBVAL := $(CPU_ONLY) $(CAPPED_KERNELS) $(PY) -m pytest --nbval --nbval-current-env $(NBVAL_COMMON)
NBVAL_MXNET := $(CPU_ONLY) $(CAPPED_KERNELS) $(PY) -m pytest --nbval --nbval-kernel-name $(MXKERNEL) $(NBVAL_COMMON)
PORT ?= 8888
# The unit, reader and notebook tiers run under pytest-xdist with JOBS workers (2 per core, at most
# 4): one test file, or one notebook with its kernel, per worker at a time. Much of a test's time is
# spent waiting on processes it started (kernels, gloo ranks), so on 2 cores 4 workers take well
# under half the time of one. `make test JOBS=1` runs them one at a time
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( 2 * n < 4 ? 2 * n : 4 )))
XDIST := -n $(JOBS) --dist loadfile
# the unit tier: a file per worker too, except tests/test_mutants.py's questions, one by one (tests/conftest.py)
XDIST_GROUPS := -n $(JOBS) --dist loadgroup
# pip byte-compiles what it installs on one core (a minute here for TensorFlow, JAX and PyTorch);
# compileall does it on every core. Without it each process of the first test tier would compile
# the modules it imports itself, many at once. (Files that are not valid Python 3.11, such as some
# packages' test data, fail to compile, as they do under pip: those messages are dropped.)
PIP_INSTALL := pip install -q --no-compile
# The browser test drives Debian's chromium; where apt-get exists `make test` installs it and the
# test must run (COURSE_REQUIRE_BROWSER=1), elsewhere it is skipped unless CHROMIUM points at one
CHROMIUM ?= /usr/bin/chromium
HAVE_APT := $(shell command -v apt-get >/dev/null && echo 1)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
READER_TESTS := tests/test_binder.py tests/test_book.py tests/test_browser.py
# The SLURM tier (tests/slurm) submits recipes/slurm/train_ddp.sbatch to a private SLURM cluster it
# starts and stops itself. Installing slurmd and munged is intrusive on a contributor's own machine,
# so Debian's packages are installed (never started or enabled: tools/install_slurm.sh) only where
# CI=true (CI sets it) or with `make test SLURM=1`; elsewhere the tier skips and says how to run it
SLURM ?= $(if $(filter true,$(CI)),1,0)
# Jupyter refuses to run as root (containers, CI machines) unless told it is intended
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: help capped-kernels venv lab test lint test-unit test-reader test-slurm test-notebooks test-exercises student grade book outputs browser slurm clean

help:
	@echo "make lab      open JupyterLab (creates .venv and .venv-mxnet first if needed)"
	@echo "make test     run all test tiers (unit, reader, SLURM, notebooks, exercises)"
	@echo "              SLURM=1 installs Debian's slurm + munge for the SLURM tier (CI=true does)"
	@echo "make student  build student + autograder versions of the exercises into dist/"
	@echo "make grade EXERCISE=NN_name SUBMISSIONS=DIR  grade a folder of submissions into dist/NN_name/grades.csv"
	@echo "make book     build the course site (Jupyter Book) into build/book/_build/html/"
	@echo "make outputs  re-execute the notebooks so their stored outputs are current"

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) (the course is built and tested on Python 3.11)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m $(PIP_INSTALL) -r requirements.txt -r requirements-dev.txt 2>&1 | $(QUIET_PIP)
	$(PY) -m $(PIP_INSTALL) --no-deps --no-build-isolation -e . 2>&1 | $(QUIET_PIP)
	$(PY) -m compileall -q -j 0 $(VENV)/lib >/dev/null 2>&1 || true
	touch $(STAMP)

$(MXSTAMP): requirements-mxnet.txt pyproject.toml $(STAMP)
	test -x $(MXVENV)/bin/python || $(PYTHON) -m venv $(MXVENV)
	$(MXVENV)/bin/python -m $(PIP_INSTALL) -r requirements-mxnet.txt 2>&1 | $(QUIET_PIP)
	$(MXVENV)/bin/python -m $(PIP_INSTALL) --no-deps -e . 2>&1 | $(QUIET_PIP)
	$(MXVENV)/bin/python -m compileall -q -j 0 $(MXVENV)/lib >/dev/null 2>&1 || true
	$(MXVENV)/bin/python -m ipykernel install --prefix $(abspath $(VENV)) --name $(MXKERNEL) \
	  --display-name "Python 3 (MXNet 1.9.1)" 2>&1 | { grep -v "kernelspec may not be found" || true; }
	touch $(MXSTAMP)

capped-kernels:   # the environment the notebook tier compares under (tests/test_capped_kernels.py reads it)
	@echo $(CAPPED_KERNELS)

venv: $(STAMP) $(MXSTAMP)

lab: $(STAMP) $(MXSTAMP)
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.root_dir=. \
	  --LabApp.default_url=/lab/tree/notebooks/00_setup_and_hardware.ipynb $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP) $(MXSTAMP)
	$(MAKE) --no-print-directory lint test-unit test-reader test-slurm test-notebooks test-exercises

lint: $(STAMP)
	$(VENV)/bin/ruff check

test-unit: $(STAMP) $(MXSTAMP)
	$(PY) -m pytest tests -q -p no:cacheprovider $(XDIST_GROUPS) --ignore=tests/exercises --ignore=tests/slurm \
	  $(addprefix --ignore=,$(READER_TESTS))

# what a reader meets: Binder's config, the site, JupyterLab in a browser (screenshot: build/screenshots/)
test-reader: $(STAMP) browser
	COURSE_REQUIRE_BROWSER=$(HAVE_APT) CHROMIUM=$(CHROMIUM) $(PY) -m pytest $(READER_TESTS) -q -p no:cacheprovider $(XDIST)

browser:
	@if [ -x "$(CHROMIUM)" ]; then :; \
	elif [ -n "$(HAVE_APT)" ]; then \
	  echo "installing Debian's chromium for the browser test (apt-get, ~1 min)"; \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "no apt-get: the browser test is skipped unless CHROMIUM=/path/to/chromium is set"; fi

# a real SLURM (one host, two slurmd "nodes"): the course's sbatch script, submitted and checked
test-slurm: $(STAMP) slurm
	COURSE_REQUIRE_SLURM=$(SLURM) $(PY) -m pytest tests/slurm -q -p no:cacheprovider

slurm:
	@if [ "$(SLURM)" != 1 ] || { command -v slurmctld && command -v slurmd && command -v sbatch && command -v munged; } >/dev/null; then :; \
	elif [ -n "$(HAVE_APT)" ]; then \
	  echo "installing Debian's slurm and munge for the SLURM tier (apt-get, ~10 s; not started, not enabled)"; \
	  $(SUDO) bash tools/install_slurm.sh; \
	else echo "no apt-get: the SLURM tier cannot install SLURM here (it needs Debian's slurm and munge)"; fi

test-notebooks: $(STAMP) $(MXSTAMP)
	$(NBVAL) -q $(XDIST) notebooks $(addprefix --ignore=,$(MXNET_NOTEBOOKS))
	$(NBVAL_MXNET) -q $(MXNET_NOTEBOOKS)

test-exercises: $(STAMP) $(MXSTAMP)
	$(PY) -m pytest tests/exercises -q -p no:cacheprovider

student: $(STAMP)
	$(PY) tools/build_exercises.py exercises dist

# grade a folder of submitted notebooks of one exercise (after `make student`): dist/EXERCISE/grades.csv
grade: $(STAMP)
	@test -n "$(EXERCISE)" -a -n "$(SUBMISSIONS)" || { echo "usage: make grade EXERCISE=02_data_parallel_from_scratch SUBMISSIONS=folder/of/notebooks"; exit 2; }
	$(PY) tools/grade_class.py dist/$(EXERCISE)/autograder/autograder.zip $(SUBMISSIONS) --csv dist/$(EXERCISE)/grades.csv

book: $(STAMP)
	$(PY) tools/build_book.py build

# re-execute every chapter and rewrite the README's table of wall time and peak memory
outputs: $(STAMP) $(MXSTAMP)
	rm -rf notebooks/work   # %%writefile then says "Writing", as on a fresh clone
	$(PY) tools/run_notebooks.py --readme notebooks/[0-9]*.ipynb

clean:
	rm -rf dist notebooks/work exercises/work
