"""Complex decays λ e^{iθ}: LION's plain decayed sum with a rotation per token, in every form.

S5 decays each state by a complex eigenvalue λ̄ = e^{ΛΔ}: a modulus and a rotation θ = Im(Λ)Δ per
token. With one rotation per decay channel, input-independent, the mask of a plain decayed sum
(normalize="none") becomes

    M^θ_ij = M_ij e^{iθ|i−j|}                                       (the same λ e^{iθ} per step
                                                                     in both directions, as S5's
                                                                     bidirectional scans)

and the output is complex, h_i = Σ_j (q_i·k_j) M_ij e^{iθ|i−j|} v_j (v_j itself complex with
`v_imag`). The phase factorises, like rotary position embeddings: for the keys left of the query
e^{iθ(i−j)} = e^{iΘ_i} e^{−iΘ_j} with Θ_i = θ·i, and for those right of it e^{−iΘ_i} e^{+iΘ_j}.
So

    h^F_i = e^{iΘ_i} Y^F_i,   h^B_i = e^{−iΘ_i} Y^B_i,   (Y^F, Y^B) = LION(q, k, e^{−iΘ} ⊙ v;
                                                                     right half: e^{+iΘ} ⊙ v)

where Y^F, Y^B are the two halves of `lion_attention(split_directions=True)` (keys left of the
query with half of its own, and right of it), each direction run on its own rotated values
(`v_right`): their real and imaginary parts as 2V real channels, each pair sharing its decay.
So complex values cost what real ones do, 2V channels a direction. Every form of
`lion_attention` runs unchanged, so it is exact here too, with padding and packed segments: only
differences Θ_i − Θ_j enter, so where a row's examples start changes nothing. Θ_i is computed
in at least float32, whose rounding of θ·i costs about 1e-7·|Θ_i| radians (3e-4 at L = 1,024 and
θ = 3).

The recurrent forms ("rnn", "scan") need no rotation: their states take the complex gate
log λ_t + iθ directly, turned by e^{iθ} a token as S5's are (`lion_attention(phase=θ)`), so
neither the values nor the outputs are rotated and no Θ_i is formed (with the CPU's per-token
state pass, `lion_complex`'s training step went from 1.78x S5's to about 1.0x at Pathfinder
`cpu_order` on a 2-core CPU, docs/math.md §4.7).

A row normaliser Σ_j (q_i·k_j) M^θ_ij would be complex, so only normalize="none" is defined.

Shapes: B batch, L length, H heads, K key dim, V value dim, G decay channels per head (1 or V).
"""

from __future__ import annotations

import jax.numpy as jnp

from lion_jax.ops.attention import LionForm, lion_attention, resolve_form


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
  im = jnp.zeros_like(v) if v_imag is None else v_imag
  form = resolve_form(options.get("form", "auto"), length, options.get("chunk_size", 64))
  if form in (LionForm.RNN, LionForm.SCAN):
    # The recurrences turn their states by e^{iθ} a token: no rotated values, no Θ_i.
    return lion_attention(q, k, jnp.concatenate([v, im], axis=-1), log_decay, normalize="none",
                          split_directions=split_directions, phase=phase, **options)
  dtype = jnp.promote_types(v.dtype, jnp.float32)
  angle = jnp.arange(length, dtype=dtype)[:, None, None] * phase.astype(dtype)  # [L, H, G]
  cos, sin = jnp.cos(angle), jnp.sin(angle)  # [L, H, G], broadcast over [B, L, H, V]

  def rotate(re, im, sign):
    """e^{sign·iΘ} (re + i·im) as (real part, imaginary part), per token and channel."""
    return cos * re - sign * sin * im, cos * im + sign * sin * re

  def turned(pair, sign):
    """[B, L, H, 2V] e^{sign·iΘ} (Re ‖ Im) of a [B, L, H, 2V] pair, in the dtype of `v`."""
    return jnp.concatenate(rotate(pair[..., :value_dim], pair[..., value_dim:], sign),
                           axis=-1).astype(v.dtype)

  values = jnp.concatenate([v, im], axis=-1).astype(dtype)  # [B, L, H, 2V]
  # Keys left of the query need e^{−iΘ_j} v_j, those right of it e^{+iΘ_j} v_j: each direction
  # of the kernel carries only its own pair.
  left, right = turned(values, -1.0), turned(values, 1.0)  # [B, L, H, 2V] each
  if log_decay is not None and jnp.ndim(log_decay) in (2, 4):  # per value channel: Re, Im share it
    log_decay = jnp.concatenate([log_decay] * 2, axis=-1)  # [H, 2V] or [B, L, H, 2V]
  halves = lion_attention(q, k, left, log_decay, normalize="none", split_directions=True,
                          v_right=right, **options)  # ([B, L, H, 2V], [B, L, H, 2V])
  forward = turned(halves[0].astype(dtype), 1.0)  # [B, L, H, 2V] e^{iΘ_i} Y^F_i
  backward = turned(halves[1].astype(dtype), -1.0)  # [B, L, H, 2V] e^{−iΘ_i} Y^B_i
  return (forward, backward) if split_directions else forward + backward
