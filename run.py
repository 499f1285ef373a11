r"""Trains or evaluates LION on a Long Range Arena task.

    python run.py --config configs/listops.py:lion_s[,runlocal] --workdir runs/listops \
        [--config.seed=1 --config.model.form=chunk_scan ...]
    python run.py --mode eval --workdir runs/listops [--config.eval_form=rnn]

Rerunning a train command resumes from the workdir's latest checkpoint. In eval mode the
config defaults to the run's own `config.json` (`configs/workdir.py`). A multi-process job
(JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, or an Open MPI or SLURM
launch) is joined first (`lra.distributed`; README "Multi-host training"). A training run that
raises leaves `failed.json` (the exception's type and message; `lra.run_records`) in its
workdir. The work happens in `lra.train`; this file only parses flags.
"""

import json
import os
import sys
from pathlib import Path

from absl import app, flags, logging
from ml_collections import config_flags

import lion_jax  # noqa: F401  (first: sets lion-jax's XLA:CPU flags before JAX starts a backend)
from lra import run_records

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics, results.", required=True)
flags.DEFINE_enum("mode", "train", ["train", "eval"], "train (or resume), or evaluate the best checkpoint.")
flags.DEFINE_enum("split", "test", ["test", "val"], "Split evaluated in eval mode.")
config_flags.DEFINE_config_file("config", None, "configs/<task>.py:<variant>[,runlocal]", lock_config=True)
flags.DEFINE_integer("distributed_init_timeout", 300,
                     "Multi-process runs: seconds to wait for the coordinator and every process.")
flags.DEFINE_integer("distributed_heartbeat_timeout", 100,
                     "Multi-process runs: seconds after which a silent process is declared dead "
                     "and the job stops.")


def _flag_value(argv: list[str], name: str) -> str | None:
  """The value of `--name=v` or `--name v` in argv, else None."""
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
    if arg == f"--{name}" and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _default_eval_config(argv: list[str]) -> list[str]:
  """In eval mode without --config, reads the config from the workdir (configs/workdir.py)."""
  workdir = _flag_value(argv, "workdir")
  if _flag_value(argv, "mode") == "eval" and _flag_value(argv, "config") is None and workdir:
    workdir_config = Path(__file__).resolve().parent / "configs" / "workdir.py"
    return [argv[0], f"--config={workdir_config}:{workdir}", *argv[1:]]
  return argv


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.config is None:
    raise app.UsageError("--config configs/<task>.py:<variant> is required to train")
  # pylint: disable-next=import-outside-toplevel  (after the flags: imports jax)
  from lra import distributed
  try:
    distributed.initialize(distributed.ClusterSpec.from_env(os.environ),
                           init_timeout_s=FLAGS.distributed_init_timeout,
                           heartbeat_timeout_s=FLAGS.distributed_heartbeat_timeout)
  except distributed.ClusterError as error:
    sys.exit(f"run.py: {error}")
  with distributed.stop_job_on_error():
    _train_or_evaluate()


def _train_or_evaluate():
  from lra import train  # pylint: disable=import-outside-toplevel
  if FLAGS.mode == "train":
    results = train.train_and_evaluate(FLAGS.config, FLAGS.workdir)
    print(json.dumps(results, indent=2))
    return
  report = train.evaluate(FLAGS.config, FLAGS.workdir, split=FLAGS.split)
  peak = report["device_peak_bytes"] or report["peak_memory_bytes"]
  print(f"{FLAGS.workdir}: step {report['step']} ({report['form']} form), {report['split']} "
        f"accuracy {100 * report['accuracy']:.2f}% on {report['examples']} examples, "
        f"{report['seconds']:.1f} s ({report['examples_per_sec']:.1f} examples/s), "
        f"peak memory {peak / 2**20:.1f} MiB")


def run_recording_failures(argv: list[str]) -> None:
  """`app.run(main)`; when training raises, first leaves a failure record (type and message of
  the exception, `lra.run_records`) in the workdir, so a sweep learns why the run stopped."""
  try:
    app.run(main, argv)
  except Exception as error:
    workdir = _flag_value(argv, "workdir")
    if workdir and _flag_value(argv, "mode") in (None, "train"):
      run_records.write_failure(workdir, error)
    raise


if __name__ == "__main__":
  run_recording_failures(_default_eval_config(sys.argv))
