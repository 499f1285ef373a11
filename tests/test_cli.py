"""The command lines as a user meets them: a mistake the user can fix is one message on stderr
and exit status 2, never a traceback (`lra.cli`); `--traceback` shows it; `--help` exits 0 and
lists what there is to run; a trainer that crashes still leaves a record the sweep reports.

Every command here stops before anything is compiled (a second or two each).
"""

import importlib
import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from configs import common
from lra import cli, run_records, sweep, sweep_report
from tests.test_data_loaders import write_listops

ROOT = Path(__file__).resolve().parents[1]
LISTOPS = ["--config=configs/listops.py:lion_s,runlocal"]


def command(*args, env=None, program=sys.executable, cwd=ROOT):
  """Runs `program *args` (default: `python *args` in the repository); returns (exit status,
  stdout, stderr)."""
  environ = {k: v for k, v in os.environ.items() if k != cli.TRACEBACK_ENV}
  environ.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), **(env or {}))
  proc = subprocess.run([str(program), *map(str, args)], cwd=cwd, env=environ,
                        capture_output=True, text=True, timeout=120)
  return proc.returncode, proc.stdout, proc.stderr


def console_script(name):
  """The path of an installed console script of pyproject.toml, next to this Python."""
  path = Path(sys.executable).parent / name
  assert path.is_file(), f"{name} is not installed next to {sys.executable}: run `make venv`"
  return path


def assert_one_message(result, program, *fragments):
  """Exit status 2 and stderr is `<program>: error: ...` holding every fragment, no traceback."""
  status, _, stderr = result
  lines = [line for line in stderr.splitlines() if line.strip()]
  assert status == 2 and len(lines) == 1, stderr
  assert lines[0].startswith(f"{program}: error: "), stderr
  for fragment in fragments:
    assert fragment in lines[0], stderr


def test_every_user_error_name_is_a_real_exception_class():
  for name in cli.USER_ERRORS:
    module, _, qualname = name.rpartition(".")
    assert issubclass(getattr(importlib.import_module(module), qualname), Exception), name


@pytest.mark.parametrize("flag, fragments", [
    ("--config.model.decya=fixed", ["unknown config field config.model.decya",
                                    "did you mean config.model.decay?", "fields of config.model:"]),
    pytest.param("--config.learning_rat=0.1",
                 ["config.learning_rat", "did you mean config.learning_rate"],
                 marks=pytest.mark.slow),
    ("--config.batch_size=-8", ["config.batch_size=-8 must be a positive integer"]),
    pytest.param("--config.batch_size=eight", ["flag --config.batch_size=eight", "--help"],
                 marks=pytest.mark.slow),
    ("--no_such_flag", ["Unknown command line flag 'no_such_flag'"]),
])
def test_a_bad_flag_is_one_message_that_names_it(tmp_path, flag, fragments):
  assert_one_message(command("run.py", *LISTOPS, f"--workdir={tmp_path / 'run'}", flag),
                     "run.py", *fragments)
  assert not (tmp_path / "run").exists()  # a mistyped command leaves no folder behind


def test_a_config_field_without_a_config_is_one_message():
  assert_one_message(command("run.py", "--config.seed=3", "--workdir=/tmp/unused"), "run.py",
                     "--config.seed changes a field of a config, but no --config names one",
                     "--config=configs/<task>.py:<variant>")


def test_an_unknown_variant_or_config_file_is_one_message(tmp_path):
  assert_one_message(command("run.py", "--config=configs/listops.py:lion_q",
                             f"--workdir={tmp_path}"),
                     "run.py", "unknown variant 'lion_q'; known variants: lion, lion_complex, lion_s,")
  assert_one_message(command("run.py", "--config=configs/lisops.py", f"--workdir={tmp_path}"),
                     "run.py", "--config=configs/lisops.py: no such file", "listops")


def test_traceback_flag_or_variable_shows_the_trace(tmp_path, monkeypatch):
  status, _, stderr = command("run.py", *LISTOPS, f"--workdir={tmp_path}",
                              "--config.batch_size=-8", "--traceback")
  assert status != 0 and "Traceback (most recent call last)" in stderr, stderr
  assert "ConfigError: config.batch_size=-8" in stderr
  assert not cli.wants_traceback(["--workdir=x"])
  monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
  assert cli.wants_traceback(["--workdir=x"])


