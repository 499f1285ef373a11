"""What became of a run, as files in its workdir: shared by `run.py`, `lra.sweep` and
`lra.sweep_report` (no jax, so the sweep and its reports stay light).

  results.json  written by `lra.train` when a run finishes: it is done.
  failed.json   written by `run.py` when training raised: {"type", "message"} of the exception
                (plus "returncode", added by the sweep). A run that exits non-zero without
                writing one (e.g. a bad flag absl rejects before training) gets a record from the
                sweep with "type": null.
  sweep.lock    the pid of the sweep running it; command.txt, sweep.log: its command and output;
                starts.jsonl: one line per (re)start, {"time", "commit"} of the code it started at.

A sweep with `--records` also keeps each finished run's small files in a second folder
(`lra.sweep_records`); a run whose workdir holds no outcome takes its status from there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

RESULTS_FILE = "results.json"
FAILED_FILE = "failed.json"
LOCK_FILE = "sweep.lock"
LOG_FILE = "sweep.log"
COMMAND_FILE = "command.txt"
STARTS_FILE = "starts.jsonl"
# The exception `lra.train` raises on a NaN or infinite loss or gradient: the run diverged.
DIVERGED_TYPE = "lra.train.NonFiniteError"


@dataclass(frozen=True)
class Run:
  """One task × variant × seed and the command that trains it; `records`: where its records
  are kept (`lra.sweep_records`), None without `--records`."""
  task: str
  variant: str
  seed: int
  workdir: Path
  command: tuple[str, ...] = field(compare=False)
  records: Path | None = field(default=None, compare=False)

  @property
  def name(self) -> str:
    return f"{self.task}/{self.variant}/seed{self.seed}"


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def _held_by_live_process(lock: Path) -> bool:
  try:
    return _pid_alive(int(lock.read_text().split()[0]))
  except (ValueError, IndexError, OSError):  # no lock, or one being written or removed
    return False


def _outcome(folder: Path | None) -> str | None:
  if folder is not None and (folder / RESULTS_FILE).exists():
    return "done"
  if folder is not None and (folder / FAILED_FILE).exists():
    return "failed"
  return None


def status(run: Run) -> str:
  """"done", "failed", "running" (another live sweep holds it), "partial" or "new".

  The workdir decides; where it holds no outcome and no live sweep holds the run, the run's
  records do (a run finished on another machine).
  """
  state = _outcome(run.workdir)
  if state:
    return state
  if _held_by_live_process(run.workdir / LOCK_FILE):
    return "running"
  state = _outcome(run.records)
  if state:
    return state
  return "partial" if (run.workdir / "checkpoints").exists() else "new"


def outcome_dir(run: Run) -> Path:
  """The folder whose results.json or failed.json says how the run ended: its workdir, or its
  records where only they hold one (the workdir when neither does)."""
  if _outcome(run.workdir) is None and _outcome(run.records) is not None:
    return run.records
  return run.workdir


def claim(run: Run) -> bool:
  """Takes the run's lock for this process, atomically: False if a live sweep holds it.

  Two sweeps over one workdir (or one sweep started twice) must never train the same run at
  once: both would write the same checkpoints. The lock appears by a hard link of a file that
  already holds this pid, so it is never seen half-written, and of two processes claiming a
  run at the same moment exactly one succeeds. A lock left by a dead sweep is taken over.
  """
  run.workdir.mkdir(parents=True, exist_ok=True)
  lock = run.workdir / LOCK_FILE
  mine = run.workdir / f"{LOCK_FILE}.{os.getpid()}"
  mine.write_text(f"{os.getpid()}\n")
  try:
    for _ in range(3):  # a stale lock is removed, then claimed again; a lasting race gives up
      try:
        os.link(mine, lock)
        return True
      except FileExistsError:
        if _held_by_live_process(lock):
          return False
        lock.unlink(missing_ok=True)  # its sweep died without removing it
    return False
  finally:
    mine.unlink(missing_ok=True)


def release(run: Run) -> None:
  """Removes the run's lock if this process holds it."""
  lock = run.workdir / LOCK_FILE
  try:
    if int(lock.read_text().split()[0]) == os.getpid():
      lock.unlink()
  except (ValueError, IndexError, OSError):
    pass


def exception_type(error: BaseException) -> str:
  """The qualified name of the exception's class, e.g. "lra.train.NonFiniteError"."""
  kind = type(error)
  return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


class WorkdirError(OSError):
  """The run folder cannot be written, or lacks what a command needs from it."""


def prepare_workdir(workdir: str | os.PathLike) -> None:
  """Creates the run folder if missing.

  Raises:
    WorkdirError: naming the folder and why it cannot be created or written.
  """
  workdir = Path(workdir)
  try:
    workdir.mkdir(parents=True, exist_ok=True)
  except OSError as error:
    raise WorkdirError(f"cannot create the run folder {workdir}: {error.strerror or error}; "
                       "pass a --workdir you can write") from None
  if not os.access(workdir, os.W_OK):
    raise WorkdirError(f"cannot write into the run folder {workdir}; pass a --workdir you can "
                       "write")


def write_failure(workdir: str | os.PathLike, error: BaseException) -> Path | None:
  """Records that training in `workdir` raised `error`; returns the record's path.

  Never raises: a workdir that does not exist (a mistyped flag stopped the run before it was
  created) or cannot be written (the error being recorded may be just that) gets no record, and
  None is returned.
  """
  path = Path(workdir) / FAILED_FILE
  record = {"type": exception_type(error), "message": str(error)}
  try:
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
  except OSError:
    return None
  return path


def read_failure(workdir: str | os.PathLike) -> dict | None:
  """The failure record of `workdir`, or None when there is none."""
  path = Path(workdir) / FAILED_FILE
  return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def diverged(failure: dict) -> bool:
  """Whether a failure record says the run stopped on a non-finite loss or gradient."""
  return failure.get("type") == DIVERGED_TYPE
