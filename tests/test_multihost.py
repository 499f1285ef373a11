"""Multi-process training on localhost: `run.py` as a 2-process `jax.distributed` job.

Each process gets 2 forced CPU devices and JAX's variables (JAX_COORDINATOR_ADDRESS on
127.0.0.1 and a free port, JAX_NUM_PROCESSES, JAX_PROCESS_ID); CPU collectives between
processes go through gloo (`jax_cpu_collectives_implementation`). The job must give the
results of one process with 4 devices, write every output once, stop within a bounded
time when a process is killed, and resume from its last checkpoint when rerun.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lra import distributed

ROOT = Path(__file__).resolve().parents[1]
# A 1-layer, 16-wide LION-S on length-32 ListOps; batch 8 splits over 4 devices.
TINY_FLAGS = [  # after --config=configs/listops.py:lion_s,runlocal
    "--config.model.d_model=16",
    "--config.model.num_layers=1", "--config.model.chunk_size=8", "--config.seq_len=32",
    "--config.batch_size=8", "--config.eval_every_steps=3", "--config.log_every_steps=1",
    "--config.max_examples=16", "--config.generate.num_train=32", "--config.generate.num_val=16",
    "--config.generate.num_test=16", "--config.generate.min_length=5",
    "--config.generate.max_length=30"]
JOB_TIMEOUT_S = 150  # a job that has not finished by then has hung
RESULT_KEYS = ("best_val_accuracy", "test_accuracy", "best_step")


def free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


class Job:
  """`num_processes` processes of `run.py` with `devices` CPU devices each, logging to files.

  Used as a context manager, so that whatever happens no process outlives the test.
  """

  def __init__(self, logdir: Path, args: list[str], *, num_processes: int, devices: int):
    port, self.procs, self.logs = free_port(), [], []
    logdir.mkdir(parents=True, exist_ok=True)
    for rank in range(num_processes):
      env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
                 JAX_DISABLE_MOST_OPTIMIZATIONS="true",  # as in conftest: fast compiles
                 XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") +
                            f" --xla_force_host_platform_device_count={devices}"))
      if num_processes > 1:
        env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(num_processes),
                   JAX_PROCESS_ID=str(rank), JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo")
      log = logdir / f"process{rank}.log"
      self.logs.append(log)
      with open(log, "w") as out:
        self.procs.append(subprocess.Popen([sys.executable, str(ROOT / "run.py"), *args], cwd=ROOT,
                                           env=env, stdout=out, stderr=subprocess.STDOUT))

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.kill()

  def kill(self, rank: int | None = None) -> None:
    for proc in self.procs if rank is None else [self.procs[rank]]:
      if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

  def wait(self, timeout_s: float = JOB_TIMEOUT_S) -> list[int]:
    """Every process's exit status; fails (killing them all) past `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for proc in self.procs:
      try:
        proc.wait(max(deadline - time.monotonic(), 0.1))
      except subprocess.TimeoutExpired:
        self.kill()
        pytest.fail(f"job still running after {timeout_s} s:\n{self.tail()}")
    return [proc.returncode for proc in self.procs]

  def tail(self, chars: int = 3000) -> str:
    return "\n".join(f"--- {log.name}\n{log.read_text()[-chars:]}" for log in self.logs)

  def log(self, rank: int) -> str:
    return self.logs[rank].read_text()


def train_args(workdir: Path, data_dir: Path, steps: int) -> list[str]:
  return [f"--workdir={workdir}", "--config=configs/listops.py:lion_s,runlocal",
          f"--config.data_dir={data_dir}",
          f"--config.num_train_steps={steps}", *TINY_FLAGS]


def results(workdir: Path) -> dict:
  return json.loads((workdir / "results.json").read_text())


def metric_rows(workdir: Path) -> list[dict]:
  return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("packing", [
    True,  # ListOps' default: each step's 8 examples end to end in fewer rows
    pytest.param(False, marks=pytest.mark.slow)])
def test_two_processes_of_two_devices_train_as_one_process_of_four(tmp_path, packing):
  # Each job generates its own copy of the (seeded) data; the 2-process job's process 0
  # generates while process 1 waits.
  # The expressions have 16-82 tokens: at L = 128 a step's 8 fill fewer rows when packed.
  flags = [f"--config.packing={packing}", "--config.seq_len=128"]
  one = Job(tmp_path / "logs1", [*train_args(tmp_path / "one", tmp_path / "data1", 6), *flags],
            num_processes=1, devices=4)
  two = Job(tmp_path / "logs2", [*train_args(tmp_path / "two", tmp_path / "data2", 6), *flags],
            num_processes=2, devices=2)
  with one, two:
    assert one.wait() == [0], one.tail()
    assert two.wait() == [0, 0], two.tail()
  assert "process 1 of 2" in two.log(1)
  for log in (one.log(0), two.log(0), two.log(1)):
    assert ("packing 8 examples a step into" in log) == packing, log[-2000:]
  expected, got = results(tmp_path / "one"), results(tmp_path / "two")
  for key in RESULT_KEYS:
    assert got[key] == expected[key], key
  assert got["test_loss"] == pytest.approx(expected["test_loss"], rel=1e-5)
  assert got["compiles"] == {"train_step": 1, "eval_step": 1}
  # Every output once: one line per logged step (over the global batch of 8), one
  # TensorBoard file, the same checkpoints.
  rows, expected_rows = metric_rows(tmp_path / "two"), metric_rows(tmp_path / "one")
  assert [sorted(r) for r in rows] == [sorted(r) for r in expected_rows]
  for row, expected_row in zip(rows, expected_rows):
    assert row == pytest.approx(expected_row, rel=1e-5)
  assert all(r["train_examples"] == 8 for r in rows if "train_loss" in r)
  assert len(list((tmp_path / "two" / "tensorboard").iterdir())) == 1
  for name in ("config.json", "curves.png"):
    assert (tmp_path / "two" / name).is_file()
  for folder in ("checkpoints", "best"):
    assert (sorted(p.name for p in (tmp_path / "two" / folder).iterdir())
            == sorted(p.name for p in (tmp_path / "one" / folder).iterdir())), folder


