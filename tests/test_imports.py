"""Every module of the project imports on the installed JAX, Flax, Optax, Orbax and Grain.

A module whose import breaks on a new release (a removed API used at import time, a renamed
module) fails here by name, even when no other test reaches it. The bench scripts are imported
from their files, as `python bench/x.py` would run them, without calling their `main`.
"""

import importlib
import importlib.util
import os
import pkgutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lion_jax", "lra", "configs")


def _modules():
  names = []
  for package in PACKAGES:
    names.append(package)
    path = ROOT.joinpath(*package.split("."))
    names += [info.name for info in pkgutil.walk_packages([str(path)], prefix=f"{package}.")
              if not info.name.endswith("__main__")]
  return sorted(names)


def _bench_scripts():
  """bench/'s scripts and its probes (bench/probes/), as paths below bench/."""
  return sorted(str(path.relative_to(ROOT / "bench")) for folder in ("", "probes")
                for path in (ROOT / "bench" / folder).glob("*.py"))


def test_the_module_lists_are_not_empty():
  assert len(_modules()) > 50 and "lion_jax.s5" in _modules() and "lra.data.generators.pathfinder_draw" in _modules()
  assert {"forms.py", "probes/state_pass.py"} <= set(_bench_scripts())


@pytest.mark.parametrize("name", _modules())
def test_module_imports(name):
  importlib.import_module(name)


@pytest.mark.parametrize("script", _bench_scripts())
def test_bench_script_imports(script, monkeypatch):
  path = ROOT / "bench" / script
  monkeypatch.syspath_prepend(str(path.parent))
  spec = importlib.util.spec_from_file_location(f"bench_script_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, spec.name, module)
  environment = dict(os.environ)
  try:
    spec.loader.exec_module(module)
  finally:  # a script may set XLA_FLAGS for its own run; later tests' subprocesses inherit os.environ
    os.environ.clear()
    os.environ.update(environment)
