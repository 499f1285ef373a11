"""Table 3/6 variants: each changes exactly its row's fields, and every one trains on every task.

The expected differences from `lion_s` are spelled out here again (not read from
`configs/ablations.py`), so a wrong override there fails a test instead of passing by design.
"""

import importlib

import jax
import numpy as np
import pytest

from configs import ablations, common
from lion_jax import ModelConfig
from lion_jax.options import ConfigError
from lra import steps, train
from lra.data.batching import make_loader
from tests.lra_fixtures import SHRINK, fixture_data

# `lion_complex`: LION-S in S5's form with S5's complex states. Its mixed path
# starts as large as S5's on the task: S5's release draws C LeCun-normal on ListOps, Text and
# Image (LION's own scale), standard-normal on Retrieval, Pathfinder and Path-X (S5's gain and
# W_o 2.0x).
LION_COMPLEX = {
    "model.normalize": "none", "model.value_gain": "one_minus_decay",
    "model.selective_bias_init": 8.0, "model.directional_readout": True, "model.v_init": "lecun",
    "model.feedthrough": True, "model.attention_dim": 8, "model.num_heads": 1,
    "model.form": "scan", "model.key_dim": 4, "model.decay_phase": "s5",
    "model.complex_input": True}
S5_SCALE = {"model.value_gain": "s5_zoh", "model.out_proj_init_scale": 2.0}
LION_COMPLEX_BY_TASK = {"listops": LION_COMPLEX, "text": LION_COMPLEX, "image": LION_COMPLEX,
                        "retrieval": {**LION_COMPLEX, **S5_SCALE},
                        "pathfinder": {**LION_COMPLEX, **S5_SCALE},
                        "pathx": {**LION_COMPLEX, **S5_SCALE}}
# S5's ssm_lr in its release's scripts (`--ssm_lr_base`), per task.
S5_SSM_LR = {"listops": 1e-3, "text": 1e-3, "retrieval": 1e-3, "image": 1e-3, "pathfinder": 9e-4,
             "pathx": 6e-4}

# The LION to use, `lion`: `lion_complex` with q·k fixed at 1 (its selective decays alone weight
# the sum, and it has no W_q, W_k).
LION_BY_TASK = {task: {**fields, "model.feature_map": "constant"}
                for task, fields in LION_COMPLEX_BY_TASK.items()}

