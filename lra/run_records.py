"""What became of a run, as files in its workdir: shared by `run.py`, `lra.train`, `lra.sweep` and
`lra.sweep_report` (no jax, so the sweep and its reports stay light).

  results.json    written by `lra.train` when a run finishes: it is done.
  preempted.json  written by `lra.train` when a signal stopped it after saving the step it reached
                  (`lra.preemption`): {"signal", "step", "signal_time", "time", "seconds",
                  "save_seconds", "step_seconds", "pending_eval", "processes", "message"}. A rerun
                  resumes it.
  failed.json     written by `run.py` when training raised: {"type", "message"} of the exception
                  (plus "process" in a multi-process job, and "returncode", added by the sweep).
                  A run that exits non-zero without writing one (e.g. a bad flag absl rejects
                  before training) gets a record from the sweep with "type": null; so does one
                  that crashed (an XLA abort: "type" is the signal).
  killed.json     written by the sweep when its trainer died of a signal it could not handle
                  (SIGKILL, or one that came before its handlers were installed), so it left no
                  record: {"signal", "returncode", "step" (its last checkpoint), "message"}.
  sweep.lock      the pid of the sweep running it; command.txt, sweep.log: its command and output;
                  starts.jsonl: one line per (re)start, {"time", "commit"} of the code it started at.

A record tells how the last session ended, so a session that starts (`begin_session`) removes
the ending records of the one before. A command that stops before a session starts (a refused
resume, a flag error) writes nothing into a workdir that holds a run (`record_failure`).

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
PREEMPTED_FILE = "preempted.json"
KILLED_FILE = "killed.json"
# How the last session ended, when it did not finish the run.
ENDING_FILES = (FAILED_FILE, PREEMPTED_FILE, KILLED_FILE)
CHECKPOINTS_DIR = "checkpoints"  # `lra.checkpoint.LATEST_DIR`, named here without importing orbax
# The trainer's exit status after a signal stopped it and it saved its step (`lra.preemption`).
PREEMPTED_STATUS = 75
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
  """"done", "failed", "running" (another live sweep holds it), "preempted", "killed", "partial"
  or "new".

  The workdir decides; where it holds no outcome and no live sweep holds the run, the run's
  records do (a run finished on another machine). "preempted" and "killed" runs stopped from
  outside and resume on a rerun, as "partial" ones (stopped without a record) do.
  """
  state = _outcome(run.workdir)
  if state:
    return state
  if _held_by_live_process(run.workdir / LOCK_FILE):
    return "running"
  if (run.workdir / PREEMPTED_FILE).exists():
    return "preempted"
  if (run.workdir / KILLED_FILE).exists():
    return "killed"
  state = _outcome(run.records)
  if state:
    return state
  return "partial" if (run.workdir / CHECKPOINTS_DIR).exists() else "new"


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


def write_json(path: Path, record: dict) -> None:
  """Writes `record` to `path` whole or not at all (a reader never sees half a record)."""
  staging = path.with_name(f".{path.name}.{os.getpid()}")
  staging.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
  staging.replace(path)


def _read_json(path: Path) -> dict | None:
  return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def holds_run(workdir: str | os.PathLike) -> bool:
  """Whether `workdir` holds a run: checkpoints to resume, or the results of a finished one."""
  workdir = Path(workdir)
  latest = workdir / CHECKPOINTS_DIR
  return (workdir / RESULTS_FILE).exists() or (latest.is_dir() and any(latest.iterdir()))


# The workdirs in which this process began a training session (`begin_session`).
_SESSIONS: set[Path] = set()


def begin_session(workdir: str | os.PathLike, *, remove: bool = True) -> None:
  """Marks the start of a training session in `workdir`, once the resume checks have passed:
  the ending records of the last session no longer say how the run stands, and are removed
  (`remove`: by one process of a job, which share the folder)."""
  workdir = Path(workdir)
  _SESSIONS.add(workdir.resolve())
  if remove:
    for name in ENDING_FILES:
      (workdir / name).unlink(missing_ok=True)


def record_failure(workdir: str | os.PathLike, error: BaseException,
                   process: int | None = None) -> Path | None:
  """Records that training in `workdir` raised `error`, unless that changes a run the error
  did not touch; returns the record's path, or None.

  An error raised before this process began a session in a workdir that holds a run (a refused
  resume, a bad flag) leaves the workdir as it was; a finished run keeps results.json as the
  record of how it ended (a rerun that fails after it finished changes nothing in it). A new
  workdir gets the record, so that a sweep learns why its run never started. Never raises.
  """
  try:
    workdir = Path(workdir)
    began = workdir.resolve() in _SESSIONS
    if (workdir / RESULTS_FILE).exists() or (holds_run(workdir) and not began):
      return None
  except Exception:  # pylint: disable=broad-exception-caught  (a recorder must not raise)
    return None
  return write_failure(workdir, error, process)


def _message(error: BaseException) -> str:
  try:
    return str(error)
  except Exception:  # pylint: disable=broad-exception-caught  (an exception whose str() raises)
    return f"<{type(error).__name__} whose message cannot be read>"


def write_failure(workdir: str | os.PathLike, error: BaseException,
                  process: int | None = None) -> Path | None:
  """Writes the failure record of `error` into `workdir` (`process`: which process of a job
  raised it); returns the record's path.

  Never raises: a workdir that does not exist (a mistyped flag stopped the run before it was
  created) or cannot be written (the error being recorded may be just that) gets no record, and
  None is returned.
  """
  path = Path(workdir) / FAILED_FILE
  record = {"type": exception_type(error), "message": _message(error)}
  if process is not None:
    record["process"] = process
  try:
    write_json(path, record)
  except Exception:  # pylint: disable=broad-exception-caught  (a recorder must not raise)
    return None
  return path


def write_preempted(workdir: str | os.PathLike, record: dict) -> Path:
  """Writes `preempted.json` (`lra.preemption.Preempted.record`)."""
  path = Path(workdir) / PREEMPTED_FILE
  write_json(path, record)
  return path


def read_preempted(workdir: str | os.PathLike) -> dict | None:
  """The preemption record of `workdir`, or None when there is none."""
  return _read_json(Path(workdir) / PREEMPTED_FILE)


def latest_checkpoint(workdir: str | os.PathLike) -> int | None:
  """The newest complete checkpoint step in `workdir` (orbax renames a step's folder to its
  number once it is whole), or None."""
  latest = Path(workdir) / CHECKPOINTS_DIR
  steps = [int(p.name) for p in latest.iterdir() if p.name.isdigit()] if latest.is_dir() else []
  return max(steps, default=None)


def write_killed(workdir: str | os.PathLike, signal_name: str, returncode: int) -> dict:
  """Records that the trainer in `workdir` died of `signal_name` without a record of its own;
  returns the record."""
  step = latest_checkpoint(workdir)
  resumes = (f"resumes from its checkpoint at step {step}; the steps after it are lost"
             if step is not None else "has no checkpoint: a rerun starts it from scratch")
  record = {"signal": signal_name, "returncode": returncode, "step": step,
            "message": f"killed by {signal_name} (exit status {128 - returncode} in a shell) "
                       f"before it could save; the run {resumes}"}
  write_json(Path(workdir) / KILLED_FILE, record)
  return record


def read_killed(workdir: str | os.PathLike) -> dict | None:
  """The record the sweep left for a killed trainer, or None."""
  return _read_json(Path(workdir) / KILLED_FILE)


def read_failure(workdir: str | os.PathLike) -> dict | None:
  """The failure record of `workdir`, or None when there is none."""
  return _read_json(Path(workdir) / FAILED_FILE)


def diverged(failure: dict) -> bool:
  """Whether a failure record says the run stopped on a non-finite loss or gradient."""
  return failure.get("type") == DIVERGED_TYPE