def test_an_unreachable_coordinator_is_a_clear_error_within_the_timeout(tmp_path):
  port = free_port()  # nobody listens there
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES="2", JAX_PROCESS_ID="1")
  tic = time.monotonic()
  proc = subprocess.run([sys.executable, str(ROOT / "run.py"), "--distributed_init_timeout=2",
                         *train_args(tmp_path / "run", tmp_path / "data", 6)],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  assert f"cannot reach the coordinator at 127.0.0.1:{port} (JAX_COORDINATOR_ADDRESS) within 2 s" \
      in proc.stderr, proc.stderr[-3000:]
  assert time.monotonic() - tic < 60
  assert not (tmp_path / "run").exists()


def test_cluster_environment_is_read_from_jax_or_launcher_variables():
  jax_vars = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4",
              "JAX_PROCESS_ID": "3"}
  assert distributed.ClusterSpec.from_env(jax_vars) == distributed.ClusterSpec(
      "10.0.0.1:1234", 4, 3, "JAX_* variables")
  assert distributed.ClusterSpec.from_env({}) is None
  assert distributed.ClusterSpec.from_env({"SLURM_NTASKS": "1"}) is None
  assert distributed.ClusterSpec.from_env({"SLURM_NTASKS": "8"}).launcher == "SLURM"
  assert distributed.ClusterSpec.from_env({"OMPI_COMM_WORLD_SIZE": "2"}).launcher == "Open MPI"
  with pytest.raises(distributed.ClusterError, match="JAX_PROCESS_ID is not"):
    distributed.ClusterSpec.from_env({k: v for k, v in jax_vars.items() if k != "JAX_PROCESS_ID"})
  with pytest.raises(distributed.ClusterError, match="0 <= JAX_PROCESS_ID < JAX_NUM_PROCESSES"):
    distributed.ClusterSpec.from_env({**jax_vars, "JAX_PROCESS_ID": "4"})


@pytest.mark.slow
def test_killing_one_process_stops_the_job_and_a_rerun_resumes_to_the_same_results(tmp_path):
  steps, data_dir = 12, tmp_path / "data"
  with Job(tmp_path / "logs_straight", train_args(tmp_path / "straight", data_dir, steps),
           num_processes=2, devices=2) as job:
    assert job.wait() == [0, 0], job.tail()
  expected = results(tmp_path / "straight")

  workdir = tmp_path / "killed"
  args = [*train_args(workdir, data_dir, steps), "--distributed_heartbeat_timeout=20"]
  with Job(tmp_path / "logs_killed", args, num_processes=2, devices=2) as job:
    while not (workdir / "checkpoints" / "3").is_dir():  # the first checkpoint
      assert job.procs[0].poll() is None and job.procs[1].poll() is None, job.tail()
      time.sleep(0.05)
    job.kill(rank=1)
    tic = time.monotonic()
    [status, _] = job.wait(timeout_s=60)
    finished = (workdir / "results.json").exists()
    assert status != 0 or finished, job.tail()
    if not finished:
      assert "process 0 of 2 failed" in job.log(0), job.tail()
      assert time.monotonic() - tic < 60

  with Job(tmp_path / "logs_rerun", args, num_processes=2, devices=2) as job:
    assert job.wait() == [0, 0], job.tail()
  assert finished or re.search(r"resumed from step \d+ of 12", job.log(0)), job.tail()
  got = results(workdir)
  for key in (*RESULT_KEYS, "test_loss"):
    assert got[key] == expected[key], key
  assert metric_rows(workdir) == metric_rows(tmp_path / "straight")

  # --mode eval, 2 processes, on the best checkpoint in another form.
  with Job(tmp_path / "logs_eval", [f"--workdir={workdir}", "--mode=eval", "--config.eval_form=rnn"],
           num_processes=2, devices=2) as job:
    assert job.wait() == [0, 0], job.tail()
  for rank in (0, 1):
    match = re.search(r"step (\d+) \(rnn form\), test accuracy ([\d.]+)%", job.log(rank))
    assert match, job.tail()
    assert int(match.group(1)) == expected["best_step"]
    assert float(match.group(2)) == pytest.approx(100 * expected["test_accuracy"], abs=0.005)