def test_an_unwritable_workdir_is_one_message_and_leaves_no_record():
  assert_one_message(command("run.py", *LISTOPS, "--workdir=/proc/lion_run"), "run.py",
                     "cannot create the run folder /proc/lion_run", "pass a --workdir you can write")
  assert run_records.write_failure("/proc/lion_run", OSError("recording must not raise")) is None


def test_an_unwritable_data_folder_is_one_message():
  assert_one_message(command("-m", "lra.data", "generate", "listops", "--out=/proc/lion_data",
                             "--num-train=4", "--num-val=2", "--num-test=2"),
                     "python -m lra.data", "--out /proc/lion_data: cannot write",
                     "pass an --out you can write to")


def test_a_truncated_data_file_is_one_message_with_the_fix(tmp_path):
  write_listops(tmp_path / "data" / "listops")
  path = tmp_path / "data/listops/basic_val.tsv"
  path.write_bytes(path.read_bytes()[:-6])
  workdir = tmp_path / "run"
  assert_one_message(command("run.py", *LISTOPS, f"--workdir={workdir}",
                             f"--config.data_dir={tmp_path / 'data'}"),
                     "run.py", f"{path}:4: bad ListOps row", "cut short",
                     "python -m lra.data generate listops")
  # The run had started: its folder records why it stopped, for a sweep to report.
  assert run_records.read_failure(workdir)["type"] == "lra.data.errors.MalformedDataError"


def test_sweep_errors_are_one_message(tmp_path):
  assert_one_message(command("-m", "lra.sweep", "--workdir", tmp_path, "--variants",
                             "lion_s,abl7_softplus,lion_s_log_additive"),
                     "python -m lra.sweep", "unknown variant or group 'lion_s_log_additive'",
                     "groups: all, table3")


@pytest.mark.parametrize("program", ["lion-train", "lion-sweep"])  # run.py: lion-train's code
def test_help_exits_0_and_lists_tasks_variants_groups_and_presets(program):
  status, stdout, stderr = command("--help", program=console_script(program))
  assert status == 0, stderr
  for listed in ("Tasks: listops, text, retrieval, image, pathfinder, pathx",
                 "lion: the LION to use on every task",
                 "every task, the paper's rows and readings: lion_s, lion_d, lion_lit",
                 "lion_s_snake", "transformer (baseline)",
                 "  lion_s_s5_form   ", "  s5_real   ",  # a rung a line, with its description
                 "table3 (5): lion_lit", "hippo_vs_random (6)", "positions (4)", "all (51)",
                 "runlocal ", "cpu_long ", "demo "):
    assert listed in stdout, listed
  assert "--traceback" in stdout


def _preset_steps(preset):
  """{task: num_train_steps} of `lion_s,<preset>` for every task that has the preset."""
  steps = {}
  for task in common.TASKS:
    try:  # a preset of other tasks only raises ConfigError, a ValueError
      steps[task] = importlib.import_module(f"configs.{task}").get_config(
          f"lion_s,{preset}").num_train_steps
    except ValueError:
      pass
  return steps


def test_the_step_counts_help_gives_a_preset_are_the_configs_own():
  # Each "N steps" in a preset's help (lion-train's and lion-sweep's catalogue, lion-sweep's
  # flag) must be what the preset trains, for a task its clause names (the clauses of a
  # description are split at ";"; one naming no task speaks of all the preset's tasks).
  listed = cli.catalogue().split("\nPresets (", 1)[1].replace("\n      ", " ").splitlines()[1:]
  helps = {line.split()[0]: [line] for line in listed if line.split()[0] in common.PRESET_FLAGS}
  assert set(helps) == set(common.PRESET_FLAGS)
  for action in sweep.build_parser()._actions:  # pylint: disable=protected-access
    if action.dest in helps:
      helps[action.dest].append(action.help)
  checked = 0
  for preset, texts in helps.items():
    steps = _preset_steps(preset)
    assert steps, preset
    for clause in (c for text in texts for c in text.split(";")):
      flat = clause.lower().replace("-", "")
      named = [task for task in steps if task in flat] or list(steps)
      for number in re.findall(r"(\d[\d,]*) steps", clause):
        checked += 1
        assert int(number.replace(",", "")) in {steps[task] for task in named}, (
            f"{preset}: {clause.strip()!r} says {number} steps; the config trains "
            f"{', '.join(f'{task} {steps[task]:,}' for task in named)}")
  assert checked >= 4  # runlocal, cpu_order (two), ladder, ladder_long


