"""The shared LRA experiment config: base fields, variants, `runlocal`, and `parse_arg`.

Every `configs/<task>.py` calls `get_base_config(task, arg, ...)` and overrides only what
differs for that task, so the task × variant grid stays one file per task:

    python run.py --config configs/listops.py:lion_s,runlocal --workdir runs/x
    python run.py --config configs/image.py:variant=lion_d --workdir runs/y --config.seed=1

The argument after ":" is parsed by `parse_arg`: comma-separated `key=value` pairs; a bare
first word is the variant and a bare later word is a flag set to True (`runlocal`).

Adding a variant (e.g. a Table 6 ablation) is one line in `VARIANTS`: a name mapped to
dotted-field overrides applied on top of the task's config.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
import typing
from typing import Any

from ml_collections import config_dict

from lion_jax.config import ModelConfig, foreign_fields, preset
from lion_jax.options import ConfigError
from lra.tasks import TASKS as TASK_REGISTRY

from configs.ablations import (ABLATION_VARIANTS, LADDER_PRESETS, LION, LION_COMPLEX,
                               SCALE_AT_INIT_BY_S5_C_INIT, cpu_long_preset, cpu_order_preset,
                               cpu_preset, ladder_preset, width_key)

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")

# Where the data lives unless --config.data_dir says otherwise.
DATA_ROOT = os.environ.get("LRA_DATA_DIR", "data")

# Where runlocal runs of generated tasks write their tiny data sets, kept apart from the
# real ones so that a later full run can never pick them up.
RUNLOCAL_DATA_DIR = os.path.join(DATA_ROOT, "runlocal")

# variant -> {dotted config field: value}. Names follow the paper's Table 3 rows; the
# ablation rows of Tables 3 and 6 are one more line each.
VARIANTS: dict[str, dict[str, Any]] = {
    # The LION to use (configs/ablations.py `LION`): `lion_complex` below with q·k fixed at 1, the
    # sum weighted by its selective decays alone; docs/paper_notes.md §22.
    "lion": LION,
    # The LION recommended before `lion` (configs/ablations.py `LION_COMPLEX`): LION-S in S5's form with S5's complex
    # states, its scale at init S5's on the task (`SCALE_AT_INIT_BY_S5_C_INIT`, applied by
    # `get_base_config`); docs/paper_notes.md §21.
    "lion_complex": LION_COMPLEX,
    # LION-S (w/ HiPPO): selective vector decay on a HiPPO base (paper Sec. 4.5).
    "lion_s": {"model.decay": "selective", "model.decay_init": "hippo"},
    # LION-D (w/ HiPPO): a learnt, input-independent vector decay.
    "lion_d": {"model.decay": "fixed", "model.decay_init": "hippo"},
    # LION-LIT: no decay at all (expected to fail on LRA, Table 3).
    "lion_lit": {"model.decay": "lit"},
}
# The Table 3 "w/o HiPPO" rows and the Table 6 ablations ([1]-[7]).
VARIANTS.update(ABLATION_VARIANTS)

# LION♮ (paper §C.11, Figure 9; `lion_jax.ops.grid_order`): the decays run along the row and the
# column snake of the image, each snake with its own decay parameters, and the two masks are
# averaged before the normalisation. Only for the tasks whose preset knows its grid (Image,
# Pathfinder, Path-X), so these are not in `VARIANTS`, which every task accepts.
GRID_VARIANTS: dict[str, dict[str, Any]] = {
    "lion_s_snake": {**VARIANTS["lion_s"], "model.scan_order": "snake"},
    "lion_d_snake": {**VARIANTS["lion_d"], "model.scan_order": "snake"},
}


# The baselines of the paper's Table 7, in the same classifier, blocks and pipeline: S5 (its own
# SSM in the S5 block) and the Transformer (softmax attention in the pre-norm Transformer block
# with LayerNorm). Their sizes and schedules differ per task: `configs/<task>.py` passes them to
# `get_base_config(baselines=...)`, each number with its source; a task that passes none has
# no baseline variants.
# The task presets set LION's chunk length (`lion_jax.config.PRESETS`); the baselines' mixers
# read no such field, and ModelConfig wants it at its default there.
_LION_CHUNK_AT_DEFAULT = {"model.chunk_size": ModelConfig.__dataclass_fields__["chunk_size"].default}
BASELINE_VARIANTS: dict[str, dict[str, Any]] = {
    "s5": {"model.mixer": "s5", **_LION_CHUNK_AT_DEFAULT},
    "transformer": {"model.mixer": "softmax", "model.block": "transformer", "model.norm": "layer",
                    **_LION_CHUNK_AT_DEFAULT},
}
# Variants of a baseline: (the baseline, its fields changed). Every task that has the baseline
# has them, with the task's settings of the baseline underneath.
DERIVED_BASELINES: dict[str, tuple[str, dict[str, Any]]] = {
    # S5 with real decays: Λ's imaginary parts dropped (docs/paper_notes.md §20).
    "s5_real": ("s5", {"model.ssm_real": True}),
    # ... and one read-out for both directions: left and right context weighed alike, as in LION.
    "s5_real_tied": ("s5", {"model.ssm_real": True, "model.ssm_tied_readout": True}),
    # ... and with a state as wide as the ladder's stream: P = 64 (32 complex states, each a pair
    # of real ones sharing a decay: 64 real channels), as LION's state is as wide as its stream.
    "s5_real_wide_state": ("s5", {"model.ssm_real": True, "model.ssm_size": 64}),
}


def _baseline_variants(baselines: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
  """{variant: fields} of the baselines a task lists and of their derived variants."""
  variants = {name: {**BASELINE_VARIANTS[name], **fields} for name, fields in baselines.items()}
  for name, (base, changes) in DERIVED_BASELINES.items():
    if base in baselines:
      variants[name] = {**variants[base], **changes}
  return variants


# The S5 release's --opt_config rules (lindermanlab/S5 s5/train_helpers.py `create_train_state`,
# help text in run_train.py) as `param_groups`. The release labels each parameter by its own
# name: "ssm" (Adam at ssm_lr, no weight decay: `decay` here, decay_learning_rate), "none"
# (BandCdecay only: AdamW at ssm_lr with weight decay: `decay_weight_decay`) and "regular"
# (AdamW at the global lr with weight decay: `default`). Names (release -> here): Lambda_re/_im
# -> lambda_re/_im, B -> b_re/b_im, C (C1, C2) -> c_re/c_im, D -> d, log_step -> log_step.
#   standard:       Λ, B, log Δ at ssm_lr; C, D at the learning rate with weight decay.
#   BandCdecay:     Λ, log Δ at ssm_lr; B at ssm_lr with weight decay; C, D as standard.
#   BfastandCdecay: Λ, log Δ at ssm_lr; B, C, D at the learning rate with weight decay.
#   noBCdecay:      Λ, B, C, D, log Δ at ssm_lr, none with weight decay.
# --dt_global=True (Text, Retrieval) changes only the optimiser: log Δ leaves the ssm_lr group
# for the learning rate with weight decay (the model keeps one Δ per state).
# Every other parameter (encoder, GLU, head, biases, and the norms' scale and bias) is
# "regular": weight decay included. The release also lists "norm" among the ssm_lr names, but
# it matches leaf names only, and a norm's leaves are "scale" and "bias", so it never applies.
_S5_SSM_LR = {
    "standard": ("lambda_re", "lambda_im", "b_re", "b_im"),
    "BandCdecay": ("lambda_re", "lambda_im"),
    "BfastandCdecay": ("lambda_re", "lambda_im"),
    "noBCdecay": ("lambda_re", "lambda_im", "b_re", "b_im", "c_re", "c_im", "d"),
}
S5_OPT_CONFIGS = tuple(_S5_SSM_LR)


def s5_param_groups(opt_config: str, dt_global: bool = False) -> tuple[tuple[str, str], ...]:
  """The `param_groups` of the S5 release's `--opt_config` (and `--dt_global`), see above."""
  if opt_config not in _S5_SSM_LR:
    raise ConfigError(f"opt_config {opt_config!r} is not one of {', '.join(S5_OPT_CONFIGS)}")
  names = _S5_SSM_LR[opt_config] + (() if dt_global else ("log_step",))
  groups = ((rf"(^|/)mixer/({'|'.join(names)})$", "decay"),)
  if opt_config == "BandCdecay":
    groups += ((r"(^|/)mixer/b_(re|im)$", "decay_weight_decay"),)
  return groups