# variant -> {dotted field: value} that must differ from lion_s, and nothing else (a variant
# whose fields depend on the task: {task: fields}).
EXPECTED = {
    "lion": LION_BY_TASK,
    "lion_complex": LION_COMPLEX_BY_TASK,
    "lion_s": {},
    "lion_d": {"model.decay": "fixed"},
    "lion_lit": {"model.decay": "lit"},
    "lion_d_random": {"model.decay": "fixed", "model.decay_init": "random",
                      "model.fixed_gate": False},
    "lion_s_random": {"model.decay_init": "random"},
    "abl1_sigmoid_unscaled": {"model.feature_map": "sigmoid", "model.normalize": "none"},
    "abl2_relu": {"model.feature_map": "relu"},
    "abl3_scalar_decay": {"model.decay_shape": "scalar"},
    "abl4_unscaled": {"model.normalize": "none"},
    "abl5_scale_before_mask": {"model.normalize": "before"},
    "abl6_no_selectivity": {"model.decay": "fixed", "model.fixed_gate": False},
    "abl7_softplus": {"model.selective_mode": "softplus_dt"},
    "lion_s_sigmoid_dt": {"model.selective_mode": "sigmoid_dt"},
    "lion_s_zoh": {"model.selective_mode": "sigmoid_dt", "model.v_init": "zoh_diag"},
    "lion_s_paper_literal": {"model.selective_mode": "paper_literal"},
    "lion_d_no_positions": {"model.decay": "fixed", "model.positional": "none"},
    "lion_d_ungated": {"model.decay": "fixed", "model.fixed_gate": False},
    "lion_lit_no_positions": {"model.decay": "lit", "model.positional": "none"},
    # The ladder between LION-S and S5 (docs/paper_notes.md §20).
    "lion_s_ssm_sum": {"model.normalize": "none", "model.value_gain": "one_minus_decay"},
    "lion_s_content_blind": {"model.feature_map": "constant"},
    "lion_s_feedthrough": {"model.feedthrough": True},
    "lion_s_ssm_lr": {"decay_learning_rate": 1e-3},
    "lion_s_open_gate": {"model.selective_bias_init": 8.0},
    "lion_s_directional": {"model.directional_readout": True},
    "lion_s_ssm_open": {"model.normalize": "none", "model.value_gain": "one_minus_decay",
                        "model.selective_bias_init": 8.0},
    "lion_s5_real": {"model.decay": "fixed", "model.fixed_gate": False,
                     "model.feature_map": "constant", "model.normalize": "none",
                     "model.value_gain": "one_minus_decay", "model.directional_readout": True},
    "lion_s5_real_random_v": {"model.decay": "fixed", "model.fixed_gate": False,
                              "model.feature_map": "constant", "model.normalize": "none",
                              "model.value_gain": "one_minus_decay",
                              "model.directional_readout": True, "model.v_init": "lecun"},
    "lion_s_random_v": {"model.v_init": "lecun"},
    "lion_s_narrow_state": {"model.attention_dim": 16, "model.num_heads": 1,
                            "model.form": "scan", "model.key_dim": 4,
                            "model.v_init": "lecun"},
    "lion_s5_real_narrow_state": {"model.decay": "fixed", "model.fixed_gate": False,
                                  "model.feature_map": "constant", "model.normalize": "none",
                                  "model.value_gain": "one_minus_decay",
                                  "model.directional_readout": True, "model.v_init": "lecun",
                                  "model.feedthrough": True, "model.attention_dim": 16,
                                  "model.num_heads": 1, "model.form": "scan", "model.key_dim": 1},
    "lion_s5_real_narrow_no_d": {"model.decay": "fixed", "model.fixed_gate": False,
                                 "model.feature_map": "constant", "model.normalize": "none",
                                 "model.value_gain": "one_minus_decay",
                                 "model.directional_readout": True, "model.v_init": "lecun",
                                 "model.attention_dim": 16, "model.num_heads": 1,
                                 "model.form": "scan", "model.key_dim": 1},
    "lion_s5_selective": {"model.feature_map": "constant", "model.normalize": "none",
                          "model.value_gain": "one_minus_decay", "model.selective_bias_init": 8.0,
                          "model.directional_readout": True, "model.v_init": "lecun",
                          "model.feedthrough": True, "model.attention_dim": 16,
                          "model.num_heads": 1, "model.form": "scan", "model.key_dim": 1},
    "lion_s_s5_form": {"model.normalize": "none", "model.value_gain": "one_minus_decay",
                       "model.selective_bias_init": 8.0, "model.directional_readout": True,
                       "model.v_init": "lecun", "model.feedthrough": True,
                       "model.attention_dim": 16, "model.num_heads": 1,
                       "model.form": "scan", "model.key_dim": 4},
    "lion_s_feedthrough_open": {"model.feedthrough": True, "model.selective_bias_init": 8.0},
    "lion_s5_real_feedthrough": {"model.decay": "fixed", "model.fixed_gate": False,
                                 "model.feature_map": "constant", "model.normalize": "none",
                                 "model.value_gain": "one_minus_decay",
                                 "model.directional_readout": True, "model.v_init": "lecun",
                                 "model.feedthrough": True},
    "lion_s5_real_s5_gain": {"model.decay": "fixed", "model.fixed_gate": False,
                             "model.feature_map": "constant", "model.normalize": "none",
                             "model.value_gain": "s5_zoh", "model.directional_readout": True,
                             "model.v_init": "lecun", "model.feedthrough": True,
                             "model.attention_dim": 16, "model.num_heads": 1,
                             "model.form": "scan", "model.key_dim": 1},
    "lion_s_s5_form_complex": {"model.normalize": "none", "model.value_gain": "one_minus_decay",
                               "model.selective_bias_init": 8.0, "model.directional_readout": True,
                               "model.v_init": "lecun", "model.feedthrough": True,
                               "model.attention_dim": 8, "model.num_heads": 1,
                               "model.form": "scan", "model.key_dim": 4,
                               "model.decay_phase": "hippo"},
    "lion_s_s5_form_complex_s5_scale": {
        "model.normalize": "none", "model.value_gain": "s5_zoh", "model.selective_bias_init": 8.0,
        "model.directional_readout": True, "model.v_init": "lecun", "model.feedthrough": True,
        "model.attention_dim": 8, "model.num_heads": 1, "model.form": "scan", "model.key_dim": 4,
        "model.decay_phase": "s5", "model.out_proj_init_scale": 2.8},
    "lion_s_s5_form_s5_scale": {
        "model.normalize": "none", "model.value_gain": "s5_zoh", "model.selective_bias_init": 8.0,
        "model.directional_readout": True, "model.v_init": "lecun", "model.feedthrough": True,
        "model.attention_dim": 16, "model.num_heads": 1, "model.form": "scan", "model.key_dim": 4,
        "model.out_proj_init_scale": 1.7},
    "lion_s5_complex": {"model.decay": "fixed", "model.fixed_gate": False,
                        "model.feature_map": "constant", "model.normalize": "none",
                        "model.value_gain": "s5_zoh", "model.directional_readout": True,
                        "model.v_init": "lecun", "model.feedthrough": True,
                        "model.attention_dim": 8, "model.num_heads": 1,
                        "model.form": "scan", "model.key_dim": 1,
                        "model.decay_phase": "hippo", "model.out_proj_init_scale": 2.6},
    "lion_s5_complex_input": {"model.decay": "fixed", "model.fixed_gate": False,
                              "model.feature_map": "constant", "model.normalize": "none",
                              "model.value_gain": "s5_zoh", "model.directional_readout": True,
                              "model.v_init": "lecun", "model.feedthrough": True,
                              "model.attention_dim": 8, "model.num_heads": 1,
                              "model.form": "scan", "model.key_dim": 1,
                              "model.decay_phase": "s5", "model.complex_input": True,
                              "model.out_proj_init_scale": 1.85},
    "lion_s_s5_form_complex_input": {
        "model.normalize": "none", "model.value_gain": "s5_zoh", "model.selective_bias_init": 8.0,
        "model.directional_readout": True, "model.v_init": "lecun", "model.feedthrough": True,
        "model.attention_dim": 8, "model.num_heads": 1, "model.form": "scan", "model.key_dim": 4,
        "model.decay_phase": "s5", "model.complex_input": True, "model.out_proj_init_scale": 2.0},
    # Rungs on `lion_complex` (docs/paper_notes.md §21): its gate not selective (one learnt σ(b)
    # per channel, LION-D's), its decays at S5's ssm_lr for the task, and q·k fixed at 1.
    "lion_complex_fixed_gate": {task: {**fields, "model.decay": "fixed"}
                                for task, fields in LION_COMPLEX_BY_TASK.items()},
    "lion_complex_ssm_lr": {task: {**LION_COMPLEX_BY_TASK[task], "decay_learning_rate": rate}
                            for task, rate in S5_SSM_LR.items()},
    "lion_complex_content_blind": LION_BY_TASK,
}


