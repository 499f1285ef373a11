"""`lra.sweep --records`: a sweep that moves to a machine with an empty workdir trains only what
its records lack, refuses records of another config, and reports from the records as from the
runs; published sweeps mark exactly the rows a default change made stale. No training here:
the runs are fixture files, and a "trainer" that writes them stands in for run.py."""

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from configs import ablations
from lion_jax.options import ConfigError
from lra import sweep, sweep_records

ROOT = Path(__file__).resolve().parents[1]
SWEEP_DOCS = ROOT / "docs" / "sweep"
REPORT = ("results.csv", "results.md", "speed.md")


def _args(work, records, *extra):
  return ["--tasks", "listops", "--variants", "lion_d,s5", "--seeds", "0,1", "--cpu-long",
          "--workdir", str(work), "--records", str(records), *extra]


def _finish(run, accuracy=0.3, steps=600):
  """What run.py leaves in a finished workdir: its config (as its command builds it today),
  results, timing and metrics."""
  run.workdir.mkdir(parents=True, exist_ok=True)
  (run.workdir / "config.json").write_text(
      sweep_records.build_config(run.command).to_json_best_effort(indent=2) + "\n")
  (run.workdir / "results.json").write_text(json.dumps(
      {"test_accuracy": accuracy, "best_val_accuracy": accuracy, "best_step": steps,
       "total_steps": steps, "majority_test_accuracy": 0.173, "num_params": 43274,
       "train_examples_per_sec": 40.0}))
  (run.workdir / "timing.jsonl").write_text("".join(
      json.dumps({"step": s, "train_seconds": s / 2, "timed_steps": s - 1,
                  "eval_accuracy": accuracy * s / steps}) + "\n" for s in (200, 400, 600)))
  (run.workdir / "metrics.jsonl").write_text("".join(
      json.dumps({"step": s, "train_loss": 2.3 - s / 1000, "train_accuracy": 0.2}) + "\n"
      for s in range(25, steps + 1, 25)))
  (run.workdir / "starts.jsonl").write_text(json.dumps({"time": "t", "commit": "abc1234"}) + "\n")


def _report(folder):
  return {name: (Path(folder) / name).read_text() for name in REPORT}


@pytest.fixture(name="moved")
def _moved(tmp_path, capsys):
  """A finished sweep reported with --records, then its workdir gone: (workdir, records,
  the report the runs gave)."""
  work, records = tmp_path / "runs", tmp_path / "published"
  runs = sweep.plan(["listops"], ["lion_d", "s5"], [0, 1], work, flags=("cpu_long",),
                    records=records)
  for i, run in enumerate(runs):
    _finish(run, accuracy=0.30 + 0.01 * i)
  assert sweep.main(_args(work, records, "--report-only")) == 0
  from_runs = _report(records)
  shutil.rmtree(work)  # a fresh machine: nothing under --workdir
  capsys.readouterr()
  return work, records, from_runs


def _trainer(monkeypatch, trained):
  """Replaces the trainer subprocess: each run.py command records its run and finishes it."""
  real = sweep.Trainers.start

  def start(self, command, **kwargs):
    workdir = Path(next(a for a in command if a.startswith("--workdir=")).split("=", 1)[1])
    task, variant, seed = workdir.parts[-3:]
    trained.append(f"{task}/{variant}/{seed}")
    begin = command.index(next(a for a in command if str(a).endswith("run.py"))) - 1
    fake = sweep.Run(task, variant, int(seed[4:]), workdir, tuple(command[begin:]))
    _finish(fake, accuracy=0.5)
    return real(self, [sys.executable, "-c", ""], **kwargs)

  monkeypatch.setattr(sweep.Trainers, "start", start)
  monkeypatch.setattr(sweep, "prepare_data", lambda runs: None)  # no data set to generate


