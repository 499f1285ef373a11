r"""The config of an existing run, read back from its workdir.

`run.py --mode eval --workdir DIR` uses it when no `--config` is given, so field overrides
such as `--config.eval_form=rnn` apply to exactly the config the run was trained with:

    python run.py --mode eval --workdir runs/listops --config.eval_form=rnn

A run's record is two files. `config.json` is the config its checkpoints were trained with,
written when the run starts and never rewritten once a checkpoint exists. `config_changes.jsonl`
holds one line per field changed on a resume, {"step", "field", "from", "to"}: the fields
`lra.resume.MAY_CHANGE_ON_RESUME` lets change (evaluation cadence and form, logging, mesh, ...),
each from the checkpoint step the run resumed at. `get_config` is config.json with those changes
applied: the config the run now continues with.
"""

import json
from pathlib import Path
from typing import Any

from ml_collections import config_dict

from configs import common
from lion_jax.config import VALUES_BEFORE_FIELD as MODEL_VALUES_BEFORE_FIELD
from lion_jax.options import ConfigError

CONFIG_FILE = "config.json"
CHANGES_FILE = "config_changes.jsonl"

# Fields added after runs were first stored, with the value that gives a stored run lacking them
# the run it was: runs written before `mesh` existed were all-data, before `packing` padded;
# LION-D before its gate (the model's own table, `lion_jax.config.VALUES_BEFORE_FIELD`).
VALUES_BEFORE_FIELD: dict[str, Any] = {
    "mesh": list(common.DEFAULT_MESH),
    "packing": False,
    **{f"model.{name}": value for name, value in MODEL_VALUES_BEFORE_FIELD.items()},
}


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
  """{"model": {"decay": "fixed"}} -> {"model.decay": "fixed"}: every leaf by its dotted path."""
  flat = {}
  for key, value in values.items():
    if isinstance(value, dict) and value:
      flat.update(flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def with_absent_fields(values: dict[str, Any]) -> dict[str, Any]:
  """A stored run's dotted fields with those it predates filled in: `VALUES_BEFORE_FIELD`, and
  the task's loader options at their defaults (runs stored before `task_options` listed them
  loaded their data with those defaults)."""
  values = {**VALUES_BEFORE_FIELD, **values}
  defaults = common.task_option_defaults(values["task"]) if "task" in values else {}
  if defaults and values.get("task_options") == {}:
    del values["task_options"]  # an empty group is a leaf once flattened
  for name, default in defaults.items():
    values.setdefault(f"task_options.{name}", default)
  return values


def read_changes(workdir: str | Path) -> list[dict[str, Any]]:
  """The changes recorded on resumes, oldest first: [{"step", "field", "from", "to"}, ...]."""
  path = Path(workdir) / CHANGES_FILE
  if not path.is_file():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stored_values(workdir: str | Path) -> dict[str, Any]:
  """The run's config as dotted fields: config.json, the fields it predates filled in, and the
  changes recorded on resumes applied.

  Raises:
    ConfigError: the workdir has no config.json.
  """
  path = Path(workdir) / CONFIG_FILE
  if not path.is_file():
    raise ConfigError(f"{path} not found: is {workdir} a run folder written by "
                      "`run.py --config ... --workdir`? Or pass --config explicitly.")
  values = with_absent_fields(flatten(json.loads(path.read_text())))
  for change in read_changes(workdir):
    values[change["field"]] = change["to"]
  return values


def get_config(workdir):
  """The run's config (`stored_values`) as a ConfigDict; `model` keeps its typed None fields
  (e.g. key_dim)."""
  values = stored_values(workdir)
  model = common.model_config_dict(values["task"])
  common.set_fields(model, {k.removeprefix("model."): v for k, v in values.items()
                            if k.startswith("model.")}, str(Path(workdir) / CONFIG_FILE))
  nested: dict[str, Any] = {}
  for dotted, value in values.items():
    if dotted.startswith("model."):
      continue
    *parents, leaf = dotted.split(".")
    node = nested
    for name in parents:
      node = node.setdefault(name, {})
    node[leaf] = value
  nested["mesh"] = tuple(nested["mesh"])  # JSON keeps tuples as lists
  config = config_dict.ConfigDict(nested)
  config.model = model
  return config
