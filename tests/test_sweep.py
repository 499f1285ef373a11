"""`lra.sweep`: command listing, real runlocal runs in parallel, resume, failures, table layout."""

import csv
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from configs import ablations, common
from lion_jax.options import ConfigError
from lra import run_records, sweep, sweep_report, train

# Each run: one tiny layer, 2 steps on a generated 16-example ListOps (as in test_train_tasks).
TINY = ("num_train_steps=2", "eval_every_steps=2", "log_every_steps=1", "batch_size=2",
        "max_examples=8", "seq_len=32", "model.d_model=16", "model.num_layers=1",
        "model.chunk_size=8", "generate.num_train=16", "generate.num_val=8", "generate.num_test=8",
        "generate.min_length=5", "generate.max_length=30")


def test_variant_groups_expand_in_paper_order_without_duplicates():
  assert sweep.expand_variants("table3") == list(ablations.GROUPS["table3"])
  both = sweep.expand_variants("table3,table6")
  assert len(both) == 12 and both[:5] == list(ablations.GROUPS["table3"])  # lion_s once
  assert sweep.expand_variants("abl2_relu,lion_s,abl2_relu") == ["abl2_relu", "lion_s"]
  # S5's derived variants (configs/common.DERIVED_BASELINES) by name, as in a group.
  assert sweep.expand_variants("s5_real_wide_state,s5") == ["s5_real_wide_state", "s5"]
  with pytest.raises(ValueError, match="table9.*variants: .*s5_real_tied"):
    sweep.expand_variants("table9")


def test_list_prints_one_command_per_unfinished_run(tmp_path, capsys):
  root = tmp_path / "sw"
  argv = ["--tasks", "listops,pathfinder", "--variants", "table3", "--seeds", "0,1",
          "--workdir", str(root), "--cpu", "--set", "num_train_steps=5", "--list"]
  assert sweep.main(argv) == 0
  lines = capsys.readouterr().out.splitlines()
  assert len(lines) == 2 * 5 * 2
  first = shlex.split(lines[0])
  assert first[1].endswith("run.py") and first[2].endswith("configs/listops.py:lion_lit,cpu")
  assert first[3:] == [f"--workdir={root}/listops/lion_lit/seed0", "--config.seed=0",
                       "--config.num_train_steps=5"]
  # A finished run (results.json) drops out of the listing; nothing was trained.
  (root / "listops/lion_lit/seed0").mkdir(parents=True)
  (root / "listops/lion_lit/seed0/results.json").write_text("{}")
  assert sweep.main(argv) == 0
  assert len(capsys.readouterr().out.splitlines()) == 19
  with pytest.raises(ValueError, match="--seeds"):
    sweep.plan(["listops"], ["lion_s"], [0], root, sets=("seed=3",))


def test_cpu_long_lists_the_long_listops_grid(tmp_path, capsys):
  argv = ["--tasks", "listops", "--variants", "hippo_vs_random", "--seeds", "0,1",
          "--workdir", str(tmp_path), "--cpu-long", "--list"]
  assert sweep.main(argv) == 0
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert [line[2].rsplit(":", 1)[1] for line in lines[::2]] == [
      "lion_s,cpu_long", "lion_d,cpu_long", "lion_s_random,cpu_long", "lion_d_random,cpu_long",
      "lion_s_zoh,cpu_long", "lion_d_ungated,cpu_long"]
  assert len(lines) == 12
  # The report names the flags as they are typed, so its settings line can be pasted back.
  assert sweep.main(argv[:-1] + ["--report-only"]) == 0
  assert "Sweep settings: `--cpu-long`." in (tmp_path / "results.md").read_text()


def test_a_missing_interpreter_is_named_before_any_run_starts(tmp_path, capsys):
  argv = ["--tasks", "listops", "--variants", "lion_s", "--workdir", str(tmp_path),
          "--python", str(tmp_path / "no-python")]
  with pytest.raises(SystemExit):
    sweep.main(argv)
  assert f"--python {tmp_path / 'no-python'}: no such executable" in capsys.readouterr().err
  assert not (tmp_path / "listops").exists()


