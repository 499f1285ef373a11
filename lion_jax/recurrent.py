"""Bidirectional LION as two causal decayed linear recurrences (paper Theorem 3.3).

Every function here computes, for one direction, the causal decayed linear attention

  o_t = Σ_{j ≤ t} (q_t · k_j) · exp(Σ_{r=j+1}^{t} gate_r) ⊙ u_j            # [E] per token

where the gate is a scalar per head (G = 1) or one per carried channel (G = E). The bidirectional
LION output is o^F + flip(o^B) − (q_t · k_t) u_t: each direction holds the diagonal term once, and
Theorem 3.3's −½ qᵀk corrections, one per direction, remove the second copy.

Two interchangeable algorithms (same maths, different cost), see `CAUSAL_KERNELS`:
  rnn:        `lax.scan` over tokens with a [K, E] state. O(L) steps; least memory forward.
  scan:       `lax.associative_scan` over (log-gate, k uᵀ) pairs. O(log L) depth; materialises
              L·K·E floats, so it is a GPU tool, slow on CPU (docs/benchmarks.md).
The chunked form works on both directions at once and lives in `lion_jax.chunkwise`.
Shapes follow the legend in `lion_jax.masks`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def causal_rnn(q, k, u, gate):
  """Causal decayed linear attention by a per-token `lax.scan`.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates (G = 1 or E); gate[:, 0] is never used.

  Returns:
    [B, L, H, E] causal outputs.
  """
  batch, _, heads, key_dim = k.shape
  state0 = jnp.zeros((batch, heads, key_dim, u.shape[-1]), u.dtype)  # [B, H, K, E]

  def step(state, token):
    q_t, k_t, u_t, g_t = token  # [B, H, K], [B, H, K], [B, H, E], [B, H, G]
    state = jnp.exp(g_t)[..., None, :] * state + k_t[..., :, None] * u_t[..., None, :]
    return state, jnp.einsum("bhk,bhke->bhe", q_t, state)

  tokens = jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), (q, k, u, gate))  # time first
  _, out = jax.lax.scan(step, state0, tokens)  # [L, B, H, E]
  return jnp.moveaxis(out, 0, 1)


def causal_associative_scan(q, k, u, gate):
  """Causal decayed linear attention by `jax.lax.associative_scan` over the states.

  Elements are (g_t, k_t u_tᵀ) and combine as (g1, S1) ∘ (g2, S2) = (g1 + g2, e^{g2} S1 + S2),
  kept in log space so composed decays underflow gracefully instead of multiplying tiny numbers.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates.

  Returns:
    [B, L, H, E] causal outputs.
  """
  increments = k[..., :, None] * u[..., None, :]  # [B, L, H, K, E]

  def combine(left, right):
    g_left, s_left = left
    g_right, s_right = right
    return g_left + g_right, jnp.exp(g_right)[..., None, :] * s_left + s_right

  _, states = jax.lax.associative_scan(combine, (gate, increments), axis=1)  # [B, L, H, K, E]
  return jnp.einsum("blhk,blhke->blhe", q, states)


CausalKernel = Callable[..., jnp.ndarray]

CAUSAL_KERNELS: dict[str, CausalKernel] = {
    "rnn": causal_rnn,
    "scan": causal_associative_scan,
}


def bidirectional(kernel: CausalKernel, q, k, u, forward_gate, backward_gate_flipped):
  """Bidirectional LION numerator (and normaliser channels) from one causal kernel.

  Both directions run in a single kernel call, stacked along the batch axis, so a scan pays its
  per-step overhead once.

  Args:
    kernel: one of `CAUSAL_KERNELS`.
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys (zero where a key is masked out).
    u: [B, L, H, E] carried values.
    forward_gate: [B, L, H, G] log-gates of the forward direction.
    backward_gate_flipped: [B, L, H, G] log-gates of the backward direction, in flipped time.

  Returns:
    [B, L, H, E]: Σ_j (q_i·k_j) M_ij u_j over all keys j.
  """
  flip = lambda x: jnp.flip(x, axis=1)
  both = lambda x, y: jnp.concatenate([x, y], axis=0)  # [2B, ...]
  out = kernel(both(q, flip(q)), both(k, flip(k)), both(u, flip(u)),
               both(forward_gate, backward_gate_flipped))
  batch = q.shape[0]
  out_forward, out_backward = out[:batch], flip(out[batch:])  # [B, L, H, E] each
  # Theorem 3.3: each direction counts the diagonal (q_t·k_t) u_t once; remove half from each.
  half_diagonal = 0.5 * jnp.einsum("blhk,blhk->blh", q, k)[..., None] * u
  return (out_forward - half_diagonal) + (out_backward - half_diagonal)
