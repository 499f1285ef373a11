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
  assert len(_modules()) > 50 and "lion_jax.nn.s5" in _modules()
  assert "lra.data.generators.pathfinder_draw" in _modules()
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


# --- the library's layering (docs/design.md §1) ---------------------------------------------------


def _library_imports():
  """Each lion_jax module -> ({lion_jax modules it imports anywhere}, [private names it takes
  from another lion_jax module, as `from m import _x` or `m._x`])."""
  import ast  # pylint: disable=import-outside-toplevel
  graph = {}
  for name in (n for n in _modules() if n.startswith("lion_jax")):
    path = ROOT.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    tree = ast.parse(path.read_text())
    imported, private, aliases = set(), [], {}
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lion_jax"):
        for alias in node.names:
          target = f"{node.module}.{alias.name}"
          is_module = target in _modules()
          imported.add(target if is_module else node.module)
          if is_module:
            aliases[alias.asname or alias.name] = target
          elif alias.name.startswith("_"):
            private.append(f"{node.module}.{alias.name}")
      elif isinstance(node, ast.Import):
        imported.update(a.name for a in node.names if a.name.startswith("lion_jax"))
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in aliases and node.attr.startswith("_")):
        private.append(f"{aliases[node.value.id]}.{node.attr}")
    graph[name] = ({m for m in imported if m != name and m != "lion_jax"}, private)
  return graph


def test_the_maths_never_imports_the_modules_and_nothing_imports_in_a_circle():
  graph = _library_imports()
  assert "lion_jax.ops.attention" in graph and "lion_jax.nn.mixer" in graph
  for name, (imports, _) in graph.items():
    if name.startswith("lion_jax.ops"):
      assert not {m for m in imports if m.startswith("lion_jax.nn")}, name
  state = {}

  def visit(name, path):  # depth-first search; a module met again on its own path is a circle
    if state.get(name) == "done":
      return
    assert state.get(name) != "open", " -> ".join(path + [name])
    state[name] = "open"
    for target in graph.get(name, ((), ()))[0]:
      if not target.endswith("__init__") and target in graph and not name.startswith(target):
        visit(target, path + [name])
    state[name] = "done"

  for name in graph:
    visit(name, [])


def test_no_private_name_crosses_a_module_of_the_library():
  crossings = {name: private for name, (_, private) in _library_imports().items() if private}
  assert not crossings
