r"""A sweep's per-run records: the small files of each finished run, kept beside its report, so
that a sweep outlives the machine it started on.

`python -m lra.sweep ... --records DIR` copies, as each run ends (and again on every report),
these files from the run's workdir to `DIR/runs/<task>/<variant>/seed<k>/`:

  config.json, config_changes.jsonl  what the run trained (`configs/workdir.py`)
  results.json or failed.json        how it ended
  timing.jsonl                       training seconds at each evaluation (speed.md, curves.png)
  metrics.jsonl                      the logged metrics; above `MAX_METRICS_BYTES` the training
                                     rows are thinned evenly (every evaluation row is kept)
  run.json                           {"command": the run's arguments (no interpreter, no
                                     workdir), "commits": the commits it started at,
                                     "metrics": how metrics.jsonl was thinned (or null)}

Checkpoints, TensorBoard files, curves.png and sweep.log stay in the workdir. A run of the CPU
presets leaves about 10 KB (2 KB config, 0.5 KB results, 5-10 KB metrics); no run more than
about 40 KB.

A run whose workdir holds no outcome takes its status from its records
(`lra.run_records.status`): a later sweep with the same arguments and `--records DIR`, on a
machine whose `--workdir` is empty, trains only the runs without records and builds its report
from the records. A record counts as finished only while today's command builds the config it
holds, field for field, but for the fields that leave the result as it is (`SAME_RESULT`);
so does a run finished in the workdir. `changed` lists the others, the sweep refuses to start
while any are listed (or retrains them with `--rerun-changed`), and the report marks such
results stale (†).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from configs import ablations
from configs.workdir import (CHANGES_FILE, CONFIG_FILE, flatten, stored_values,
                             with_absent_fields)
from lion_jax.config import ModelConfig, foreign_fields
from lra import resume
from lra.metrics import METRICS_FILE, TIMING_FILE
from lra.run_records import FAILED_FILE, RESULTS_FILE, STARTS_FILE, Run, outcome_dir

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = "runs"
RUN_FILE = "run.json"
# Copied as they are; metrics.jsonl is copied by `thin_metrics`, run.json written.
COPIED = (CONFIG_FILE, CHANGES_FILE, RESULTS_FILE, FAILED_FILE, TIMING_FILE)
MAX_METRICS_BYTES = 16 * 1024
# The code whose commit a run records ("+changes" when these paths differ from it).
CODE_PATHS = ("configs", "lion_jax", "lra", "run.py")
# Fields that leave a finished run's result as it is: how the same function is computed,
# logged or checkpointed (`lra.resume.MAY_CHANGE_ON_RESUME`, but for `eval_every_steps`, which
# decides the steps the best one is picked from), and where this machine keeps the data.
# The generator's files depend on its seed and arguments, never on its worker count (docs/data.md).
SAME_RESULT = (frozenset(resume.MAY_CHANGE_ON_RESUME) - {"eval_every_steps"}
               | {"data_dir", "generate.workers"})
ABSENT = "(absent)"
# LION fields the mixer does not read under a decay (`lion_jax.nn.mixer`): LION-LIT has no decay
# parameters (its W_v gains come from HiPPO's Δ whatever decay_init says), LION-D no input gate.
UNREAD_BY_DECAY = {
    "lit": ("decay_init", "decay_param", "selective_mode", "selective_bias_init",
            "selective_init_std"),
    "fixed": ("selective_mode", "selective_init_std"),
}


def record_dir(records: str | Path, task: str, variant: str, seed: int) -> Path:
  """Where the records of one run are kept under a sweep's records folder."""
  return Path(records) / RUNS_DIR / task / variant / f"seed{seed}"


def arguments(command: tuple[str, ...] | list[str]) -> list[str]:
  """The run's command without the interpreter and the workdir, paths relative to the
  repository: `["run.py", "--config=configs/listops.py:lion_s,cpu", "--config.seed=0", ...]`."""
  args = []
  for arg in command[1:]:
    if arg.startswith("--workdir"):
      continue
    if arg.endswith("run.py"):
      arg = "run.py"
    elif arg.startswith("--config="):
      path, _, spec = arg.removeprefix("--config=").partition(":")
      arg = f"--config=configs/{Path(path).name}:{spec}"
    args.append(arg)
  return args


def current_commit() -> str | None:
  """The repository's HEAD, "+changes" when the code differs from it; None without git."""
  try:
    head = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip()
    changes = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--",
                              *CODE_PATHS], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return None
  return head + ("+changes" if changes else "")


def note_start(workdir: Path) -> None:
  """Appends this (re)start's time and commit to the workdir's starts.jsonl."""
  line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": current_commit()}
  with open(workdir / STARTS_FILE, "a", encoding="utf-8") as f:
    f.write(json.dumps(line) + "\n")


