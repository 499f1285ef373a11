r"""Runs every task × variant × seed of an LRA sweep in its own workdir, then tabulates the results.

    lion-sweep --tasks listops,pathfinder --variants table3,table6 --workdir runs/sweep \
        [--runlocal] [--cpu | --cpu-long] [--seeds 0,1,2] [--parallel N] [--set field=value ...]
    lion-sweep ... --list          # print the commands of unfinished runs, run nothing
    lion-sweep ... --report-only   # only rewrite the tables from finished runs
    lion-sweep ... --records docs/sweep/NAME   # keep each run's records beside the report

(`python -m lra.sweep` is the same command from a source tree without installing.)

Run `<workdir>/<task>/<variant>/seed<k>` is `python run.py --config
configs/<task>.py:<variant>[,runlocal][,cpu] --workdir ... --config.seed=<k> --config.<field>=<value>`,
in a subprocess whose output goes to `sweep.log` in its workdir. A run is finished when its
workdir holds `results.json` and is then skipped; any other run is (re)started with the same
command, and the trainer resumes it from its latest checkpoint, so a killed sweep continues
where it stopped. A run that exits with an error (e.g. a non-finite loss) leaves `failed.json`
with the exception's type and message (`lra.run_records`) and shows as ✗; `--retry-failed` runs it again.

`--records DIR` keeps each run's small records (config, results, metrics, timing; no
checkpoints) in `DIR/runs/<task>/<variant>/seed<k>/` as it ends, and writes the report to DIR
(`lra.sweep_records`). A run whose workdir holds nothing finished and whose records do is
finished: the same command on a machine with an empty `--workdir` trains only the runs without
records and reports from the records. A run that ended (in its workdir or in its records)
trained with another config than today's command builds (another preset or `--set` value, a
changed default) does not count: the sweep stops and names each such run and field, unless
`--rerun-changed` trains them again (records replaced when they end, a finished workdir moved
aside to `seed<k>.replaced-<time>`); `--report-only` reports them marked stale (†). The report
written to DIR covers every run recorded there, so a sweep over some of its variants, tasks or
seeds adds to it.

The tables go to `--out` (default: `--records`, else the sweep's workdir): `results.csv` (one
row per run), `results.md` (rows = variants, columns = tasks, mean ± sample std over seeds with
the paper's number beside each; `configs/ablations.PAPER`) and `results.png` (bars per task).

A run stopped by a signal saves the step it reached and leaves `preempted.json`; one that died
of a signal it could not catch (SIGKILL, the OOM killer) gets `killed.json` from the sweep, with
the checkpoint it resumes from. Both are resumed first by the next sweep, and `results.md`
reports them as preempted or killed, with the signal and step, never as failed. The sweep itself
stops on SIGTERM, SIGINT or SIGUSR1 the same way: it passes the signal to the runs in progress,
starts no more, waits for them to save, writes the report and exits with status 75, for a
scheduler to requeue it (docs/usage.md, "Stopping and requeueing").

`--list` prints one shell command per unfinished run for a cluster scheduler (generate the
data first with `--prepare-only`: parallel jobs must not generate the same data set at once);
preempted and killed runs come first.
Variant groups: those of `configs/ablations.GROUPS` and `all`, each listed with its variants at
the end of `--help`. The snake variants (LION♮) run on the image tasks only,
the baselines (`s5`, `transformer`) on the tasks whose config lists them (every task; Path-X has
`s5` only, Table 7's Transformer fails there); other tasks skip them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

from configs import ablations, common
from lion_jax.options import ConfigError
from lra import cli, run_records, sweep_records
from lra.run_records import (COMMAND_FILE, FAILED_FILE, LOG_FILE, PREEMPTED_FILE,
                             PREEMPTED_STATUS, RESULTS_FILE, Run, claim, outcome_dir,
                             read_failure, release, status)

ROOT = Path(__file__).resolve().parents[1]


def expand_variants(spec: str) -> list[str]:
  """`"table3,abl2_relu"` -> variant names in order, groups expanded, duplicates dropped.

  Raises:
    ValueError: for a name that is neither a variant nor a group.
  """
  names: list[str] = []
  for item in (s.strip() for s in spec.split(",") if s.strip()):
    known = common.VARIANTS | common.GRID_VARIANTS | common.BASELINE_VARIANTS
    if item == "all":
      group = tuple(known)
    elif item in ablations.GROUPS:
      group = ablations.GROUPS[item]
    elif item in known or item in common.DERIVED_BASELINES:  # s5_real & co. by name too
      group = (item,)
    else:
      raise ConfigError(f"unknown variant or group {item!r}; groups: all, "
                       f"{', '.join(ablations.GROUPS)}; variants: "
                       f"{', '.join([*known, *common.DERIVED_BASELINES])}")
    names += [n for n in group if n not in names]
  return names


def _split_list(spec: str, allowed: tuple[str, ...], what: str) -> list[str]:
  items = [s.strip() for s in spec.split(",") if s.strip()]
  bad = [s for s in items if s not in allowed]
  if bad or not items:
    raise ConfigError(f"bad {what} {spec!r}; choose from {', '.join(allowed)}")
  return items


def plan(tasks: list[str], variants: list[str], seeds: list[int], workdir: str | Path, *,
         flags: tuple[str, ...] = (), sets: tuple[str, ...] = (),
         python: str = sys.executable, records: str | Path | None = None) -> list[Run]:
  """Every run of the grid, task-major (all of one task's runs are adjacent).

  Args:
    tasks, variants, seeds: the grid.
    workdir: root folder of the sweep.
    flags: config flags appended to the variant (`runlocal`, `cpu`).
    sets: `field=value` overrides passed on as `--config.field=value`.
    python: interpreter written into the commands.
    records: folder of the runs' records (`lra.sweep_records`), or None.
  """
  for item in sets:
    if "=" not in item or item.startswith("seed="):
      raise ConfigError(f"--set takes field=value (not seed, which --seeds sets), got {item!r}")
  # Relative paths when run from the repository root keep the listed commands readable.
  base = Path() if Path.cwd().resolve() == ROOT else ROOT
  runs = []
  for task in tasks:
    # A grid variant (LION♮) exists only for the image tasks, a baseline only where the
    # task config lists it; other tasks skip them.
    for variant in (v for v in variants if v in common.task_variants(task)):
      for seed in seeds:
        run_dir = Path(workdir) / task / variant / f"seed{seed}"
        arg = ",".join([variant, *flags])
        command = (python, str(base / "run.py"), f"--config={base / 'configs' / task}.py:{arg}",
                   f"--workdir={run_dir}", f"--config.seed={seed}",
                   *(f"--config.{item}" for item in sets))
        runs.append(Run(task, variant, seed, run_dir, command,
                        None if records is None else
                        sweep_records.record_dir(records, task, variant, seed)))
  return runs


def with_recorded_runs(runs: list[Run], records: str | Path, workdir: str | Path, *,
                       flags: tuple[str, ...] = (), sets: tuple[str, ...] = (),
                       python: str = sys.executable) -> list[Run]:
  """`runs` and every other run whose records `records` holds, planned with the same flags and
  overrides, so that a sweep over some of a published folder's tasks, variants or seeds still
  reports all of them (a record of another config shows stale, †, as under --report-only).

  A folder of `records/runs/` that is no task, variant or seed of today's configs is left out.
  """
  known = {(run.task, run.variant, run.seed) for run in runs}
  found = []
  for variant_dir in sorted(Path(records, sweep_records.RUNS_DIR).glob("*/*")):
    task, variant = variant_dir.parent.name, variant_dir.name
    if task not in common.TASKS or variant not in common.task_variants(task):
      continue
    seeds = sorted(int(d.name[4:]) for d in variant_dir.glob("seed*") if d.name[4:].isdigit())
    found += [(task, variant, seed) for seed in seeds if (task, variant, seed) not in known]
  return runs + [plan([task], [variant], [seed], workdir, flags=flags, sets=sets, python=python,
                      records=records)[0] for task, variant, seed in found]


# Runs in a fresh interpreter between the sweep and the trainer, never in a forked copy of the
# sweep (a `preexec_fn` would run Python in a fork of a multithreaded process, which can
# deadlock): asks Linux to SIGTERM it when the sweep dies, even by SIGKILL, so that no orphan
# keeps training while a restarted sweep resumes the same workdir, then becomes the trainer
# (the signal request survives exec). argv: the sweep's pid, then the command.
_DIE_WITH_PARENT = """\
import ctypes, os, signal, sys
try:  # the C library of this process, whichever it is (glibc, musl)
  ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
  pass  # no prctl: the run still trains, it just is not stopped with a killed sweep
if os.getppid() != int(sys.argv[1]):  # the sweep died before the request was made
  sys.exit(128 + signal.SIGTERM)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def dies_with_this_process(command: tuple[str, ...] | list[str]) -> list[str]:
  """`command`, wrapped so that it gets SIGTERM when this process dies (Linux only).

  Elsewhere (no PR_SET_PDEATHSIG) the command is returned unchanged.
  """
  if not sys.platform.startswith("linux"):
    return list(command)
  return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]