def test_sweep_trains_in_parallel_resumes_and_tabulates(tmp_path, capsys):
  root, data = tmp_path / "sw", tmp_path / "data"
  argv = ["--tasks", "listops", "--variants", "lion_lit,lion_s", "--workdir", str(root),
          "--runlocal", "--parallel", "2", "--set", f"data_dir={data}",
          *(a for s in TINY for a in ("--set", s))]
  assert sweep.main(argv) == 0
  assert "2 to run with 2 in parallel" in capsys.readouterr().out
  runs = {r.variant: r for r in sweep.plan(["listops"], ["lion_lit", "lion_s"], [0], root)}
  for run in runs.values():
    results = json.loads((run.workdir / "results.json").read_text())
    assert results["best_step"] == 2 and results["total_steps"] == 2
    assert (run.workdir / "command.txt").exists() and not (run.workdir / "sweep.lock").exists()

  table = (root / "results.md").read_text().splitlines()
  assert table[0] == "| Model | ListOps |" and table[1] == "|---|---|"
  assert table[2].startswith("| LION-LIT | ") and table[2].endswith(" (16.78) |")
  assert table[3].startswith("| LION-S (w/ HiPPO) | ") and table[3].endswith(" (62.25) |")
  csv_rows = (root / "results.csv").read_text().splitlines()
  assert csv_rows[0].startswith("task,variant,seed,status,test_accuracy") and len(csv_rows) == 3
  assert (root / "results.png").stat().st_size > 1000

  # A run killed before it wrote results.json is resumed from its checkpoint; a finished
  # run is left alone (same file, same mtime).
  kept = runs["lion_s"].workdir / "results.json"
  stamp = kept.stat().st_mtime_ns
  (runs["lion_lit"].workdir / "results.json").unlink()
  assert sweep.main(argv) == 0
  assert "1 to run" in capsys.readouterr().out
  assert kept.stat().st_mtime_ns == stamp
  log = (runs["lion_lit"].workdir / "sweep.log").read_text()
  assert log.count("=== ") == 2 and "resumed from step 2" in log
  assert (runs["lion_lit"].workdir / "results.json").exists()


def test_failed_run_is_recorded_skipped_and_retried(tmp_path, capsys):
  argv = ["--tasks", "listops", "--variants", "lion_s", "--workdir", str(tmp_path / "sw"),
          "--runlocal", "--set", "no_such_field=1"]
  assert sweep.main(argv) == 1  # run.py rejects the field: exit status 2, a user error
  run = sweep.plan(["listops"], ["lion_s"], [0], tmp_path / "sw")[0]
  assert sweep.status(run) == "failed"
  # Written by run.py itself, from the exception (not scraped from the log); the sweep adds
  # the exit status.
  failure = run_records.read_failure(run.workdir)
  assert failure["type"] == "lion_jax.options.ConfigError" and failure["returncode"] == 2
  assert "unknown config field config.no_such_field" in failure["message"]
  assert sweep.main(argv) == 0 and "0 to run" in capsys.readouterr().out
  assert sweep.main(argv + ["--retry-failed"]) == 1 and "1 to run" in capsys.readouterr().out


def test_parallel_below_one_is_refused_naming_the_flag(tmp_path, capsys):
  with pytest.raises(SystemExit):
    sweep.main(["--tasks", "listops", "--variants", "lion_s", "--workdir", str(tmp_path),
                "--parallel", "0"])
  assert "--parallel 0: the number of runs at a time must be at least 1" in capsys.readouterr().err
  assert not (tmp_path / "listops").exists()