def commits(folder: Path) -> list[str]:
  """The distinct commits a run started at, oldest first, from its workdir or its records."""
  if (folder / RUN_FILE).exists():
    return json.loads((folder / RUN_FILE).read_text())["commits"]
  if not (folder / STARTS_FILE).exists():
    return []
  seen = [json.loads(line).get("commit") for line in
          (folder / STARTS_FILE).read_text().splitlines() if line.strip()]
  return list(dict.fromkeys(c for c in seen if c))


def _is_eval_row(line: str) -> bool:
  try:
    return any(key.startswith("eval_") for key in json.loads(line))
  except ValueError:  # a line cut short by a killed run
    return False


def thin_metrics(text: str, max_bytes: int = MAX_METRICS_BYTES) -> tuple[str, dict | None]:
  """metrics.jsonl cut to about `max_bytes`: every evaluation row, every k-th training row and
  the last; returns the text and {"rows", "kept", "train_every"} (None when nothing was cut)."""
  if len(text.encode()) <= max_bytes:
    return text, None
  lines = text.splitlines(keepends=True)
  is_eval = [_is_eval_row(line) for line in lines]
  train = [i for i, e in enumerate(is_eval) if not e]
  budget = max_bytes - sum(len(lines[i].encode()) for i, e in enumerate(is_eval) if e)
  longest = max(len(lines[i].encode()) for i in train)
  rows = max(1, int(budget // longest) - 1)  # every k-th from the first, and the last
  every = -(-len(train) // rows)
  kept = set(train[::every]) | {train[-1]}
  out = [line for i, line in enumerate(lines) if is_eval[i] or i in kept]
  return "".join(out), {"rows": len(lines), "kept": len(out), "train_every": every}


def save(run: Run) -> Path | None:
  """Copies the run's records from its workdir to `run.records`, replacing what was there;
  returns the folder, or None when the run keeps no records or its workdir holds no outcome.
  Unchanged records are not rewritten."""
  if run.records is None or outcome_dir(run) != run.workdir or not any(
      (run.workdir / name).exists() for name in (RESULTS_FILE, FAILED_FILE)):
    return None
  files = {name: (run.workdir / name).read_bytes() for name in COPIED
           if (run.workdir / name).exists()}
  thinning = None
  if (run.workdir / METRICS_FILE).exists():
    text, thinning = thin_metrics((run.workdir / METRICS_FILE).read_text(encoding="utf-8"))
    files[METRICS_FILE] = text.encode()
  files[RUN_FILE] = (json.dumps({"command": arguments(run.command),
                                 "commits": commits(run.workdir), "metrics": thinning},
                                indent=1, ensure_ascii=False) + "\n").encode()
  dest = run.records
  if dest.is_dir() and {p.name: p.read_bytes() for p in dest.iterdir()} == files:
    return dest
  if (dest / CONFIG_FILE).exists() and (run.workdir / CONFIG_FILE).exists():
    other = differences(stored_values(dest), stored_values(run.workdir))
    if other:  # e.g. an old workdir, after another machine retrained the run with --rerun-changed
      print(f"sweep: warning: {run.name}: not replacing its records in {dest}, which were "
            f"trained with another config than its workdir's ({describe(other)})",
            file=sys.stderr)
      return None
  staging = dest.with_name(f".{dest.name}.new")
  shutil.rmtree(staging, ignore_errors=True)
  staging.mkdir(parents=True)
  for name, data in files.items():
    (staging / name).write_bytes(data)
  if dest.exists():
    shutil.rmtree(dest)
  staging.rename(dest)
  return dest


def build_config(command: tuple[str, ...] | list[str]):
  """The ConfigDict that `run.py` builds from the run command's flags (the workdir aside).

  Raises:
    absl.flags.Error or ConfigError: the flags do not build a config (e.g. a removed variant).
  """
  from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel
  from ml_collections import config_flags  # pylint: disable=import-outside-toplevel
  argv = ["sweep", *(a for a in command[2:] if not a.startswith("--workdir"))]
  values = absl_flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
  values(argv)
  return values.config


def result_fields(values: dict[str, Any]) -> dict[str, Any]:
  """The dotted fields of a config that decide a run's result, each as the model reads it:
  without `SAME_RESULT`, the fields only other mixers read, those its decay does not read
  (`UNREAD_BY_DECAY`, LION-D's gate switch elsewhere) and the grid of a raster scan, and with
  positional="auto" resolved."""
  mixer = values.get("model.mixer", "lion")
  unread = {f"model.{name}" for name in foreign_fields(mixer)}
  if values.get("model.scan_order", "raster") == "raster":
    unread.add("model.grid")
  unread.update(f"model.{name}" for name in UNREAD_BY_DECAY.get(values.get("model.decay"), ()))
  out = {f: v for f, v in values.items() if f not in SAME_RESULT and f not in unread
         and resume.is_read(f, values)}
  if out.get("model.positional") == "auto":
    model = {f.removeprefix("model."): v for f, v in values.items() if f.startswith("model.")}
    try:
      out["model.positional"] = ModelConfig(**model).position_encoding
    except (TypeError, ValueError):
      pass  # a config that no longer builds a model differs anyway
  return out


def differences(recorded: dict[str, Any], now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
  """{field: (recorded value, today's value)} of the result fields that differ."""
  old, new = result_fields(recorded), result_fields(now)
  return {f: (old.get(f, ABSENT), new.get(f, ABSENT)) for f in sorted(old.keys() | new.keys())
          if old.get(f, ABSENT) != new.get(f, ABSENT)}


def stale_fields(run: Run) -> dict[str, tuple[Any, Any]]:
  """How the config the run's outcome was trained with (its workdir's or its records')
  differs from the one its command builds today; {} when they agree or nothing was recorded.
  A command that no longer builds a config differs in "command"."""
  folder = outcome_dir(run)
  if not (folder / CONFIG_FILE).exists():
    return {}
  return _against_today(run, stored_values(folder))


def _against_today(run: Run, recorded: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
  """`differences(recorded, today's config of run.command)`; a command that no longer builds
  a config differs in "command". A recorded config without a seed is compared without one."""
  try:
    now = flatten(json.loads(build_config(run.command).to_json_best_effort()))
  except Exception as error:  # pylint: disable=broad-except  (absl's and ours alike)
    lines = [line for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    return {"command": (" ".join(arguments(run.command)),
                        f"fails today: {lines[-1].split(';')[0]}")}
  if "seed" not in recorded:
    now.pop("seed", None)
  return differences(recorded, now)


def changed(runs: list[Run]) -> dict[Run, dict[str, tuple[Any, Any]]]:
  """The runs that ended (in their workdir, or on another machine and only their records say
  so) trained with another config than today's command builds: {run: stale_fields(run)}.

  A finished workdir counts as much as a record: a sweep of one preset pointed at the workdir
  of another would otherwise report the other preset's results as its own."""
  out = {}
  for run in runs:
    if any((outcome_dir(run) / name).exists() for name in (RESULTS_FILE, FAILED_FILE)):
      fields = stale_fields(run)
      if fields:
        out[run] = fields
  return out


def describe(fields: dict[str, tuple[Any, Any]], limit: int = 6) -> str:
  """"`model.positional` 'none' → 'sinusoidal' (changed at 7581f2e: ...); ...": the first
  `limit` fields, those of `configs/ablations.DEFAULT_CHANGES` first."""
  parts = []
  ordered = sorted(fields.items(), key=lambda item: item[0] not in ablations.DEFAULT_CHANGES)
  for field, (old, new) in ordered[:limit]:
    change = ablations.DEFAULT_CHANGES.get(field)
    parts.append(f"`{field}` {old!r} → {new!r}" + (f" (changed at {change[0]}: {change[1]})"
                                                    if change else ""))
  more = len(fields) - limit
  return "; ".join(parts) + (f"; and {more} more field{'s' * (more > 1)}" if more > 0 else "")


# --- sweeps published before records were kept --------------------------------------------
# Their runs recorded no config in the repository. `rebuild` builds each row's config with the
# code of the commit it ran at (`git archive`), into the folder's configs.json, so that
# `stale_rebuilt` can hold it against today's like a record's: the published rows a default
# change made stale are known, and a later change cannot make more of them stale unnoticed.
REBUILT_FILE = "configs.json"
# Fields added after the earliest published sweeps, with the value that gives the model of then
# (no baselines, positions, snake orders or context parallelism existed yet), beside the ones a
# resume fills in (`configs.workdir.with_absent_fields`).
ADDED_SINCE: dict[str, Any] = {"model.mixer": "lion", "model.positional": "none",
                               "model.scan_order": "raster", "model.grid": None,
                               "model.sequence_axis": None}

_BUILD_CONFIGS = """\
import json, sys
from absl import flags as absl_flags
from ml_collections import config_flags
out = {}
for key, argv in json.loads(sys.argv[1]).items():
  values = absl_flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
  try:
    values(argv)
    out[key] = json.loads(values.config.to_json_best_effort())
  except Exception as error:
    out[key] = {"error": [l for l in str(error).splitlines() if l.strip()][-1]}
print(json.dumps(out))
"""


def _row(task: str, variant: str, flags: list[str], sets: list[str]) -> Run:
  """A run of the row's command, seed 0 (also for a variant today's catalogue lacks)."""
  return Run(task, variant, 0, Path("."), (
      sys.executable, str(ROOT / "run.py"),
      f"--config={ROOT / 'configs' / task}.py:{','.join([variant, *flags])}", "--config.seed=0",
      *(f"--config.{item}" for item in sets)))


def _key(run: Run) -> str:
  return f"{run.task}/{run.variant}"


def rebuild(commit: str, runs: list[Run]) -> dict[str, dict]:
  """{"task/variant": {"commit", "config"}}: the result fields (`result_fields`, no seed) of
  the config each run's command built at `commit`, fields added since filled in (`ADDED_SINCE`).

  Raises:
    RuntimeError: the commit's code does not build one of the configs.
  """
  import tarfile  # pylint: disable=import-outside-toplevel
  import tempfile  # pylint: disable=import-outside-toplevel
  with tempfile.TemporaryDirectory() as tree:
    archive = subprocess.run(["git", "archive", commit, "configs", "lion_jax", "lra"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
      tar.extractall(tree)  # git's own archive of tracked files
    argvs = {_key(run): ["sweep", *arguments(run.command)[1:]] for run in runs}
    built = subprocess.run([sys.executable, "-c", _BUILD_CONFIGS, json.dumps(argvs)], cwd=tree,
                           env={**os.environ, "PYTHONPATH": tree}, check=True,
                           capture_output=True, text=True).stdout
  out = {}
  for key, config in json.loads(built.strip().splitlines()[-1]).items():
    if "error" in config:
      raise RuntimeError(f"{key} at {commit}: {config['error']}")
    values = {**ADDED_SINCE, **with_absent_fields(flatten(config))}
    out[key] = {"commit": commit, "config": {f: v for f, v in result_fields(values).items()
                                             if f != "seed"}}
  return out


def stale_rebuilt(folder: str | Path) -> dict[tuple[str, str], dict[str, tuple[Any, Any]]]:
  """{(task, variant): fields} of the rows in `folder/configs.json` (`rebuild`) whose config
  differs from the one the same command builds today; {} for a folder without the file."""
  path = Path(folder) / REBUILT_FILE
  if not path.exists():
    return {}
  rebuilt = json.loads(path.read_text(encoding="utf-8"))
  out = {}
  for key, entry in rebuilt["configs"].items():
    task, variant = key.split("/")
    # Fields added after the rebuild hold the value that gives the run it was.
    recorded = result_fields(with_absent_fields(entry["config"]))
    fields = _against_today(_row(task, variant, rebuilt["flags"], rebuilt["sets"]), recorded)
    if fields:
      out[task, variant] = fields
  return out


def main(argv: list[str] | None = None) -> int:
  """`python -m lra.sweep_records rebuild DIR --commit C --tasks ... --variants ... [--cpu]`:
  adds the rows' configs at commit C to DIR/configs.json (`rebuild`)."""
  import argparse  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser(prog="python -m lra.sweep_records", description=main.__doc__)
  parser.add_argument("action", choices=["rebuild"])
  parser.add_argument("folder", help="the published sweep's folder, e.g. docs/sweep/NAME")
  parser.add_argument("--commit", required=True, help="the commit the rows ran at")
  parser.add_argument("--tasks", required=True)
  parser.add_argument("--variants", required=True)
  parser.add_argument("--cpu", action="store_true")
  parser.add_argument("--cpu-long", dest="cpu_long", action="store_true")
  parser.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE")
  parser.add_argument("--command", default="", help="the sweep's command, for the reader")
  args = parser.parse_args(argv)
  flags = [f for f in ("cpu", "cpu_long") if getattr(args, f)]
  runs = [_row(task, variant, flags, args.sets) for task in args.tasks.split(",")
          for variant in args.variants.split(",")]
  path = Path(args.folder) / REBUILT_FILE
  old = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
  if old and (old["flags"], old["sets"]) != (flags, args.sets):
    parser.error(f"{path} holds rows of --flags {old['flags']} --set {old['sets']}")
  data = {"about": "Each row's config as the code of the commit it ran at built it (rebuilt "
                   "with `python -m lra.sweep_records rebuild`; the runs recorded none): the "
                   "fields that decide the result (lra.sweep_records.result_fields), no seed.",
          "command": args.command or old.get("command", ""), "flags": flags, "sets": args.sets,
          "configs": {**old.get("configs", {}), **rebuild(args.commit, runs)}}
  path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
  print(f"wrote {path}: {len(runs)} rows at {args.commit}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
