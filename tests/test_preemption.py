"""A run stopped by a signal saves the step it reached, says so, exits 75, and resumes exactly.

Each stop runs `run.py`'s command line in a subprocess that sends itself the signal at a chosen
instant (inside a training step, inside a validation, inside the save the stop makes), on a
1-layer, 16-wide LION-S of 12 steps, evaluated at steps 5, 10 and 12. The rerun resumes in this
process and must end as the same run trained without a stop (`uninterrupted`): the same
results.json and metrics.jsonl, row for row. Two processes stop together whichever of them gets
the signal (slow: three 2-process jobs a case).
"""

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from lra import checkpoint, distributed, metrics, preemption, run_records, sweep_records, train
from tests.test_multihost import TINY_FLAGS, Job, metric_rows, results

ROOT = Path(__file__).resolve().parents[1]
STEPS = 12
RESULT_KEYS = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss", "total_steps")

# Runs run.py's command line with a signal sent at one instant. argv: the signal, where to send
# it ("step": as training step N starts; "validation": as evaluation batch N starts; "twice": at
# step N and again as the stop's save starts; "killed in the save": at step N, then SIGKILL just
# before orbax commits the stop's checkpoint), N, then run.py's flags.
SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from lra import checkpoint, command, steps

    signame, where, at, argv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    send = lambda signum=signal.Signals[signame]: os.kill(os.getpid(), signum)

    def sending_at(make_step, n):
      def make(*args, **kwargs):
        step, calls = make_step(*args, **kwargs), [0]
        def call(*inputs):
          calls[0] += 1
          if calls[0] == n:
            send()
          return step(*inputs)
        return call
      return make

    if where == "validation":
      steps.jit_eval_step = sending_at(steps.jit_eval_step, at)
    else:
      steps.jit_train_step = sending_at(steps.jit_train_step, at)
    if where == "twice":
      real_save = checkpoint.Checkpointer.save
      def save(self, step, *args, **kwargs):
        if step == at:  # the stop's save; step 5's regular one is left alone
          send()
        real_save(self, step, *args, **kwargs)
      checkpoint.Checkpointer.save = save
    elif where == "killed in the save":
      workdir = next(a.split("=", 1)[1] for a in argv if a.startswith("--workdir="))
      final, real_rename = Path(workdir, "checkpoints", str(at)).resolve(), os.rename
      def rename(src, dst):
        if Path(dst).resolve() == final:
          os.kill(os.getpid(), signal.SIGKILL)
        real_rename(src, dst)
      os.rename = rename
    sys.exit(command.run_command_line(["run.py", *argv]))