# What a user sets to size JAX's GPU memory pool; any of them leaves the choice to them.
GPU_MEMORY_VARIABLES = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                        "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")


def run_environment(parallel: int, environ: dict[str, str] | None = None) -> dict[str, str]:
  """The environment of each run: this process's, plus no preallocation when runs share a GPU.

  JAX reserves 75% of a GPU's memory in the first process that uses it, so a second run started
  beside it on the same card can run out of memory (JAX's "GPU memory allocation" page lists
  concurrent processes as the common cause). Runs of
  `--parallel N > 1` therefore allocate what they use, unless one of `GPU_MEMORY_VARIABLES` is
  set. No effect on a CPU.
  """
  environ = dict(os.environ if environ is None else environ)
  if parallel > 1 and not any(name in environ for name in GPU_MEMORY_VARIABLES):
    environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
  return environ


class Trainers:
  """The trainer processes a sweep runs, so that a signal to the sweep reaches them, and whether
  the sweep is stopping (no run starts after a stop)."""

  def __init__(self):
    self.stop = threading.Event()
    self.signum: int | None = None
    self._running: set[subprocess.Popen] = set()
    self._lock = threading.RLock()  # also taken by the signal handler, in the main thread

  def start(self, command: list[str], **kwargs) -> subprocess.Popen | None:
    """`subprocess.Popen(command, **kwargs)`, or None once the sweep is stopping."""
    with self._lock:  # a signal either finds the process started, or the stop set before it
      if self.stop.is_set():
        return None
      proc = subprocess.Popen(command, **kwargs)
      self._running.add(proc)
      return proc

  def finished(self, proc: subprocess.Popen) -> None:
    with self._lock:
      self._running.discard(proc)

  def signal(self, signum: int) -> None:
    """Stops the sweep: no more runs start, and those running get `signum` (to save their
    step and exit)."""
    self.signum = self.signum or signum
    self.stop.set()
    with self._lock:
      for proc in self._running:
        if proc.poll() is None:
          proc.send_signal(signum)

  @contextlib.contextmanager
  def forwarding(self) -> Iterator[None]:
    """Within, SIGTERM, SIGINT and SIGUSR1 to the sweep `signal` its trainers (in the main
    thread, the only one where Python installs handlers; elsewhere signals act as before)."""
    handler = lambda signum, frame: self.signal(signum)
    main = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS if main}
    try:
      yield
    finally:
      for signum, old in previous.items():
        signal.signal(signum, old)


