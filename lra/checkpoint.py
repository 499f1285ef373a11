"""Checkpoints of a run: the train state plus a JSON `meta` (step, data iterator, best so far).

Two orbax `CheckpointManager`s (the stable v0 API with `ocp.args`) live in the workdir:

  checkpoints/<step>/  the latest `max_to_keep` steps, what a restart resumes from;
  best/<step>/         the single best-validation step, what test and `--mode eval` use.

Each step holds `state` (the split NNX state of model and optimizer, which includes
the dropout RNG key and counter) and `meta` (JSON: the step, the data iterator's
position, the best validation accuracy so far, the partial training sums).

A SIGKILL at any instant leaves a usable latest and best checkpoint: orbax writes a
step into a temporary folder, renames it into place when complete and only then
retires the steps beyond `max_to_keep`, and `save` never deletes or overwrites a saved
step. The training loop keeps that last promise by saving a new best step to
`checkpoints/` before `best/` (so `best/` never runs ahead of the step a restart
resumes from) and, when a kill fell between the two, by `repair_best` on resume.

In a multi-process run every process calls every method (orbax synchronises them and
the primary process writes the replicated state); the workdir must be on a file
system that all processes share.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

LATEST_DIR = "checkpoints"
BEST_DIR = "best"


def _quiet_orbax(record: logging.LogRecord) -> bool:
  """Drops orbax's per-save INFO lines (a dozen per checkpoint); keeps its warnings."""
  return record.levelno >= logging.WARNING or "orbax" not in record.pathname


def _manager(directory: Path, max_to_keep: int) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
      max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False,
      cleanup_tmp_directories=True)
  return ocp.CheckpointManager(directory.absolute(), item_names=("state", "meta"), options=options)


def abstract_like(state):
  """ShapeDtypeStructs (with shardings) of `state`: the restore target."""
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, state)


class Checkpointer:
  """Saves and restores the latest and the best state of a run in `workdir`."""

  def __init__(self, workdir: str | os.PathLike, max_to_keep: int = 2):
    for name in ("absl", ""):  # orbax logs through absl, which logs through the root logger
      if _quiet_orbax not in logging.getLogger(name).filters:
        logging.getLogger(name).addFilter(_quiet_orbax)
    workdir = Path(workdir)
    self.latest = _manager(workdir / LATEST_DIR, max(max_to_keep, 1))
    self.best = _manager(workdir / BEST_DIR, 1)

  def latest_step(self) -> int | None:
    return self.latest.latest_step()

  def best_step(self) -> int | None:
    return self.best.latest_step()

  def holds(self, step: int) -> bool:
    """Whether checkpoints/ holds `step`."""
    return step in self.latest.all_steps()

  def save(self, step: int, state, meta: dict[str, Any], *, best: bool = False) -> None:
    """Saves `state` and `meta` at `step` (into best/ when `best`, else checkpoints/).

    A step that is already saved is kept as it is: deleting it first would leave, until
    the new copy is complete, no checkpoint at all in best/ (which keeps one step).
    """
    manager = self.best if best else self.latest
    if step in manager.all_steps():
      logging.warning("%s already holds step %d; keeping it", manager.directory, step)
      return
    manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)

  def repair_best(self, state, meta: dict[str, Any]) -> None:
    """After resuming from `state` at `meta["step"]`, completes what a kill cut short in best/.

    Saves `state` to best/ if it is the best step and best/ lacks it (killed between the
    two saves of that step), and retires best steps older than the newest (killed while
    orbax retired them; they may be half deleted).
    """
    if meta["best_step"] == meta["step"] and self.best_step() != meta["step"]:
      logging.info("best/ lacks the best step %d; saving it from the latest checkpoint",
                   meta["step"])
      self.save(meta["step"], state, meta, best=True)
    for step in self.best.all_steps():
      if step != self.best_step():
        logging.info("retiring best/%d, left behind by an interrupted save", step)
        self.best.delete(step)

  def restore(self, step: int, target, *, best: bool = False) -> tuple[Any, dict[str, Any]]:
    """Restores (state, meta) at `step` into the structure and shardings of `target`.

    Raises:
      ValueError: the checkpoint holds other parameters than `target`, naming the folder.
    """
    manager = self.best if best else self.latest
    try:
      restored = manager.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(abstract_like(target)), meta=ocp.args.JsonRestore()))
    except ValueError as error:
      if "tree structures do not match" not in str(error):
        raise
      raise ValueError(
          f"{manager.directory}/{step} holds other parameters than the model this config "
          "builds: it was written by another config, or by the code before LION with "
          "feature_map='constant' dropped its unused W_q and W_k. Resume it with the config "
          f"and code that wrote it, or start again in an empty --workdir. Orbax: {error}"
      ) from error
    return restored["state"], restored["meta"]

  def restore_meta(self, step: int, *, best: bool = False) -> dict[str, Any]:
    manager = self.best if best else self.latest
    return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

  def close(self) -> None:
    self.latest.wait_until_finished()
    self.best.wait_until_finished()
    self.latest.close()
    self.best.close()