def test_records_alone_rerun_nothing_and_report_as_the_runs_did(moved, monkeypatch, capsys):
  work, records, from_runs = moved
  for seed_dir in (records / "runs/listops").glob("*/seed*"):
    names = {p.name for p in seed_dir.iterdir()}
    assert names == {"config.json", "results.json", "timing.jsonl", "metrics.jsonl", "run.json"}
    assert sum(p.stat().st_size for p in seed_dir.iterdir()) < 8 * 1024
  run_file = json.loads((records / "runs/listops/s5/seed1/run.json").read_text())
  assert run_file["command"] == ["run.py", "--config=configs/listops.py:s5,cpu_long",
                                 "--config.seed=1"]
  assert run_file["commits"] == ["abc1234"]

  assert sweep.main(_args(work, records, "--list")) == 0
  assert capsys.readouterr().out == ""
  trained = []
  _trainer(monkeypatch, trained)
  assert sweep.main(_args(work, records)) == 0
  assert "4 runs, 4 finished" in capsys.readouterr().out and trained == []
  assert _report(records) == from_runs  # rewritten from the records alone
  assert "†" not in from_runs["results.md"]
  assert not work.exists() or not any(work.rglob("results.json"))


def test_a_missing_record_reruns_exactly_that_run(moved, monkeypatch, capsys):
  work, records, _ = moved
  shutil.rmtree(records / "runs/listops/s5/seed1")
  assert sweep.main(_args(work, records, "--list")) == 0
  listed = capsys.readouterr().out.splitlines()
  assert len(listed) == 1 and "listops.py:s5,cpu_long" in listed[0] and "seed=1" in listed[0]
  trained = []
  _trainer(monkeypatch, trained)
  assert sweep.main(_args(work, records)) == 0
  assert trained == ["listops/s5/seed1"]
  # Its records are back, copied as the run ended, and the report has its new result.
  assert json.loads((records / "runs/listops/s5/seed1/results.json").read_text())[
      "test_accuracy"] == 0.5
  rows = {(r["variant"], r["seed"]): r for r in csv.DictReader((records / "results.csv").open())}
  assert rows["s5", "1"]["test_accuracy"] == "50.0" and rows["s5", "0"]["test_accuracy"] == "32.0"


def test_a_sweep_over_some_variants_keeps_the_others_in_the_folders_report(moved, monkeypatch):
  """Training S5 again into a published folder must not drop LION-D's rows from its report."""
  work, records, from_runs = moved
  shutil.rmtree(records / "runs/listops/s5/seed1")
  trained = []
  _trainer(monkeypatch, trained)
  only_s5 = [a if a != "lion_d,s5" else "s5" for a in _args(work, records)]
  assert sweep.main([a if a != "0,1" else "1" for a in only_s5]) == 0
  assert trained == ["listops/s5/seed1"]
  rows = {(r["variant"], r["seed"]): r["test_accuracy"]
          for r in csv.DictReader((records / "results.csv").open())}
  assert rows == {("lion_d", "0"): "30.0", ("lion_d", "1"): "31.0", ("s5", "0"): "32.0",
                  ("s5", "1"): "50.0"}
  assert "LION-D" in (records / "results.md").read_text()


def test_retry_failed_reruns_a_run_that_failed_here_or_elsewhere(moved, monkeypatch, capsys):
  """A run that failed leaves failed.json in its workdir and in its records: --retry-failed
  clears both (a sweep here, or one on another machine, failed it)."""
  work, records, _ = moved
  failure = json.dumps({"type": "ConfigError", "message": "m", "returncode": 2})
  for seed in (0, 1):
    record = records / f"runs/listops/s5/seed{seed}"
    (record / "results.json").unlink()
    (record / "failed.json").write_text(failure)
  (work / "listops/s5/seed0").mkdir(parents=True)
  (work / "listops/s5/seed0/failed.json").write_text(failure)  # failed here, record copied
  trained = []
  _trainer(monkeypatch, trained)
  assert sweep.main(_args(work, records)) == 0
  assert trained == []  # failed runs are not retried unasked
  assert sweep.main(_args(work, records, "--retry-failed")) == 0
  assert sorted(trained) == ["listops/s5/seed0", "listops/s5/seed1"]
  capsys.readouterr()


