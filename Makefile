# Every target creates the virtual environment and installs the project when missing, so a fresh
# clone needs nothing else. PYTHON picks the interpreter (`make test PYTHON=python3.13`); each one
# other than the default gets its own environment, .venv-3.13 for python3.13. CONSTRAINTS pins the
# installed versions to a tested set (`make test CONSTRAINTS=constraints/py3.13-jax0.12.txt`).
PYTHON ?= python3
CONSTRAINTS ?=
VENV ?= $(if $(filter python3,$(PYTHON)),.venv,.venv-$(patsubst python%,%,$(notdir $(PYTHON))))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export JAX_COMPILATION_CACHE_DIR ?= $(CURDIR)/.jax_cache

# The interpreter PYTHON names, as a path: from PATH (a pyenv shim counts only if it runs), else
# from pyenv's versions folder, which CI machines have without the shims on PATH.
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
PYTHON_EXE = $(shell for p in $(PYTHON) $(PYENV_VERSIONS)/$(patsubst python%,%,$(notdir $(PYTHON)))*/bin/$(notdir $(PYTHON)); do \
  "$$p" -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)

$(STAMP): pyproject.toml $(CONSTRAINTS)
	@test -x $(PY) || test -n "$(PYTHON_EXE)" || { echo "PYTHON=$(PYTHON) does not run here: not on PATH, not in $(PYENV_VERSIONS). Install it, or pass PYTHON=/path/to/python3.X" >&2; exit 1; }
	test -x $(PY) || $(PYTHON_EXE) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
	touch $(STAMP)

.PHONY: venv test test-all test-smoke demo bench clean

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 --dist worksteal tests

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal tests

# A couple of minutes, for a second Python/JAX: imports every module, trains, checkpoints and
# resumes a runlocal ListOps run, checks every form and its gradients against the float64
# definition, and the version-dependent XLA flag.
SMOKE_TESTS := tests/test_imports.py tests/test_train.py tests/ops/test_segments.py \
  tests/ops/test_lion_attention.py::test_every_form_equals_float64_definition \
  tests/ops/test_lion_attention.py::test_gradients_agree_between_forms_and_with_finite_differences \
  tests/test_xla_cpu_crashes.py::test_lion_jax_import_switches_ynn_fusions_off_on_jaxlib_0_10_unless_the_user_chose

test-smoke: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 2 --dist worksteal $(SMOKE_TESTS)

demo: $(STAMP)
	$(PY) -m lra.demo

bench: $(STAMP)
	$(PY) bench/forms.py --quick
	$(PY) bench/layers.py --quick
	$(PY) bench/inference.py --quick
	$(PY) bench/train_step.py --quick

clean:
	rm -rf .venv .venv-* .pytest_cache .jax_cache
