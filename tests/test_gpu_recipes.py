"""bench/gpu_recipes.py: the one command a lent GPU runs, checked at tiny sizes on the CPU."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))

import gpu_recipes  # noqa: E402  (bench/ is no package)


def test_on_a_gpu_it_trains_the_four_models_three_seeds_of_long_listops_sharing_the_card(tmp_path):
  command = gpu_recipes.stage_commands("long", tmp_path, quick=False)
  after = lambda flag: command[command.index(flag) + 1]
  assert command[1:3] == ["-m", "lra.sweep"] and "--ladder-long" in command
  assert after("--variants").split(",") == ["lion", "lion_complex", "lion_s_s5_form", "s5"]
  assert after("--seeds") == "0,1,2" and after("--parallel") == "12"
  assert after("--records") == str(tmp_path / "records")
  table = gpu_recipes.stage_commands("table", tmp_path, quick=False)
  variants = table[table.index("--variants") + 1].split(",")
  assert {"lion", "lion_complex", "s5", "transformer"} <= set(variants)


def test_an_unknown_stage_is_named():
  with pytest.raises(SystemExit, match="unknown stage 'train'; stages: table, long"):
    gpu_recipes.stage_commands("train", pathlib.Path("."), quick=True)


@pytest.mark.slow
def test_quick_run_writes_the_table_and_the_records_of_both_models(tmp_path):
  assert gpu_recipes.main(["--quick", "--out", str(tmp_path)]) == 0
  table = json.loads((tmp_path / "recipes_vs_s5.json").read_text())["results"]
  assert {r["model"] for r in table} >= {"lion", "s5"}
  runs = tmp_path / "records" / "runs" / "listops"
  for variant in ("lion", "s5"):
    assert json.loads((runs / variant / "seed0" / "results.json").read_text())["test_accuracy"] > 0
