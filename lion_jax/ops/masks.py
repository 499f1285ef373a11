"""LION masks and decay alignment, in log space.

Shape legend (used in every `# [...]` comment of `lion_jax`):
  B batch, L sequence length, H heads, K key/query head dim, V value head dim,
  G decay channels per head (1 for scalar decays, V for per-value-channel decays),
  E value channels carried by a recurrence (V, plus the normaliser channels),
  N number of chunks, C chunk length.

Conventions (docs/math.md §1.1). Write a_t = log λ_t ≤ 0 for the per-token log-decay. Every
LION mask has a unit diagonal and is split into a lower (forward) and an upper (backward) triangle:

  lower, i > j:  M_ij = exp(Σ_{t=j+1}^{i} f_t)      upper, i < j:  M_ij = exp(Σ_{t=i+1}^{j} a_t)

where the *forward gate* f depends on the convention:
  "symmetric" (paper eq. 17): f_t = a_t, so M = Mᵀ and M_ij = Π_{t=min+1}^{max} λ_t.
  "code" (official release):  f_t = a_{t-1}, so M_ij = Π_{t=j}^{i-1} λ_t below the diagonal.
The upper triangle is the same in both. Every recurrence in `lion_jax` is written in terms of
"decay the carried state by exp(gate_t), then add token t"; the backward direction is that
same recurrence on the flipped sequence with the gate shift_right(flip(a)).
"""

from __future__ import annotations

import jax.numpy as jnp

from lion_jax.options import check_choice, str_enum

Convention = str_enum("Convention", "convention", __name__,
                      "Which λ multiplies which mask entry (docs/math.md §1.1).")


def shift_right(x: jnp.ndarray, axis: int = 1) -> jnp.ndarray:
  """Shifts `x` one place to the right along `axis`, filling with zeros.

  Args:
    x: any array.
    axis: the time axis.

  Returns:
    An array of the same shape with out[t] = x[t - 1] and out[0] = 0 (a gate that is never used:
    nothing is carried into the first step).
  """
  x = jnp.moveaxis(x, axis, 0)
  out = jnp.concatenate([jnp.zeros_like(x[:1]), x[:-1]], axis=0)
  return jnp.moveaxis(out, 0, axis)


def forward_gate(log_decay: jnp.ndarray, convention: str | Convention, axis: int = 1) -> jnp.ndarray:
  """Log-gate applied to the carried state of the forward (left-to-right) recurrence.

  Args:
    log_decay: per-token log-decays a, time along `axis`.
    convention: "symmetric" or "code".
    axis: the time axis.

  Returns:
    f with the shape of `log_decay`: a itself ("symmetric") or a shifted right by one ("code").
  """
  convention = Convention(check_choice("convention", convention))
  return log_decay if convention is Convention.SYMMETRIC else shift_right(log_decay, axis)


def backward_gate_flipped(log_decay: jnp.ndarray, axis: int = 1) -> jnp.ndarray:
  """Log-gate of the backward recurrence written in flipped time (both conventions).

  Backward: S_t = λ_{t+1} S_{t+1} + k_t v_tᵀ. In flipped time τ = L-1-t this is the forward
  recurrence with gate a_{L-τ}: flip a, then shift it right by one.

  Args:
    log_decay: per-token log-decays a, time along `axis`.
    axis: the time axis.

  Returns:
    The flipped-time gate, same shape as `log_decay`.
  """
  return shift_right(jnp.flip(log_decay, axis), axis)


def segsum(x: jnp.ndarray) -> jnp.ndarray:
  """Stable segment sums along the last axis, by additions only (docs/math.md §4.1).

  Args:
    x: [..., L] log-decays.

  Returns:
    [..., L, L] with out[..., i, j] = Σ_{r=j+1}^{i} x[..., r] for i ≥ j (0 on the diagonal) and
    -inf above the diagonal, so exp(out) is a lower-triangular decay mask with unit diagonal.
    No difference of two long cumulative sums is ever taken, so nothing cancels.
  """
  length = x.shape[-1]
  rows = jnp.arange(length)[:, None]  # r
  cols = jnp.arange(length)[None, :]  # j
  # [..., L(r), L(j)]: x_r where r > j, so the cumsum over r starts right after j.
  terms = jnp.where(rows > cols, x[..., :, None], 0.0)
  sums = jnp.cumsum(terms, axis=-2)
  return jnp.where(rows >= cols, sums, -jnp.inf)