# opt_config -> param_groups, with the release's default --dt_global=False.
S5_PARAM_GROUPS = {name: s5_param_groups(name) for name in S5_OPT_CONFIGS}


# The LION this codebase recommends: first in `--help` and in the README's results.
RECOMMENDED_VARIANT = "lion"


def s5_scale_at_init(task: str, baselines: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
  """The scale fields that start a LION's mixed path as large as S5's on `task`.

  Args:
    task: the task whose config is being built.
    baselines: the task's `BASELINES`, whose "s5" entry holds S5's `model.c_init` for the task.

  Raises:
    ConfigError: for a task without S5's settings, or a C_init without a scale here.
  """
  c_init = (baselines or {}).get("s5", {}).get("model.c_init")
  if c_init not in SCALE_AT_INIT_BY_S5_C_INIT:
    raise ConfigError(f"configs/{task}.py: BASELINES['s5'] sets model.c_init={c_init!r}, which "
                      "configs/ablations.SCALE_AT_INIT_BY_S5_C_INIT has no scale at init for; "
                      f"add it there (known: {', '.join(SCALE_AT_INIT_BY_S5_C_INIT)})")
  return SCALE_AT_INIT_BY_S5_C_INIT[c_init]


def s5_ssm_lr(task: str, baselines: dict[str, dict[str, Any]] | None) -> dict[str, Any]:
  """The learning rate of a LION's decay parameters at S5's `ssm_lr` on `task` (S5's rate for
  Λ and log Δ; LION's decay group holds the base decays, the gate and the turn θ).

  Raises:
    ConfigError: for a task whose `BASELINES['s5']` sets no decay_learning_rate.
  """
  rate = (baselines or {}).get("s5", {}).get("decay_learning_rate")
  if not rate:
    raise ConfigError(f"configs/{task}.py: BASELINES['s5'] sets no decay_learning_rate (S5's "
                      "ssm_lr), which this variant trains its decays at; add it there")
  return {"decay_learning_rate": rate}


# Variants that take some of S5's settings for the task, by name of the setting (`FROM_S5`): the
# scale at which the mixed path starts (S5's C_init), the rate of the decays (S5's ssm_lr).
FROM_S5 = {"scale_at_init": s5_scale_at_init, "ssm_lr": s5_ssm_lr}
S5_TASK_SETTINGS: dict[str, tuple[str, ...]] = {
    "lion": ("scale_at_init",),
    "lion_complex": ("scale_at_init",),
    "lion_complex_fixed_gate": ("scale_at_init",),
    "lion_complex_ssm_lr": ("scale_at_init", "ssm_lr"),
    "lion_complex_content_blind": ("scale_at_init",),
}


def task_variants(task: str) -> dict[str, dict[str, Any]]:
  """The variants `configs/<task>.py` accepts: `VARIANTS`, `GRID_VARIANTS` for image tasks, and
  the baselines its module lists in `BASELINES` (their task settings not included)."""
  baselines = getattr(importlib.import_module(f"configs.{task}"), "BASELINES", {})
  return (VARIANTS | (GRID_VARIANTS if preset(task).grid is not None else {})
          | _baseline_variants({name: {} for name in baselines}))


def for_mixer(overrides: dict[str, Any], mixer: str) -> dict[str, Any]:
  """`overrides` without the model fields that only another mixer reads (`MIXER_FIELDS`).

  The `cpu`, `cpu_long` and `runlocal` presets size every model by one rule: the same width,
  depth, heads, data and schedule for all of them, while each mixer keeps its own layer-internal
  settings (LION's chunk size, S5's P and J, the Transformer's MLP ratio). A preset's LION-only
  field (e.g. `model.chunk_size`) is therefore left out for S5 and the Transformer.
  """
  foreign = foreign_fields(mixer)
  return {k: v for k, v in overrides.items()
          if not (k.startswith("model.") and k.removeprefix("model.") in foreign)}

DEFAULT_MESH = (-1, 1)

# The switches that may follow the variant (`configs/<task>.py:<variant>,<switch>`), with what
# each does; a task config may accept more (`extra_args`: ListOps' `demo`).
PRESET_FLAGS: dict[str, str] = {
    "runlocal": "a tiny model, 30 steps on 64 examples: any task in about a minute (smoke run); "
                "Path-X 10 steps on 16",
    "cpu": "a small model and a few hundred steps that fit a 2-core CPU (configs/ablations.py)",
    "cpu_long": "ListOps only: 250-500-token expressions at L = 512, the paper's HiPPO range",
    "cpu_order": "every model at equal parameters where Table 7's ordering can show: ListOps at "
                 "cpu_long's lengths, 4x the data, 2,000 steps, ~50k parameters; Pathfinder-32 "
                 "easy without distractors, 2,000 steps, ~12k (configs/ablations.py)",
    "ladder": "ListOps only: cpu's short expressions, 6 blocks at ~48k parameters, 2,000 steps: "
              "where S5 leads LION-S, for the ladder between them (configs/ablations.py)",
    "ladder_long": "ListOps only: the ladder at cpu_order's lengths and data, 6 blocks, 10,000 "
                   "steps: hours a run on a CPU, minutes on a GPU (configs/ablations.py)",
    "long_testbed": "ListOps only: ladder_long cut to 3,000 steps: LRA's lengths at the least cost "
                    "that still orders the models, 3+ seeds a model (configs/ablations.py)",
}

# What `runlocal` shrinks (any task then finishes in about a minute on a 2-core CPU).
RUNLOCAL = {
    "model.d_model": 32,
    "model.num_layers": 2,
    "model.num_heads": 2,
    "model.dropout": 0.0,
    "model.remat": False,
    "batch_size": 8,
    "num_train_steps": 30,
    "eval_every_steps": 15,
    "log_every_steps": 5,
    "max_examples": 64,
    "warmup_epochs": 0.0,
    "learning_rate": 2e-3,
}


def parse_arg(arg: str | None, **spec: Any) -> config_dict.ConfigDict:
  """Parses `"lion_s,runlocal"` / `"variant=lion_d,seed=3"` against typed defaults.

  Args:
    arg: the string after ":" in `--config file.py:arg` (may be None or empty).
    **spec: every accepted key with its default; the value's type is the key's type.
      The first key may be given without a name.

  Returns:
    A ConfigDict with one entry per key of `spec`.

  Raises:
    ValueError: for an unknown key or a value that does not parse, listing the keys.
  """
  result = dict(spec)
  names = list(spec)
  for i, item in enumerate(p.strip() for p in (arg or "").split(",") if p.strip()):
    if "=" in item:
      key, value = (s.strip() for s in item.split("=", 1))
    elif i == 0 and names and not isinstance(spec[names[0]], bool) and item not in spec:
      key, value = names[0], item
    else:
      key, value = item, "True"
    if key not in spec:
      raise ConfigError(f"config argument {key!r} is not one of {', '.join(names)} (got {arg!r})")
    result[key] = _parse_value(key, value, spec[key])
  return config_dict.ConfigDict(result)


def _parse_value(key: str, value: str, default: Any) -> Any:
  if isinstance(default, bool):
    if value.lower() not in ("true", "false", "1", "0"):
      raise ConfigError(f"config argument {key}={value!r} is not a boolean")
    return value.lower() in ("true", "1")
  return type(default)(value) if default is not None else value


def model_config_dict(task: str) -> config_dict.ConfigDict:
  """The task's model preset as a ConfigDict with exactly the `ModelConfig` field names.

  Fields whose default is None become typed placeholders so that they can still be set
  from the command line (`--config.model.key_dim=32`).
  """
  model = preset(task)
  hints = typing.get_type_hints(ModelConfig)
  values = {}
  for field in dataclasses.fields(ModelConfig):
    value = getattr(model, field.name)
    if value is None:
      value = config_dict.placeholder(_non_none_type(hints[field.name]))
    values[field.name] = value
  return config_dict.ConfigDict(values)


def _non_none_type(hint: Any) -> type:
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  # tuple[int, int] -> tuple: ConfigDict placeholders take plain types.
  return (typing.get_origin(args[0]) or args[0]) if args else str


def unknown_field(config: config_dict.ConfigDict, dotted: str) -> ConfigError | None:
  """The error for setting `config.<dotted>` when a part of that path is not a field, else None.

  The message names the full path, the nearest valid names and every field where the path
  leaves the config.
  """
  node, path = config, "config"
  for name in dotted.split("."):
    fields = tuple(node) if isinstance(node, config_dict.ConfigDict) else ()
    if name not in fields:
      near = difflib.get_close_matches(name, fields, n=3, cutoff=0.6)
      hint = f" (did you mean {' or '.join(f'{path}.{n}' for n in near)}?)" if near else ""
      return ConfigError(f"unknown config field config.{dotted}{hint}; fields of {path}: "
                         f"{', '.join(sorted(fields)) or 'none, it is not a group of fields'}")
    node, path = node[name], f"{path}.{name}"
  return None


def set_fields(config: config_dict.ConfigDict, overrides: dict[str, Any], source: str) -> None:
  """Sets dotted fields.

  Raises:
    ConfigError: for an unknown field, naming `source`, the field and the nearest valid ones.
  """
  for dotted, value in overrides.items():
    error = unknown_field(config, dotted)
    if error is not None:
      raise ConfigError(f"{source} sets an {error}")
    *parents, leaf = dotted.split(".")
    node = config
    for name in parents:
      node = node[name]
    node[leaf] = value


def task_option_defaults(task: str) -> dict[str, Any]:
  """{option: default} of the task's loader options (`lra.tasks`); {} for a task without any."""
  return dict(TASK_REGISTRY[task].options)


def get_base_config(task: str, arg: str | None, *, batch_size: int, num_epochs: int,
                    weight_decay: float, warmup_epochs: float = 1.0,
                    extra_args: dict[str, Any] | None = None,
                    baselines: dict[str, dict[str, Any]] | None = None
                    ) -> tuple[config_dict.ConfigDict, config_dict.ConfigDict]:
  """The config shared by every task; `configs/<task>.py` passes S5's numbers (docs/design.md §3).

  Args:
    task: one of `TASKS`.
    arg: the `--config file.py:arg` string (see `parse_arg`).
    batch_size, num_epochs, weight_decay, warmup_epochs: the task's schedule.
    extra_args: task-specific `parse_arg` keys (e.g. listops' `demo`) with defaults.
    baselines: {"s5" | "transformer": dotted-field overrides}: the task's settings of the
      `BASELINE_VARIANTS`, applied after the variant's own fields and before `cpu`/`runlocal`.

  Returns:
    (config, args): the config, unlocked, for the caller to adjust and return, and the
    parsed argument (`variant`, `runlocal` and the `extra_args` keys).
  """
  args = parse_arg(arg, variant="lion_s", **dict.fromkeys(PRESET_FLAGS, False),
                   **(extra_args or {}))
  variants = task_variants(task) | _baseline_variants(baselines or {})
  if args.variant not in variants:
    raise ConfigError(f"unknown variant {args.variant!r}; known variants: {', '.join(variants)}")
  config = config_dict.ConfigDict()
  config.task = task
  # Seeds the model init, dropout and the data order (epoch e is shuffled with seed + e).
  config.seed = 0
  # Root of the LRA data (layouts in `lra.data`); $LRA_DATA_DIR sets the default.
  config.data_dir = DATA_ROOT
  # Sequence length L (per document for retrieval); 0 keeps the task's own (2048, 4096, 4000).
  config.seq_len = 0
  # Keep at most this many examples per split (0: all); for smoke runs.
  config.max_examples = 0
  # Options passed to `lra.tasks.load_task`, each at the task's default (Pathfinder's
  # `difficulty`, Text's `val_split`, ...), so that `--config.task_options.<name>=` can set them.
  config.task_options = config_dict.ConfigDict(task_option_defaults(task))
  # Generator arguments used when the task's data is missing (empty: never generate).
  config.generate = config_dict.ConfigDict()

  # Device mesh (data, seq): the batch is split over `data` devices and every sequence over
  # `seq` devices (context parallelism: each LION layer runs `chunk_scan` on its L/seq tokens
  # and exchanges only per-head states; docs/multi_device.md).
  # data = -1: every device not used by `seq`. The default (-1, 1) is pure data parallelism.
  config.mesh = DEFAULT_MESH
  # Global batch size, split over the `data` devices (must divide evenly).
  config.batch_size = batch_size
  # Evaluation batch size (0: same as batch_size); the last batch is padded and masked.
  config.eval_batch_size = 0
  # Train on packed rows: each step's batch_size examples end to end in fewer rows, each
  # example kept apart by every mixer (lra/data/packing.py; docs/usage.md). On for the token
  # tasks, whose padded rows are half or more padding (1.7x the examples/s of LION-S and S5 on
  # ListOps, docs/benchmarks.md §12); images are never padded. Evaluation stays padded.
  config.packing = TASK_REGISTRY[task].info.input_kind == "tokens"
  config.num_epochs = num_epochs
  # When > 0, train exactly this many steps instead of num_epochs.
  config.num_train_steps = 0

  # AdamW with linear warmup then cosine to 0 (paper D.2: lr 5e-4, cosine; S5: 1 warmup epoch).
  config.learning_rate = 5e-4
  config.warmup_epochs = warmup_epochs
  config.weight_decay = weight_decay
  # Learning rate of the decay parameters (the analogue of S5's ssm_lr); 0: learning_rate.
  config.decay_learning_rate = 0.0
  config.b1 = 0.9
  config.b2 = 0.999
  # Clip gradients to this global norm (0: no clipping).
  config.grad_clip_norm = 0.0
  # Parameter groups: (regex searched in the parameter path "encoder/blocks/0/mixer/decay_base",
  # group); the first match wins, unmatched parameters are "default". Groups: "default"
  # (lr, weight decay), "no_weight_decay" (lr), "decay" (decay_learning_rate, no weight decay).
  config.param_groups = (("decay", "decay"), (r"norm|bias|(^|/)scale$", "no_weight_decay"))

  # Log training metrics every this many steps.
  config.log_every_steps = 100
  # Evaluate on validation every this many steps (0: once per epoch); always at the end.
  config.eval_every_steps = 0
  # Save a checkpoint every this many steps (0: at every evaluation); always at the end
  # and at every new best validation step (the best/ copy is saved after it).
  config.checkpoint_every_steps = 0
  config.max_checkpoints_to_keep = 2
  # Form of the model at evaluation ("" : the training form, model.form); any form of
  # `lion_attention` gives the same numbers.
  config.eval_form = ""

  # The model: exactly the fields of `lion_jax.config.ModelConfig`, from the task preset.
  config.model = model_config_dict(task)
  set_fields(config, variants[args.variant], f"variant {args.variant!r}")
  for setting in S5_TASK_SETTINGS.get(args.variant, ()):
    set_fields(config, FROM_S5[setting](task, baselines), f"variant {args.variant!r}")
  mixer = config.model.mixer
  if args.cpu:  # a small model and short run on the task's data (configs/ablations.py)
    set_fields(config, for_mixer(cpu_preset(task), mixer), "cpu")
  if args.cpu_long:  # long ListOps for the HiPPO-vs-random question (configs/ablations.py)
    set_fields(config, for_mixer(cpu_long_preset(task), mixer), "cpu_long")
  width = width_key(config.model)
  if args.cpu_order:  # equal-parameter models where Table 7's ordering can show
    set_fields(config, for_mixer(cpu_order_preset(task, width), mixer), "cpu_order")
  for flag in LADDER_PRESETS:  # the ladder's testbeds between S5 and LION-S
    if args[flag]:
      set_fields(config, for_mixer(ladder_preset(task, width, flag), mixer), flag)
  if args.runlocal:
    set_fields(config, for_mixer(RUNLOCAL, mixer), "runlocal")
  return config, args
