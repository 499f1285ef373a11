"""`run.py` as a user runs it: train, eval mode in another form, and SIGKILL + rerun.

The kill test is `slow` (three training processes); `make test-all` runs it.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra.metrics import read_timing

ROOT = Path(__file__).resolve().parents[1]
TINY_FLAGS = [
    "--config.model.d_model=16", "--config.model.num_layers=1", "--config.model.chunk_size=8",
    "--config.seq_len=32", "--config.batch_size=4", "--config.eval_every_steps=3",
    "--config.log_every_steps=1", "--config.max_examples=16", "--config.generate.num_train=32",
    "--config.generate.num_val=16", "--config.generate.num_test=16",
    "--config.generate.min_length=5", "--config.generate.max_length=30"]


def run_py(*args, workdir, data_dir=None, steps=6, wait=True):
  cmd = [sys.executable, str(ROOT / "run.py"), f"--workdir={workdir}", *args]
  if data_dir is not None:
    cmd += ["--config=configs/listops.py:lion_s,runlocal", f"--config.data_dir={data_dir}",
            f"--config.num_train_steps={steps}", *TINY_FLAGS]
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  if not wait:
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  return proc.stdout


def test_cli_trains_then_evaluates_the_best_checkpoint_in_another_form(tmp_path):
  run_py(workdir=tmp_path / "run", data_dir=tmp_path / "data")
  results = json.loads((tmp_path / "run" / "results.json").read_text())
  out = run_py("--mode=eval", "--config.eval_form=rnn", workdir=tmp_path / "run")
  match = re.search(r"step (\d+) \(rnn form\), test accuracy ([\d.]+)% on 16 examples.*"
                    r"peak memory [\d.]+ MiB", out)
  assert match, out
  assert int(match.group(1)) == results["best_step"]
  assert float(match.group(2)) == pytest.approx(100 * results["test_accuracy"], abs=0.005)


def test_cli_eval_without_a_run_says_what_is_missing(tmp_path):
  cmd = [sys.executable, str(ROOT / "run.py"), "--mode=eval", f"--workdir={tmp_path}"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert proc.returncode != 0 and "config.json not found" in proc.stderr


@pytest.mark.slow
def test_sigkill_at_any_moment_then_rerun_gives_the_uninterrupted_results(tmp_path):
  steps = 12
  run_py(workdir=tmp_path / "straight", data_dir=tmp_path / "data", steps=steps)
  expected = json.loads((tmp_path / "straight" / "results.json").read_text())
  workdir = tmp_path / "killed"
  for delay in (0.5, 2.0):  # once just after the first checkpoint, once a little later
    proc = run_py(workdir=workdir, data_dir=tmp_path / "data", steps=steps, wait=False)
    while not (workdir / "checkpoints").is_dir() or not any(
        p.name.isdigit() for p in (workdir / "checkpoints").iterdir()):
      assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
      time.sleep(0.05)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if (workdir / "results.json").exists():
      break  # finished before the kill: the rerun below must still agree
  run_py(workdir=workdir, data_dir=tmp_path / "data", steps=steps)
  got = json.loads((workdir / "results.json").read_text())
  for key in ("best_val_accuracy", "test_accuracy", "test_loss", "best_step", "num_params"):
    assert got[key] == expected[key], key
  assert (workdir / "metrics.jsonl").read_text() == (tmp_path / "straight" / "metrics.jsonl").read_text()
  # Training time is summed over the sessions: one row per evaluation, increasing.
  timing, straight = (read_timing(d) for d in (workdir, tmp_path / "straight"))
  assert [t["step"] for t in timing] == [t["step"] for t in straight]
  seconds = [t["train_seconds"] for t in timing]
  assert seconds == sorted(seconds) and seconds[0] > 0
