"""Bidirectional LION as two causal decayed linear recurrences (paper Theorem 3.3).

Every function here computes, for one direction, the causal decayed linear attention

  o_t = Σ_{j ≤ t} (q_t · k_j) · exp(Σ_{r=j+1}^{t} gate_r) ⊙ u_j            # [E] per token

where the gate is a scalar per head (G = 1) or one per carried channel (G = E). The bidirectional
LION output is o^F + flip(o^B) − (q_t · k_t) u_t: each direction holds the diagonal term once, and
Theorem 3.3's −½ qᵀk corrections, one per direction, remove the second copy.

Three interchangeable algorithms (same maths, different cost), see `CAUSAL_KERNELS`:
  rnn:        `lax.scan` over tokens with a [K, E] state. O(L) steps; least memory forward.
  scan:       `lax.associative_scan` over (log-gate, k uᵀ) pairs. O(log L) depth; materialises
              L·K·E floats, so it is a GPU tool, slow on CPU (performance.md §3.1).
  chunk_scan: exact intra-chunk C×C blocks plus a `lax.scan` over L/C chunk states.
              O(L·C·(K+E) + L·K·E) work; only chunk-local cumulative sums are exponentiated and
              every exponent is ≤ 0, so it is stable in float32 at any L.
Shapes follow the legend in `lion_jax.masks`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def causal_rnn(q, k, u, gate, chunk_size: int | None = None):
  """Causal decayed linear attention by a per-token `lax.scan`.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates (G = 1 or E); gate[:, 0] is never used.
    chunk_size: unused (uniform kernel signature).

  Returns:
    [B, L, H, E] causal outputs.
  """
  del chunk_size
  batch, _, heads, key_dim = k.shape
  state0 = jnp.zeros((batch, heads, key_dim, u.shape[-1]), u.dtype)  # [B, H, K, E]

  def step(state, token):
    q_t, k_t, u_t, g_t = token  # [B, H, K], [B, H, K], [B, H, E], [B, H, G]
    state = jnp.exp(g_t)[..., None, :] * state + k_t[..., :, None] * u_t[..., None, :]
    return state, jnp.einsum("bhk,bhke->bhe", q_t, state)

  tokens = jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), (q, k, u, gate))  # time first
  _, out = jax.lax.scan(step, state0, tokens)  # [L, B, H, E]
  return jnp.moveaxis(out, 0, 1)


def causal_associative_scan(q, k, u, gate, chunk_size: int | None = None):
  """Causal decayed linear attention by `jax.lax.associative_scan` over the states.

  Elements are (g_t, k_t u_tᵀ) and combine as (g1, S1) ∘ (g2, S2) = (g1 + g2, e^{g2} S1 + S2),
  kept in log space so composed decays underflow gracefully instead of multiplying tiny numbers.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates.
    chunk_size: unused (uniform kernel signature).

  Returns:
    [B, L, H, E] causal outputs.
  """
  del chunk_size
  increments = k[..., :, None] * u[..., None, :]  # [B, L, H, K, E]

  def combine(left, right):
    g_left, s_left = left
    g_right, s_right = right
    return g_left + g_right, jnp.exp(g_right)[..., None, :] * s_left + s_right

  _, states = jax.lax.associative_scan(combine, (gate, increments), axis=1)  # [B, L, H, K, E]
  return jnp.einsum("blhk,blhke->blhe", q, states)


def causal_chunk_scan(q, k, u, gate, chunk_size: int = 64):
  """Causal decayed linear attention by exact chunks plus a scan over chunk states.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates.
    chunk_size: C; L is padded up to a multiple of C (padding sits after every real token, so
      it never reaches a real output).

  Returns:
    [B, L, H, E] causal outputs.
  """
  batch, length, heads, key_dim = k.shape
  channels = u.shape[-1]
  chunk = max(1, min(chunk_size, length))
  num_chunks = -(-length // chunk)
  pad = num_chunks * chunk - length

  def to_chunks(x):  # [B, L, H, X] -> [B, H, N, C, X]; heads lead so every einsum is batched
    x = jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
    return jnp.moveaxis(x.reshape(batch, num_chunks, chunk, heads, x.shape[-1]), 3, 1)

  q, k, u, gate = map(to_chunks, (q, k, u, gate))
  causal = jnp.tril(jnp.ones((chunk, chunk), q.dtype))  # [C(r), C(c)]
  # Chunk-local inclusive log-decay; a tiny matmul is much faster than cumsum on XLA:CPU.
  local = jnp.einsum("rc,bhncg->bhnrg", causal, gate)  # [B, H, N, C, G]
  total = local[:, :, :, -1]  # [B, H, N, G] log-decay across a whole chunk

  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  if gate.shape[-1] == 1:
    intra = jnp.einsum("bhnrc,bhnce->bhnre", scores * _causal_decay(local[..., 0]), u)
  elif chunk % VECTOR_SUBCHUNK == 0 and chunk > VECTOR_SUBCHUNK:
    intra = _intra_vector_subchunks(scores, local, u, VECTOR_SUBCHUNK)
  else:
    decay = _causal_decay(jnp.moveaxis(local, -1, 3))  # [B, H, N, E, C, C]
    intra = jnp.einsum("bhnrc,bhnerc,bhnce->bhnre", scores, decay, u)

  # Chunk states: Σ_c exp(total - local_c) k_c u_cᵀ, the chunk's contribution to its end state.
  to_end = jnp.exp(total[:, :, :, None] - local)  # [B, H, N, C, G]
  chunk_states = jnp.einsum("bhnck,bhnce->nbhke", k, u * to_end)  # [N, B, H, K, E]

  def carry_state(state, chunk_in):
    chunk_total, chunk_state = chunk_in  # [B, H, G], [B, H, K, E]
    entering = state
    state = jnp.exp(chunk_total)[..., None, :] * state + chunk_state
    return state, entering

  state0 = jnp.zeros((batch, heads, key_dim, channels), u.dtype)  # [B, H, K, E]
  _, entering = jax.lax.scan(carry_state, state0, (jnp.moveaxis(total, 2, 0), chunk_states))
  # [N, B, H, K, E]: the state before each chunk

  # Inter-chunk read-out: exp(local_r) · q_rᵀ S_entering.
  inter = jnp.einsum("bhnrk,nbhke->bhnre", q, entering) * jnp.exp(local)  # [B, H, N, C, E]
  out = jnp.moveaxis(intra + inter, 1, 3).reshape(batch, num_chunks * chunk, heads, channels)
  return out[:, :length]


# Vector decays give every carried channel its own C×C mask; splitting a chunk into sub-chunks
# of this size keeps only the diagonal sub-blocks exact and routes the rest through matmuls.
VECTOR_SUBCHUNK = 8


def _causal_decay(local):
  """Exact intra-block masks exp(local_r − local_c) for c ≤ r, 0 above the diagonal.

  Args:
    local: [..., C] chunk-local inclusive log-decays (non-increasing).

  Returns:
    [..., C(r), C(c)]; every exponent used is ≤ 0, so nothing overflows.
  """
  size = local.shape[-1]
  exponent = local[..., :, None] - local[..., None, :]
  return jnp.exp(jnp.where(jnp.tril(jnp.ones((size, size), bool)), exponent, -jnp.inf))


def _intra_vector_subchunks(scores, local, u, sub):
  """Intra-chunk outputs with per-channel decays, in O(C·E·(sub + C/sub)) memory per chunk.

  Rows r of sub-block p see keys c of earlier sub-blocks through the boundary b_p just before
  p: exp(l_r − l_c) = exp(l_r − l_{b_p}) · exp(l_{b_p} − l_c), both factors ≤ 1, so the product
  is stable and the sum over c becomes a matmul. Keys in p's own sub-block use exact masks.

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    local: [B, H, N, C, E] chunk-local inclusive log-decays per carried channel.
    u: [B, H, N, C, E] carried values.
    sub: sub-chunk length S (divides C).

  Returns:
    [B, H, N, C, E] Σ_{c ≤ r} q_r·k_c exp(l_r − l_c) u_c.
  """
  *lead, chunk, channels = local.shape
  blocks = chunk // sub  # P
  local_b = local.reshape(*lead, blocks, sub, channels)  # [B, H, N, P, S, E]
  u_b = u.reshape(*lead, blocks, sub, channels)
  rows = scores.reshape(*lead, blocks, sub, chunk)  # [B, H, N, P, S, C]
  own = jnp.diagonal(rows.reshape(*lead, blocks, sub, blocks, sub), axis1=-4, axis2=-2)
  own = jnp.moveaxis(own, -1, -3)  # [B, H, N, P, S(r), S(c)]
  decay = _causal_decay(jnp.moveaxis(local_b, -1, -2))  # [B, H, N, P, E, S, S]
  diagonal = jnp.einsum("bhnprc,bhnperc,bhnpce->bhnpre", own, decay, u_b)
  # l at the last token before each sub-block (0 before the first: nothing precedes it).
  boundary = jnp.concatenate([jnp.zeros_like(local_b[..., :1, -1, :]), local_b[..., :-1, -1, :]],
                             axis=-2)  # [B, H, N, P, E]
  earlier = jnp.arange(chunk)[None, :] < (jnp.arange(blocks) * sub)[:, None]  # [P, C]
  to_boundary = jnp.where(earlier[:, :, None], boundary[..., :, None, :] - local[..., None, :, :],
                          -jnp.inf)  # [B, H, N, P, C, E]
  carried = jnp.exp(to_boundary) * u[..., None, :, :]  # [B, H, N, P, C, E]
  from_boundary = jnp.exp(local_b - boundary[..., None, :])  # [B, H, N, P, S, E]
  off_diagonal = jnp.einsum("bhnpsc,bhnpce->bhnpse", rows, carried) * from_boundary
  return (diagonal + off_diagonal).reshape(local.shape)


CausalKernel = Callable[..., jnp.ndarray]

CAUSAL_KERNELS: dict[str, CausalKernel] = {
    "rnn": causal_rnn,
    "scan": causal_associative_scan,
    "chunk_scan": causal_chunk_scan,
}


def bidirectional(kernel: CausalKernel, q, k, u, forward_gate, backward_gate_flipped,
                  chunk_size: int = 64):
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
    chunk_size: C for the chunked kernel.

  Returns:
    [B, L, H, E]: Σ_j (q_i·k_j) M_ij u_j over all keys j.
  """
  flip = lambda x: jnp.flip(x, axis=1)
  both = lambda x, y: jnp.concatenate([x, y], axis=0)  # [2B, ...]
  out = kernel(both(q, flip(q)), both(k, flip(k)), both(u, flip(u)),
               both(forward_gate, backward_gate_flipped), chunk_size=chunk_size)
  batch = q.shape[0]
  out_forward, out_backward = out[:batch], flip(out[batch:])  # [B, L, H, E] each
  # Theorem 3.3: each direction counts the diagonal (q_t·k_t) u_t once; remove half from each.
  half_diagonal = 0.5 * jnp.einsum("blhk,blhk->blh", q, k)[..., None] * u
  return (out_forward - half_diagonal) + (out_backward - half_diagonal)
