"""Configs: every task × variant builds, `runlocal` shrinks, unknown fields are named errors."""

import importlib
import json
import re
from pathlib import Path

import pytest
from absl import flags
from ml_collections import config_flags

from configs import common
from configs import workdir as workdir_config
from lion_jax.options import ConfigError
from lra import train

ROOT = Path(__file__).resolve().parents[1]
# LION Table 3, LION-S (w/ HiPPO) row: each config file quotes it.
PAPER_LION_S = {"listops": "62.25", "text": "88.10", "retrieval": "90.35", "image": "86.14",
                "pathfinder": "91.30", "pathx": "97.99"}


def get_config(task, arg=None):
  return importlib.import_module(f"configs.{task}").get_config(arg)


@pytest.mark.parametrize("task", common.TASKS)
def test_every_task_and_variant_builds_a_valid_config(task):
  """Each trains in `chunk_scan`, the fast form for long sequences, but the rungs with a state of
  at most 64 numbers a head (S5's shapes), which train in the associative `scan`, as S5 does."""
  for variant in common.VARIANTS:
    config = get_config(task, variant)
    model_config = train.check_config(config)
    narrow_state = model_config.mixer == "lion" and model_config.qk_dim * model_config.head_dim <= 64
    assert config.task == task
    assert model_config.form == ("scan" if narrow_state else "chunk_scan"), variant
  assert get_config(task, "lion_d").model.decay == "fixed"
  assert get_config(task, "lion_lit").model.decay == "lit"
  assert get_config(task).model.decay == "selective"  # lion_s is the default


@pytest.mark.parametrize("task", common.TASKS)
def test_config_files_open_with_the_run_command_and_the_paper_number(task):
  doc = importlib.import_module(f"configs.{task}").__doc__
  first_command = re.search(r"python run\.py --config (\S+)", doc).group(1)
  assert first_command.startswith(f"configs/{task}.py:")
  assert PAPER_LION_S[task] in doc


@pytest.mark.parametrize("task", common.TASKS)
def test_runlocal_shrinks_model_batch_steps_and_data(task):
  full, local = get_config(task, "lion_s"), get_config(task, "lion_s,runlocal")
  assert local.model.d_model < full.model.d_model and local.model.num_layers < full.model.num_layers
  assert local.batch_size < full.batch_size and 0 < local.num_train_steps <= 30
  assert 0 < local.max_examples <= 64
  if task in ("listops", "pathfinder", "pathx"):  # generated, and kept apart from real data
    assert local.generate and local.data_dir == common.RUNLOCAL_DATA_DIR
  else:
    assert not local.generate and local.data_dir == full.data_dir


def test_the_demo_trains_lion_and_sets_sizes_data_and_schedule_only():
  """`make demo` trains the LION to use; its preset shrinks any variant without changing its kind."""
  from lra import demo
  assert 'get_config("lion,demo")' in Path(demo.__file__).read_text()
  for variant in ("lion", "lion_s", "s5"):
    full, small = get_config("listops", variant), get_config("listops", f"{variant},demo")
    assert (small.model.d_model, small.model.num_layers, small.seq_len) == (64, 2, 160)
    assert small.num_train_steps == 0 and small.num_epochs == 6
    assert small.data_dir.endswith("demo") and small.generate["max_length"] == 150
    kind = ("mixer", "num_heads", "attention_dim", "decay", "decay_shape", "feature_map", "form")
    assert {f: small.model[f] for f in kind} == {f: full.model[f] for f in kind}, variant


@pytest.mark.parametrize("task", common.TASKS)
def test_token_tasks_train_packed_by_default_and_the_published_presets_padded(task):
  tokens = task in ("listops", "text", "retrieval")
  variants = ("lion_s", "s5") if task == "pathx" else ("lion_s", "s5", "transformer")
  for variant in variants:
    assert get_config(task, variant).packing == tokens, variant
    assert get_config(task, f"{variant},runlocal").packing == tokens, variant
    assert not get_config(task, f"{variant},cpu").packing  # as their tables were trained
  if task == "listops":
    assert not get_config(task, "lion_s,cpu_long").packing
    assert get_config(task, "lion_s,cpu_order").packing


def test_s5_schedule_numbers_per_task():
  expected = {"listops": (50, 40, 0.04), "text": (50, 35, 0.07), "retrieval": (32, 20, 0.05),
              "image": (50, 250, 0.07), "pathfinder": (64, 200, 0.03), "pathx": (32, 75, 0.06)}
  for task, (batch, epochs, wd) in expected.items():
    config = get_config(task)
    assert (config.batch_size, config.num_epochs, config.weight_decay) == (batch, epochs, wd)
    assert config.learning_rate == 5e-4  # paper D.2, every task


