"""Shared test setup: fast CPU compiles (tests use small shapes, so optimisation passes cost more
than they save), here and in the training runs tests start as subprocesses (the environment
variables; 12% off the subprocess-heavy files cold), and no global float64 (tests that need it
use `jax.enable_x64(True)`)."""

import os
from importlib import metadata
from pathlib import Path

import jax
import pytest

import lion_jax  # noqa: F401  (sets lion-jax's XLA:CPU flags before any test starts a backend)

jax.config.update("jax_disable_most_optimizations", True)
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "true")

# jaxlib 0.10's XLA:CPU emits its fusions through MLIR; its older emitters compile the tests'
# small programs in about half the time (tests/test_train.py and test_packing.py from an empty
# compilation cache: 122 s against 68 s, the same results). Later jaxlibs dropped the flag, and
# XLA aborts on a flag it does not know, so it is added on 0.10 only. Tests only: a user's run
# compiles as XLA chooses. Must be set before the first backend starts, as lion_jax's flags are.
FAST_COMPILE_XLA_FLAG = "--xla_cpu_use_fusion_emitters=false"
if (metadata.version("jaxlib").startswith("0.10.")
    and FAST_COMPILE_XLA_FLAG not in os.environ.get("XLA_FLAGS", "")):  # xdist's workers inherit it
  os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE_XLA_FLAG}".strip()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """A data root shared by one test module's training runs (ListOps is generated into it once)."""
  return tmp_path_factory.mktemp("listops_data")


# Files whose tests start training processes of 10-40 s each run first: at the end of the run
# one of `make test`'s two workers would otherwise wait alone on one of them.
LONG_FILES_FIRST = ("test_multihost.py", "test_sweep.py", "test_xla_cpu_crashes.py",
                    "test_train_sharding.py", "test_checkpoint_kill.py")


def pytest_collection_modifyitems(config, items):
  missing = [name for name in LONG_FILES_FIRST if not (Path(__file__).parent / name).exists()]
  if missing:  # a renamed file would silently lose its place at the front
    raise pytest.UsageError(f"tests/conftest.py LONG_FILES_FIRST names {', '.join(missing)}, "
                            "which tests/ does not have: rename them there too")
  items.sort(key=lambda item: item.path.name not in LONG_FILES_FIRST)  # stable: files stay whole
