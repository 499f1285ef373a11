r"""The config of an existing run, read back from `<workdir>/config.json`.

`run.py --mode eval --workdir DIR` uses it when no `--config` is given, so field overrides
such as `--config.eval_form=rnn` apply to exactly the config the run was trained with:

    python run.py --mode eval --workdir runs/listops --config.eval_form=rnn
"""

import json
from pathlib import Path

from ml_collections import config_dict

from configs import common
from lion_jax.config import VALUES_BEFORE_FIELD


def get_config(workdir):
  """Loads `<workdir>/config.json`; `model` keeps its typed None fields (e.g. key_dim)."""
  path = Path(workdir) / "config.json"
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: is {workdir} a run folder written by "
                            "`run.py --config ... --workdir`? Or pass --config explicitly.")
  values = json.loads(path.read_text())
  model = common.model_config_dict(values["task"])
  # JSON keeps tuples as lists; runs written before `mesh` existed were all-data.
  values["mesh"] = tuple(values.get("mesh", common.DEFAULT_MESH))
  config = config_dict.ConfigDict({k: v for k, v in values.items() if k != "model"})
  # A field the run predates takes the value that reproduces its model (LION-D before its gate).
  common.set_fields(model, {**VALUES_BEFORE_FIELD, **values["model"]}, str(path))
  config.model = model
  return config