def test_quiet_backend_probes_drops_only_the_lines_of_absent_backends():
  cli.quiet_backend_probes()
  cli.quiet_backend_probes()  # idempotent: one filter
  logger = logging.getLogger(cli.JAX_BACKEND_LOGGER)
  assert logger.filters.count(cli._not_an_absent_backend) == 1  # pylint: disable=protected-access
  line = lambda message: logging.LogRecord(logger.name, logging.INFO, __file__, 1, message, (),
                                           None)
  absent = [
      "Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: libtpu.so: cannot "
      "open shared object file: No such file or directory",
      "Unable to initialize backend 'proxy': The 'proxy' backend requires the address of an IFRT "
      "Proxy server. Set it via the JAX_BACKEND_TARGET environment variable",
  ]
  real = [
      "Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process 7",
      "Unable to initialize backend 'tpu': INTERNAL: Failed to open /opt/libtpu.so: /opt/libtpu.so: "
      "cannot open shared object file",  # a library the user named, missing
      "Unable to initialize backend 'cuda': no CUDA-capable device is detected",
      "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed.",
  ]
  assert not any(logger.filter(line(message)) for message in absent)
  assert all(logger.filter(line(message)) for message in real)


def test_a_run_does_not_open_with_the_backends_this_machine_lacks():
  # What JAX logs when it starts a backend without JAX_PLATFORMS (the commands log at INFO):
  # the lines of `cli.ABSENT_BACKENDS` are gone, so a JAX that rewords them fails here.
  probe = ("import logging; logging.basicConfig(level=logging.INFO); from lra import cli; "
           "cli.quiet_backend_probes(); import jax; jax.devices()")
  environ = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS",)}
  environ["PYTHONPATH"] = str(ROOT)
  stderr = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=environ, check=True,
                          capture_output=True, text=True, timeout=120).stderr
  if importlib.util.find_spec("libtpu") is None and "TPU_LIBRARY_PATH" not in environ:
    assert "Unable to initialize backend 'tpu'" not in stderr, stderr
  if not environ.get("JAX_BACKEND_TARGET"):
    assert "Unable to initialize backend 'proxy'" not in stderr, stderr


def test_console_scripts_work_from_any_folder_without_activating(tmp_path):
  # `.venv/bin/lion-train` after `make demo`, from outside the clone: `configs/...` is looked up
  # in the project, and errors are the same one message.
  assert_one_message(command("--config=configs/listops.py:lion_q", f"--workdir={tmp_path / 'r'}",
                             program=console_script("lion-train"), cwd=tmp_path),
                     "lion-train", "unknown variant 'lion_q'")
  assert command("--help", program=console_script("lion-data"), cwd=tmp_path)[0] == 0


def test_a_trainer_that_aborts_leaves_a_record_the_sweep_reports(tmp_path):
  # What an XLA fatal check does (exit status 134 in a shell): abort() after its log line.
  crash = ("import os, sys; print('F1125 12:00:00.000 1 rendezvous.cc:161] Termination timeout "
           "for `collective permute` of 40 seconds exceeded.', flush=True); os.abort()")
  run = run_records.Run("pathx", "lion_s", 0, tmp_path / "pathx/lion_s/seed0",
                        (sys.executable, "-c", crash))
  assert sweep.execute(run) == "failed"
  failure = run_records.read_failure(run.workdir)
  assert failure["type"] == "SIGABRT" and failure["returncode"] == -6
  assert failure["message"].startswith("crashed with SIGABRT (exit status 134 in a shell): F1125")
  (record,) = sweep_report.collect([run])
  assert record["status"] == "failed" and "SIGABRT: crashed with SIGABRT" in record["error"]
  assert "✗ error" in sweep_report.markdown([record], ["pathx"], ["lion_s"])