def _config(task, arg):
  return importlib.import_module(f"configs.{task}").get_config(arg)


def _flat(node, prefix=""):
  """ConfigDict -> {dotted field: value}."""
  out = {}
  for key, value in node.items():
    if hasattr(value, "items"):
      out.update(_flat(value, f"{prefix}{key}."))
    else:
      out[f"{prefix}{key}"] = value
  return out


def _diff(a, b):
  """Fields of `b` that differ from (or are missing in) `a`, with b's values."""
  fa, fb = _flat(a), _flat(b)
  return {k: fb.get(k) for k in fa.keys() | fb.keys() if k not in fa or k not in fb or fa[k] != fb[k]}


def test_every_table_row_is_a_variant_and_every_variant_is_expected():
  assert set(EXPECTED) == set(common.VARIANTS)
  assert not set(ablations.ABLATION_VARIANTS) & {"lion_s", "lion_d", "lion_lit"}
  for group in ablations.GROUPS.values():
    assert set(group) <= set(common.VARIANTS | common.GRID_VARIANTS | common.BASELINE_VARIANTS
                             | common.DERIVED_BASELINES)
    assert len(set(group)) == len(group)
  assert [len(ablations.GROUPS[t]) for t in ("table3", "table6", "table7")] == [5, 8, 5]


