"""Everything that has crashed XLA:CPU runs in a fresh process: a segfault fails one test.

Each kernel case runs with the YNN fusions a user may switch on (`dot,reduce,eltwise`), which
crashed the kernel as it was before its exact vector block became a contraction: that shows the
kernel itself is safe, whatever the flags. `make test-all` also runs it with lion-jax's own XLA
flags (`lion_jax.xla_flags`, YNN fusions off), the path the training runs below take.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lion_jax import xla_flags
from tests.xla_crash_cases import CASES

ROOT = Path(__file__).resolve().parents[1]
TESTS_FUSION_EMITTER_FLAG = "--xla_cpu_use_fusion_emitters"  # tests/conftest.py sets it
FLAG_SETTINGS = {
    "lion_jax_flags": "",
    "ynn_fusions_on": f"{xla_flags.YNN_FUSION_FLAG}=dot,reduce,eltwise",
}


def _environment(xla_setting: str, fast_compile: bool = False) -> dict[str, str]:
  """This process's environment minus the XLA flags lion_jax and conftest put in it (YNN fusions,
  the tests' fusion emitters), plus `xla_setting`: the crash cases compile as a user's run does.

  `fast_compile` skips most XLA optimisations, as the in-process tests do (tests/conftest.py);
  the kernel cases crashed the previous kernel with and without them.
  """
  inherited = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
               if not flag.startswith((xla_flags.YNN_FUSION_FLAG, TESTS_FUSION_EMITTER_FLAG))]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             XLA_FLAGS=" ".join(inherited + [xla_setting]).strip())
  env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "true" if fast_compile else "false"
  return env


def _run(cmd, env, timeout=600) -> subprocess.CompletedProcess:
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, (
      f"exit code {proc.returncode} (-11 or 139: segmentation fault)\n{proc.stderr[-3000:]}")
  return proc


# With YNN fusions on in `make test` (the stronger check: the kernel itself must be safe); with
# lion-jax's flags in `make test-all` (the training runs below take that path in `make test`).
@pytest.mark.parametrize("setting", [
    "ynn_fusions_on", pytest.param("lion_jax_flags", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", CASES)
def test_known_crash_case_runs_and_matches_float64(case, setting):
  proc = _run([sys.executable, "-m", "tests.xla_crash_cases", case],
              _environment(FLAG_SETTINGS[setting], fast_compile=True))
  report = json.loads(proc.stdout.strip().splitlines()[-1])
  assert report["finite"]
  for name, error in report["entrywise"].items():
    assert error < 1e-4, f"d/d{name}: {error:.2e} of its largest entry"
  if "directional" in report:
    assert report["directional"] < 1e-4


def test_subprocesses_of_the_tests_compile_fast_unless_a_crash_case_chooses_otherwise():
  """Training runs that tests start inherit conftest's fast compiles; the crash cases here set
  theirs explicitly, since the kernel crashed with XLA's optimisations on as well as off."""
  show = [sys.executable, "-c",
          "import jax; print(jax.config.read('jax_disable_most_optimizations'))"]
  assert _run(show, dict(os.environ, JAX_PLATFORMS="cpu")).stdout.strip() == "True"
  assert _run(show, _environment("")).stdout.strip() == "False"
  assert _run(show, _environment("", fast_compile=True)).stdout.strip() == "True"
  tests_flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split()
                 if flag.startswith(TESTS_FUSION_EMITTER_FLAG)]
  on_jaxlib_0_10 = xla_flags._jaxlib_version() == (0, 10)  # pylint: disable=protected-access
  assert tests_flags == ([f"{TESTS_FUSION_EMITTER_FLAG}=false"] if on_jaxlib_0_10 else [])
  assert TESTS_FUSION_EMITTER_FLAG not in _environment("")["XLA_FLAGS"]


def test_lion_jax_import_switches_ynn_fusions_off_on_jaxlib_0_10_unless_the_user_chose():
  """jaxlib 0.10.x gets the flag; later jaxlibs run with XLA's own defaults (no flag added)."""
  env = _environment("")
  show = [sys.executable, "-c", "import os, lion_jax; print(os.environ.get('XLA_FLAGS', ''))"]
  flags = _run(show, env).stdout.split()
  if xla_flags._jaxlib_version() < (0, 11):  # pylint: disable=protected-access
    assert f"{xla_flags.YNN_FUSION_FLAG}=" in flags
  else:
    assert not [flag for flag in flags if flag.startswith(xla_flags.YNN_FUSION_FLAG)], flags
  env["XLA_FLAGS"] = f"{xla_flags.YNN_FUSION_FLAG}=dot"
  assert _run(show, env).stdout.split() == [f"{xla_flags.YNN_FUSION_FLAG}=dot"]


@pytest.mark.parametrize("jaxlib", [(0, 9), (0, 11), (0, 12), (0, 99)])
def test_flag_is_added_only_for_jaxlib_0_10(monkeypatch, jaxlib):
  """Other jaxlibs keep XLA's defaults (and XLA aborts on a flag that it does not know)."""
  monkeypatch.setattr(xla_flags, "_jaxlib_version", lambda: jaxlib)
  environ = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  assert not xla_flags.disable_crashing_cpu_fusions(environ)
  assert environ == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
  monkeypatch.setattr(xla_flags, "_jaxlib_version", lambda: (0, 10))
  assert xla_flags.disable_crashing_cpu_fusions(environ)
  assert environ["XLA_FLAGS"] == (
      f"--xla_force_host_platform_device_count=2 {xla_flags.YNN_FUSION_FLAG}=")


# Table 3's "w/o HiPPO" rows: random decays span more than 2W per chunk from the first step, so
# their training runs a steep branch's backward pass (the exact vector fallback's segfaulted at
# step 1; the factored kernel takes them now, with the steepest chunks recomputed on the side). As a user runs them: lion-jax's flags, XLA's default
# optimisations. (The kernel cases above show that the kernel is safe with YNN fusions on as
# well.)
SMALL_DATA = ["--config.num_train_steps=3", "--config.eval_every_steps=3",
              "--config.max_examples=16", "--config.generate.num_train=32",
              "--config.generate.num_val=16", "--config.generate.num_test=16"]


# make test-all: these runs compile with XLA's full optimisations, about 35 s each; make test
# runs the steep branch's backward pass through the kernel cases above.
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["lion_d_random", "lion_s_random"])
def test_random_init_rows_train_at_runlocal_size_and_write_results(tmp_path, variant):
  workdir = tmp_path / "run"
  _run([sys.executable, "run.py", f"--config=configs/listops.py:{variant},runlocal",
        f"--workdir={workdir}", f"--config.data_dir={tmp_path / 'data'}", *SMALL_DATA],
       _environment(FLAG_SETTINGS["lion_jax_flags"]))
  results = json.loads((workdir / "results.json").read_text())
  assert results["best_step"] == 3 and 0.0 <= results["test_accuracy"] <= 1.0
