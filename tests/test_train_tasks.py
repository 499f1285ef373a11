"""`runlocal` end to end on every task: generated ListOps/Pathfinder, fixture Text/AAN/CIFAR/Path-X.

Each run is the task's own runlocal config, shrunk further (1 layer, width 16, 2 steps)
so that six tasks cost about as much as one real runlocal run.
"""

import importlib
import json

import pytest

from lra import train
from tests.lra_fixtures import SHRINK, fixture_data

def tiny_runlocal_config(task, root, arg="lion_s,runlocal"):
  """The task's runlocal config shrunk to 1 layer, width 16, 2 steps of batch 2 on data under
  `root` (generated for ListOps/Pathfinder, fixture files otherwise). Reusable by other tests."""
  config = importlib.import_module(f"configs.{task}").get_config(arg)
  if task in ("listops", "pathfinder"):  # the config's own generator settings, made smaller
    config.data_dir = str(root)
    config.generate.update({"listops": dict(num_train=16, num_val=8, num_test=8, min_length=5,
                                            max_length=30), "pathfinder": dict(num=40)}[task])
  else:
    config.data_dir = str(fixture_data(task, root))
    config.generate = {}
  if config.seq_len:
    config.seq_len = 32
  config.model.update(SHRINK)
  if task == "pathx":
    config.model.chunk_size = 128  # L = 16384: fewer, larger chunks
  config.update(dict(batch_size=2, num_train_steps=2, eval_every_steps=2, max_examples=8))
  return config


# make test: the dual-input task (ListOps trains in tests/test_train.py, Pathfinder's grid in
# tests/test_ablations.py); the rest in make test-all (Path-X at L = 16384: ~1 min).
@pytest.mark.parametrize("task", ["retrieval"] + [
    pytest.param(task, marks=pytest.mark.slow) for task in ("listops", "text", "image",
                                                            "pathfinder", "pathx")])
def test_runlocal_trains_and_tests_every_task(task, tmp_path):
  config = tiny_runlocal_config(task, tmp_path / "data")
  results = train.train_and_evaluate(config, str(tmp_path / "run"), progress=False)
  assert json.loads((tmp_path / "run" / "results.json").read_text())["best_step"] == 2
  assert 0.0 <= results["test_accuracy"] <= 1.0 and results["test_examples"] > 0
  assert results["compiles"] == {"train_step": 1, "eval_step": 1}