def test_runs_sharing_a_gpu_do_not_preallocate_unless_the_user_sized_the_pool():
  assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in sweep.run_environment(1, {"PATH": "/bin"})
  assert sweep.run_environment(2, {"PATH": "/bin"}) == {
      "PATH": "/bin", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
  for name, value in [("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
                      ("XLA_PYTHON_CLIENT_MEM_FRACTION", ".3"), ("XLA_CLIENT_MEM_FRACTION", ".3"),
                      ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")]:
    assert sweep.run_environment(4, {name: value}) == {name: value}


@pytest.mark.parametrize("parallel, seen", [(1, "unset"), (2, "false")])
def test_each_run_gets_the_sweeps_environment(tmp_path, monkeypatch, parallel, seen):
  for name in sweep.GPU_MEMORY_VARIABLES:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setattr(sweep, "prepare_data", lambda runs: None)  # these runs read no data
  report = ("import os, pathlib, sys; pathlib.Path(sys.argv[1]).write_text("
            "os.environ.get('XLA_PYTHON_CLIENT_PREALLOCATE', 'unset')); sys.exit(3)")
  runs = [run_records.Run("listops", "lion_s", seed, tmp_path / f"run{seed}",
                          (sys.executable, "-c", report, str(tmp_path / f"env{seed}")))
          for seed in (0, 1)]
  for run in runs:
    run.workdir.mkdir()
  assert sweep.run_all(runs, parallel=parallel) == {"failed": 2}
  assert [(tmp_path / f"env{seed}").read_text() for seed in (0, 1)] == [seen, seen]


def test_a_run_that_exits_without_a_record_gets_one_from_the_sweep(tmp_path):
  exits = run_records.Run("listops", "lion_s", 0, tmp_path / "run",
                          (sys.executable, "-c", "import sys; sys.exit(3)"))
  assert sweep.execute(exits) == "failed"
  assert run_records.read_failure(exits.workdir) == {
      "type": None, "returncode": 3,
      "message": "exited with status 3 without a failure record (e.g. a flag error); see sweep.log"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_run_dies_with_its_sweep_even_when_the_sweep_is_killed(tmp_path):
  """A sweep killed by SIGKILL takes its trainer with it (no orphan keeps writing checkpoints
  while a restarted sweep resumes the workdir), and the trainer starts in a fresh interpreter,
  not in a fork that runs Python (JAX's os.fork() warning would say so)."""
  child_pid = tmp_path / "child.pid"
  trainer = [sys.executable, "-c", "import os, sys, time; "
             f"open({str(child_pid)!r}, 'w').write(str(os.getpid())); time.sleep(120)"]
  run = f"run_records.Run('listops', 'lion_s', 0, pathlib.Path({str(tmp_path / 'run')!r}), {trainer!r})"
  sweep_process = subprocess.Popen([sys.executable, "-c",
                                    "import pathlib, jax; from lra import run_records, sweep; "
                                    "jax.numpy.zeros(1).block_until_ready(); "  # JAX's threads
                                    f"sweep.execute({run})"], stderr=subprocess.PIPE, text=True)
  deadline = time.monotonic() + 60
  while not child_pid.exists() or not child_pid.read_text():
    assert time.monotonic() < deadline and sweep_process.poll() is None
    time.sleep(0.05)
  pid = int(child_pid.read_text())
  os.kill(sweep_process.pid, signal.SIGKILL)
  assert "os.fork() was called" not in sweep_process.communicate()[1]
  deadline = time.monotonic() + 10
  while os.path.exists(f"/proc/{pid}") and "Z" not in _process_state(pid):
    assert time.monotonic() < deadline, f"the trainer (pid {pid}) outlived its killed sweep"
    time.sleep(0.05)


def _process_state(pid):
  try:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
      return stat.read().rsplit(")", 1)[1].split()[0]
  except FileNotFoundError:
    return "gone"


def test_a_run_another_live_sweep_holds_is_not_trained_twice(tmp_path):
  """Two sweeps over one workdir: the one that claims a run first trains it; the other, whose
  plan listed the run before that claim, skips it instead of writing the same checkpoints."""
  marker = tmp_path / "trained"
  run = run_records.Run("listops", "lion_s", 0, tmp_path / "run",
                        (sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"))
  other_sweep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
  try:
    run.workdir.mkdir(parents=True)
    (run.workdir / run_records.LOCK_FILE).write_text(f"{other_sweep.pid}\n")
    assert sweep.execute(run) == "running" and not marker.exists()
  finally:
    other_sweep.kill()
    other_sweep.wait()
  # Its sweep died: the stale lock is taken over, held once, and released after the run.
  assert run_records.claim(run) and not run_records.claim(run)
  run_records.release(run)
  assert sweep.execute(run) == "new" and marker.read_text() == "x"
  assert not (run.workdir / run_records.LOCK_FILE).exists()
  assert sorted(p.name for p in run.workdir.iterdir()) == ["command.txt", "starts.jsonl", "sweep.log"]


def test_failure_records_name_the_exception_and_tell_divergence_apart(tmp_path):
  (tmp_path / "a").mkdir()
  (tmp_path / "b").mkdir()
  run_records.write_failure(tmp_path / "a", train.NonFiniteError("loss is nan at step 7"))
  run_records.write_failure(tmp_path / "b", ValueError("config.model.form='x' is not one of"))
  nan, bad = run_records.read_failure(tmp_path / "a"), run_records.read_failure(tmp_path / "b")
  assert nan == {"type": "lra.train.NonFiniteError", "message": "loss is nan at step 7"}
  assert bad == {"type": "ValueError", "message": "config.model.form='x' is not one of"}
  assert run_records.diverged(nan) and not run_records.diverged(bad)
  assert run_records.read_failure(tmp_path / "c") is None
  # A run folder that was never created (a mistyped flag) gets none, and recording never raises.
  assert run_records.write_failure(tmp_path / "c", ValueError("typo")) is None
  assert not (tmp_path / "c").exists()


def _fake(root, task, variant, seed, accuracy=None, diverged=False):
  run = sweep.plan([task], [variant], [seed], root)[0]
  run.workdir.mkdir(parents=True)
  if accuracy is None:
    error = train.NonFiniteError("nan loss") if diverged else RuntimeError("out of memory")
    run_records.write_failure(run.workdir, error)
  else:
    (run.workdir / "results.json").write_text(json.dumps(
        {"test_accuracy": accuracy, "best_val_accuracy": accuracy, "best_step": 4}))
  return run


def test_table_shows_mean_std_over_seeds_paper_numbers_failures_and_average(tmp_path):
  root = tmp_path / "sw"
  runs = [_fake(root, "listops", "lion_s", 0, 0.40), _fake(root, "listops", "lion_s", 1, 0.60),
          _fake(root, "pathfinder", "lion_s", 0, 0.70), _fake(root, "pathfinder", "lion_s", 1, 0.80),
          _fake(root, "listops", "abl7_softplus", 0, diverged=True),
          _fake(root, "pathfinder", "abl7_softplus", 0, 0.5)]
  runs += sweep.plan(["pathfinder"], ["abl7_softplus"], [1], root)  # never started
  os.makedirs(root / "out")
  sweep_report.write_reports(runs, root / "out", ["listops", "pathfinder"],
                             ["abl7_softplus", "lion_s"], settings="--cpu")
  lines = (root / "out/results.md").read_text().splitlines()
  assert lines[0] == "| Model | ListOps | Pathfinder | Avg |"
  assert lines[2] == ("| [7] softplus decay | ✗ diverged (16.23) | 50.00 (70.07) [1 unfinished] "
                      "| – (43.15) |")
  assert lines[3] == "| LION-S (w/ HiPPO) | 50.00 ± 14.14 (62.25) | 75.00 ± 7.07 (91.30) | 62.50 (76.78) |"
  assert "5 of 7 runs finished" in lines[5] and "`--cpu`" in lines[-1]
  errors = {(r["task"], r["variant"], r["seed"]): r["error"]
            for r in csv.DictReader((root / "out/results.csv").open())}
  assert errors[("listops", "abl7_softplus", "0")] == "diverged"


def test_snake_variants_run_on_image_tasks_only_and_have_no_paper_number(tmp_path, capsys):
  """LION♮ exists where the preset knows its grid: a ListOps column says n/a, not a failure,
  and a variant that is no row of Tables 3/6 gets no number in parentheses (not ✗)."""
  assert sweep.expand_variants("snake") == ["lion_s", "lion_s_snake", "lion_d", "lion_d_snake"]
  runs = sweep.plan(["listops", "pathfinder"], sweep.expand_variants("snake"), [0], tmp_path)
  assert [(r.task, r.variant) for r in runs] == [
      ("listops", "lion_s"), ("listops", "lion_d"), ("pathfinder", "lion_s"),
      ("pathfinder", "lion_s_snake"), ("pathfinder", "lion_d"), ("pathfinder", "lion_d_snake")]
  argv = ["--tasks", "listops", "--variants", "lion_s_snake", "--workdir", str(tmp_path)]
  with pytest.raises(ConfigError, match="snake variants need image, pathfinder or pathx"):
    sweep.main(argv + ["--list"])
  assert "lion_s_snake on listops" in capsys.readouterr().out

  root = tmp_path / "sw"
  runs = [_fake(root, "listops", "lion_s", 0, 0.40), _fake(root, "pathfinder", "lion_s", 0, 0.70),
          _fake(root, "pathfinder", "lion_s_snake", 0, 0.60)]
  os.makedirs(root / "out")
  sweep_report.write_reports(runs, root / "out", ["listops", "pathfinder"],
                             ["lion_s", "lion_s_snake"])
  lines = (root / "out/results.md").read_text().splitlines()
  assert lines[2] == "| LION-S (w/ HiPPO) | 40.00 (62.25) | 70.00 (91.30) | 55.00 (76.78) |"
  assert lines[3] == "| LION-S♮ (snake orders) | n/a | 60.00 | – |"


def test_table7_runs_the_baselines_where_the_task_has_them_and_prints_parameter_counts(tmp_path):
  """`table7`: Transformer and S5 in the same sweep as LION, with the paper's Table 7 numbers;
  Path-X lists S5 but no Transformer (Table 7: it fails there); every run's size is tabulated."""
  assert sweep.expand_variants("table7") == ["transformer", "s5", "lion_lit", "lion_d", "lion_s"]
  runs = sweep.plan(["listops", "pathx"], sweep.expand_variants("table7"), [0], tmp_path,
                    flags=("cpu",))
  assert [(r.task, r.variant) for r in runs if r.task == "pathx"] == [
      ("pathx", "s5"), ("pathx", "lion_lit"), ("pathx", "lion_d"), ("pathx", "lion_s")]
  assert runs[0].command[2].endswith("configs/listops.py:transformer,cpu")

  root = tmp_path / "sw"
  runs = [_fake(root, "listops", "s5", 0, 0.50), _fake(root, "listops", "lion_s", 0, 0.40)]
  for run, params in zip(runs, (12345, 67890)):
    record = json.loads((run.workdir / "results.json").read_text())
    (run.workdir / "results.json").write_text(json.dumps({**record, "num_params": params}))
  os.makedirs(root / "out")
  sweep_report.write_reports(runs, root / "out", ["listops"], ["s5", "lion_s"])
  lines = (root / "out/results.md").read_text().splitlines()
  assert lines[2] == "| S5 | 50.00 (62.15) |"
  assert "| Parameters | ListOps |" in lines
  assert "| S5 | 12,345 |" in lines and "| LION-S (w/ HiPPO) | 67,890 |" in lines


def test_speed_report_times_accuracy_against_training_seconds(tmp_path):
  """speed.md and curves.png come from each run's timing.jsonl: steps/s, the seconds to first
  reach an accuracy level (mean over seeds; – where a seed never did)."""
  root = tmp_path / "sw"
  timings = {("s5", 0): [(10, 5.0, 0.15), (20, 10.0, 0.25)],
             ("s5", 1): [(10, 7.0, 0.22), (20, 14.0, 0.31)],
             ("lion_s", 0): [(10, 2.0, 0.21), (20, 4.0, 0.35)]}
  runs = []
  for (variant, seed), rows in timings.items():
    run = _fake(root, "listops", variant, seed, rows[-1][2])
    (run.workdir / "timing.jsonl").write_text("".join(
        json.dumps({"step": s, "train_seconds": t, "timed_steps": s - 1, "eval_accuracy": a}) + "\n" for s, t, a in rows))
    runs.append(run)
  paths = sweep_report.write_reports(runs, root / "out", ["listops"], ["s5", "lion_s"])
  assert [p.name for p in paths[3:]] == ["speed.md", "curves.png"] and paths[4].stat().st_size
  lines = (root / "out/speed.md").read_text().splitlines()
  assert lines[0].startswith("| Task | Model | seeds | steps/s |")
  assert lines[0].endswith("| s to 20% | s to 30% |")
  cells = lambda line: [c.strip() for c in line.strip("| ").split("|")]
  s5, lion = cells(lines[2]), cells(lines[3])
  # steps/s: 19 timed steps in 10 and 14 s (mean ± sample std); 20%: first at 10 and 7 s;
  # 30%: seed 0 never did. One seed has no ±.
  assert s5[1:4] == ["S5", "2", "1.63 ± 0.38"] and s5[-2:] == ["8 ± 2", "–"]
  assert lion[2:4] == ["1", "4.75"] and lion[-2:] == ["2", "4"]
  # Why the columns for 40% and above are missing is said, not left to guess.
  assert 'No "s to N%" column for 40%, 50%, 60%, 70%, 80%, 90%: no model reached it' in lines[-1]


def test_results_give_the_majority_class_and_warn_when_no_model_beats_it(tmp_path):
  """A runlocal sweep compares nothing: results.md says so beside the chance line, rather than
  set chance-level numbers next to the paper's."""
  root = tmp_path / "sw"
  runs = [_fake(root, "listops", "lion_s", 0, 0.19), _fake(root, "listops", "s5", 0, 0.21),
          _fake(root, "pathfinder", "lion_s", 0, 0.80)]
  for run, chance in zip(runs, (0.173, 0.173, 0.50)):
    record = json.loads((run.workdir / "results.json").read_text())
    (run.workdir / "results.json").write_text(json.dumps({**record,
                                                          "majority_test_accuracy": chance}))
  sweep_report.write_reports(runs, root / "out", ["listops", "pathfinder"], ["s5", "lion_s"])
  text = (root / "out/results.md").read_text()
  assert "| Majority class (chance) | 17.30 | 50.00 |  |" in text.splitlines()
  assert ("**ListOps: too short to compare.** No model beats the majority class (17.30%) by 5 "
          "points (best: S5, 21.00%)") in text
  assert "Pathfinder: too short" not in text
  assert next(csv.DictReader((root / "out/results.csv").open()))["majority_test_accuracy"] == "17.3"


def test_cpu_order_lists_table7_at_equal_parameters(tmp_path, capsys):
  argv = ["--tasks", "listops", "--variants", "lion_s,s5,transformer", "--workdir", str(tmp_path),
          "--cpu-order", "--list"]
  assert sweep.main(argv) == 0
  lines = [shlex.split(line) for line in capsys.readouterr().out.splitlines()]
  assert [line[2].rsplit(":", 1)[1] for line in lines] == [
      "lion_s,cpu_order", "s5,cpu_order", "transformer,cpu_order"]


def test_probe_curves_reads_the_published_equal_parameter_sweep():
  """bench/probes/probe_curves.py reads a records folder as the sweep's own report does: every run
  of docs/sweep/table7_order with the test accuracy its results.csv lists."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  root = Path(__file__).resolve().parents[1]
  spec = importlib.util.spec_from_file_location("probe_curves",
                                                root / "bench/probes/probe_curves.py")
  probe_curves = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(probe_curves)
  runs = probe_curves.read_runs("order", root / "docs/sweep/table7_order")
  read = {(r["variant"], r["seed"]): r["results"]["test_accuracy"] for r in runs}
  with open(root / "docs/sweep/table7_order/results.csv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f))
  assert len(read) == len(rows) == 10
  for row in rows:
    assert abs(100 * read[row["variant"], f"seed{row['seed']}"]
               - float(row["test_accuracy"])) < 1e-6, row
  assert all(len(r["evals"]) == 8 for r in runs)  # 2,000 steps, evaluated every 250
  assert "| order | listops | transformer | seed0 |" in probe_curves.table(runs)


# A stand-in trainer for the sweep's signal tests: on SIGTERM, SIGINT or SIGUSR1 it records a stop
# at step 7 and exits 75, as run.py does; with FAKE_TRAINER=finish it finishes its run at once.
# Each start appends its workdir to $FAKE_TRAINER_LOG.
FAKE_TRAINER = """\
import json, os, signal, sys, time
from pathlib import Path
workdir = Path(next(a for a in sys.argv if a.startswith("--workdir=")).split("=", 1)[1])
with open(os.environ["FAKE_TRAINER_LOG"], "a") as log:
  log.write(f"{workdir}\\n")
if os.environ.get("FAKE_TRAINER") == "finish":
  (workdir / "results.json").write_text(json.dumps(
      {"test_accuracy": 0.5, "best_val_accuracy": 0.5, "best_step": 7}))
  sys.exit(0)
def stop(signum, frame):
  name = signal.Signals(signum).name
  (workdir / "preempted.json").write_text(json.dumps(
      {"signal": name, "step": 7, "message": f"{name} stopped the run after step 7 of 12"}))
  sys.exit(75)
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
  signal.signal(signum, stop)
(workdir / "started").write_text("")
time.sleep(120)
"""


def _fake_run(root, variant, code):
  return run_records.Run("listops", variant, 0, root / "listops" / variant / "seed0",
                         (sys.executable, "-c", code))


def test_preempted_and_killed_runs_are_resumed_first_and_reported_with_their_cause(
    tmp_path, monkeypatch):
  root, order = tmp_path / "sw", tmp_path / "order"
  note = f"open({str(order)!r}, 'a').write('{{}}\\n'); "
  killed = _fake_run(root, "lion_lit", "import os, pathlib, signal; " + note.format("lion_lit")
                     + "pathlib.Path('checkpoints/3').mkdir(parents=True, exist_ok=True); "
                     "os.kill(os.getpid(), signal.SIGKILL)")
  killed.workdir.mkdir(parents=True)
  monkeypatch.chdir(killed.workdir)
  assert sweep.execute(killed) == "killed"
  assert run_records.read_killed(killed.workdir) == {
      "signal": "SIGKILL", "returncode": -9, "step": 3,
      "message": "killed by SIGKILL (exit status 137 in a shell) before it could save; the run "
                 "resumes from its checkpoint at step 3; the steps after it are lost"}
  preempted = _fake_run(root, "lion_d", note.format("lion_d"))
  preempted.workdir.mkdir(parents=True)
  run_records.write_preempted(preempted.workdir, {
      "signal": "SIGUSR1", "step": 7, "message": "SIGUSR1 stopped the run after step 7 of 12"})
  fresh = _fake_run(root, "lion_s", note.format("lion_s"))
  assert [sweep.status(r) for r in (fresh, preempted, killed)] == ["new", "preempted", "killed"]
  assert sweep.stopped_first([fresh, preempted, killed]) == [preempted, killed, fresh]

  records = sweep_report.collect([fresh, preempted, killed])
  assert [r["stopped"] for r in records] == [
      "", "SIGUSR1 stopped the run after step 7 of 12",
      run_records.read_killed(killed.workdir)["message"]]
  text = sweep_report.markdown(records, ["listops"], ["lion_s", "lion_d", "lion_lit"])
  assert "| LION-D (w/ HiPPO) | – (62.00) [1 preempted] |" in text
  assert "| LION-LIT | – (16.78) [1 killed] |" in text
  assert "✗" not in "".join(text.splitlines()[:5])  # the table: nothing failed
  assert ("* listops/lion_d/seed0: preempted: SIGUSR1 stopped the run after step 7 of 12"
          in text)

  monkeypatch.setattr(sweep, "prepare_data", lambda runs: None)
  # The fakes train nothing: each run stays as it was, the preempted one first.
  assert sweep.run_all([fresh, preempted, killed]) == {"preempted": 1, "killed": 1, "new": 1}
  assert order.read_text().split() == ["lion_lit", "lion_d", "lion_lit", "lion_s"]


def test_a_stopped_sweep_stops_its_runs_reports_them_preempted_and_exits_75(tmp_path):
  fake = tmp_path / "fake_python"
  fake.write_text(f"#!{sys.executable}\n{FAKE_TRAINER}")
  fake.chmod(0o755)
  root, log = tmp_path / "sw", tmp_path / "started.txt"
  argv = [sys.executable, "-m", "lra.sweep", "--tasks", "listops", "--variants", "lion_s,lion_d",
          "--workdir", str(root), "--python", str(fake)]
  env = dict(os.environ, JAX_PLATFORMS="cpu", FAKE_TRAINER_LOG=str(log))
  sweep_process = subprocess.Popen(argv, cwd=Path(__file__).resolve().parents[1], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  started = root / "listops/lion_s/seed0/started"
  deadline = time.monotonic() + 120
  while not started.exists():
    assert time.monotonic() < deadline and sweep_process.poll() is None
    time.sleep(0.05)
  sweep_process.send_signal(signal.SIGTERM)
  out, _ = sweep_process.communicate(timeout=120)
  assert sweep_process.returncode == 75, out
  assert "stopped by SIGTERM; preempted runs saved their steps" in out
  assert run_records.read_preempted(root / "listops/lion_s/seed0")["signal"] == "SIGTERM"
  assert log.read_text().split() == [str(root / "listops/lion_s/seed0")]  # lion_d not started
  text = (root / "results.md").read_text()
  assert "| LION-S (w/ HiPPO) | – (62.25) [1 preempted] |" in text
  assert "| LION-D (w/ HiPPO) | – (62.00) [1 unfinished] |" in text
  # Rerun: the preempted run first (its plan order is first too here), then the other.
  rerun = subprocess.run(argv, env={**env, "FAKE_TRAINER": "finish"}, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], timeout=120)
  assert rerun.returncode == 0, rerun.stdout + rerun.stderr
  assert "(1 preempted or killed: resumed first)" in rerun.stdout
  assert "2 of 2 runs finished" in (root / "results.md").read_text()


@pytest.mark.slow
def test_a_sweep_stopped_by_sigterm_resumes_its_preempted_run_first_to_the_same_results(
    tmp_path):
  root_dir = Path(__file__).resolve().parents[1]

  def argv(root):
    sets = (*TINY, "num_train_steps=40", "eval_every_steps=10", f"data_dir={tmp_path / 'data'}")
    return [sys.executable, "-m", "lra.sweep", "--tasks", "listops", "--variants",
            "lion_s,lion_lit", "--workdir", str(root), "--runlocal",
            *(a for s in sets for a in ("--set", s))]

  def sweep_to_the_end(root):
    proc = subprocess.run(argv(root), cwd=root_dir, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout

  sweep_to_the_end(tmp_path / "straight")
  root = tmp_path / "stopped"
  stopped = subprocess.Popen(argv(root), cwd=root_dir, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  metrics = root / "listops/lion_s/seed0/metrics.jsonl"
  deadline = time.monotonic() + 300
  while not metrics.exists() or len(metrics.read_text().splitlines()) < 5:
    assert time.monotonic() < deadline and stopped.poll() is None
    time.sleep(0.05)
  stopped.send_signal(signal.SIGTERM)
  out, _ = stopped.communicate(timeout=300)
  assert stopped.returncode == 75, out[-3000:]
  record = run_records.read_preempted(root / "listops/lion_s/seed0")
  assert record["signal"] == "SIGTERM" and 5 <= record["step"] < 40, record
  assert "| LION-S (w/ HiPPO) | – (62.25) [1 preempted] |" in (root / "results.md").read_text()
  assert not (root / "listops/lion_lit/seed0").exists()  # not started once the sweep stopped

  out = sweep_to_the_end(root)
  assert "(1 preempted or killed: resumed first)" in out
  log = (root / "listops/lion_s/seed0/sweep.log").read_text()
  assert f"resumed from step {record['step']} of 40" in log
  for variant in ("lion_s", "lion_lit"):
    got, expected = (json.loads((r / "listops" / variant / "seed0/results.json").read_text())
                     for r in (root, tmp_path / "straight"))
    for key in ("best_val_accuracy", "best_step", "test_accuracy", "test_loss"):
      assert got[key] == expected[key], (variant, key)


def test_every_preset_flag_is_a_sweep_option_that_reaches_the_runs_command(tmp_path, capsys):
  parser = sweep.build_parser()
  options = {action.dest for action in parser._actions}  # pylint: disable=protected-access
  assert set(common.PRESET_FLAGS) <= options
  sweep.main(["--tasks", "listops", "--variants", "lion_complex", "--long-testbed", "--list",
              "--workdir", str(tmp_path)])
  assert "configs/listops.py:lion_complex,long_testbed" in capsys.readouterr().out
