r"""The command line of training and evaluation: `run.py`, and `lion-train` once installed.

    lion-train --config configs/listops.py:lion_s[,runlocal] --workdir runs/listops \
        [--config.seed=1 --config.model.form=chunk_scan ...]
    lion-train --mode eval --workdir runs/listops [--config.eval_form=rnn]

Rerunning a train command resumes from the workdir's latest checkpoint (with the config it was
trained with: `lra.resume`). In eval mode the config defaults to the run's own (`configs/workdir.py`).
`--config configs/<task>.py` is a file; a relative path that does not exist from the current
folder is looked up in this project's `configs/`, so the commands work from any folder. A
multi-process job (JAX_COORDINATOR_ADDRESS / JAX_NUM_PROCESSES / JAX_PROCESS_ID, or an Open MPI
or SLURM launch) is joined first (`lra.distributed`; docs/multi_device.md). A training run that
raises leaves `failed.json` (the exception's type and message; `lra.run_records`) in its
workdir; one stopped by SIGTERM, SIGINT or SIGUSR1 saves the step it reached, leaves
`preempted.json` and exits with status 75 (`lra.preemption`): rerun it to resume. A mistake
the user can fix is one message and exit status 2 (`--traceback` shows the trace; `lra.cli`);
`--help` lists the tasks, variants, groups and presets. The work happens in `lra.train`; this
module only parses flags.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

from absl import app, flags
from ml_collections import config_flags

import configs
import lion_jax  # noqa: F401  (first: sets lion-jax's XLA:CPU flags before JAX starts a backend)
from configs import common
from lra import cli, run_records

FLAGS = flags.FLAGS
flags.DEFINE_string("workdir", None, "Run folder: checkpoints, metrics, results.")
flags.DEFINE_enum("mode", "train", ["train", "eval"], "train (or resume), or evaluate the best checkpoint.")
flags.DEFINE_enum("split", "test", ["test", "val"], "Split evaluated in eval mode.")
config_flags.DEFINE_config_file("config", None, "configs/<task>.py:<variant>[,<preset>]", lock_config=True)
flags.DEFINE_integer("distributed_init_timeout", 300,
                     "Multi-process runs: seconds to wait for the coordinator and every process.")
flags.DEFINE_integer("distributed_heartbeat_timeout", 100,
                     "Multi-process runs: seconds after which a silent process is declared dead "
                     "and the job stops.")
flags.DEFINE_bool("traceback", False, "Show the traceback of user errors too (or set "
                  f"{cli.TRACEBACK_ENV}=1); without it they are one message and exit status 2.")

HELP_FLAGS = ("-h", "--help", "--helpshort", "--helpfull", "-?")
CONFIGS_DIR = Path(configs.__file__).resolve().parent


def _flag_value(argv: list[str], name: str) -> str | None:
  """The value of `--name=v` or `--name v` in argv, else None."""
  for i, arg in enumerate(argv):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
    if arg == f"--{name}" and i + 1 < len(argv):
      return argv[i + 1]
  return None



def _config_path(path: str) -> str:
  """`path` as given when it exists; else `configs/...` from this project's configs folder,
  if it is there (a file in neither place is reported as the user typed it)."""
  in_project = CONFIGS_DIR / path.removeprefix("configs/")
  if Path(path).exists() or not path.startswith("configs/") or not in_project.exists():
    return path
  return str(in_project)


def resolve_config(argv: list[str]) -> list[str]:
  """argv with `--config` made loadable: in eval mode without one, the run's own config
  (configs/workdir.py); a `configs/...` path looked up in the project when it is not relative
  to the current folder."""
  workdir, config = _flag_value(argv, "workdir"), _flag_value(argv, "config")
  if _flag_value(argv, "mode") == "eval" and config is None and workdir:
    return [argv[0], f"--config={CONFIGS_DIR / 'workdir.py'}:{workdir}", *argv[1:]]
  if config is None:
    return argv
  path, sep, arg = config.partition(":")
  resolved = f"--config={_config_path(path)}{sep}{arg}"
  out, skip = [argv[0]], False
  for i, item in enumerate(argv[1:], start=1):
    if skip:
      skip = False
    elif item == "--config" and i + 1 < len(argv):
      out.append(resolved)
      skip = True
    elif item.startswith("--config="):
      out.append(resolved)
    else:
      out.append(item)
  return out


def _root_error(error: BaseException) -> BaseException:
  """The exception a config file raised, from inside the flag errors that wrap it (absl and
  ml_collections re-raise it, with the traceback pasted into the message)."""
  while error.__context__ is not None:
    error = error.__context__
  return error


def _config_without_overrides(config_arg: str):
  """The config `--config=<file>[:<arg>]` names, built without the `--config.<field>` overrides
  (config_flags applies them while it loads the file)."""
  path, _, arg = config_arg.partition(":")
  spec = importlib.util.spec_from_file_location("config_without_overrides", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg) if arg else module.get_config()


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with every mistake raised as a user error that names it.

  Raises:
    cli.CommandLineError: an unknown or malformed flag, a --config file that does not exist.
    ConfigError: an unknown `--config.<field>` (its full path and the nearest names), or the
      config file's own error (an unknown variant, say).
  """
  config_arg = _flag_value(argv, "config")
  overrides = [arg.split("=")[0] for arg in argv if arg.startswith("--config.")]
  if config_arg is None and overrides:
    raise cli.CommandLineError(
        f"{overrides[0]} changes a field of a config, but no --config names one: add "
        "--config=configs/<task>.py:<variant> (or, to evaluate a run, --mode eval --workdir "
        "DIR, which loads the run's own)")
  if config_arg is not None and not Path(config_arg.split(":", 1)[0]).is_file():
    raise cli.CommandLineError(f"--config={config_arg}: no such file; use configs/<task>.py:"
                               f"<variant> with <task> one of {', '.join(common.TASKS)}")
  try:
    return FLAGS(argv)
  except (AttributeError, KeyError):  # config_flags: a --config.<field> the config lacks
    if config_arg is None:
      raise
    config = _config_without_overrides(config_arg)
    for arg in argv:
      if arg.startswith("--config."):
        unknown = common.unknown_field(config, arg.removeprefix("--config.").split("=")[0])
        if unknown is not None:
          raise unknown from None
    raise
  except flags.Error as error:
    root = _root_error(error)
    if cli.is_user_error(root):
      raise root from None
    raise cli.CommandLineError(f"{error}. --help lists the flags.") from None


