"""`bench/recipes_vs_s5.py`: the recipes' training steps against S5's and their identity-mixer
floors. The configs it builds resolve at every setting it runs, and `--quick` runs end to end."""

import dataclasses
import json
import pathlib
import sys

import pytest

from lion_jax.config import MIXER_FIELDS, ModelConfig
from lra.train import check_config

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))

import recipes_vs_s5  # noqa: E402  (bench/ is no package: its scripts import each other by name)

MIXER_OWN = {name for names in MIXER_FIELDS.values() for name in names}


@pytest.mark.parametrize("setting", recipes_vs_s5.SETTINGS.split(","))
def test_every_floor_is_its_model_with_the_identity_mixer_and_nothing_else_changed(setting):
  task, _, preset = setting.partition(":")
  models, _, _, _ = recipes_vs_s5.setting_models(task, preset,
                                                 recipes_vs_s5.VARIANTS.split(","))
  by_name = {m.name: m for m in models}
  for model in (m for m in models if m.floor):
    floor = by_name[model.floor].model_config
    assert floor.mixer == "identity" and check_config(by_name[model.floor].config) == floor
    assert floor.position_encoding == model.model_config.position_encoding
    for field in dataclasses.fields(ModelConfig):
      if field.name not in MIXER_OWN | {"mixer", "positional", "num_heads"}:
        assert getattr(floor, field.name) == getattr(model.model_config, field.name), field.name


def test_a_variant_without_a_config_at_a_setting_is_skipped_with_the_reason():
  _, _, _, skipped = recipes_vs_s5.setting_models("pathx", "", ["s5", "transformer"])
  assert skipped == {"transformer": "configs/pathx.py has no variant 'transformer'"}
  _, _, _, skipped = recipes_vs_s5.setting_models("listops", "ladder", ["transformer"])
  assert "no width for mixer 'softmax'" in skipped["transformer"]


def test_a_step_too_large_for_the_budget_is_timed_at_a_smaller_power_of_two_batch():
  models, info, length, _ = recipes_vs_s5.setting_models("pathx", "", ["s5"])
  assert recipes_vs_s5.timed_batch(models, info, length, 2 ** 22) == 2  # 16,384 x 128 floats
  assert recipes_vs_s5.timed_batch(models, info, length, 1) == 1
  assert recipes_vs_s5.timed_batch(models, info, length, 1e12) == recipes_vs_s5.MEMORY_BATCH


def test_quick_run_times_lion_s5_and_their_floor_and_plans_memory_at_32(tmp_path):
  recipes_vs_s5.main(["--quick", "--out", str(tmp_path)])
  records = json.loads((tmp_path / "recipes_vs_s5_quick.json").read_text())["results"]
  by_model = {r["model"]: r for r in records}
  floor = "identity in LION's block = S5's block"  # runlocal: one width for every mixer
  assert list(by_model) == ["lion", "s5", floor]
  assert {r["batch"] for r in records} == {16}
  assert by_model["s5"]["examples_per_s_over_s5"] == 1.0
  assert by_model[floor]["step_over_floor"] == 1.0
  assert by_model["lion"]["floor"] == floor
  for r in records:
    assert r["examples_per_s"] > 0 and r["step_over_floor"] > 0
    assert r["memory_batch_32_bytes"] > r["temp_plus_output_bytes"] > 0  # planned at 32, ran at 16
