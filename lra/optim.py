"""AdamW with linear warmup then cosine, over a regex table of parameter groups.

The table is data, not code: an ordered list of
`(regex, group)` pairs searched in each parameter's path ("encoder/blocks/0/mixer/decay_base");
the first match wins and unmatched parameters fall into "default", so every parameter
gets exactly one group. The groups are

  default          learning_rate, weight_decay
  no_weight_decay  learning_rate, no weight decay (norms, biases)
  decay            decay_learning_rate (or learning_rate), no weight decay (λ parameters)
  decay_weight_decay  decay_learning_rate, weight_decay (S5's B under its BandCdecay option)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import jax
import optax

from lion_jax.options import ConfigError

GROUPS = ("default", "no_weight_decay", "decay", "decay_weight_decay")


def path_name(path: Sequence) -> str:
  """Turns a pytree key path into "encoder/blocks/0/mixer/decay_base" (Variable `.value` dropped)."""
  parts = []
  for key in path:
    if isinstance(key, jax.tree_util.DictKey):
      parts.append(str(key.key))
    elif isinstance(key, jax.tree_util.SequenceKey):
      parts.append(str(key.idx))
    elif isinstance(key, jax.tree_util.GetAttrKey) and key.name != "value":
      parts.append(key.name)
    elif isinstance(key, jax.tree_util.FlattenedIndexKey):
      parts.append(str(key.key))
  return "/".join(parts)


def group_of(name: str, param_groups: Sequence[tuple[str, str]]) -> str:
  """The group of one parameter path: the first matching regex's group, else "default"."""
  for pattern, group in param_groups:
    if re.search(pattern, name):
      return group
  return "default"


def check_param_groups(param_groups: Sequence[tuple[str, str]]) -> None:
  """Raises ValueError for a malformed table (bad regex or unknown group), naming the entry."""
  for entry in param_groups:
    if len(entry) != 2:
      raise ConfigError(f"param_groups entry {entry!r} must be (regex, group)")
    pattern, group = entry
    if group not in GROUPS:
      raise ConfigError(f"param_groups entry {entry!r}: group {group!r} is not one of {GROUPS}")
    try:
      re.compile(pattern)
    except re.error as error:
      raise ConfigError(f"param_groups entry {entry!r}: bad regex ({error})") from None


def label_params(params, param_groups: Sequence[tuple[str, str]]):
  """A pytree like `params` holding each parameter's group name."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: group_of(path_name(path), param_groups), params)


def group_table(params, param_groups: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
  """{group: [parameter paths]} for logging and tests."""
  table: dict[str, list[str]] = {g: [] for g in GROUPS}
  for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
    name = path_name(path)
    table[group_of(name, param_groups)].append(name)
  return table


def learning_rate_schedule(peak: float, total_steps: int, warmup_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to `peak` over `warmup_steps`, then cosine to 0 at `total_steps`."""
  warmup_steps = min(max(warmup_steps, 0), max(total_steps - 1, 0))
  if warmup_steps == 0:
    return optax.cosine_decay_schedule(peak, max(total_steps, 1))
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=peak, warmup_steps=warmup_steps,
      decay_steps=max(total_steps, warmup_steps + 1), end_value=0.0)


def make_optimizer(config, total_steps: int, steps_per_epoch: int) -> optax.GradientTransformation:
  """Builds the optimizer described by `config` (fields in `configs/common.py`).

  Args:
    config: learning_rate, decay_learning_rate, warmup_epochs, weight_decay, b1, b2,
      grad_clip_norm, param_groups.
    total_steps: length of the cosine schedule.
    steps_per_epoch: converts warmup_epochs into steps.

  Returns:
    An optax transformation whose `init`/`update` take the model's `nnx.Param` state.
  """
  param_groups = [tuple(entry) for entry in config.param_groups]
  check_param_groups(param_groups)
  warmup_steps = int(round(config.warmup_epochs * steps_per_epoch))
  decay_lr = config.decay_learning_rate or config.learning_rate

  def adamw(peak, weight_decay):
    schedule = learning_rate_schedule(peak, total_steps, warmup_steps)
    return optax.adamw(schedule, b1=config.b1, b2=config.b2, weight_decay=weight_decay)

  tx = optax.multi_transform(
      {"default": adamw(config.learning_rate, config.weight_decay),
       "no_weight_decay": adamw(config.learning_rate, 0.0),
       "decay": adamw(decay_lr, 0.0),
       "decay_weight_decay": adamw(decay_lr, config.weight_decay)},
      lambda params: label_params(params, param_groups))
  if config.grad_clip_norm > 0:
    tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
  return tx
