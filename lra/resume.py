"""A workdir with checkpoints resumes only with the config they were trained with.

Rerunning a train command on a workdir that holds checkpoints compares every field of the new
config with the run's own (`configs.workdir.stored_values`: config.json and the changes
recorded since):

* A field of `MAY_CHANGE_ON_RESUME` may differ. It changes when or how the run is evaluated,
  logged, checkpointed or laid out on devices, not the function its training steps compute.
  The change is appended to `config_changes.jsonl` with the checkpoint step the run resumed at;
  config.json keeps the value the run was started with.
* The number of steps (`num_train_steps`, `num_epochs`) may grow, to train a run longer; it is
  recorded the same way. The learning rate follows a warmup and a cosine over the run's total
  steps, and the optimiser is rebuilt for the new total: the steps before the resume followed
  the old schedule and the steps after it follow the new one from the step reached, so the
  learning rate jumps up from one curve to the other there (a finished run, at a learning rate
  near 0, restarts at the new cosine's value for that step: 0.5 × the peak when the total
  doubles). The result is not that of a run trained for the new total from the start;
  `config_changes.jsonl` says so, with the step.
* Any other field, or fewer steps, stops the resume with a `ResumeMismatchError` that names each
  field with both values and the overrides that resume the run as trained: the model, the
  optimiser and its schedule, the data, the seed, the batch size.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ml_collections import config_dict

from configs.workdir import CHANGES_FILE, CONFIG_FILE, flatten, stored_values
from lion_jax.options import ConfigError
from lra.checkpoint import LATEST_DIR

# Fields a resumed run may change, with why that leaves its record true.
MAY_CHANGE_ON_RESUME: dict[str, str] = {
    "log_every_steps": "when training metrics are logged",
    "eval_every_steps": "when validation runs (and so which steps may become the best one)",
    "checkpoint_every_steps": "when checkpoints are saved",
    "max_checkpoints_to_keep": "how many checkpoints are kept",
    "eval_batch_size": "evaluation batches: sums over the same examples",
    "eval_form": "the form of evaluation: every form computes the same function",
    "mesh": "how devices split batches and sequences: the state is replicated",
    "model.form": "the training form: every form computes the same function",
    "model.chunk_size": "the chunk length of the chunked forms: the same function",
    "model.state_pass": "how chunk_scan passes states: the same function",
    "model.residuals": "what chunk_scan keeps for the backward pass: the same gradients",
    "model.remat": "whether blocks recompute activations: the same gradients",
}


# Fields that may grow on a resume: a longer run (the schedule's meaning: the module docstring).
MAY_GROW_ON_RESUME = ("num_train_steps", "num_epochs")


class ResumeMismatchError(ConfigError):
  """The config differs from the one a workdir's checkpoints were trained with.

  Attributes:
    differences: the fields that differ, each with the run's value and the new one ("" when the
      run's config is missing), for callers that word their own advice (`lra.demo`).
  """

  def __init__(self, message: str, differences: str = ""):
    super().__init__(message)
    self.differences = differences


def has_checkpoints(workdir: Path) -> bool:
  latest = Path(workdir) / LATEST_DIR
  return latest.is_dir() and any(latest.iterdir())


def is_read(field: str, current: dict[str, Any]) -> bool:
  """Whether the model reads `field`; LION-D's gate switch means nothing to other decays, so a
  run stored before the field existed resumes under any value there."""
  return field != "model.fixed_gate" or current.get("model.decay") == "fixed"


def _may_change(field: str, old: Any, new: Any) -> bool:
  """Whether a resume may change `field` from the run's `old` value to `new`."""
  if field in MAY_GROW_ON_RESUME:
    return (isinstance(old, (int, float)) and isinstance(new, (int, float))
            and 0 < old < new)  # 0 steps means "use the epochs": no total to grow from
  return field in MAY_CHANGE_ON_RESUME


def _flag(field: str, value: Any) -> str:
  """The command-line override that sets `field` to `value`."""
  if isinstance(value, list):
    value = repr(tuple(tuple(v) if isinstance(v, list) else v for v in value))
  return shlex.join([f"--config.{field}={value}"])


def check_resumable(config: config_dict.ConfigDict, workdir: str | Path) -> dict[str, tuple]:
  """Checks that `config` may resume the run in `workdir` (any config may start a new one).

  Returns:
    {field: (the run's value, the new value)} for the fields of `MAY_CHANGE_ON_RESUME` that
    differ and those of `MAY_GROW_ON_RESUME` that grow; empty when the workdir holds no
    checkpoint.

  Raises:
    ResumeMismatchError: naming each other field that differs, with the run's value and the new
      one, and the overrides that resume the run as it was trained.
  """
  workdir = Path(workdir)
  if not has_checkpoints(workdir):
    return {}
  if not (workdir / CONFIG_FILE).is_file():
    raise ResumeMismatchError(
        f"{workdir} holds checkpoints but no {CONFIG_FILE}, so what they were trained with is "
        f"unknown; restore {workdir / CONFIG_FILE} or start a new --workdir.")
  stored = stored_values(workdir)
  current = flatten(json.loads(config.to_json_best_effort()))  # tuples as lists, as stored
  absent = "(absent)"
  changed = {field: (stored.get(field, absent), current.get(field, absent))
             for field in sorted(stored.keys() | current.keys())
             if stored.get(field, absent) != current.get(field, absent)
             and is_read(field, current)}
  refused = {f: values for f, values in changed.items() if not _may_change(f, *values)}
  if refused:
    fields = ", ".join(f"{field}: {old!r} in {workdir / CONFIG_FILE}, {new!r} now"
                       for field, (old, new) in refused.items())
    overrides = " ".join(_flag(field, old) for field, (old, _) in refused.items()
                         if old != absent)
    raise ResumeMismatchError(
        f"{workdir} holds checkpoints trained with another config ({fields}). Resume it as "
        f"trained with `{overrides}` or with `--config=configs/workdir.py:{workdir}` (the run's "
        "own config), or start a new --workdir. Only these fields may change on a resume: "
        f"{', '.join(MAY_CHANGE_ON_RESUME)}; and {' and '.join(MAY_GROW_ON_RESUME)} may grow.",
        differences=fields)
  return changed


def write_config(config: config_dict.ConfigDict, workdir: str | Path) -> None:
  """Writes config.json of a run that has no checkpoint yet (a new run, or one restarted before
  its first checkpoint)."""
  workdir = Path(workdir)
  if has_checkpoints(workdir):
    raise AssertionError(f"{workdir / CONFIG_FILE} records what its checkpoints were trained "
                         "with and is never rewritten")
  (workdir / CONFIG_FILE).write_text(config.to_json_best_effort(indent=2) + "\n")


def record_changes(workdir: str | Path, step: int, changes: dict[str, tuple]) -> None:
  """Appends the changes a resume from checkpoint `step` made (`check_resumable`)."""
  with open(Path(workdir) / CHANGES_FILE, "a", encoding="utf-8") as f:
    for field, (old, new) in changes.items():
      f.write(json.dumps({"step": step, "field": field, "from": old, "to": new}) + "\n")