""")


def flags(workdir, data_dir, *extra) -> list[str]:
  return [f"--workdir={workdir}", "--config=configs/listops.py:lion_s,runlocal",
          f"--config.data_dir={data_dir}", f"--config.num_train_steps={STEPS}",
          *TINY_FLAGS, "--config.eval_every_steps=5", *extra]


def config(data_dir, *extra):
  """The config run.py builds from `flags` (the same code: `sweep_records.build_config`)."""
  return sweep_records.build_config(["python", "run.py", *flags("unused", data_dir, *extra)])


def stop(workdir, data_dir, signame, where, at, *extra) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             JAX_DISABLE_MOST_OPTIMIZATIONS="true")
  return subprocess.run([sys.executable, "-c", SCRIPT, signame, where, str(at),
                         *flags(workdir, data_dir, *extra)], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
  """{packing: (results, metrics rows)} of the runs trained without a stop, made on demand."""
  made = {}

  def get(packing: bool):
    if packing not in made:
      workdir = tmp_path_factory.mktemp(f"uninterrupted_{packing}")
      got = train.train_and_evaluate(config(data_dir, f"--config.packing={packing}"),
                                     str(workdir), progress=False)
      made[packing] = got, metrics.read_metrics(workdir), workdir
    return made[packing]

  return get


def assert_resumes_to_the_uninterrupted_run(workdir, data_dir, uninterrupted, packing, context):
  expected, rows, _ = uninterrupted(packing)
  got = train.train_and_evaluate(config(data_dir, f"--config.packing={packing}"), str(workdir),
                                 progress=False)
  for key in RESULT_KEYS:
    assert got[key] == expected[key], (key, context)
  assert metrics.read_metrics(workdir) == rows, context
  assert not (workdir / run_records.PREEMPTED_FILE).exists()  # the run is no longer stopped


@pytest.mark.parametrize("signame, packing", [
    ("SIGTERM", True),
    pytest.param("SIGTERM", False, marks=pytest.mark.slow),  # padded rows
    pytest.param("SIGINT", True, marks=pytest.mark.slow),
    pytest.param("SIGUSR1", True, marks=pytest.mark.slow)])
def test_a_signal_inside_a_step_saves_that_step_and_the_rerun_ends_as_if_never_stopped(
    signame, packing, data_dir, uninterrupted, tmp_path):
  at = random.randint(1, STEPS)  # any step: a stop loses none of them
  context = f"signal at step {at}"
  proc = stop(tmp_path, data_dir, signame, "step", at, f"--config.packing={packing}")
  assert proc.returncode == preemption.EXIT_STATUS == 75, (context, proc.stderr[-3000:])
  due = at % 5 == 0 or at == STEPS  # a validation was due after the step: the rerun does it
  message = (f"{signame} stopped the run after step {at} of {STEPS} (saved "
             f"{tmp_path / 'checkpoints' / str(at)}); rerun the same command to resume it"
             + (" (its validation runs first)" if due else ""))
  assert proc.stderr.splitlines()[-1] == f"run.py: {message}", context
  record = run_records.read_preempted(tmp_path)
  assert record["message"] == message and record["signal"] == signame, context
  assert (record["step"], record["pending_eval"], record["processes"]) == (at, due, 1), context
  assert record["seconds"] >= record["save_seconds"] > 0 and record["signal_time"] <= record["time"]
  assert run_records.latest_checkpoint(tmp_path) == at, context  # no step lost
  assert max(r["step"] for r in metrics.read_metrics(tmp_path)) == at, context
  assert not (tmp_path / "results.json").exists()
  assert_resumes_to_the_uninterrupted_run(tmp_path, data_dir, uninterrupted, packing, context)


@pytest.mark.slow  # the same save and resume as a signal inside a step, in make test
def test_a_signal_inside_a_validation_saves_the_step_and_the_rerun_validates_it_first(
    data_dir, uninterrupted, tmp_path):
  # Evaluation batches 3 and 4 are the validation after step 10 (16 examples, batches of 8).
  proc = stop(tmp_path, data_dir, "SIGTERM", "validation", 3)
  assert proc.returncode == 75, proc.stderr[-3000:]
  record = run_records.read_preempted(tmp_path)
  assert (record["step"], record["pending_eval"]) == (10, True)
  rows = metrics.read_metrics(tmp_path)
  assert rows[-1]["step"] == 10 and "train_loss" in rows[-1]  # no validation row yet
  assert [t["step"] for t in metrics.read_timing(tmp_path)] == [5]
  # A rerun killed after the validation it owed, before the next checkpoint, resumes from
  # step 10 again: the validation is done again and logged once.
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(train.TrainSums, "flush", _dies_at(11))
    with pytest.raises(Killed):
      train.train_and_evaluate(config(data_dir), str(tmp_path), progress=False)
  assert [t["step"] for t in metrics.read_timing(tmp_path)] == [5, 10]
  assert_resumes_to_the_uninterrupted_run(tmp_path, data_dir, uninterrupted, True,
                                          "stopped in the validation after step 10")
  assert [t["step"] for t in metrics.read_timing(tmp_path)] == [5, 10, 12]


class Killed(Exception):
  """Stands for a SIGKILL: the process ends with no chance to save."""


def _dies_at(step):
  real_flush = train.TrainSums.flush

  def flush(self):
    if any(s == step for s, _ in self._pending):  # pylint: disable=protected-access
      raise Killed()
    real_flush(self)

  return flush


@pytest.mark.slow
def test_a_second_signal_during_the_save_is_ignored_and_the_save_completes(
    data_dir, uninterrupted, tmp_path):
  proc = stop(tmp_path, data_dir, "SIGTERM", "twice", 7)
  assert proc.returncode == 75, proc.stderr[-3000:]
  assert "SIGTERM received while stopping on SIGTERM; ignored" in proc.stderr
  assert run_records.read_preempted(tmp_path)["step"] == 7
  assert_resumes_to_the_uninterrupted_run(tmp_path, data_dir, uninterrupted, True, "twice")


@pytest.mark.slow  # SIGKILL inside saves: tests/test_checkpoint_kill.py, in make test
def test_a_sigkill_inside_the_stops_save_leaves_the_previous_checkpoint_to_resume_from(
    data_dir, uninterrupted, tmp_path):
  proc = stop(tmp_path, data_dir, "SIGTERM", "killed in the save", 7)
  assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
  # Step 5's checkpoint is whole; orbax's unfinished step 7 is removed by the next start.
  assert run_records.latest_checkpoint(tmp_path) == 5
  assert not (tmp_path / run_records.PREEMPTED_FILE).exists()
  assert_resumes_to_the_uninterrupted_run(tmp_path, data_dir, uninterrupted, True, "SIGKILL")
  assert not list((tmp_path / "checkpoints").glob("*tmp*"))


def test_a_refused_resume_changes_nothing_and_a_later_session_clears_stale_records(
    data_dir, uninterrupted, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(uninterrupted(True)[2], workdir)
  before = {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()}
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
  proc = subprocess.run([sys.executable, "run.py", *flags(workdir, data_dir),
                         "--config.learning_rate=0.1"], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 2 and "learning_rate: 0.002 in" in proc.stderr, proc.stderr[-2000:]
  assert {p: p.read_bytes() for p in workdir.rglob("*") if p.is_file()} == before
  # A record left by an earlier session (here: a refusal recorded before this rule) is removed
  # by the next session that starts, which then ends as it does.
  run_records.write_failure(workdir, ValueError("an earlier refusal"))
  train.train_and_evaluate(config(data_dir), str(workdir), progress=False)
  assert not (workdir / run_records.FAILED_FILE).exists()


class Unprintable(Exception):
  def __str__(self):
    raise RuntimeError("no message")


def test_the_failure_recorder_never_raises_and_leaves_a_finished_run_alone(tmp_path):
  assert run_records.read_failure(run_records.write_failure(tmp_path, Unprintable()).parent) == {
      "type": "tests.test_preemption.Unprintable",
      "message": "<Unprintable whose message cannot be read>"}
  (tmp_path / "file").write_text("")
  assert run_records.write_failure(tmp_path / "file", ValueError("x")) is None  # not a folder
  assert run_records.record_failure(tmp_path / "file", ValueError("x")) is None
  finished = tmp_path / "finished"
  finished.mkdir()
  (finished / "results.json").write_text("{}")
  run_records.begin_session(finished)
  assert run_records.record_failure(finished, ValueError("a rerun's error")) is None
  assert not (finished / "failed.json").exists()
  (tmp_path / "new").mkdir()  # nothing to protect: the sweep learns why the run never started
  assert run_records.record_failure(tmp_path / "new", ValueError("bad flag")) is not None


def test_a_failing_process_of_a_job_records_its_error_before_it_exits(monkeypatch, tmp_path):
  monkeypatch.setattr(distributed.jax.distributed, "is_initialized", lambda: True)
  monkeypatch.setattr(distributed.jax, "process_count", lambda: 2)
  monkeypatch.setattr(distributed.jax, "process_index", lambda: 1)

  def exit_(status):
    raise SystemExit(f"os._exit({status})")

  monkeypatch.setattr(distributed.os, "_exit", exit_)
  seen = []
  with pytest.raises(SystemExit, match=r"os\._exit\(1\)"):
    with distributed.stop_job_on_error(on_error=lambda error, process: seen.append(process)):
      raise MemoryError("out of memory")
  assert seen == [1]
  # A stop on a signal is every process's normal ending: it passes through.
  with pytest.raises(preemption.Preempted):
    with distributed.stop_job_on_error(on_error=lambda *args: seen.append(args)):
      raise preemption.Preempted({"message": "SIGTERM stopped the run"})
  assert seen == [1]


def _start_job(tmp_path, name, workdir, data_dir, packing) -> Job:
  return Job(tmp_path / name, flags(workdir, data_dir, f"--config.packing={packing}"),
             num_processes=2, devices=2)


@pytest.mark.slow
@pytest.mark.parametrize("signame, rank, packing", [
    ("SIGTERM", 1, True), ("SIGUSR1", 0, True), ("SIGTERM", 0, False)])
def test_a_signal_to_one_process_stops_both_at_the_same_step_and_the_job_resumes_exactly(
    signame, rank, packing, tmp_path):
  data_dir = tmp_path / "data"
  with _start_job(tmp_path, "logs_straight", tmp_path / "straight", data_dir, packing) as job:
    assert job.wait() == [0, 0], job.tail()

  workdir = tmp_path / "stopped"
  at = random.randint(2, 5)  # JAX notices SIGTERM within a second: a few steps later
  with _start_job(tmp_path, "logs_stopped", workdir, data_dir, packing) as job:
    deadline = time.monotonic() + 120
    while not (workdir / "metrics.jsonl").exists() or not any(
        row["step"] >= at for row in metric_rows(workdir)):
      assert time.monotonic() < deadline and all(p.poll() is None for p in job.procs), job.tail()
      time.sleep(0.05)
    job.procs[rank].send_signal(signal.Signals[signame])
    tic = time.monotonic()
    statuses = job.wait(timeout_s=60)
    seconds = time.monotonic() - tic
  finished = (workdir / "results.json").exists()  # the signal came after the last check
  if not finished:
    assert statuses == [75, 75], job.tail()
    record = run_records.read_preempted(workdir)
    assert record["signal"] == signame and record["processes"] == 2, record
    step = record["step"]
    for log in (job.log(0), job.log(1)):
      assert f"{signame} stopped the run after step {step} of {STEPS}" in log, job.tail()
    assert run_records.latest_checkpoint(workdir) == step
    print(f"{signame} to process {rank} after step {at}: both stopped after step {step}, "
          f"{seconds:.1f} s after the signal")
  with _start_job(tmp_path, "logs_rerun", workdir, data_dir, packing) as job:
    assert job.wait() == [0, 0], job.tail()
  expected = results(tmp_path / "straight")
  for key in RESULT_KEYS:
    assert results(workdir)[key] == expected[key], key
  assert metric_rows(workdir) == metric_rows(tmp_path / "straight")


def test_a_notice_before_the_first_step_stops_without_training(data_dir, tmp_path, monkeypatch):
  # A signal while the session is set up (data, restore): nothing is trained or saved.
  monkeypatch.setattr(preemption.Watch, "should_stop", lambda self: True)
  monkeypatch.setattr(preemption.Watch, "cause", lambda self: ("SIGTERM", time.time()))
  with pytest.raises(preemption.Preempted, match="after step 0 of 12 .nothing trained yet."):
    train.train_and_evaluate(config(data_dir), str(tmp_path), progress=False)
  assert run_records.read_preempted(tmp_path)["step"] == 0
  assert checkpoint.Checkpointer(tmp_path).latest_step() is None