def print_help() -> None:
  """This module's docstring, its flags, and the tasks, variants, groups and presets."""
  print(__doc__)
  print("Flags:\n" + FLAGS.module_help(__name__) + "\n")
  print(cli.catalogue())


def main(argv):
  if len(argv) > 1:
    raise cli.CommandLineError(f"unexpected arguments: {' '.join(argv[1:])}")
  if FLAGS.workdir is None:
    raise cli.CommandLineError("--workdir is required: the run folder (created if missing)")
  if FLAGS.config is None:
    raise cli.CommandLineError("--config configs/<task>.py:<variant> is required to train; "
                               "--help lists the tasks and variants")
  # pylint: disable-next=import-outside-toplevel  (after the flags: imports jax)
  from lra import distributed
  distributed.initialize(distributed.ClusterSpec.from_env(os.environ),
                         init_timeout_s=FLAGS.distributed_init_timeout,
                         heartbeat_timeout_s=FLAGS.distributed_heartbeat_timeout)
  with distributed.stop_job_on_error(on_error=_record_failure):
    _train_or_evaluate()


def _record_failure(error: BaseException, process: int | None = None) -> None:
  """Leaves the failure record of a training run (`lra.run_records.record_failure`); never
  raises."""
  if FLAGS.workdir and FLAGS.mode == "train":
    run_records.record_failure(FLAGS.workdir, error, process)


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


def run_command_line(argv: list[str]) -> int:
  """`app.run(main)` on `argv` (argv[0]: the program's name); returns the exit status.

  A user error is one message and status 2 (`lra.cli`); when training raises, a failure record
  (type and message of the exception, `lra.run_records`) is left in the workdir first, so a
  sweep learns why the run stopped; an error before training began (a bad flag, a refused
  resume) leaves a workdir that holds a run as it was. A run stopped by a signal after saving
  its step prints one line and returns `preemption.EXIT_STATUS` (75).
  """
  if any(arg in HELP_FLAGS for arg in argv[1:]):
    print_help()
    return 0
  program = Path(argv[0]).name
  argv = resolve_config(argv)
  cli.quiet_backend_probes()

  def record_failure(error: BaseException) -> None:
    workdir = _flag_value(argv, "workdir")
    if workdir and _flag_value(argv, "mode") in (None, "train"):
      run_records.record_failure(workdir, error)

  def run() -> int | None:
    from lra import preemption  # pylint: disable=import-outside-toplevel  (imports jax)
    try:
      return app.run(main, argv, flags_parser=parse_flags)
    except preemption.Preempted as stop:
      print(f"{program}: {stop}", file=sys.stderr, flush=True)
      return preemption.EXIT_STATUS

  return cli.run(run, program, argv, on_error=record_failure)


def console_main() -> int:
  """The `lion-train` console script."""
  return run_command_line(sys.argv)