@pytest.mark.parametrize("flags", ["", ",cpu", ",runlocal"])
@pytest.mark.parametrize("task", common.TASKS)
def test_variant_differs_from_lion_s_in_exactly_its_fields(task, flags):
  base = _config(task, "lion_s" + flags)
  # A reduced preset sizes every model alike, the variant's heads included.
  sized = {",cpu": ablations.cpu_preset(task), ",runlocal": common.RUNLOCAL}.get(flags, {})
  for variant, expected in EXPECTED.items():
    config = _config(task, variant + flags)
    expected = expected.get(task, expected)
    expected = {k: v for k, v in expected.items() if k not in sized}
    assert _diff(base, config) == expected, variant
    train.check_config(config)  # a valid ModelConfig


def test_lion_complex_is_the_recipes_it_was_measured_as():
  """The records of `lion_complex` (docs/paper_notes.md §21) were trained as the recipes: on the
  ListOps testbeds `lion_s_s5_form_complex_input` at LION's scale, on Pathfinder `cpu_order` that
  recipe as it is. Field for field the same configs."""
  lion_scale = {"model.value_gain": "one_minus_decay", "model.out_proj_init_scale": 1.0}
  for task, flags, changes in [("listops", "ladder", lion_scale),
                               ("listops", "ladder_long", lion_scale),
                               ("pathfinder", "cpu_order", {})]:
    recipe = _config(task, f"lion_s_s5_form_complex_input,{flags}")
    common.set_fields(recipe, changes, "test")
    assert _diff(recipe, _config(task, f"lion_complex,{flags}")) == {}, (task, flags)


@pytest.mark.parametrize("task,flags", [("listops", "ladder"), ("listops", "long_testbed"),
                                        ("listops", "cpu_order"), ("pathfinder", "cpu_order")])
def test_lion_is_the_content_blind_rung_it_was_measured_as(task, flags):
  """The content-blind rung's records (docs/paper_notes.md §21) count for `lion`: field for field
  the same config wherever both ran."""
  assert _diff(_config(task, f"lion_complex_content_blind,{flags}"),
               _config(task, f"lion,{flags}")) == {}


def test_a_task_whose_s5_c_init_has_no_scale_is_a_clear_error():
  with pytest.raises(ConfigError, match=r"configs/listops.py: BASELINES\['s5'\] sets "
                     r"model.c_init='unit'.*SCALE_AT_INIT_BY_S5_C_INIT"):
    common.s5_scale_at_init("listops", {"s5": {"model.c_init": "unit"}})


def test_a_task_without_s5s_ssm_lr_is_a_clear_error_for_a_variant_that_takes_it():
  with pytest.raises(ConfigError, match=r"configs/listops.py: BASELINES\['s5'\] sets no "
                     r"decay_learning_rate \(S5's ssm_lr\)"):
    common.s5_ssm_lr("listops", {"s5": {"model.c_init": "lecun_normal"}})


def test_s5s_derived_variants_differ_from_s5_in_exactly_their_fields_on_the_ladder():
  """Each rung of the ladder that changes S5 builds a valid S5 on the testbed, and changes only
  what `DERIVED_BASELINES` says (P = 64 keeps S5's J = 8 blocks: 4 complex states each)."""
  base = _config("listops", "s5,ladder")
  for variant, (parent, fields) in common.DERIVED_BASELINES.items():
    assert parent == "s5"
    config = _config("listops", f"{variant},ladder")
    assert _diff(base, config) == fields, variant
    assert train.check_config(config).ssm_size == config.model.ssm_size


def test_paper_numbers_cover_every_paper_row_and_task():
  paper_rows = {v for t in ("table3", "table6", "table7") for v in ablations.GROUPS[t]}
  assert set(ablations.PAPER) == paper_rows
  assert set(common.VARIANTS | common.GRID_VARIANTS | common.BASELINE_VARIANTS
             | common.DERIVED_BASELINES) <= set(ablations.LABELS)
  for variant in paper_rows:
    assert set(ablations.PAPER[variant]) == set(common.TASKS) == set(ablations.TASK_LABELS)
    for task, value in ablations.PAPER[variant].items():
      # Only Path-X has failures ("✗", None) in Tables 3, 6 and 7.
      assert (value is None) <= (task == "pathx") and (value is None or 10 < value < 100)
  # Spot checks against the paper's Tables 3 and 6 ([5] and [6] share ListOps 60.12 there).
  assert ablations.PAPER["lion_s"]["listops"] == 62.25
  assert ablations.PAPER["abl5_scale_before_mask"]["listops"] == 60.12
  assert ablations.PAPER["abl6_no_selectivity"]["pathx"] == 96.30
  assert ablations.PAPER["lion_d_random"]["pathx"] is None
  assert ablations.PAPER["s5"]["listops"] == 62.15 and ablations.PAPER["transformer"]["pathx"] is None


