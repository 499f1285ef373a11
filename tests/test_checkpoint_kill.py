"""A SIGKILL at any instant of a checkpoint save leaves a usable latest and best checkpoint.

A tiny run saves at steps 3 and 6 and its (faked) validation accuracy makes step 3 and
then step 6 the best, so best/ (one step) replaces step 3 by step 6. A training process
kills itself at each window of those saves: between the latest and the best save of
step 6, just before orbax renames a completed step into place, and while orbax retires
the old best step. After every kill both folders hold a restorable step, and a rerun
ends with the results of an uninterrupted run.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from lra import checkpoint, train
from tests.test_train import tiny_config

ROOT = Path(__file__).resolve().parents[1]

# Runs the tiny training in `workdir`; `window` names the instant at which it SIGKILLs itself.
SCRIPT = textwrap.dedent("""
    import os, shutil, signal, sys
    from pathlib import Path
    from lra import checkpoint, train
    from tests import test_checkpoint_kill as spec

    data_dir, workdir, window = sys.argv[1:]
    train._validate = spec.fake_validate(train._validate)

    def kill():
      os.kill(os.getpid(), signal.SIGKILL)

    if window == "between the latest and the best save of step 6":
      real_save = checkpoint.Checkpointer.save
      def save(self, step, state, meta, *, best=False):
        if best and step == 6:
          kill()
        real_save(self, step, state, meta, best=best)
      checkpoint.Checkpointer.save = save
    elif window.startswith("before the commit of "):
      final = Path(workdir, window.split()[-1]).resolve()  # checkpoints/6 or best/6
      real_rename = os.rename
      def rename(src, dst):
        if Path(dst).resolve() == final:
          kill()
        real_rename(src, dst)
      os.rename = rename
    elif window == "midway through retiring best/3":
      old = Path(workdir, "best", "3").resolve()
      real_rmtree = shutil.rmtree
      def rmtree(path, *args, **kwargs):
        if Path(path).resolve() == old:
          os.remove(next(p for p in old.rglob("*") if p.is_file()))  # half-deleted
          kill()
        real_rmtree(path, *args, **kwargs)
      shutil.rmtree = rmtree
    train.train_and_evaluate(spec.config(data_dir), workdir, progress=False)
""")

# The first window is where a resumed run must repair best/; the others rest on orbax's
# write-then-rename-then-retire order and run with the slow tests (`make test-all`).
WINDOWS = ["between the latest and the best save of step 6",
           *(pytest.param(window, marks=pytest.mark.slow) for window in (
               "before the commit of best/6", "midway through retiring best/3",
               "before the commit of checkpoints/6"))]


def config(data_dir):
  return tiny_config(data_dir)  # 6 steps, evaluated and saved at steps 3 and 6


def fake_validate(real_validate):
  """`train._validate` with accuracy 0.25 at step 3 and 0.75 at step 6, read from the
  optimizer's step count so that a resumed run sees the same values."""

  def validate(eval_fn, state, *args, **kwargs):
    values = real_validate(eval_fn, state, *args, **kwargs)
    values["eval_accuracy"] = {3: 0.25, 6: 0.75}[int(np.asarray(state[1]["step"].get_value()))]
    return values

  return validate


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("uninterrupted")
  return run_training(data_dir, workdir)


def run_training(data_dir, workdir) -> dict:
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(train, "_validate", fake_validate(train._validate))  # pylint: disable=protected-access
    return train.train_and_evaluate(config(data_dir), str(workdir), progress=False)


@pytest.mark.parametrize("window", WINDOWS)
def test_a_kill_inside_a_save_leaves_usable_checkpoints_and_a_rerun_finishes_the_run(
    window, data_dir, uninterrupted, tmp_path):
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), JAX_DISABLE_MOST_OPTIMIZATIONS="true")
  proc = subprocess.run([sys.executable, "-c", SCRIPT, str(data_dir), str(tmp_path), window],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == -9, f"the kill window was never reached:\n{proc.stderr[-3000:]}"

  ckpt = checkpoint.Checkpointer(tmp_path)
  target = train._setup(config(data_dir), *_info(data_dir), 1, 1).state  # pylint: disable=protected-access
  latest, best = ckpt.latest_step(), ckpt.best_step()
  assert latest is not None and best is not None
  assert ckpt.restore(latest, target)[1]["step"] == latest
  assert ckpt.restore(best, target, best=True)[1]["best_step"] == best
  ckpt.close()

  resumed = run_training(data_dir, tmp_path)
  for key in ("best_val_accuracy", "best_step", "test_accuracy", "test_loss"):
    assert resumed[key] == uninterrupted[key], key
  assert resumed["best_step"] == 6
  assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["6"]


def _info(data_dir):
  _, info = train.load_data(config(data_dir))
  return info, train.check_config(config(data_dir))


def test_saving_a_saved_step_again_keeps_it_instead_of_deleting_it_first(tmp_path):
  # Deleting first would leave best/ (one step) empty until the new copy is complete.

  ckpt = checkpoint.Checkpointer(tmp_path)
  saved = {"w": jnp.arange(3.0)}
  ckpt.save(6, saved, {"step": 6}, best=True)
  ckpt.save(6, {"w": jnp.zeros(3)}, {"step": 6}, best=True)
  state, meta = ckpt.restore(6, saved, best=True)
  np.testing.assert_array_equal(state["w"], [0.0, 1.0, 2.0])
  assert meta == {"step": 6} and ckpt.best_step() == 6
  ckpt.close()


def test_a_checkpoint_of_other_parameters_is_refused_naming_its_folder(tmp_path):
  ckpt = checkpoint.Checkpointer(tmp_path)
  ckpt.save(3, {"w": jnp.arange(3.0), "q_proj": jnp.ones(2)}, {"step": 3})
  with pytest.raises(ValueError, match=r"checkpoints/3 holds other parameters than the model "
                                       r"this config builds.*empty --workdir"):
    ckpt.restore(3, {"w": jnp.zeros(3)})
  ckpt.close()