# The signals a scheduler stops a job with (`lra.preemption.SIGNALS`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def execute(run: Run, trainers: Trainers | None = None,
            environ: dict[str, str] | None = None) -> str:
  """Trains (or resumes) one run in a subprocess; returns its status afterwards.

  A run that another live sweep has claimed since this sweep made its plan is left alone
  ("running"), and one it has finished meanwhile is not trained again. A run that ends with an
  outcome has its records copied (`lra.sweep_records.save`) before its lock is released.
  `environ` is the subprocess's environment (default: this process's); `trainers` registers it
  with the sweep (default: its own).
  """
  trainers = trainers or Trainers()
  if not claim(run):
    return status(run)
  try:
    if status(run) in ("done", "failed"):
      return status(run)
    (run.workdir / COMMAND_FILE).write_text(shlex.join(run.command) + "\n")
    sweep_records.note_start(run.workdir)
    with open(run.workdir / LOG_FILE, "a", encoding="utf-8") as log:
      log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(run.command)}\n")
      log.flush()
      started = time.time()
      proc = trainers.start(dies_with_this_process(run.command), stdout=log,
                            stderr=subprocess.STDOUT, env=environ)
      if proc is None:
        return status(run)
      try:
        proc.wait()
      finally:
        trainers.finished(proc)
    refused = _record_ending(run, proc.returncode, started)
    sweep_records.save(run)
  finally:
    release(run)
  return "refused" if refused else status(run)