@pytest.mark.parametrize("task", common.TASKS)
def test_cpu_preset_shrinks_the_run_but_not_the_variant(task):
  full, cpu = _config(task, "lion_s"), _config(task, "lion_s,cpu")
  assert cpu.model.d_model < full.model.d_model and cpu.model.num_layers < full.model.num_layers
  assert 0 < cpu.num_train_steps <= 2000
  changed = set(_diff(full, cpu))
  # Heads are the one exception: the preset gives every model its heads, and the one-head state
  # of `lion_s_narrow_state` (16 channels, which the full Pathfinder's three heads do not divide)
  # is split over the preset's heads there.
  assert not changed & {"task", *(k for v in EXPECTED.values() for k in v)} - {"model.num_heads"}
  if task == "pathfinder":  # the task itself (L = 1024), fewer images, kept apart from real data
    assert cpu.data_dir == ablations.CPU_DATA_DIR != full.data_dir and cpu.seq_len == 0
  if task == "listops":  # the LRA generator with shorter expressions (documented deviation)
    assert cpu.seq_len == 160 and cpu.generate.max_length <= cpu.seq_len
    assert cpu.data_dir.startswith(ablations.CPU_DATA_DIR)
    # HiPPO timescales scaled to the ~10x shorter inputs, as in `make demo`.
    assert (cpu.model.dt_min, cpu.model.dt_max) == (10 * full.model.dt_min, 10 * full.model.dt_max)
  else:  # the other tasks keep their length and timescales
    assert cpu.seq_len == full.seq_len and cpu.model.dt_max == full.model.dt_max
  # A short warmup, and every run ends with an evaluation on the schedule it was given.
  assert 0 < cpu.warmup_epochs < 1 and cpu.num_train_steps % cpu.eval_every_steps == 0


def test_cpu_long_preset_is_long_listops_with_the_papers_timescales():
  full, long = _config("listops", "lion_s"), _config("listops", "lion_s,cpu_long")
  short = _config("listops", "lion_s,cpu")
  # Expressions of 250-500 tokens at L = 512: several times the `cpu` preset's 50-150.
  assert long.seq_len == 512 and long.generate.max_length <= long.seq_len
  assert long.generate.min_length >= 250 > short.generate.max_length
  assert long.data_dir.startswith(ablations.CPU_DATA_DIR) and long.data_dir != short.data_dir
  # The paper's Δ range (memories of ~10-1000 tokens), not the `cpu` preset's scaled one.
  assert (long.model.dt_min, long.model.dt_max) == (full.model.dt_min, full.model.dt_max)
  # The `cpu` preset's model (the one that learnt ListOps on the CPU), vector decays.
  assert long.model.decay_shape == "vector" and long.model.d_model == short.model.d_model
  assert long.model.num_heads == short.model.num_heads
  assert long.num_train_steps % long.eval_every_steps == 0
  for variant in ablations.GROUPS["hippo_vs_random"]:  # the variant's fields survive the preset
    assert _diff(_config("listops", variant), _config("listops", variant + ",cpu_long")) == \
        _diff(full, long), variant
  with pytest.raises(ValueError, match="ListOps preset"):
    _config("text", "lion_s,cpu_long")


def _one_step(task, variant, tmp_path):
  """Builds the variant's runlocal model for `task` on tiny data and takes one train step."""
  config = _config(task, variant + ",runlocal")
  if task in ("listops", "pathfinder"):
    config.data_dir = str(tmp_path / "data")
    config.generate.update({"listops": dict(num_train=8, num_val=2, num_test=2, min_length=5,
                                            max_length=30), "pathfinder": dict(num=20)}[task])
  else:
    config.data_dir = str(fixture_data(task, tmp_path / "data"))
    config.generate = {}
  if config.seq_len:
    config.seq_len = 32
  shrink = common.for_mixer({f"model.{k}": v for k, v in SHRINK.items()}, config.model.mixer)
  config.model.update({k.removeprefix("model."): v for k, v in shrink.items()})
  if task == "pathx":
    config.model.chunk_size = 128
  config.update(dict(batch_size=2, num_train_steps=1, max_examples=4))
  model_config = train.check_config(config)
  splits, info = train.load_data(config)
  setup = train._setup(config, info, model_config, 1, 1)  # pylint: disable=protected-access
  batch = next(make_loader(splits["train"], batch_size=2, seed=0, shuffle=False,
                           drop_remainder=True))
  _, metrics = steps.jit_train_step(setup)(setup.state, steps.shard_batch(batch, setup.mesh))
  metrics = jax.device_get(metrics)
  # Every variant keeps λ ∈ (0, 1], [7] included (it trained in the paper), so no step overflows.
  assert np.isfinite(metrics["loss_sum"]) and np.isfinite(metrics["grad_norm"]), \
      (task, variant, metrics)


