"""The valid values of every string option of `lion_jax`, in one table.

`ModelConfig` validates its fields against `CHOICES`; `lion_attention`, the masks, the feature maps
and the decay functions check their own arguments with `check_choice`, and the enums of
`lion_jax.ops.attention` and `lion_jax.ops.masks` are built from the same tuples. A new option
value is added here once (and implemented where it is used); every error message then lists
it.
"""

from __future__ import annotations

import enum


class ConfigError(ValueError):
  """An option or config value the user chose is not valid.

  The message is complete on its own: it names the field, the value and what is valid, so a
  command line prints it alone, without a traceback (`lra.cli`).
  """

# Allowed values of every string option (the first one is `ModelConfig`'s default unless the field
# says otherwise). Keys are the `ModelConfig` field names, which are also the argument names.
CHOICES: dict[str, tuple[str, ...]] = {
    "mixer": ("lion", "s5", "softmax", "identity"),
    "block": ("s5", "transformer"),
    "norm": ("batch", "layer"),
    "activation": ("half_glu1", "half_glu2", "full_glu", "gelu"),
    "encoder": ("embed", "dense"),
    "positional": ("auto", "none", "sinusoidal"),
    "feature_map": ("silu_norm", "elu1", "sigmoid", "relu", "identity", "constant"),
    # What multiplies each key's value before mixing (`LionMixer`): nothing, 1 − λ_j (the
    # S5/Mamba input gain that keeps an unnormalised decayed sum bounded), or 4(1 − λ_j), the gain
    # S5 with real decays starts with (`VALUE_GAIN_SCALES` in lion_jax.nn.mixer).
    "value_gain": ("none", "one_minus_decay", "s5_zoh"),
    "decay": ("lit", "fixed", "selective"),
    # A rotation per token beside each decay, λ e^{iθ} as S5's complex eigenvalues
    # (`lion_jax.ops.rotation`): none; θ learnt directly from HiPPO-N's Im Λ·Δ
    # (`decay.hippo_phase`); or θ = Im Λ·Δ with Im Λ learnt and Δ the base decay's step, as S5
    # (`decay.step_phase`).
    "decay_phase": ("none", "hippo", "s5"),
    "decay_shape": ("scalar", "vector"),
    "decay_param": ("neg_exp", "sigmoid"),
    "selective_mode": ("sigmoid_dt", "softplus_dt", "log_additive", "paper_literal"),
    "decay_init": ("hippo", "hippo_modulus", "s4d_real", "random"),
    "v_init": ("identity", "zoh_diag", "zoh_lecun", "lecun"),
    "normalize": ("after", "before", "none"),
    "convention": ("symmetric", "code"),
    "form": ("auto", "attention", "rnn", "scan", "chunk", "chunk_scan"),
    "dtype": ("float32", "bfloat16", "float64"),
    "scan_order": ("raster", "snake", "snake_outputs"),
    "ssm_scan": ("associative", "linear"),
    "c_init": ("lecun_normal", "trunc_standard_normal", "complex_normal"),
    # How `chunk_scan` passes states between chunks (`chunkwise.resolve_state_pass`).
    "state_pass": ("auto", "scan", "associative"),
    # What `chunk_scan` keeps for its backward pass (`lion_jax.ops.recomputed`,
    # `resolve_residuals`).
    "residuals": ("auto", "stored", "recomputed"),
}


def describe(option: str) -> str:
  """The valid values of `option` as they appear in error messages: 'a', 'b', 'c'."""
  return ", ".join(map(repr, CHOICES[option]))


def check_choice(option: str, value, *, where: str = "") -> str:
  """`value` as a plain string if it is a valid value of `option`.

  Args:
    option: a key of `CHOICES`, also the argument or field name shown in the error.
    value: the value passed by the caller (a string, or a member of the matching str enum).
    where: prefix of the name in messages, e.g. "ModelConfig." for a config field.

  Returns:
    The value as a str (enum members become their value).

  Raises:
    TypeError: `value` is not a string; ConfigError (a ValueError): it is not in
      `CHOICES[option]`. Both name the argument and list the valid values.
  """
  if not isinstance(value, str):
    raise TypeError(f"{where}{option} must be a string, one of {describe(option)}; got "
                    f"{type(value).__name__} {value!r}.")
  value = str.__str__(value)  # an enum member's plain value
  if value not in CHOICES[option]:
    raise ConfigError(f"{where}{option}={value!r} is not one of {describe(option)}.")
  return value


def str_enum(class_name: str, option: str, module: str, doc: str) -> type[enum.Enum]:
  """A str enum of the values of `option`: member `NAME` has value "name" (e.g. LionForm.CHUNK_SCAN
  == "chunk_scan"), so callers may pass members or plain strings.

  Args:
    class_name: the enum's name; module: its module (`__name__`), for pickling and reprs.
    option: a key of `CHOICES`.
    doc: the enum's docstring.
  """
  kind = enum.Enum(class_name, [(value.upper(), value) for value in CHOICES[option]], type=str,
                   module=module)
  kind.__doc__ = doc
  return kind