def test_records_of_another_config_stop_the_sweep_until_rerun(moved, monkeypatch, capsys):
  work, records, _ = moved
  # A longer schedule is another run: refused by name and field, before anything starts.
  longer = _args(work, records, "--set", "num_train_steps=700")
  for argv in (longer, longer + ["--list"]):
    with pytest.raises(ConfigError) as error:
      sweep.main(argv)
    message = str(error.value)
    assert "4 run(s) ended trained with another config" in message
    assert "listops/s5/seed1" in message
    assert "`num_train_steps` 600 → 700" in message and "--rerun-changed" in message
  # How the same results are computed is not: another evaluation batch leaves them finished.
  assert sweep.main(_args(work, records, "--set", "eval_batch_size=16", "--list")) == 0
  assert capsys.readouterr().out == ""
  # --report-only marks them stale instead, naming the field.
  assert sweep.main(longer + ["--report-only", "--out", str(work / "report")]) == 0
  text = (work / "report/results.md").read_text()
  assert "| S5 | 32.50 ± 0.71† (62.15) |" in text
  assert "† **Stale: S5 on ListOps** (2 of its runs, run at abc1234)" in text
  assert "(results.md says how)" in (work / "report/speed.md").read_text()
  # --rerun-changed trains them all again and replaces their records.
  trained = []
  _trainer(monkeypatch, trained)
  assert sweep.main(longer + ["--rerun-changed"]) == 0
  assert sorted(trained) == ["listops/lion_d/seed0", "listops/lion_d/seed1",
                             "listops/s5/seed0", "listops/s5/seed1"]
  config = json.loads((records / "runs/listops/s5/seed0/config.json").read_text())
  assert config["num_train_steps"] == 700
  assert "†" not in (records / "results.md").read_text()


def test_a_workdir_finished_by_another_preset_stops_the_sweep_and_is_moved_aside_to_rerun(
    tmp_path, monkeypatch, capsys):
  """Pointed at the workdir of a finished `--cpu-long` sweep, a `--ladder` sweep must not
  report those runs as its own: it stops naming the field, and `--rerun-changed` trains them
  again after moving each finished workdir aside, checkpoints and all."""
  work = tmp_path / "runs"
  for run in sweep.plan(["listops"], ["s5"], [0], work, flags=("cpu_long",)):
    _finish(run)
    (run.workdir / "checkpoints").mkdir()
  ladder = ["--tasks", "listops", "--variants", "s5", "--seeds", "0", "--ladder",
            "--workdir", str(work)]
  with pytest.raises(ConfigError) as error:
    sweep.main(ladder)
  message = str(error.value)
  assert "1 run(s) ended trained with another config" in message
  assert str(work / "listops/s5/seed0") in message and "`generate.max_length` 500 → 150" in message
  assert "--workdir" in message and "--rerun-changed" in message
  trained = []
  _trainer(monkeypatch, trained)
  assert sweep.main(ladder + ["--rerun-changed"]) == 0
  assert trained == ["listops/s5/seed0"]
  (aside,) = (work / "listops/s5").glob("seed0.replaced-*")
  assert (aside / "checkpoints").is_dir() and (aside / "results.json").exists()
  assert sweep_records.stale_fields(
      sweep.plan(["listops"], ["s5"], [0], work, flags=("ladder",))[0]) == {}
  assert "moved its finished workdir" in capsys.readouterr().out