def test_parse_arg_positional_named_and_flags():
  args = common.parse_arg("lion_d,runlocal", variant="lion_s", runlocal=False)
  assert (args.variant, args.runlocal) == ("lion_d", True)
  args = common.parse_arg("runlocal=false,variant=lion_lit", variant="lion_s", runlocal=False)
  assert (args.variant, args.runlocal) == ("lion_lit", False)
  assert common.parse_arg(None, variant="lion_s").variant == "lion_s"
  with pytest.raises(ValueError, match="'bogus' is not one of variant, runlocal"):
    common.parse_arg("lion_s,bogus", variant="lion_s", runlocal=False)
  with pytest.raises(ValueError,
                     match="unknown variant 'lion_x'; known variants: lion, lion_complex, lion_s,"):
    get_config("listops", "lion_x")


def test_a_new_variant_is_one_table_entry(monkeypatch):
  monkeypatch.setitem(common.VARIANTS, "lion_s_random",
                      {"model.decay": "selective", "model.decay_init": "random"})
  config = get_config("image", "lion_s_random,runlocal")
  assert config.model.decay_init == "random" and config.model.d_model == 32
  monkeypatch.setitem(common.VARIANTS, "typo", {"model.decya": "fixed"})
  with pytest.raises(ConfigError, match=r"variant 'typo' sets an unknown config field "
                                        r"config\.model\.decya \(did you mean config\.model\.decay"):
    get_config("image", "typo")


def test_unknown_fields_are_errors_that_name_the_field():
  config = get_config("listops", "runlocal")
  config.unlock()
  config.learning_rat = 1e-3
  with pytest.raises(ValueError, match=r"unknown field\(s\) config\.learning_rat; valid fields"):
    train.check_config(config)
  config = get_config("listops", "runlocal")
  config.model.unlock()
  config.model.dmodel = 8
  with pytest.raises(ValueError, match=r"config\.model\.dmodel; valid fields of config\.model: .*d_model"):
    train.check_config(config)


def test_command_line_override_of_an_unknown_field_names_it():
  argv = ["run.py", f"--config={ROOT}/configs/listops.py:runlocal", "--config.model.d_model=24",
          "--config.eval_form=rnn"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
  values(argv)
  assert values.config.model.d_model == 24 and values.config.eval_form == "rnn"
  argv = argv[:2] + ["--config.learning_rat=0.1"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
  with pytest.raises(AttributeError, match='Did you mean "learning_rate" instead of "learning_rat"'):
    values(argv)


def test_workdir_config_round_trips_config_json(tmp_path):
  config = get_config("retrieval", "lion_d,runlocal")
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  restored = workdir_config.get_config(str(tmp_path))
  train.check_config(restored)
  assert json.loads(restored.to_json_best_effort()) == json.loads(config.to_json_best_effort())
  restored.model.key_dim = 8  # a None field stays settable
  with pytest.raises(ConfigError, match="config.json not found"):
    workdir_config.get_config(str(tmp_path / "nope"))


def test_task_options_are_fields_at_the_task_defaults_and_settable_from_the_command_line():
  assert dict(get_config("pathfinder", "runlocal").task_options) == {"difficulty": "hard",
                                                                      "split": "random"}
  assert dict(get_config("text", "runlocal").task_options) == {"source": "auto",
                                                                "val_split": "test"}
  argv = ["run.py", f"--config={ROOT}/configs/pathfinder.py:runlocal",
          "--config.task_options.difficulty=easy"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, flag_values=values, sys_argv=argv)
  values(argv)
  assert values.config.task_options.difficulty == "easy"


def test_a_run_stored_before_task_options_were_fields_reads_as_the_task_defaults(tmp_path):
  """Stored runs kept `task_options` empty: they loaded the task's defaults, which is what
  resumes and the sweep's stale-row check must see (else every such run would read as changed)."""
  config = json.loads(get_config("pathfinder", "runlocal").to_json_best_effort())
  config["task_options"] = {}
  (tmp_path / "config.json").write_text(json.dumps(config))
  stored = workdir_config.stored_values(tmp_path)
  assert stored["task_options.difficulty"] == "hard" and "task_options" not in stored
  assert stored == workdir_config.flatten(
      json.loads(get_config("pathfinder", "runlocal").to_json_best_effort()))
