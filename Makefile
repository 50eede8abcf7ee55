# graphpar: every target creates/updates .venv first, so a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEVICES ?= 8
export XLA_FLAGS ?= --xla_force_host_platform_device_count=$(DEVICES)
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-latest latest-python test-slow test-dist bench venv clean

# test-latest: the default suite on Python >= 3.12 with the newest jax pyproject.toml allows (jax >= 0.11 needs
# 3.12), in its own .venv-latest; `make test` covers Python 3.11 and the lowest jax. Its interpreter: PYTHON_LATEST
# if set, else the first of python3.12 / python3.13 on PATH that runs, else pyenv's 3.12 (or later) with the newest
# patch release (pyenv's shims answer "command not found" for a version installed but not selected, so its own path
# is used). 3.12 first: the oldest Python the newest jax supports, whose full test extra was checked to install.
# TESTS=PATHS: test and test-latest run only those (make test-latest TESTS=tests/planner).
LATEST_VENV  := .venv-latest
LATEST_PY    := $(LATEST_VENV)/bin/python
LATEST_STAMP := $(LATEST_VENV)/.installed
IS_312 := import sys; sys.exit(sys.version_info < (3, 12))
FIND_LATEST_PYTHON := \
	py="$(PYTHON_LATEST)"; \
	if [ -n "$$py" ] && ! "$$py" -c '$(IS_312)' >/dev/null 2>&1; then \
		echo "PYTHON_LATEST=$$py is not a Python >= 3.12 that runs" >&2; exit 1; fi; \
	if [ -z "$$py" ]; then for c in python3.12 python3.13; do \
		if $$c -c '$(IS_312)' >/dev/null 2>&1; then py=$$c; break; fi; done; fi; \
	if [ -z "$$py" ] && command -v pyenv >/dev/null 2>&1; then \
		for v in $$(pyenv versions --bare | grep -E '^3\.[0-9]+\.[0-9]+$$' | sort -t. -k2,2n -k3,3nr); do \
			c="$$(pyenv root)/versions/$$v/bin/python3"; \
			if "$$c" -c '$(IS_312)' >/dev/null 2>&1; then py=$$c; break; fi; done; fi; \
	if [ -z "$$py" ]; then echo "no Python >= 3.12 found (python3.12, python3.13, pyenv): install one (pyenv install \
	3.12) or set PYTHON_LATEST=/path/to/python3.12" >&2; exit 1; fi

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "graphpar needs Python >= 3.11; set PYTHON=python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## MindSpore's distributed-parallel quick start (examples/quickstart.py) on 8 simulated CPU devices
	$(PY) examples/quickstart.py

test: $(STAMP)  ## the default suite (about 10 minutes on 2 cores; installs Chromium from Debian when apt is usable)
	-@test -x /usr/bin/chromium || ! command -v apt-get >/dev/null 2>&1 || (echo "make test: installing chromium from Debian (apt-get) for the headless-browser tests of the HTML views; they are skipped without it" && (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)))
	$(PY) -m pytest -q $(TESTS)

latest-python:  ## print the Python >= 3.12 that test-latest uses (exits 1 with a hint when there is none)
	@$(FIND_LATEST_PYTHON); echo "$$py"

$(LATEST_STAMP): pyproject.toml
	@$(FIND_LATEST_PYTHON); test -x $(LATEST_PY) || (echo "make test-latest: creating $(LATEST_VENV) with $$py" && "$$py" -m venv $(LATEST_VENV))
	$(LATEST_PY) -m pip install -qq --upgrade pip
	$(LATEST_PY) -m pip install -qq --upgrade --upgrade-strategy eager -e '.[test]'
	@touch $(LATEST_STAMP)

test-latest: $(LATEST_STAMP)  ## the default suite on Python >= 3.12 and the newest allowed jax (.venv-latest)
	@$(LATEST_PY) -c 'import sys, jax; print(f"make test-latest: Python {sys.version.split()[0]}, jax {jax.__version__}")'
	$(LATEST_PY) -m pytest -q $(TESTS)

test-slow: $(STAMP)  ## long runs: convergence, fault trials
	$(PY) -m pytest -q -m slow

test-dist: $(STAMP)  ## multi-process tests on 127.0.0.1 (installs OpenMPI from Debian when apt is usable)
	-@command -v mpirun >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || (echo "make test-dist: installing openmpi-bin from Debian (apt-get) for the mpirun launch tests" && (apt-get install -y -q openmpi-bin || (apt-get update -q && apt-get install -y -q openmpi-bin)))
	$(PY) -m pytest -q -m dist

bench: $(STAMP)  ## ratios against hand-written JAX, measured in the same run
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(LATEST_VENV) ir_dumps/rank_* .pytest_cache