def _record_ending(run: Run, returncode: int, started: float) -> bool:
  """Completes the record of how the trainer ended, where it could not write one itself;
  returns whether the trainer refused to run (below).

  0: results.json; 75 (`PREEMPTED_STATUS`): it saved its step and wrote preempted.json. > 0: it
  raised (run.py wrote failed.json; the exit status is added) or exited early (the sweep writes
  the record), but a user error that refused to touch a workdir holding a run (a resume with
  another config) leaves it as it is: sweep.log has the message. A crash signal (an XLA abort,
  a segfault) is a failure with its signal and XLA's fatal log line. Any other signal (SIGKILL,
  the OOM killer, one that came before the trainer's handlers were installed) killed it
  without a save: killed.json names the signal and the checkpoint the run resumes from.
  """
  workdir = run.workdir
  if returncode in (0, PREEMPTED_STATUS):
    return False
  if returncode < 0 and -returncode not in CRASH_SIGNALS:
    preempted = workdir / PREEMPTED_FILE
    if preempted.exists() and preempted.stat().st_mtime >= started:
      return False  # saved and recorded, then killed on its way out
    preempted.unlink(missing_ok=True)  # an earlier session's: it no longer says where the run is
    run_records.write_killed(workdir, signal.Signals(-returncode).name, returncode)
    return False
  failure = read_failure(workdir)
  if failure is None and returncode == cli.USER_ERROR_STATUS and run_records.holds_run(workdir):
    return True
  failure = failure or _unrecorded_exit(run, returncode)
  run_records.write_json(workdir / FAILED_FILE, {**failure, "returncode": returncode})
  return False


# Signals that mean the trainer crashed rather than was stopped: abort() (XLA's fatal checks,
# e.g. a collective's rendezvous timeout, exit status 134 in a shell), segfaults and the like.
CRASH_SIGNALS = frozenset({signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE,
                           signal.SIGILL})