# Fast: a train step for the selective and the fixed decay families and the scalar decay shape
# on three tasks, and `lion`, which takes q·k = 1 without W_q and W_k, the directional read-outs, the plain sum, the
# feed-through, a state narrower than the stream, complex decays and complex inputs at S5's
# scale through the trainer (`lion_s_s5_form` is the same with real states). Every variant on every
# task in make test-all (each variant's fields are checked above, fast; the feature maps,
# selective gates and normalisations each variant switches are checked against their formulas
# in tests/nn/test_mixer.py and tests/ops).
FAST = [("listops", "lion_s"), ("text", "lion_d"), ("pathfinder", "abl3_scalar_decay"),
        ("pathfinder", "lion")]
SLOW = [pytest.param(t, v, marks=pytest.mark.slow) for t in common.TASKS for v in EXPECTED
        if (t, v) not in FAST]


@pytest.mark.parametrize("task,variant", FAST + SLOW)
def test_variant_trains_a_runlocal_step(task, variant, tmp_path):
  _one_step(task, variant, tmp_path)


@pytest.mark.parametrize("flag", ["cpu", "cpu_long"])
def test_reduced_presets_size_every_table7_model_by_one_rule(flag):
  """Same width, depth, heads, data and schedule for every mixer; LION-only fields stay LION's."""
  configs = {v: _config("listops", f"{v},{flag}") for v in ablations.GROUPS["table7"]}
  shared = ("model.d_model", "model.num_layers", "model.num_heads", "seq_len", "data_dir",
            "batch_size", "num_train_steps", "learning_rate", "warmup_epochs")
  for field in shared:
    values = {v: configs[v][field] if "." not in field else configs[v].model[field.split(".")[1]]
              for v in configs}
    assert len(set(map(str, values.values()))) == 1, (field, values)
  # LION-only: the baselines keep ModelConfig's default, whatever the LION preset sets.
  assert configs["s5"].model.chunk_size == ModelConfig.__dataclass_fields__["chunk_size"].default
  for variant, config in configs.items():
    assert train.check_config(config).mixer == config.model.mixer, variant