def lion_mask(log_decay: jnp.ndarray, convention: str | Convention = "symmetric") -> jnp.ndarray:
  """The full L×L LION mask for one sequence of per-token log-decays.

  Args:
    log_decay: [..., L] log-decays a_t = log λ_t ≤ 0 (time on the last axis).
    convention: "symmetric" (paper eq. 17) or "code" (official release); see the module docstring.

  Returns:
    [..., L, L] mask M with M[..., i, j] for query i and key j; entries in (0, 1] when a ≤ 0.
  """
  return mask_from_gates(forward_gate(log_decay, convention, axis=-1), log_decay)


def mask_from_gates(forward: jnp.ndarray, log_decay: jnp.ndarray) -> jnp.ndarray:
  """The L×L LION mask from its two triangles' gates (module docstring: f and a).

  Args:
    forward: [..., L] the lower triangle's log-gates f (`forward_gate`).
    log_decay: [..., L] the upper triangle's log-gates a.

  Returns:
    [..., L, L] mask M with M[..., i, j] for query i and key j.
  """
  lower = jnp.exp(segsum(forward))  # [..., L, L] includes the unit diagonal
  upper = jnp.swapaxes(jnp.exp(segsum(log_decay)), -1, -2)  # [..., L, L] includes the unit diagonal
  return lower + upper - jnp.eye(log_decay.shape[-1], dtype=lower.dtype)


def toeplitz_mask(log_decay: jnp.ndarray, length: int) -> jnp.ndarray:
  """LION-D mask λ^|i-j| (paper eq. 85), equal to `lion_mask` of a constant sequence.

  Args:
    log_decay: [...] fixed log-decays (one per head or per channel).
    length: L.

  Returns:
    [..., L, L] with exp(|i - j| · log λ).
  """
  distance = jnp.abs(jnp.arange(length)[:, None] - jnp.arange(length)[None, :])
  return jnp.exp(distance * log_decay[..., None, None])


def per_token_log_decay(log_decay, batch: int, length: int, heads: int, value_dim: int, dtype):
  """Broadcasts any accepted decay shape to one log-decay per token, head and decay channel.

  Args:
    log_decay: None (LIT), [H] (fixed per head), [H, V] (fixed per value channel),
      [B, L, H] (selective per token) or [B, L, H, V] (selective vector).
    batch, length, heads, value_dim: B, L, H, V of the inputs.
    dtype: the compute dtype.

  Returns:
    [B, L, H, G] log-decays with G = 1 (scalar per head) or G = V.

  Raises:
    ValueError: for a shape that is none of the above, naming the expected shapes.
  """
  accepted = (f"None, [H]=[{heads}], [H, V]=[{heads}, {value_dim}], [B, L, H]=[{batch}, {length}, "
              f"{heads}] or [B, L, H, V]=[{batch}, {length}, {heads}, {value_dim}]")
  if log_decay is None:
    return jnp.zeros((batch, length, heads, 1), dtype)
  log_decay = jnp.asarray(log_decay, dtype)
  shape = tuple(log_decay.shape)
  if shape == (heads,):
    expanded = log_decay[None, None, :, None]
  elif shape == (heads, value_dim):
    expanded = log_decay[None, None]
  elif shape == (batch, length, heads):
    expanded = log_decay[..., None]
  elif shape == (batch, length, heads, value_dim):
    expanded = log_decay
  else:
    raise ValueError(f"log_decay has shape {shape}; expected {accepted}.")
  return jnp.broadcast_to(expanded, (batch, length, heads, expanded.shape[-1]))


def with_unit_values(v, *gates):
  """Values with one channel of ones per decay channel appended, and gates to match.

  The decayed normaliser is the numerator with v ≡ 1 (paper App. C.7), so a kernel that carries
  these channels computes both at once.

  Args:
    v: [B, L, H, V] values.
    *gates: [B, L, H, G] log-gates, G = 1 or V.

  Returns:
    [B, L, H, V + G] carried values, and the gates widened to V + G channels when G = V.
  """
  groups = gates[0].shape[-1]
  carried = jnp.concatenate([v, jnp.ones(v.shape[:-1] + (groups,), v.dtype)], axis=-1)
  if groups > 1:  # vector decays: each carried channel needs its own gate
    gates = tuple(jnp.concatenate([g, g], axis=-1) for g in gates)
  return carried, gates