def test_a_changed_default_marks_a_record_stale_and_resolved_fields_do_not(moved, capsys):
  """A record of LION-D before its gate is stale and names the change; S5 recorded with
  positional="none" is what "auto" builds for S5 today, so it is not."""
  work, records, _ = moved
  for variant, field, value in (("lion_d", "fixed_gate", False), ("s5", "positional", "none")):
    path = records / f"runs/listops/{variant}/seed0/config.json"
    config = json.loads(path.read_text())
    config["model"][field] = value
    path.write_text(json.dumps(config))
  with pytest.raises(ConfigError, match=r"(?s)1 run\(s\) ended.*listops/lion_d/seed0"):
    sweep.main(_args(work, records))
  assert sweep.main(_args(work, records, "--report-only")) == 0
  text = (records / "results.md").read_text()
  assert ("`model.fixed_gate` False → True (changed at c5e0334: "
          + ablations.DEFAULT_CHANGES["model.fixed_gate"][1] + ")") in text
  assert "| LION-D (w/ HiPPO) | 30.50 ± 0.71† (62.00) |" in text
  assert "| S5 | 32.50 ± 0.71 (62.15) |" in text
  stale = {(r["variant"], r["seed"]): r["stale"]
           for r in csv.DictReader((records / "results.csv").open())}
  assert stale == {("lion_d", "0"): "model.fixed_gate", ("lion_d", "1"): "",
                   ("s5", "0"): "", ("s5", "1"): ""}
  capsys.readouterr()


def test_only_fields_that_decide_a_result_make_a_record_differ():
  """The data's folder and the generator's worker count never change a result (the generator's
  files depend on its seed and arguments only); a field only another mixer reads is not read."""
  lion = {"model.mixer": "lion", "model.attention_dim": None, "generate.seed": 0,
          "generate.workers": 2, "data_dir": "data/cpu"}
  elsewhere = {**lion, "generate.workers": 12, "data_dir": "/scratch/data"}
  assert sweep_records.differences(lion, elsewhere) == {}
  assert sweep_records.differences(lion, {**lion, "generate.seed": 1}) == {"generate.seed": (0, 1)}
  # attention_dim is LION's value width and softmax's q, k, v width; S5 reads none.
  assert sweep_records.differences(lion, {**lion, "model.attention_dim": 16}) == {
      "model.attention_dim": (None, 16)}
  s5 = {**lion, "model.mixer": "s5"}
  assert sweep_records.differences(s5, {**s5, "model.attention_dim": 16}) == {}


def test_a_record_of_another_config_is_not_overwritten_by_an_old_workdir(moved, capsys):
  work, records, _ = moved
  run = sweep.plan(["listops"], ["s5"], [0], work, flags=("cpu_long",), records=records)[0]
  _finish(run)
  config = json.loads((run.workdir / "config.json").read_text())
  config["num_train_steps"] = 500
  (run.workdir / "config.json").write_text(json.dumps(config))
  before = (run.records / "config.json").read_text()
  assert sweep_records.save(run) is None
  assert (run.records / "config.json").read_text() == before
  assert "not replacing its records" in capsys.readouterr().err


def test_execute_copies_the_records_as_the_run_ends(tmp_path):
  run = sweep.plan(["listops"], ["s5"], [0], tmp_path / "runs", flags=("cpu_long",),
                   records=tmp_path / "published")[0]
  finish = (f"import json, pathlib; w = pathlib.Path({str(run.workdir)!r}); "
            "(w / 'config.json').write_text('{}'); "
            "(w / 'results.json').write_text(json.dumps({'test_accuracy': 0.4}))")
  fake = sweep.Run(run.task, run.variant, run.seed, run.workdir,
                   (sweep.sys.executable, "-c", finish), run.records)
  assert sweep.execute(fake) == "done"
  assert sorted(p.name for p in run.records.iterdir()) == ["config.json", "results.json",
                                                           "run.json"]
  commits = json.loads((run.records / "run.json").read_text())["commits"]
  assert commits == [sweep_records.current_commit()]


def test_long_metrics_are_thinned_keeping_every_evaluation():
  rows = [json.dumps({"step": s, "train_loss": 1.0, "train_accuracy": 0.5, "pad": "x" * 80})
          for s in range(1, 3001)]
  rows[99::100] = [json.dumps({"step": s, "eval_accuracy": 0.5}) for s in range(100, 3001, 100)]
  text = "\n".join(rows) + "\n"
  thinned, info = sweep_records.thin_metrics(text, max_bytes=16 * 1024)
  assert len(thinned.encode()) <= 16 * 1024 and info["rows"] == 3000
  kept = [json.loads(line) for line in thinned.splitlines()]
  assert sum("eval_accuracy" in row for row in kept) == 30
  train = [row["step"] for row in kept if "train_loss" in row]
  assert train[0] == 1 and train[-1] == 2999 and len(train) == info["kept"] - 30
  assert sweep_records.thin_metrics("small\n") == ("small\n", None)


