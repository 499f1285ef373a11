# Every target creates .venv and installs the project when missing, so a fresh clone needs nothing else.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/.jax_cache

.PHONY: venv test test-all demo bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 tests

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

demo: $(STAMP)
	$(PY) -m lra.demo

bench: $(STAMP)
	$(PY) bench/forms.py --quick
	$(PY) bench/layers.py --quick
	$(PY) bench/inference.py --quick
	$(PY) bench/train_step.py --quick

clean:
	rm -rf $(VENV) .pytest_cache .jax_cache
