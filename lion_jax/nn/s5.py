"""S5: a bidirectional diagonal complex state-space mixer (Smith, Warrington & Linderman, ICLR 2023).

The S5 baseline of the LION paper's Table 7, set up as S5's LRA release configures it:

  * A = HiPPO-N (the normal part of HiPPO-LegS) of size P/J, diagonalised, A = V Λ V⁻¹, and
    repeated in J blocks on the diagonal; with conjugate symmetry only the half of the
    eigenvalues with one sign of the imaginary part is kept: P/2 complex states, read out as 2·Re;
  * learnt Λ (real and imaginary parts), B̃ = V⁻¹B with B lecun-normal of shape [P, M],
    C̃ = C V with a complex C per direction (`C_INITS`), D ~ N(0, 1);
  * one learnt log Δ per state (or one per layer), drawn uniformly in [log Δ_min, log Δ_max];
  * zero-order hold: Λ̄ = exp(ΛΔ), B̄ = (Λ̄ − 1)/Λ · B̃;
  * x_t = Λ̄ ⊙ x_{t−1} + B̄ u_t forward, and the same from the end backward (both include the
    current token), y_t = 2·Re(C̃_fwd x^fwd_t + C̃_bwd x^bwd_t) + D ⊙ u_t.

Padding: the inputs at padded positions are zeroed before B̄, so the backward scan starts at the
last real token with a zero state and a real example's outputs do not depend on the padding.

Packed rows (`segment_ids`, `lion_jax.ops.segments`): both scans restart at every run of one id. The
forward scan drops the carried state at a run's first token (x_t = B̄u_t there) and the backward
scan at a run's last token, so no state crosses from one example, or padding run, to the next.

Shapes: B batch, L length, M = d_model, N = P/2 (conjugate symmetry) or P complex states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lion_jax.ops import segments
from lion_jax.ops.decay import hippo_n
from lion_jax.config import ModelConfig


def block_hippo(ssm_size: int, blocks: int, conj_sym: bool = True):
  """The block-diagonal HiPPO-N initialisation of S5 (J blocks of size P/J).

  Args:
    ssm_size: P, the state size before conjugate symmetry halves it.
    blocks: J; P must be divisible by J (and P/J even with `conj_sym`).
    conj_sym: keep half of each block's eigenvalues (the conjugate pairs' other halves).

  Returns:
    (Λ [N] complex, V [P, N] complex): eigenvalues and the block-diagonal eigenvector matrix.
  """
  block = ssm_size // blocks
  lam, v = hippo_n(block)
  keep = block // 2 if conj_sym else block
  return np.tile(lam[:keep], blocks), np.kron(np.eye(blocks), v[:, :keep])


def zoh(lambda_, log_step, b_tilde):
  """Zero-order hold discretisation.

  Args:
    lambda_: [N] complex continuous eigenvalues Λ.
    log_step: [N] (or [1], one Δ for all states) real log Δ.
    b_tilde: [N, M] complex input matrix B̃.

  Returns:
    (Λ̄ [N], B̄ [N, M]) complex: Λ̄ = exp(ΛΔ), B̄ = (Λ̄ − 1)/Λ · B̃.
  """
  lambda_bar = jnp.exp(lambda_ * jnp.exp(log_step))
  return lambda_bar, ((lambda_bar - 1.0) / lambda_)[:, None] * b_tilde


def _combine(left, right):
  """Composes x ↦ a_l x + b_l then x ↦ a_r x + b_r (the associative scan's operator)."""
  a_left, b_left = left
  a_right, b_right = right
  return a_right * a_left, a_right * b_left + b_right


def linear_recurrence(lambda_bar, bu, *, reverse: bool = False, method: str = "associative",
                      resets=None):
  """x_t = Λ̄ ⊙ x_{t−1} + bu_t along axis 1 from x = 0 (from the end when `reverse`).

  Args:
    lambda_bar: [N] complex discrete eigenvalues.
    bu: [B, L, N] complex inputs B̄u_t.
    reverse: run right to left, x_t = Λ̄ ⊙ x_{t+1} + bu_t.
    method: "associative" (`lax.associative_scan`, S5's choice) or "linear" (`lax.scan`).
    resets: optional [B, L] bool, True where the carried state is dropped: x_t = bu_t, as if the
      sequence began at t (ended at t when `reverse`).

  Returns:
    [B, L, N] complex states.
  """
  if resets is None:
    multipliers = lambda_bar  # [N], the same at every step
  else:
    # A zero multiplier is an exact restart: every composition across t carries a factor 0.
    multipliers = jnp.where(resets[..., None], 0, lambda_bar)  # [B, L, N]
  if method == "associative":
    elements = (jnp.broadcast_to(multipliers, bu.shape), bu)  # [B, L, N] each
    _, states = jax.lax.associative_scan(_combine, elements, reverse=reverse, axis=1)
    return states
  if method == "linear":
    zeros = jnp.zeros((bu.shape[0], bu.shape[2]), bu.dtype)  # [B, N]
    if resets is None:  # Λ̄ is the same at every step: carry no [B, L, N] multipliers
      def step(x, b_t):
        x = lambda_bar * x + b_t
        return x, x
      _, states = jax.lax.scan(step, zeros, jnp.moveaxis(bu, 1, 0), reverse=reverse)
    else:
      def step(x, a_b):
        x = a_b[0] * x + a_b[1]
        return x, x
      _, states = jax.lax.scan(step, zeros, (jnp.moveaxis(multipliers, 1, 0),
                                             jnp.moveaxis(bu, 1, 0)), reverse=reverse)
    return jnp.moveaxis(states, 0, 1)
  raise ValueError(f"ssm_scan={method!r} is not 'associative' or 'linear'.")


def bidirectional_ssm(u, lambda_bar, b_bar, c_tilde, d, *, mask=None, segment_ids=None,
                      conj_sym: bool = True, method: str = "associative"):
  """The bidirectional S5 SSM.

  Args:
    u: [B, L, M] real inputs.
    lambda_bar: [N] complex discrete eigenvalues.
    b_bar: [N, M] complex discrete input matrix.
    c_tilde: [M, 2N] complex read-out, forward states' columns first.
    d: [M] real feed-through.
    mask: optional [B, L] bool, False at padding: padded inputs enter no state.
    segment_ids: optional [B, L] integer ids of a packed row (`lion_jax.ops.segments`): both scans
      restart at every run of one id, and id 0 is padding as where `mask` is False.
    conj_sym: the states stand for conjugate pairs: read out 2·Re.
    method: `linear_recurrence`'s method.

  Returns:
    [B, L, M] outputs (at padded positions: D ⊙ u plus the states carried past the end; zero
    with `segment_ids`, where padding runs restart too).
  """
  forward_resets = backward_resets = None
  if segment_ids is not None:
    real = segment_ids > 0  # [B, L]
    mask = real if mask is None else mask & real
    forward_resets = segments.segment_starts(segment_ids)  # [B, L]
    backward_resets = segments.segment_ends(segment_ids)  # [B, L]
  if mask is not None:
    u = u * mask[..., None].astype(u.dtype)
  complex_dtype = jnp.result_type(u.dtype, jnp.complex64)
  bu = jnp.einsum("blm,nm->bln", u.astype(complex_dtype), b_bar.astype(complex_dtype))  # [B, L, N]
  forward = linear_recurrence(lambda_bar, bu, method=method, resets=forward_resets)  # [B, L, N]
  backward = linear_recurrence(lambda_bar, bu, reverse=True, method=method,
                               resets=backward_resets)  # [B, L, N]
  states = jnp.concatenate([forward, backward], axis=-1)  # [B, L, 2N]
  y = jnp.einsum("bln,mn->blm", states, c_tilde.astype(complex_dtype)).real  # [B, L, M]
  return (2.0 * y if conj_sym else y) + d * u


def _per_direction_times_v(init):
  """A C init that draws C per direction as a real [M, P, 2] array by `init`, then C̃ = C V."""
  def draw(key, width: int, v):
    draws = [init(k, (width, v.shape[0], 2)) for k in jax.random.split(key)]  # [M, P, 2] each
    return jnp.concatenate([(c[..., 0] + 1j * c[..., 1]) @ v for c in draws], axis=-1)
  return draw


def _c_complex_normal(key, width: int, v):
  """C̃ drawn directly in the eigenbasis: real and imaginary parts N(0, ½)."""
  c = nnx.initializers.normal(0.5 ** 0.5)(key, (width, 2 * v.shape[1], 2))
  return c[..., 0] + 1j * c[..., 1]


# `ModelConfig.c_init` -> (key, M, V [P, N]) -> C̃ [M, 2N] complex, the two directions' read-outs
# side by side (the S5 release's C_init options).
C_INITS = {
    # lecun-normal over the whole [M, P, 2] array: fan-in P·M, std 1/√(P·M).
    "lecun_normal": _per_direction_times_v(nnx.initializers.lecun_normal()),
    # lecun-normal per row of C: fan-in P, std 1/√P.
    "trunc_standard_normal": _per_direction_times_v(nnx.initializers.variance_scaling(
        1.0, "fan_in", "truncated_normal", in_axis=1, out_axis=2, batch_axis=0)),
    "complex_normal": _c_complex_normal,
}


class S5Mixer(nnx.Module):
  """Bidirectional S5 SSM over [B, L, M] sequences, a drop-in for `LionMixer`.

  Parameter names: lambda_re, lambda_im [N] (absent with `ssm_real`); c_re, c_im are [M, N]
  with `ssm_tied_readout`; b_re, b_im [N, M]; c_re, c_im [M, 2N] (forward
  states' read-out first); d [M]; log_step [N] ([1] with `dt_global`).

  Args:
    config: the model configuration (d_model, ssm_size, ssm_blocks, conj_sym, clip_eigs, c_init,
      dt_global, ssm_scan, dt_min, dt_max).
    rngs: parameter randomness.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.config = config
    m, p = config.d_model, config.ssm_size
    lam, v = block_hippo(p, config.ssm_blocks, config.conj_sym)  # [N], [P, N]
    v = jnp.asarray(v, jnp.complex64)  # [P, N]
    b = nnx.initializers.lecun_normal()(rngs.params(), (p, m))  # [P, M] real
    b_tilde = v.conj().T @ b.astype(jnp.complex64)  # [N, M]
    c_tilde = C_INITS[config.c_init](rngs.params(), m, v)  # [M, 2N]
    if config.ssm_tied_readout:  # the forward read-out serves both directions
      c_tilde = c_tilde[:, :lam.shape[0]]  # [M, N]
    self.lambda_re = nnx.Param(jnp.asarray(lam.real, jnp.float32))
    self.lambda_im = None if config.ssm_real else nnx.Param(jnp.asarray(lam.imag, jnp.float32))
    self.b_re = nnx.Param(b_tilde.real)
    self.b_im = nnx.Param(b_tilde.imag)
    self.c_re = nnx.Param(c_tilde.real)
    self.c_im = nnx.Param(c_tilde.imag)
    self.d = nnx.Param(jax.random.normal(rngs.params(), (m,)))
    steps = 1 if config.dt_global else lam.shape[0]  # one Δ per layer, or one per state
    self.log_step = nnx.Param(jax.random.uniform(
        rngs.params(), (steps,), minval=np.log(config.dt_min), maxval=np.log(config.dt_max)))

  def eigenvalues(self):
    """Λ [N] complex; the real part clipped to ≤ −10⁻⁴ with `clip_eigs` (stable for any L)."""
    lambda_re = self.lambda_re[...]
    if self.config.clip_eigs:
      lambda_re = jnp.minimum(lambda_re, -1e-4)
    if self.lambda_im is None:  # ssm_real: decays that never turn
      return jax.lax.complex(lambda_re, jnp.zeros_like(lambda_re))
    return lambda_re + 1j * self.lambda_im[...]

  def discretize(self):
    """(Λ̄ [N], B̄ [N, M]) complex, by zero-order hold."""
    return zoh(self.eigenvalues(), self.log_step[...], self.b_re[...] + 1j * self.b_im[...])

  def __call__(self, x, mask=None, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None):
    """Mixes [B, L, M] → [B, L, M]; `mask` [B, L] bool is False at padding.

    `form` and `chunk_size` pick LION's evaluation form; S5 has one, so only None or the config's
    own `form` are accepted (the trainer passes the latter). `segment_ids` [B, L] integer packs
    several examples in a row (`lion_jax.ops.segments`): each example's outputs are its own alone.
    """
    self.config.check_single_form(form, chunk_size)
    if segment_ids is not None:
      segments.check_segment_ids(segment_ids, x.shape[0], x.shape[1])
    lambda_bar, b_bar = self.discretize()
    c_tilde = self.c_re[...] + 1j * self.c_im[...]
    if self.config.ssm_tied_readout:
      c_tilde = jnp.concatenate([c_tilde, c_tilde], axis=-1)  # [M, 2N]
    compute = jnp.promote_types(x.dtype, jnp.float32)  # bf16 → f32; f64 stays
    y = bidirectional_ssm(x.astype(compute), lambda_bar, b_bar, c_tilde, self.d[...],
                          mask=mask, segment_ids=segment_ids, conj_sym=self.config.conj_sym,
                          method=self.config.ssm_scan)
    return y.astype(x.dtype)