# Published sweeps without records: configs.json holds each row's config rebuilt at the commit
# it ran at. A row is marked † (results.md, speed.md) exactly where that config differs from
# today's, so a default that changes tomorrow fails here until its rows are marked.
REMOVED_LABELS = {"lion_s_log_additive": "LION-S, log-additive gate"}
PUBLISHED = sorted(p.parent.name for p in SWEEP_DOCS.glob("*/configs.json"))


def _rows(text):
  """{label: [cells]} of the first markdown table."""
  lines = text.split("\n\n")[0].splitlines()
  head = [c.strip() for c in lines[0].strip("|").split("|")]
  return head, {cells[0]: cells for cells in
                ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:])}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_sweeps_mark_exactly_their_stale_rows(name):
  folder = SWEEP_DOCS / name
  stale = sweep_records.stale_rebuilt(folder)
  rebuilt = json.loads((folder / "configs.json").read_text())["configs"]
  texts = {"results.md": (folder / "results.md").read_text()}
  if (folder / "speed.md").exists():
    texts["speed.md"] = (folder / "speed.md").read_text()
  head, rows = _rows(texts["results.md"])
  for key in rebuilt:
    task, variant = key.split("/")
    label = REMOVED_LABELS.get(variant) or ablations.LABELS[variant]
    task_label = ablations.TASK_LABELS[task]
    cell = rows[label][head.index(task_label)]
    assert ("†" in cell) == ((task, variant) in stale), (name, key, cell)
    assert ((f"† **Stale: {ablations.LABELS.get(variant, variant)} on {task_label}**"
             in texts["results.md"]) == ((task, variant) in stale)), (name, key)
    if "speed.md" in texts and (task, variant) in stale:
      assert f"| {task_label} | {label}† |" in texts["speed.md"], (name, key)


def test_published_sweeps_stay_small():
  """Each run's records stay small (metrics thinned, no checkpoint or log slips in), and so do
  all of them together and the whole folder, which grow by ~20 KB a published run."""
  kept = [p for p in SWEEP_DOCS.rglob("*") if p.is_file() and (
      p.name == "configs.json" or "runs" in p.relative_to(SWEEP_DOCS).parts)]
  per_run: dict[Path, int] = {}
  for p in kept:
    if p.name != "configs.json":
      per_run[p.parent] = per_run.get(p.parent, 0) + p.stat().st_size
  assert per_run and max(per_run.values()) < 48 * 1024, max(per_run, key=per_run.get)
  # 156 published runs and their configs made 2.6 MB once their metrics were thinned to 16 KB
  # (2026-11-29): room for about 20 more; past that, thin older sweeps' metrics rather than
  # raise the limit. (2026-12-07: at 3.1 MB, the metrics of ladder/ and ladder_gpu/ were thinned
  # to 8 KB a run, every evaluation row kept: 2.5 MB. Later the same day, at 2.9 MB, those of
  # probes/, table7_order*/, ladder_pathfinder/ and ladder_3000/ that have a run.json: 2.6 MB.
  # Then at 2.96 MB, the 17 runs of probes/ without a run.json, one written for each: 2.67 MB.)
  assert sum(p.stat().st_size for p in kept) < 3 * 1024 * 1024
  # With each sweep's tables and pictures (about 50 KB a sweep), 4.2 MB (2026-11-28); 5.1 MB
  # (2026-12-07, after one 400 KB mixing picture went to 32 colours): thin before adding more.
  assert sum(p.stat().st_size for p in SWEEP_DOCS.rglob("*") if p.is_file()) < 5 * 1024 * 1024
