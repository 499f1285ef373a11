"""`LionMixer`: the LION sequence mixer (the attention block replacement) in Flax NNX.

    q = φ(x W_q),  k = φ(x W_k),  v = x W_v      per head          (paper App. D.2)
    λ per head or per value channel, fixed or per token            (`lion_jax.ops.decay`)
    y = lion_attention(q, k, v, log λ) W_o                          (paper eq. 16, App. C.7)
    (directional_readout: y = W_F y^F + W_B y^B, the output's left and right halves)
    (decay_phase: complex decays λ e^{iθ}, y = W_o [Re h, Im h], `lion_jax.ops.rotation`)
    (scan_order="snake"/"snake_outputs": `grid_lion_attention` with one log λ per snake, LION♮)

The module owns parameters and wiring only; the maths is in `lion_jax.ops.attention` (the five
forms) and `lion_jax.ops.decay` (decay parameterisations). The same parameters run in every
form: pass `form=` (and `chunk_size=`) to `__call__` to switch at inference without touching
weights.

Parameter names (for optimiser partitions; every decay parameter has "decay" in its path):
  q_proj/kernel, k_proj/kernel, v_proj/kernel     [M, H·K], [M, H·K], [M, H·V] (no biases; W_v
                                                   [M, 2·H·V] with complex_input: each head's V
                                                   real parts, then its V imaginary parts; no
                                                   W_q, W_k with feature_map="constant")
  decay_base                                       [H, G] base decay ρ (log λ = −e^ρ) or a (λ = σ(a));
                                                   absent for decay="lit". The HiPPO/Δ part: no WD.
  decay_gate/kernel, decay_gate/bias               [M, H·G], [H·G] selective gate (decay="selective")
  decay_gate                                       [H, G] LION-D's gate logit b, log λ = B + log σ(b)
                                                   (decay="fixed" with fixed_gate)
  decay_phase                                      [H, G] θ, each decay channel's rotation per
                                                   token (decay_phase="hippo"), or its Im Λ
                                                   (decay_phase="s5", θ = Im Λ·Δ); no WD
  column_decay_base, column_decay_gate/...         the column snake's own decay_base and decay_gate
                                                   (scan_order="snake"/"snake_outputs", LION♮;
                                                   decay_base/decay_gate then belong to the row snake)
  out_proj/kernel, out_proj/bias                   [H·V, M], [M] (output_proj=True); [2·H·V, M]
                                                   with directional_readout: W_F's rows, then W_B's;
                                                   each head's V rows twice with decay_phase (Re
                                                   parts, then Im parts)
  feedthrough                                      [M] S5's D, y += D ⊙ x (feedthrough=True)
Shapes: B batch, L length, M = d_model, H heads, K key dim, V = A / H value dim (A = attention_dim,
by default M), G decay channels.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lion_jax.ops import decay as decay_lib
from lion_jax.ops.attention import lion_attention, resolve_residuals
from lion_jax.ops.barrier import gradient_barrier
from lion_jax.ops.rotation import rotating_lion_attention
from lion_jax.config import ModelConfig
from lion_jax.options import describe
from lion_jax.ops.grid_order import grid_lion_attention, num_scans


def feature_map(x, name: str):
  """φ applied to queries or keys, per head (docs/math.md §1).

  Args:
    x: [..., K] projected queries or keys of one head.
    name: "silu_norm" ((SiLU(x) + 0.5)/‖·‖₂, positive: the official release's form, not the
      paper's SiLU(x + 0.5)/‖·‖, see docs/paper_notes.md), "elu1" (ELU(x) + 1), "sigmoid",
      "relu", "identity" or "constant" (1/√K whatever x is, so every q·k is 1 and the mixing
      weights are the mask alone: the content-blind control of docs/paper_notes.md §20).

  Returns:
    [..., K] features.
  """
  if name == "silu_norm":
    # SiLU(x) + 0.5 ≥ 0.2215 > 0, so the norm never vanishes and q·k ∈ (0, 1].
    y = jax.nn.silu(x) + 0.5
    return y * jax.lax.rsqrt(jnp.sum(y * y, axis=-1, keepdims=True))
  if name == "elu1":
    return jax.nn.elu(x) + 1.0
  if name == "sigmoid":
    return jax.nn.sigmoid(x)
  if name == "relu":
    return jax.nn.relu(x)
  if name == "identity":
    return x
  if name == "constant":
    return jnp.full_like(x, x.shape[-1] ** -0.5)
  raise ValueError(f"feature_map={name!r} is not one of {describe('feature_map')}.")


class LionMixer(nnx.Module):
  """LION-LIT / LION-D / LION-S mixer over [B, L, M] sequences (module docstring for parameters).

  Where its defaults (φ, the selective form, the ZOH W_v init, the base decay) read or depart
  from the paper, and why: docs/paper_notes.md.

  Args:
    config: the model configuration (d_model, num_heads, decay, feature_map, inits, ...).
    rngs: parameter initialisation randomness.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.config = config
    m, h, k, v = config.d_model, config.num_heads, config.qk_dim, config.head_dim
    self.groups = v if config.decay_shape == "vector" else 1  # G
    qk_init = nnx.initializers.normal(config.qk_init_std)
    dtype = config.compute_dtype
    if config.feature_map == "constant":
      # Every q·k is 1 whatever W_q and W_k are, so the mixer has neither. It still draws their
      # keys, so that every other parameter starts as it does with learnt features (and as in
      # the runs recorded before the projections were dropped).
      rngs.params(), rngs.params()
      self.q_proj = self.k_proj = None
    else:
      self.q_proj = nnx.Linear(m, h * k, use_bias=False, kernel_init=qk_init, dtype=dtype,
                               rngs=rngs)
      self.k_proj = nnx.Linear(m, h * k, use_bias=False, kernel_init=qk_init, dtype=dtype,
                               rngs=rngs)
    inputs = 2 if config.complex_input else 1  # real parts, then imaginary parts
    self.v_proj = nnx.Linear(m, inputs * h * v, use_bias=False, dtype=dtype, rngs=rngs)

    # LIT has no decay; its ZOH W_v init still uses HiPPO gains (Λ = −½, Δ log-uniform).
    init = config.decay_init if config.decay != "lit" else "hippo"
    log_lambda, gain = decay_lib.init_log_decay(rngs.params(), h, self.groups, init,
                                                config.dt_min, config.dt_max)  # [H, G] each
    self.decay_base, self.decay_gate = _decay_parameters(config, self.groups, log_lambda, rngs)
    phases = {"hippo": lambda: decay_lib.hippo_phase(log_lambda),  # θ itself
              "s5": lambda: decay_lib.hippo_frequency(log_lambda.shape)}  # Im Λ
    self.decay_phase = (nnx.Param(phases[config.decay_phase]()) if config.decay_phase in phases
                        else None)  # [H, G]
    # LION♮ (`lion_jax.ops.grid_order`): the column snake gets its own decays, drawn the same way.
    column = None, None
    if num_scans(config.scan_order) == 2:
      column_log_lambda, _ = decay_lib.init_log_decay(rngs.params(), h, self.groups, init,
                                                      config.dt_min, config.dt_max)  # [H, G]
      column = _decay_parameters(config, self.groups, column_log_lambda, rngs)
    self.column_decay_base, self.column_decay_gate = column

    # W_v (docs/math.md §5, §5.1): the identity, or ZOH gains γ on the diagonal (scalar decays
    # share γ over a head). Both need M = H·V, which the config checks (attention_dim).
    gain = jnp.broadcast_to(gain, (h, v)).reshape(h * v)  # [H·V]
    if config.v_init == "identity":
      self.v_proj.kernel[...] = jnp.eye(m, dtype=self.v_proj.kernel.dtype)
    elif config.v_init == "zoh_diag":
      self.v_proj.kernel[...] = jnp.diag(gain)
    elif config.v_init == "zoh_lecun":
      self.v_proj.kernel[...] = self.v_proj.kernel[...] * gain[None, :]  # diag(γ) on the state side
    read_outs = 2 if config.directional_readout else 1  # W_o, or W_F and W_B stacked
    parts = 2 if self.decay_phase is not None else 1  # Re and Im of a complex state
    scale = config.out_proj_init_scale  # 1: nnx.Linear's own LeCun-normal, drawn as before
    out_init = ({} if scale == 1.0 else dict(kernel_init=nnx.initializers.variance_scaling(
        scale ** 2, "fan_in", "truncated_normal")))
    self.out_proj = (nnx.Linear(read_outs * parts * h * v, m, dtype=dtype, rngs=rngs, **out_init)
                     if config.output_proj else None)
    self.feedthrough = (nnx.Param(jax.random.normal(rngs.params(), (m,)))
                        if config.feedthrough else None)

  def phase(self):
    """θ, each decay channel's rotation per token: [H, G] (decay_phase other than "none")."""
    if self.config.decay_phase == "s5":
      base = decay_lib.base_log_decay(self.decay_base[...], self.config.decay_param)  # [H, G]
      return decay_lib.step_phase(self.decay_phase[...], base)
    return self.decay_phase[...]

  def log_decay(self, x):
    """log λ in the shape `lion_attention` takes, or None for LION-LIT.

    Args:
      x: [B, L, M] the mixer input (used by selective decays only).

    Returns:
      None, [H] or [H, V] (fixed), or [B, L, H] or [B, L, H, V] (selective).
    """
    return self._log_decay(self.decay_base, self.decay_gate, x)

  def scan_log_decays(self, x):
    """One log-decay per scan of `config.scan_order` (`grid_lion_attention`'s `log_decays`).

    Args:
      x: [B, L, M] the mixer input.

    Returns:
      (log_decay(x),) for "raster"; (row snake's, column snake's) for the snake orders, each in
      a shape `log_decay` returns.
    """
    parameters = ((self.decay_base, self.decay_gate),
                  (self.column_decay_base, self.column_decay_gate))
    return tuple(self._log_decay(base, gate, x)
                 for base, gate in parameters[:num_scans(self.config.scan_order)])

  def _log_decay(self, decay_base, decay_gate, x):
    """`log_decay` from one set of decay parameters."""
    config = self.config
    if config.decay == "lit":
      return None
    base = decay_lib.base_log_decay(decay_base[...], config.decay_param)  # [H, G]
    if config.decay == "selective":
      batch, length, _ = x.shape
      logits = decay_gate(x).reshape(batch, length, config.num_heads, self.groups)  # [B, L, H, G]
      # The gate is a plain parameter in the graph: gradients reach W (unlike the official
      # image code, which detaches it; docs/math.md §5).
      logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))  # bf16 -> f32, f64 stays
      gate = decay_lib.selective_log_decay
      if resolve_residuals(config.residuals, length) == "recomputed":
        gate = jax.checkpoint(gate, static_argnums=(2,))  # keeps the logits only
      out = gate(base, logits, config.selective_mode)
    elif decay_gate is not None:  # LION-D's gate: the log_additive form with z = b, no input
      out = decay_lib.selective_log_decay(base, decay_gate[...], "log_additive")  # [H, G]
    else:
      out = base
    return out[..., 0] if self.groups == 1 else out

  def __call__(self, x, mask=None, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None):
    """Mixes a batch of sequences.

    Args:
      x: [B, L, M] inputs (normalised by the enclosing block).
      mask: optional [B, L] bool, False at padding: padded keys enter no sum.
      form: evaluation form of `lion_attention`; None uses `config.form`.
      chunk_size: chunk length for "chunk"/"chunk_scan"; None uses `config.chunk_size`.
      segment_ids: optional [B, L] integers of packed rows (`lion_jax.ops.segments`): each
        example sees only its own keys. Not with LION♮'s snake orders.

    Returns:
      [B, L, M] outputs (values at padded positions are meaningless but finite).
    """
    config = self.config
    batch, length, _ = x.shape
    h, k, v = config.num_heads, config.qk_dim, config.head_dim
    phi = feature_map
    if resolve_residuals(config.residuals, length) == "recomputed":
      # The attention keeps only its inputs; φ's and the gate's intermediates are recomputed
      # too (elementwise), so that the layer keeps its projections' outputs and nothing else.
      phi = jax.checkpoint(feature_map, static_argnums=(1,))
    # The barrier keeps each projection's gradient (from the chunk kernel's heads-first layout,
    # through φ) one array on XLA:CPU instead of a transposing fusion per weight gradient.
    project = lambda proj, width: gradient_barrier(proj(x)).reshape(batch, length, h, width)
    value = project(self.v_proj, v * (2 if config.complex_input else 1))  # [B, L, H, V or 2V]
    if self.q_proj is None:
      # q·k = 1 with one feature a head: the state carries one copy of each value's decayed
      # sum, where K features of 1/√K each would carry K equal copies.
      q = key = jnp.ones((batch, length, h, 1), value.dtype)  # [B, L, H, 1]
    else:
      q = phi(project(self.q_proj, k), config.feature_map)  # [B, L, H, K]
      key = phi(project(self.k_proj, k), config.feature_map)  # [B, L, H, K]
    log_decays = self.scan_log_decays(x)
    if config.value_gain != "none":
      gain = _key_gain(log_decays[0], value.shape[:-1] + (v,))  # [B, L, H, V]-broadcastable
      scale = VALUE_GAIN_SCALES[config.value_gain]
      gain = gain if scale == 1.0 else scale * gain
      value = value * (jnp.concatenate([gain, gain], axis=-1) if config.complex_input else gain)
    options = dict(form=config.form if form is None else form, convention=config.convention,
                   normalize=config.normalize, key_mask=mask,
                   chunk_size=config.chunk_size if chunk_size is None else chunk_size,
                   eps=config.eps, sequence_axis=config.sequence_axis,
                   state_pass=config.state_pass, residuals=config.residuals,
                   segment_ids=segment_ids)
    if self.decay_phase is not None:  # [B, L, H, 2V]: Re h, Im h per head (a pair: y^F, y^B)
      imag = None
      if config.complex_input:
        value, imag = jnp.split(value, 2, axis=-1)  # [B, L, H, V] each
      y = rotating_lion_attention(q, key, value, log_decays[0], self.phase(),
                                  v_imag=imag, split_directions=config.directional_readout,
                                  **options)
      if config.directional_readout:
        y = jnp.concatenate([half.reshape(batch, length, -1) for half in y], axis=-1)
    elif config.directional_readout:  # raster order (config check): y^F and y^B side by side
      halves = lion_attention(q, key, value, log_decays[0], split_directions=True, **options)
      y = jnp.concatenate([half.reshape(batch, length, h * v) for half in halves], axis=-1)
    else:
      y = grid_lion_attention(q, key, value, log_decays, grid=config.grid,
                              scan_order=config.scan_order,
                              **options)  # [B, L, H, V]; lion_attention for scan_order="raster"
    y = y.reshape(batch, length, -1)  # [B, L, A], [B, L, 2A]: y^F's heads, then y^B's (2A, 4A:
    # each head's Re h, then its Im h, with decay_phase)
    y = self.out_proj(y) if self.out_proj is not None else y
    if self.feedthrough is not None:
      y = y + self.feedthrough[...].astype(y.dtype) * x
    return y