def _unrecorded_exit(run: Run, returncode: int) -> dict:
  """The failure record of a trainer that exited without writing one: its exit status or
  signal, and for a crash the fatal line of its log (XLA's "F1125 ... rendezvous.cc ...")."""
  if returncode > 0:
    return {"type": None, "message": f"exited with status {returncode} without a failure record "
                                     f"(e.g. a flag error); see {LOG_FILE}"}
  name = signal.Signals(-returncode).name
  lines = (run.workdir / LOG_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
  fatal = [line for line in lines if re.match(r"F\d{4} ", line)]
  detail = f": {fatal[-1]}" if fatal else f"; see {LOG_FILE}"
  return {"type": name, "message": f"crashed with {name} (exit status {128 - returncode} in a "
                                   f"shell){detail}"}


def prepare_data(runs: list[Run]) -> None:
  """Generates each task's data once, in this process, before runs share it in parallel.

  Only tasks whose config has `generate` set and whose data is missing do any work.
  """
  from lra import train  # pylint: disable=import-outside-toplevel  (imports jax)
  seen = set()
  for run in runs:
    if run.task in seen:
      continue
    seen.add(run.task)
    try:
      config = sweep_records.build_config(run.command)
    except Exception as error:  # pylint: disable=broad-except  (each run then fails and says why)
      print(f"sweep: cannot build the {run.task} config ({error}); not preparing its data",
            file=sys.stderr)
      continue
    if config.generate:
      print(f"sweep: checking {run.task} data under {config.data_dir}", flush=True)
      train.load_or_generate(config)


# Runs that a signal stopped: the next sweep resumes them before the others.
STOPPED = ("preempted", "killed")


def stopped_first(runs: list[Run]) -> list[Run]:
  """`runs` with the preempted and killed ones first, each group in plan order."""
  return sorted(runs, key=lambda run: status(run) not in STOPPED)


def run_all(runs: list[Run], parallel: int = 1, retry_failed: bool = False,
            trainers: Trainers | None = None) -> dict[str, int]:
  """Executes every unfinished run with `parallel` workers, preempted and killed runs first;
  returns counts per final status. `trainers` stops them (default: a sweep's own)."""
  trainers = trainers or Trainers()
  todo = []
  for run in runs:
    state = status(run)
    if state == "failed" and retry_failed:
      # Both the workdir and the records may say it failed (the records copy the workdir's).
      (run.workdir / FAILED_FILE).unlink(missing_ok=True)
      if run.records is not None and (run.records / FAILED_FILE).exists():
        shutil.rmtree(run.records)
      state = status(run)
    if state in ("new", "partial", *STOPPED):
      todo.append(run)
  todo = stopped_first(todo)
  stopped = sum(status(run) in STOPPED for run in todo)
  print(f"sweep: {len(runs)} runs, {len(runs) - len(todo)} finished, failed or running "
        f"elsewhere, {len(todo)} to run with {parallel} in parallel"
        + (f" ({stopped} preempted or killed: resumed first)" if stopped else ""), flush=True)
  if todo:
    prepare_data(todo)
  counts: dict[str, int] = {}
  with futures.ThreadPoolExecutor(max_workers=max(parallel, 1)) as pool:
    tic = time.time()
    environ = run_environment(parallel)
    jobs = {pool.submit(_timed, run, trainers, environ): run for run in todo}
    for i, job in enumerate(futures.as_completed(jobs), 1):
      run, (state, seconds) = jobs[job], job.result()
      counts[state] = counts.get(state, 0) + 1
      if seconds is None:
        continue  # not started: the sweep is stopping
      print(f"sweep: [{i}/{len(todo)}] {run.name}: {state} after {seconds:.0f} s "
            f"({time.time() - tic:.0f} s elapsed){_brief(run)}", flush=True)
  return counts


def _timed(run: Run, trainers: Trainers, environ: dict[str, str]) -> tuple[str, float | None]:
  if trainers.stop.is_set():
    return status(run), None
  tic = time.time()
  return execute(run, trainers, environ), time.time() - tic


def _brief(run: Run) -> str:
  path = outcome_dir(run) / RESULTS_FILE
  if path.exists():
    return f", test accuracy {100 * json.loads(path.read_text())['test_accuracy']:.2f}%"
  stopped = run_records.read_preempted(run.workdir) or run_records.read_killed(run.workdir)
  if stopped is not None:
    return f": {stopped['message']}"
  return f", see {run.workdir / LOG_FILE}"


def build_parser() -> argparse.ArgumentParser:
  """The sweep's command-line parser (its `--help` ends with the tasks, variants and groups)."""
  parser = argparse.ArgumentParser(prog="lion-sweep", description=__doc__,
                                   epilog=cli.catalogue(),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--tasks", default="listops,pathfinder", help="comma list of " + ",".join(common.TASKS))
  parser.add_argument("--variants", default="table3", help="comma list of variants and groups")
  parser.add_argument("--workdir", required=True, help="root folder of the sweep")
  parser.add_argument("--seeds", default="0", help="comma list of seeds")
  parser.add_argument("--runlocal", action="store_true", help="tiny smoke runs (configs/common.RUNLOCAL)")
  parser.add_argument("--cpu", action="store_true", help="the reduced CPU preset (configs/ablations.py)")
  parser.add_argument("--cpu-long", dest="cpu_long", action="store_true",
                      help="long ListOps (250-500 tokens at L = 512) on the CPU (configs/ablations.py)")
  parser.add_argument("--cpu-order", dest="cpu_order", action="store_true",
                      help="equal-parameter models where Table 7's ordering can show "
                           "(ListOps, Pathfinder; configs/ablations.py)")
  parser.add_argument("--ladder", action="store_true",
                      help="ListOps: the testbed of the ladder between S5 and LION-S (6 blocks, "
                           "short expressions; configs/ablations.py)")
  parser.add_argument("--ladder-long", dest="ladder_long", action="store_true",
                      help="ListOps: the same ladder at cpu_order's lengths, 6 blocks, 10,000 "
                           "steps, for an accelerator (configs/ablations.py)")
  parser.add_argument("--long-testbed", dest="long_testbed", action="store_true",
                      help="ListOps: the ladder at LRA's lengths cut to 3,000 steps, the testbed "
                           "of LION against S5 (configs/ablations.py)")
  parser.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                      help="config override for every run, e.g. --set num_train_steps=100")
  parser.add_argument("--parallel", type=int, default=1,
                      help="runs at a time (on one GPU they share it, each without preallocation)")
  parser.add_argument("--list", "--dry-run", dest="list", action="store_true",
                      help="print the commands of unfinished runs and exit")
  parser.add_argument("--prepare-only", action="store_true", help="generate missing data and exit")
  parser.add_argument("--report-only", action="store_true", help="only write the tables")
  parser.add_argument("--retry-failed", action="store_true", help="rerun runs that exited with an error")
  parser.add_argument("--out", default=None,
                      help="folder of results.{csv,md,png} (default: --records, else --workdir)")
  parser.add_argument("--records", default=None, metavar="DIR",
                      help="keep each run's records in DIR/runs/ and count runs recorded there "
                           "as finished (e.g. docs/sweep/NAME)")
  parser.add_argument("--rerun-changed", action="store_true",
                      help="train again the runs that ended with another config than today's "
                           "(records replaced, a finished workdir moved aside)")
  parser.add_argument("--python", default=sys.executable, help="interpreter in the commands")
  parser.add_argument(cli.TRACEBACK_FLAG, action="store_true",
                      help=f"show the traceback of user errors too (or set {cli.TRACEBACK_ENV}=1)")
  return parser


def main(argv: list[str] | None = None) -> int:
  parser = build_parser()
  args = parser.parse_args(argv)
  if args.parallel < 1:
    parser.error(f"--parallel {args.parallel}: the number of runs at a time must be at least 1")
  if shutil.which(args.python) is None:
    parser.error(f"--python {args.python}: no such executable; pass the path of the Python "
                 f"that has lion-jax installed (default: this one, {sys.executable})")

  tasks = _split_list(args.tasks, common.TASKS, "--tasks")
  variants = expand_variants(args.variants)
  seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  flags = tuple(f for f in common.PRESET_FLAGS if getattr(args, f))
  runs = plan(tasks, variants, seeds, args.workdir, flags=flags, sets=tuple(args.sets),
              python=args.python, records=args.records)
  skipped = [f"{v} on {t}" for t in tasks for v in variants if v not in common.task_variants(t)]
  if skipped:
    print(f"sweep: not run (the task has no such variant: snakes need an image task, the "
          f"baselines a task config that lists them): {', '.join(skipped)}", flush=True)
  if not runs:
    raise ConfigError(f"no task of --tasks {args.tasks} has any of the variants "
                      f"{', '.join(variants)}; snake variants need image, pathfinder or pathx, "
                      "and Path-X has no transformer")
  changed = {} if args.report_only or args.prepare_only else sweep_records.changed(runs)
  if changed and not args.rerun_changed:
    raise ConfigError(_changed_message(changed))
  if args.list:
    for run in stopped_first(runs):
      if status(run) != "done" or run in changed:
        print(shlex.join(run.command))
    return 0
  if args.prepare_only:
    prepare_data(runs)
    return 0
  for run in changed:  # --rerun-changed: train them again; git keeps the old records
    _set_aside(run)
  trainers = Trainers()
  with trainers.forwarding():
    counts = {} if args.report_only else run_all(runs, args.parallel, args.retry_failed,
                                                 trainers)
  for run in runs:  # runs finished before --records was given, or by a plain `run.py`
    sweep_records.save(run)
  from lra import sweep_report  # pylint: disable=import-outside-toplevel  (matplotlib)
  out = Path(args.out or args.records or args.workdir)
  if args.records and out == Path(args.records):  # the folder's report covers all it holds
    runs = with_recorded_runs(runs, args.records, args.workdir, flags=flags,
                              sets=tuple(args.sets), python=args.python)
    tasks += [t for t in common.TASKS if t not in tasks and any(r.task == t for r in runs)]
    variants += [v for v in expand_variants("all")
                 if v not in variants and any(r.variant == v for r in runs)]
  paths = sweep_report.write_reports(runs, out, tasks, variants, settings=" ".join(
      [f"--{f.replace('_', '-')}" for f in flags] + [f"--set {s}" for s in args.sets]))
  print(f"sweep: wrote {', '.join(str(p) for p in paths)}")
  if counts.get("failed") or counts.get("killed") or counts.get("refused"):
    return 1
  if trainers.signum is not None or counts.get("preempted"):
    print(f"sweep: stopped{' by ' + signal.Signals(trainers.signum).name if trainers.signum else ''}"
          "; preempted runs saved their steps: rerun the same command to resume them",
          flush=True)
    return PREEMPTED_STATUS
  return 0


def _set_aside(run: Run) -> None:
  """Makes room to train a changed run again: its records go (git keeps them) and a workdir
  that finished under the other config moves to `seed<k>.replaced-<time>`, checkpoints and all,
  so that nothing trained is lost and the new run does not resume from the other config."""
  if run.records is not None and run.records.exists():
    shutil.rmtree(run.records)
  if run_records.status(run) in ("done", "failed"):
    aside = run.workdir.with_name(f"{run.workdir.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    run.workdir.rename(aside)
    print(f"sweep: {run.name}: moved its finished workdir (another config) to {aside}",
          flush=True)


def _changed_message(changed: dict[Run, dict]) -> str:
  lines = [f"{run.name} ({outcome_dir(run)}): {sweep_records.describe(fields)}"
           for run, fields in changed.items()]
  return (f"{len(changed)} run(s) ended trained with another config than these arguments build "
          "today (another preset or --set, or a default changed since), so they do not count as "
          "finished (field: recorded value → today's):\n  "
          + "\n  ".join(lines) + "\nTrain them again with --rerun-changed (records are "
          "replaced when they end, a finished workdir is moved aside, not deleted), pass the "
          "recorded values with --set FIELD=VALUE, give this sweep its own --workdir, or write "
          "the report with --report-only, which marks them stale (†).")


def console_main(program: str = "lion-sweep") -> int:
  """The `lion-sweep` console script (and `python -m lra.sweep`): `main` with the user's errors
  as one message (`lra.cli`)."""
  return cli.run(main, program, sys.argv[1:])


if __name__ == "__main__":
  sys.exit(console_main("python -m lra.sweep"))
