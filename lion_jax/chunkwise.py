"""The `chunk_scan` form: LION's bidirectional mask as exact chunk blocks plus chunk states.

Split the sequence into N chunks of C tokens. Inside chunk n, with chunk-local inclusive
cumulative log-decays F_r = Σ_{t ≤ r} f_t (the forward gate: a for the symmetric convention, a
shifted right for the code convention) and A_r = Σ_{t ≤ r} a_t, the LION mask is

  same chunk:       M_rc = exp(F_r − F_c) for c < r,  1 for c = r,  exp(A_c − A_r) for c > r
  earlier chunk m:  M_rc = exp(F_r) · Π_{m < p < n} exp(F̄_p) · exp(F̄_m − F_c)
  later chunk m:    M_rc = exp(Ā_n − A_r) · Π_{n < p < m} exp(Ā_p) · exp(A_c)

(F̄, Ā: whole-chunk totals). So every output is one C×C block per chunk plus a query times the
forward state entering its chunk plus a query times the backward state entering it from the
right; both states come from one `lax.scan` over chunks, the two directions stacked on the batch
axis. Only chunk-local sums are exponentiated and every exponent is ≤ 0: stable in float32 at
any L. Work O(L·C·(K+E) + L·K·E), memory O(L·C + N·K·E).

Unlike running a causal kernel on the sequence and on its flip (`lion_jax.recurrent`), this
computes each C×C score block once and never flips the sequence, and it works heads-first
([B, H, N, C, X]) so that every contraction is a batched matmul.

Shapes follow the legend in `lion_jax.masks`; additionally N = number of chunks, C = chunk length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# Vector decays give every carried channel its own C×C mask; splitting a chunk into sub-chunks
# of this size keeps only the diagonal sub-blocks exact and routes the rest through matmuls.
VECTOR_SUBCHUNK = 8


def bidirectional_chunk_scan(q, k, u, forward_gate, log_decay, chunk_size: int = 64,
                             with_key_sums: bool = False):
  """Σ_j (q_i·k_j) M_ij u_j over all keys j, chunk by chunk.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys (zero where a key is masked out).
    u: [B, L, H, E] carried values.
    forward_gate: [B, L, H, G] log-gates of the lower triangle (`masks.forward_gate`), G = 1
      (one decay per head) or G = E (one per carried channel).
    log_decay: [B, L, H, G] log λ, the upper triangle's gates.
    chunk_size: C; L is padded up to a multiple of C with zero keys, which add nothing.
    with_key_sums: also return Σ_j (q_i·k_j) M_ij (the "after" normaliser); only for G = 1,
      where it costs a row sum instead of a carried channel of ones.

  Returns:
    [B, L, H, E] outputs, and [B, L, H, 1] key sums (or None).
  """
  batch, length, heads, key_dim = k.shape
  channels, groups = u.shape[-1], log_decay.shape[-1]
  if with_key_sums and groups != 1:
    raise ValueError("with_key_sums needs one decay per head (G = 1); carry a channel of ones "
                     "per decay channel instead.")
  chunk = max(1, min(chunk_size, length))
  num_chunks = -(-length // chunk)
  pad = num_chunks * chunk - length

  def to_chunks(x):  # [B, L, H, X] -> [B, H, N, C, X]
    x = jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
    return jnp.moveaxis(x, 2, 1).reshape(batch, heads, num_chunks, chunk, x.shape[-1])

  q, k, u, forward_gate, log_decay = map(to_chunks, (q, k, u, forward_gate, log_decay))
  # Chunk-local inclusive cumsums; a tiny matmul is much faster than cumsum on XLA:CPU.
  inclusive = jnp.tril(jnp.ones((chunk, chunk), q.dtype))  # [C(r), C(t)]
  fwd = jnp.einsum("rt,bhntg->bhnrg", inclusive, forward_gate)  # [B, H, N, C, G] F
  bwd = jnp.einsum("rt,bhntg->bhnrg", inclusive, log_decay)  # [B, H, N, C, G] A
  fwd_total, bwd_total = fwd[:, :, :, -1], bwd[:, :, :, -1]  # [B, H, N, G]

  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  key_sums = None
  if groups == 1:
    weights = scores * _block_decay(fwd[..., 0], bwd[..., 0])  # [B, H, N, C, C]
    intra = jnp.einsum("bhnrc,bhnce->bhnre", weights, u)
    if with_key_sums:
      key_sums = weights.sum(-1, keepdims=True)  # [B, H, N, C, 1]
  elif chunk % VECTOR_SUBCHUNK == 0 and chunk > VECTOR_SUBCHUNK:
    intra = _vector_block_subchunked(scores, u, log_decay, fwd)
  else:
    decay = _block_decay(jnp.moveaxis(fwd, -1, 3), jnp.moveaxis(bwd, -1, 3))  # [B,H,N,E,C,C]
    intra = jnp.einsum("bhnrc,bhnerc,bhnce->bhnre", scores, decay, u)

  # What each chunk adds to the state leaving it, per direction: forward Σ_c e^{F̄ − F_c} k_c u_cᵀ
  # (towards later chunks), backward Σ_c e^{A_c} k_c u_cᵀ (towards earlier ones).
  to_end = jnp.exp(fwd_total[:, :, :, None] - fwd)  # [B, H, N, C, G]
  to_start = jnp.exp(bwd)  # [B, H, N, C, G]
  leaving = jnp.concatenate([jnp.einsum("bhnck,bhnce->bhnke", k, u * to_end),
                             jnp.flip(jnp.einsum("bhnck,bhnce->bhnke", k, u * to_start), 2)])
  totals = jnp.concatenate([fwd_total, jnp.flip(bwd_total, 2)])  # [2B, H, N, G], chunks in scan order
  carried = (leaving,)  # [2B, H, N, K, E]
  if with_key_sums:
    carried += (jnp.concatenate([jnp.einsum("bhnck,bhnc->bhnk", k, to_end[..., 0]),
                                 jnp.flip(jnp.einsum("bhnck,bhnc->bhnk", k, to_start[..., 0]),
                                          2)])[..., None],)  # [2B, H, N, K, 1]
  entering = _entering_states(totals, carried)
  # Read-out: e^{F_r} q_r·S^fwd and e^{Ā − A_r} q_r·S^bwd, S the states entering chunk n.
  from_start = jnp.exp(fwd)  # [B, H, N, C, G]
  from_end = jnp.exp(bwd_total[:, :, :, None] - bwd)  # [B, H, N, C, G]

  def read_out(state):  # [2B, H, N, K, X] -> [B, H, N, C, X]
    forward_state, backward_state = state[:batch], jnp.flip(state[batch:], 2)
    return (jnp.einsum("bhnrk,bhnkx->bhnrx", q, forward_state) * from_start
            + jnp.einsum("bhnrk,bhnkx->bhnrx", q, backward_state) * from_end)

  def unchunk(x):  # [B, H, N, C, X] -> [B, L, H, X]
    x = jnp.moveaxis(x.reshape(batch, heads, num_chunks * chunk, x.shape[-1]), 1, 2)
    return x[:, :length]

  out = unchunk(intra + read_out(entering[0]))
  if with_key_sums:
    key_sums = unchunk(key_sums + read_out(entering[1]))
  return out, key_sums


def _entering_states(totals, leaving):
  """Exclusive scan over chunks: the state entering chunk n, for each stacked direction.

  Args:
    totals: [2B, H, N, G] whole-chunk log-decays, in the scan's chunk order.
    leaving: tuple of [2B, H, N, K, X] per-chunk contributions (X = E, or 1 for key sums).

  Returns:
    Tuple of [2B, H, N, K, X]: Σ_{m < n} exp(Σ_{m < p < n} totals_p) leaving_m.
  """
  def step(states, chunk_in):
    total, contributions = chunk_in  # [2B, H, G], tuple of [2B, H, K, X]
    decay = jnp.exp(total)[..., None, :]  # [2B, H, 1, G]
    new = tuple(decay * s + c for s, c in zip(states, contributions))
    return new, states

  to_scan = lambda x: jnp.moveaxis(x, 2, 0)
  initial = tuple(jnp.zeros(x[:, :, 0].shape, x.dtype) for x in leaving)
  _, entering = jax.lax.scan(step, initial, (to_scan(totals), tuple(map(to_scan, leaving))))
  return tuple(jnp.moveaxis(x, 0, 2) for x in entering)


def _block_decay(fwd, bwd):
  """The exact same-chunk mask: e^{F_r − F_c} below the diagonal, 1 on it, e^{A_c − A_r} above.

  Args:
    fwd: [..., C] chunk-local inclusive forward log-decays F (non-increasing).
    bwd: [..., C] chunk-local inclusive log λ sums A (non-increasing).

  Returns:
    [..., C(r), C(c)]. Every exponent taken is ≤ 0; the other triangle's (positive) differences
    are selected away before `exp`, never multiplied by zero, so nothing overflows.
  """
  size = fwd.shape[-1]
  row = jnp.arange(size)[:, None]
  col = jnp.arange(size)[None, :]
  exponent = jnp.where(row > col, fwd[..., :, None] - fwd[..., None, :],
                       jnp.where(row < col, bwd[..., None, :] - bwd[..., :, None], 0.0))
  return jnp.exp(exponent)


def _vector_block_subchunked(scores, u, log_decay, fwd):
  """Same-chunk outputs with one decay per carried channel, without [E, C, C] masks.

  The lower triangle (with the diagonal) is `_lower_subchunked` on F; the strict upper one is
  the same computation on the chunk read backwards, whose gates are log λ shifted by one.

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    u: [B, H, N, C, E] carried values.
    log_decay: [B, H, N, C, E] log λ.
    fwd: [B, H, N, C, E] chunk-local inclusive cumsum of `forward_gate`.

  Returns:
    [B, H, N, C, E] Σ_c q_r·k_c M_rc u_c over the keys c of the same chunk.
  """
  lower = _lower_subchunked(scores, fwd, u, VECTOR_SUBCHUNK)
  reverse = lambda x: jnp.flip(x, axis=3)
  # Read backwards, position r' = C−1−r; e^{A_c − A_r} = exp(Σ_{t=r+1}^{c} a_t) is a lower-
  # triangle mask whose gate at r' is a at the position after it: a reversed, shifted right.
  gate = jnp.pad(reverse(log_decay)[:, :, :, :-1], [(0, 0), (0, 0), (0, 0), (1, 0), (0, 0)])
  local = jnp.cumsum(gate, axis=3)
  upper = reverse(_lower_subchunked(jnp.flip(scores, (3, 4)), local, reverse(u),
                                    VECTOR_SUBCHUNK))
  diagonal = jnp.diagonal(scores, axis1=-2, axis2=-1)[..., None] * u  # counted by both
  return lower + upper - diagonal


def _lower_subchunked(scores, local, u, sub):
  """Σ_{c ≤ r} q_r·k_c exp(l_r − l_c) u_c per channel, in O(C·E·(sub + C/sub)) memory per chunk.

  Rows r of sub-block p see keys c of earlier sub-blocks through the boundary b_p just before
  p: exp(l_r − l_c) = exp(l_r − l_{b_p}) · exp(l_{b_p} − l_c), both factors ≤ 1, so the product
  is stable and the sum over c becomes a matmul. Keys in p's own sub-block use exact masks.

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    local: [B, H, N, C, E] chunk-local inclusive log-decays per carried channel.
    u: [B, H, N, C, E] carried values.
    sub: sub-chunk length S (divides C).

  Returns:
    [B, H, N, C, E].
  """
  *lead, chunk, channels = local.shape
  blocks = chunk // sub  # P
  local_b = local.reshape(*lead, blocks, sub, channels)  # [B, H, N, P, S, E]
  u_b = u.reshape(*lead, blocks, sub, channels)
  rows = scores.reshape(*lead, blocks, sub, chunk)  # [B, H, N, P, S, C]
  own = jnp.diagonal(rows.reshape(*lead, blocks, sub, blocks, sub), axis1=-4, axis2=-2)
  own = jnp.moveaxis(own, -1, -3)  # [B, H, N, P, S(r), S(c)]
  by_channel = jnp.moveaxis(local_b, -1, -2)  # [B, H, N, P, E, S]
  exponent = jnp.where(jnp.tril(jnp.ones((sub, sub), bool)),
                       by_channel[..., :, None] - by_channel[..., None, :], -jnp.inf)
  diagonal = jnp.einsum("bhnprc,bhnperc,bhnpce->bhnpre", own, jnp.exp(exponent), u_b)
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