# `value_gain` -> c in v_j ← c(1 − λ_j) ⊙ v_j. S5 with real decays starts at c = 4: its ZOH gain
# (Λ̄ − 1)/Λ is 2(1 − λ̄) at HiPPO-N's Λ = −½, and it reads its states out as 2·Re(C̃x).
VALUE_GAIN_SCALES = {"one_minus_decay": 1.0, "s5_zoh": 4.0}


def _key_gain(log_decay, value_shape):
  """1 − λ_j for each key and value channel (`value_gain` other than "none").

  Args:
    log_decay: [H], [H, V], [B, L, H] or [B, L, H, V] as `LionMixer.log_decay` returns.
    value_shape: (B, L, H, V).

  Returns:
    [B, L, H, V]-broadcastable gains in (0, 1], as the values' dtype allows.
  """
  if log_decay.ndim in (1, 3):  # scalar decays: one per head, shared by its channels
    log_decay = log_decay[..., None]
  return jnp.broadcast_to(-jnp.expm1(log_decay), value_shape)


def _decay_parameters(config: ModelConfig, groups: int, log_lambda, rngs: nnx.Rngs):
  """One set of decay parameters: the base decay and the selective gate (None where unused).

  Args:
    config: the model configuration (decay, decay_param, selective_* fields, d_model, num_heads).
    groups: G, decay channels per head.
    log_lambda: [H, G] the base log-decays at init.
    rngs: parameter randomness (the gate's kernel).

  Returns:
    (base, gate): an nnx.Param [H, G] or None (LIT), and the gate: an nnx.Linear M → H·G
    (selective), an nnx.Param [H, G] of logits (fixed with `fixed_gate`) or None.
  """
  base = (None if config.decay == "lit" else
          nnx.Param(decay_lib.to_param(log_lambda, config.decay_param)))
  fixed_gate = config.decay == "fixed" and config.fixed_gate
  if config.decay != "selective" and not fixed_gate:
    return base, None
  bias = config.selective_bias_init
  if bias is None:  # LION-D's gate is the log_additive form whatever selective_mode says
    bias = decay_lib.DEFAULT_SELECTIVE_BIAS["log_additive" if fixed_gate else config.selective_mode]
  if fixed_gate:
    return base, nnx.Param(jnp.full(log_lambda.shape, bias, jnp.float32))
  gate = nnx.Linear(
      config.d_model, config.num_heads * groups,
      kernel_init=nnx.initializers.normal(config.selective_init_std),
      bias_init=nnx.initializers.constant(bias), rngs=rngs)
  return base, gate
