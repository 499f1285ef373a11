"""Complex decays λ e^{iθ}: LION's plain decayed sum with a rotation per token, in every form.

S5 decays each state by a complex eigenvalue λ̄ = e^{ΛΔ}: a modulus and a rotation θ = Im(Λ)Δ per
token. With one rotation per decay channel, input-independent, the mask of a plain decayed sum
(normalize="none") becomes

    M^θ_ij = M_ij e^{iθ|i−j|}                                       (the same λ e^{iθ} per step
                                                                     in both directions, as S5's
                                                                     bidirectional scans)

and the output is complex, h_i = Σ_j (q_i·k_j) M_ij e^{iθ|i−j|} v_j (v_j itself complex with
`v_imag`). The phase factorises, like
rotary position embeddings: for the keys left of the query e^{iθ(i−j)} = e^{iΘ_i} e^{−iΘ_j}
with Θ_i = θ·i, and for those right of it the conjugate. So

    h^F_i = e^{iΘ_i}       Y^F_i,   h^B_i = conj(e^{iΘ_i} Y^B_i),   Y = LION(q, k, e^{−iΘ} ⊙ v)

where Y^F, Y^B are the two halves of `lion_attention(split_directions=True)` (keys left of the
query with half of its own, and right of it) run on the real and imaginary parts of the rotated
values as 2V real channels, each pair sharing its decay. Every form of `lion_attention` is
therefore exact here too, with padding and packed segments: only differences Θ_i − Θ_j enter,
so where a row's examples start changes nothing. Θ_i is computed in at least float32, whose
rounding of θ·i costs about 1e-7·|Θ_i| radians (3e-4 at L = 1,024 and θ = 3).

A row normaliser Σ_j (q_i·k_j) M^θ_ij would be complex, so only normalize="none" is defined.

Shapes: B batch, L length, H heads, K key dim, V value dim, G decay channels per head (1 or V).
"""

from __future__ import annotations

import jax.numpy as jnp

from lion_jax.ops.attention import lion_attention


def rotating_lion_attention(q, k, v, log_decay, phase, *, v_imag=None,
                            split_directions: bool = False, normalize: str = "none", **options):
  """LION's plain decayed sum with complex decays λ e^{iθ} (module docstring).

  Args:
    q: [B, L, H, K] feature-mapped queries.
    k: [B, L, H, K] feature-mapped keys.
    v: [B, L, H, V] values (their real parts with v_imag).
    log_decay: log λ as `lion_attention` takes it: [H], [H, V], [B, L, H] or [B, L, H, V].
    phase: [H, G] θ, the rotation per token of each decay channel (G = 1: one per head).
    v_imag: None (real values), or [B, L, H, V] their imaginary parts: complex inputs to the
      states, as S5's complex B̃ x gives them.
    split_directions: return (h^F, h^B), the keys left of each query and right of it (each with
      half of the query's own), instead of h = h^F + h^B.
    normalize: must be "none" (a complex normaliser is not defined).
    **options: the other keyword arguments of `lion_attention` (form, chunk_size, key_mask,
      segment_ids, ...); not sequence_axis.

  Returns:
    [B, L, H, 2V]: Re h in the first V channels of each head, Im h in the last V (a pair of them
    with split_directions), in the dtype of `v`.

  Raises:
    ValueError: normalize other than "none", a phase whose shape does not fit the heads or the
      value channels, or v_imag of another shape than v.
  """
  if normalize != "none":
    raise ValueError(f"rotating_lion_attention needs normalize='none' (got {normalize!r}): the "
                     "row normaliser of a complex mask would be complex.")
  batch, length, heads, value_dim = v.shape
  if phase.ndim != 2 or phase.shape[0] != heads or phase.shape[1] not in (1, value_dim):
    raise ValueError(f"phase must be [H, G] = [{heads}, 1 or {value_dim}] (one rotation per head "
                     f"or per value channel), got shape {phase.shape}.")
  if v_imag is not None and v_imag.shape != v.shape:
    raise ValueError(f"v_imag must have v's shape {v.shape} (the imaginary parts of the same "
                     f"values), got {v_imag.shape}.")
  dtype = jnp.promote_types(v.dtype, jnp.float32)
  angle = jnp.arange(length, dtype=dtype)[:, None, None] * phase.astype(dtype)  # [L, H, G]
  cos, sin = jnp.cos(angle), jnp.sin(angle)  # [L, H, G], broadcast over [B, L, H, V]

  def rotate(re, im, sign):
    """e^{sign·iΘ} (re + i·im) as (real part, imaginary part), per token and channel."""
    return cos * re - sign * sin * im, cos * im + sign * sin * re

  re = v.astype(dtype)
  # Keys left of the query need e^{−iΘ_j} v_j, those right of it e^{+iΘ_j} v_j; for real values
  # the second is the first's conjugate, so one rotated copy serves both (h^B from its conjugate).
  rotated = [rotate(re, jnp.zeros_like(re) if v_imag is None else v_imag.astype(dtype), -1.0)]
  if v_imag is not None:
    rotated.append(rotate(re, v_imag.astype(dtype), 1.0))
  channels = jnp.concatenate([part for pair in rotated for part in pair],
                             axis=-1).astype(v.dtype)  # [B, L, H, 2V or 4V]
  if log_decay is not None and jnp.ndim(log_decay) in (2, 4):  # per value channel: Re, Im share it
    log_decay = jnp.concatenate([log_decay] * (2 * len(rotated)), axis=-1)  # [.., H, 2V or 4V]
  forward, backward = lion_attention(q, k, channels, log_decay, normalize="none",
                                     split_directions=True, **options)  # [B, L, H, 2V or 4V]
  forward, backward = forward.astype(dtype), backward.astype(dtype)
  d = value_dim
  h_forward = rotate(forward[..., :d], forward[..., d:2 * d], 1.0)  # e^{iΘ_i} Y^F_i
  if v_imag is None:  # conj(e^{iΘ_i} Y^B_i)
    re_b, im_b = rotate(backward[..., :d], backward[..., d:2 * d], 1.0)
    h_backward = re_b, -im_b
  else:  # e^{−iΘ_i} Y⁺^B_i, Y⁺ the sum over the values turned the other way
    h_backward = rotate(backward[..., 2 * d:3 * d], backward[..., 3 * d:], -1.0)
  forward, backward = (jnp.concatenate(h, axis=-1).astype(v.dtype)  # [B, L, H, 2V]
                       for h in (h_forward, h_backward))
  return (forward, backward) if split_directions else forward + backward
