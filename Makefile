# graphpar: every target creates/updates .venv first, so a fresh clone needs only Python 3.11+ and make.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DEVICES ?= 8
export XLA_FLAGS ?= --xla_force_host_platform_device_count=$(DEVICES)
export PYTHONUNBUFFERED := 1

.PHONY: demo test test-slow test-dist bench venv clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "graphpar needs Python >= 3.11; set PYTHON=python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## the seed quickstart on 8 simulated CPU devices
	$(PY) examples/quickstart.py

test: $(STAMP)  ## the default suite (about 7 minutes on 2 cores; installs Chromium from Debian when apt is usable)
	-@test -x /usr/bin/chromium || ! command -v apt-get >/dev/null 2>&1 || (echo "make test: installing chromium from Debian (apt-get) for the headless-browser tests of the HTML views; they are skipped without it" && (apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)))
	$(PY) -m pytest -q

test-slow: $(STAMP)  ## long runs: convergence, fault trials
	$(PY) -m pytest -q -m slow

test-dist: $(STAMP)  ## multi-process tests on 127.0.0.1 (installs OpenMPI from Debian when apt is usable)
	-@command -v mpirun >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || (echo "make test-dist: installing openmpi-bin from Debian (apt-get) for the mpirun launch tests" && (apt-get install -y -q openmpi-bin || (apt-get update -q && apt-get install -y -q openmpi-bin)))
	$(PY) -m pytest -q -m dist

bench: $(STAMP)  ## ratios against hand-written JAX, measured in the same run
	$(PY) -m bench

clean:
	rm -rf $(VENV) ir_dumps/rank_* .pytest_cache