@pytest.mark.parametrize("task,flag,variants", [
    ("listops", "cpu_order", ("lion_s", "s5", "transformer", "lion_s_directional",
                              "lion_s_narrow_state", "lion_s_s5_form")),
    ("pathfinder", "cpu_order", ("lion_s", "s5", "transformer", "lion_s_directional",
                                 "lion_s_narrow_state", "lion_s_s5_form")),
    ("listops", "ladder", ("lion_s", "s5", "s5_real", "lion_s_ssm_sum", "lion_s_feedthrough",
                           "lion_s_directional", "lion_s_narrow_state",
                           "lion_s5_real_narrow_state", "lion_s_s5_form")),
    ("listops", "ladder_long", ("lion_s", "s5", "lion_s_directional", "lion_s_s5_form")),
])
def test_equal_parameter_presets_give_every_model_about_the_same_parameters(task, flag, variants):
  """The rule of `cpu_order` and `ladder`: same depth, heads, data and schedule; the width per
  task and mixer puts LION-S, S5 and the Transformer within 7% of one another (the comparison
  Table 7 is read as), and the ladder's rungs as well."""
  from flax import nnx  # pylint: disable=import-outside-toplevel
  from lion_jax.nn.models import (  # pylint: disable=import-outside-toplevel
      LraClassifier, count_params)
  from lra.tasks import get_task  # pylint: disable=import-outside-toplevel
  info = get_task(task).info
  configs = {v: _config(task, f"{v},{flag}") for v in variants}
  counts = {}
  for variant, config in configs.items():
    model_config = train.check_config(config)
    model = nnx.eval_shape(lambda mc=model_config: LraClassifier(
        mc, num_classes=info.num_classes, vocab_size=info.vocab_size, dual_input=False,
        rngs=nnx.Rngs(0)))
    counts[variant] = count_params(model)
  assert max(counts.values()) / min(counts.values()) < 1.07, counts
  for field in ("model.num_layers", "model.num_heads", "seq_len", "data_dir", "batch_size",
                "num_train_steps", "learning_rate", "warmup_epochs", "packing"):
    # A 16-channel state is one head, as S5's state is (`lion_s_narrow_state`).
    values = {str(_flat(c)[field]) for v, c in configs.items()
              if not (field == "model.num_heads" and "narrow_state" in v)}
    assert len(values) == 1, field
  for node in ("generate", "task_options"):
    assert len({str(c[node]) for c in configs.values()}) == 1, node
  assert configs["s5"].model.d_model != configs["lion_s"].model.d_model  # widths do differ
  if flag.startswith("ladder"):
    assert configs["lion_s"].model.num_layers == 6
    with pytest.raises(ConfigError, match="ladder preset is a ListOps preset"):
      _config("text", "lion_s,ladder")
    with pytest.raises(ConfigError, match="no width for mixer 'mamba'.*LADDER_WIDTH"):
      ablations.ladder_preset(task, "mamba")
    return
  with pytest.raises(ConfigError, match="cpu_order preset exists for listops, pathfinder"):
    _config("text", "lion_s,cpu_order")
  with pytest.raises(ConfigError, match=f"no {task} width for mixer 'mamba'.*EQUAL_PARAMETER"):
    ablations.cpu_order_preset(task, "mamba")


def test_cpu_order_pathfinder_is_the_easy_task_without_distractor_curves():
  """Every probe stayed at chance on Pathfinder with distractors (docs/paper_notes.md §18); the
  preset generates its own folder of easy images with none, and enough that its 2,000 steps of
  32 see each training image (80% of the images) at most twice."""
  config = _config("pathfinder", "s5,cpu_order")
  assert config.task_options.difficulty == "easy"
  assert config.generate.num_distractors == 0
  assert config.data_dir != _config("pathfinder", "s5,cpu").data_dir
  assert config.num_train_steps * config.batch_size <= 2 * 0.8 * config.generate.num
  assert config.model.ssm_size == 16


def test_ladder_long_is_the_accelerator_runs_of_the_6_block_question():
  """`ladder_long` trains what the H100 runs of docs/paper_notes.md §17 trained (their records)."""
  import json  # pylint: disable=import-outside-toplevel
  from pathlib import Path  # pylint: disable=import-outside-toplevel
  runs = Path(__file__).parents[1] / "docs/sweep/probes/listops_depth6_10000steps_h100/runs/listops"
  for variant in ("lion_s", "s5"):
    stored = _flat(json.loads((runs / variant / "seed0" / "config.json").read_text()))
    today = _flat(_config("listops", f"{variant},ladder_long"))
    as_json = lambda value: json.dumps(value, sort_keys=True)  # tuples read back as lists
    differ = {k for k in stored if k in today and as_json(stored[k]) != as_json(today[k])}
    unread = {"model.num_heads"} if variant == "s5" else set()  # S5's state has no heads
    assert differ <= unread, {k: (stored[k], today[k]) for k in differ}


@pytest.mark.parametrize("variant", ["s5", "lion_s_s5_form", "lion_complex", "lion"])
def test_long_testbed_is_the_ladders_3000_step_runs(variant):
  """`long_testbed` is `ladder_long` cut to 3,000 steps and evaluated every 250, the 6-block runs
  of docs/paper_notes.md §20 (`--ladder-long --set num_train_steps=3000 --set
  eval_every_steps=250`), so their records count for it."""
  ladder_long = _config("listops", f"{variant},ladder_long")
  common.set_fields(ladder_long, {"num_train_steps": 3000, "eval_every_steps": 250}, "test")
  testbed = _config("listops", f"{variant},long_testbed")
  assert _diff(ladder_long, testbed) == {}
  assert testbed.generate.min_length >= 250 and testbed.seq_len == 512
