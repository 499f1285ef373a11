"""The `chunk_scan` form: LION's bidirectional mask as exact chunk blocks plus chunk states.

Split the sequence into N chunks of C tokens. Inside chunk n, with chunk-local inclusive
cumulative log-decays F_r = Σ_{t ≤ r} f_t (the forward gate: a for the symmetric convention, a
shifted right for the code convention) and A_r = Σ_{t ≤ r} a_t, the LION mask is

  same chunk:       M_rc = exp(F_r − F_c) for c < r,  1 for c = r,  exp(A_c − A_r) for c > r
  earlier chunk m:  M_rc = exp(F_r) · Π_{m < p < n} exp(F̄_p) · exp(F̄_m − F_c)
  later chunk m:    M_rc = exp(Ā_n − A_r) · Π_{n < p < m} exp(Ā_p) · exp(A_c)

(F̄, Ā: whole-chunk totals). So every output is one C×C block per chunk plus a query times the
forward state entering its chunk plus a query times the backward state entering it from the
right; both states come from one exclusive scan over chunks, the two directions stacked on the
batch axis: a `lax.scan` of N steps, or a `lax.associative_scan` of log N depth for accelerators
(`state_pass`, `resolve_state_pass`). Only chunk-local sums are exponentiated and every exponent
is ≤ 0: stable in float32 at any L. Work O(L·C·(K+E) + L·K·E), memory O(L·C + N·K·E).

With one decay per carried channel (vector decays) the same-chunk mask differs per channel.
When every chunk's log-decays span at most 2W (`factored_exponent_limit`: 80 in float32, e.g.
per-token log λ ≥ −1.25 at C = 64), each triangle factors through a per-chunk middle R,
e^{F_r − R} · e^{R − F_c} = e^{F_r − F_c}, and the block is two matmuls with O(C·E) scaling,
whose scaled values also make the chunk states (`_factored_kernel`).
Steeper chunks are halved until their sub-chunks of S = C/2^J tokens span at most 2W (down to
S = 8, i.e. per-token log λ ≥ −10): the sub-chunks' blocks are factored and each halving couples
its two halves through the boundary between them, with factors ≤ 1 (`_halving_block`); exact
[S, S, E] masks, one chunk at a time, only beyond that. One `lax.cond` per call picks the
factored kernel or the other, inside which a `lax.switch` picks the same-chunk block.

Unlike running a causal kernel on the sequence and on its flip (`lion_jax.recurrent`), this
computes each C×C score block once and never flips the sequence, and it works heads-first
([B, H, N, C, X]) so that every contraction is a batched matmul.

Shapes follow the legend in `lion_jax.masks`; additionally N = number of chunks, C = chunk length.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from lion_jax.options import check_choice

# The shortest sub-chunk the vector-decay kernel halves chunks down to; the exact fallback splits
# a chunk into sub-chunks of this size too: only the diagonal sub-blocks get [S, S, E] masks, the
# rest goes through matmuls.
VECTOR_SUBCHUNK = 8

# The factored kernel recomputes up to max(MIN, B·H·N / DIVISOR) steep chunks exactly on the side
# (`steep_chunk_capacity`); more than that, and the whole call takes the halving or exact kernel.
STEEP_CHUNKS_MIN = 4
STEEP_CHUNKS_DIVISOR = 32


def bidirectional_chunk_scan(q, k, u, forward_gate, log_decay, chunk_size: int = 64,
                             with_key_sums: bool = False, state_pass: str = "auto",
                             branch_axis: str | None = None):
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
    state_pass: how the chunk states pass between chunks: "scan" (a `lax.scan` of N sequential
      steps), "associative" (a log-depth `lax.associative_scan` over the chunk axis) or "auto"
      (`resolve_state_pass`). Both give the same values.
    branch_axis: inside `shard_map`, the bound axis whose shards must all take the same branch
      of the vector-decay kernel: the deepest any of them needs (a `switch` whose branches hold
      collectives deadlocks when devices disagree).

  Returns:
    [B, L, H, E] outputs, and [B, L, H, 1] key sums (or None).
  """
  entering_states = STATE_PASSES[resolve_state_pass(state_pass)]
  batch, length, heads, _ = k.shape
  groups = log_decay.shape[-1]
  if with_key_sums and groups != 1:
    raise ValueError("with_key_sums needs one decay per head (G = 1); carry a channel of ones "
                     "per decay channel instead.")
  chunk = max(1, min(chunk_size, length))
  pad = -length % chunk
  padded = [jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
            for x in (q, k, u, forward_gate, log_decay)]  # [B, L', H, X]
  unchunk = lambda x: _unchunk(x)[:, :length]  # [B, H, N, C, X] -> [B, L, H, X]

  if groups == 1:
    out, key_sums = _chunk_kernel(*_to_chunks(padded, chunk), _scalar_block, entering_states)
    return unchunk(out), unchunk(key_sums) if with_key_sums else None
  # Vector decays. A token's log-gate below −W/2 only scales the mask across it by less than
  # e^{−W/2} (1e-13 in float32), under every rounding of the sums it enters; raising it to −W/2
  # bounds what one token adds to a chunk's span.
  limit = factored_exponent_limit(u.dtype)
  padded[3:] = [jnp.maximum(gate, -0.5 * limit) for gate in padded[3:]]
  # The factored kernel runs unconditionally: it needs each chunk to span at most 2W, but for up
  # to `steep_chunk_capacity` steep chunks, which it recomputes exactly on the side. A call with
  # more steep chunks takes the exact masks instead, under a `cond` whose other branch is empty.
  chunked = _to_chunks(padded, chunk)
  steep = steep_chunks(*padded[3:], chunk, limit)  # [B, H, N]
  capacity = steep_chunk_capacity(steep.size)
  out = _unchunk(_factored_kernel(*chunked, entering_states, steep_slots(steep, capacity))[0])
  too_steep = jnp.sum(steep) > capacity
  if branch_axis is not None:
    too_steep = jax.lax.pmax(too_steep.astype(jnp.int32), branch_axis) > 0

  def exact(*operands):
    return _unchunk(_chunk_kernel(*_to_chunks(operands, chunk), _exact_vector_block,
                                  entering_states)[0])

  out = jnp.where(too_steep, _only_if(too_steep, exact, *padded), out)
  return out[:, :length], None


def _only_if(predicate, fn, *operands):
  """fn(*operands) where `predicate` holds, else zeros of its shape; forward and backward.

  A `lax.cond` under differentiation keeps every residual its branches could need and zero-fills
  the slots of the branch not taken: 15% of a vector kernel's forward+backward and 229 MB of
  its 201 (L = 512, B = 32, H = 4, E = 32) for a fallback that almost never runs. Here the
  backward pass recomputes fn's forward instead, and only where it runs, so nothing but the
  operands (alive anyway) is kept.
  """
  @jax.custom_vjp
  def guarded(predicate, *operands):
    return jax.lax.cond(predicate, fn, lambda *x: jnp.zeros_like(jax.eval_shape(fn, *x)),
                        *operands)

  def forward(predicate, *operands):
    return guarded(predicate, *operands), (predicate, operands)

  def backward(saved, cotangent):
    predicate, operands = saved
    pulled = jax.lax.cond(predicate, lambda c, *x: jax.vjp(fn, *x)[1](c),
                          lambda c, *x: tuple(map(jnp.zeros_like, x)), cotangent, *operands)
    return (None, *pulled)

  guarded.defvjp(forward, backward)
  return guarded(predicate, *operands)


def _to_chunks(padded, chunk: int):
  """q, k, u and the two gates [B, L', H, X] (L' = N·C) as q, k, u, F, A [B, H, N, C, X].

  F and A are the chunk-local inclusive cumsums of the gates, taken before the heads-first
  relayout: there they are one batched [C, C] @ [C, H·G] matmul each, with no transposes
  (XLA:CPU's cumsum is much slower).
  """
  batch, length, heads, _ = padded[0].shape
  num_chunks = length // chunk
  inclusive = jnp.broadcast_to(jnp.tril(jnp.ones((chunk, chunk), padded[0].dtype)),
                               (batch, num_chunks, chunk, chunk))  # [B, N, C(r), C(t)]
  in_chunks = lambda x: x.reshape(batch, num_chunks, chunk, -1)  # [B, N, C, H·G]
  cumsums = [jnp.matmul(inclusive, in_chunks(x)).reshape(x.shape) for x in padded[3:]]
  heads_first = lambda x: jnp.moveaxis(x, 2, 1).reshape(batch, heads, num_chunks, chunk,
                                                        x.shape[-1])
  return tuple(map(heads_first, list(padded[:3]) + cumsums))


def _unchunk(x):
  """[B, H, N, C, X] -> [B, N·C, H, X]."""
  batch, heads, num_chunks, chunk, channels = x.shape
  return jnp.moveaxis(x.reshape(batch, heads, num_chunks * chunk, channels), 1, 2)


def vector_chunk_sizes(chunk: int) -> tuple[int, ...]:
  """The chunk lengths the vector-decay kernel may run at: C, then C/2, C/4, ... while they
  are whole and at least `VECTOR_SUBCHUNK`, coarsest first."""
  sizes = [chunk]
  while sizes[-1] % 2 == 0 and sizes[-1] // 2 >= VECTOR_SUBCHUNK:
    sizes.append(sizes[-1] // 2)
  return tuple(sizes)


def steep_chunks(forward_gate, log_decay, chunk: int, limit):
  """Which chunks the factored block cannot take: a channel spanning more than 2W, or NaN.

  Args:
    forward_gate, log_decay: [B, L', H, G] log-gates, L' a multiple of `chunk`.
    chunk: C.
    limit: W (`factored_exponent_limit`).

  Returns:
    [B, H, N] bool.
  """
  batch, length, heads, groups = log_decay.shape
  spans = jnp.maximum(*(jnp.abs(x).reshape(batch, length // chunk, chunk, heads, groups).sum(2)
                        for x in (forward_gate, log_decay)))  # [B, N, H, G]
  return jnp.moveaxis(~jnp.all(spans <= 2 * limit, axis=-1), 1, 2)


def steep_chunk_capacity(num_chunks: int) -> int:
  """P: how many steep chunks the factored kernel recomputes exactly on the side
  (`_factored_kernel`); a call with more takes the halving or exact kernel for every chunk."""
  return max(STEEP_CHUNKS_MIN, num_chunks // STEEP_CHUNKS_DIVISOR)


def steep_slots(steep, capacity: int):
  """[P] flat indices into [B·H·N] of the first P steep chunks, then B·H·N (no chunk)."""
  flat = steep.reshape(-1)
  return jnp.nonzero(flat, size=capacity, fill_value=flat.shape[0])[0].astype(jnp.int32)


def _gather_chunks(x, slots):
  """[B, H, N, ...] -> [P, ...]: the chunks at `slots`, zeros for an index past the end."""
  return jnp.take(x.reshape(-1, *x.shape[3:]), slots, axis=0, mode="fill", fill_value=0)


def _overwrite_chunks(x, slots, values):
  """`x` [B, H, N, ...] with the chunks at `slots` replaced by `values` [P, ...] (an index past
  the end writes nothing, so no chunk is written twice)."""
  flat = x.reshape(-1, *x.shape[3:])
  return flat.at[slots].set(values.astype(x.dtype), mode="drop").reshape(x.shape)


def vector_level(forward_gate, log_decay, sizes, limit):
  """Which branch of the vector-decay kernel runs: the coarsest chunk length the factored kernel
  can take.

  Args:
    forward_gate, log_decay: [B, L', H, G] log-gates, L' a multiple of every size.
    sizes: chunk lengths, coarsest first (`vector_chunk_sizes`).
    limit: W.

  Returns:
    int32 scalar: the index into `sizes` of the first length with at most
    `steep_chunk_capacity` steep chunks (`steep_chunks`), or len(sizes) (the exact masks) if
    none has so few.
  """
  fits = []
  for size in sizes:
    steep = steep_chunks(forward_gate, log_decay, size, limit)  # [B, H, L'/size]
    fits.append(jnp.sum(steep) <= steep_chunk_capacity(steep.size))
  fits = jnp.stack(fits)
  return jnp.where(jnp.any(fits), jnp.argmax(fits), len(sizes)).astype(jnp.int32)


def _chunk_kernel(q, k, u, fwd, bwd, intra_block, entering_states):
  """The chunk kernel on chunked inputs, with a given same-chunk block.

  Args:
    q, k: [B, H, N, C, K].
    u: [B, H, N, C, E].
    fwd, bwd: [B, H, N, C, G] chunk-local inclusive cumsums F of the forward gates and A of
      log λ.
    intra_block: (scores, u, F, A) -> ([B, H, N, C, E] same-chunk outputs, [B, H, N, C, 1]
      same-chunk key sums or None).
    entering_states: (totals, leaving) -> entering states, a value of `STATE_PASSES`.

  Returns:
    [B, H, N, C, E] outputs and [B, H, N, C, 1] key sums (None unless `intra_block` gives them).
  """
  batch = q.shape[0]
  fwd_total, bwd_total = fwd[:, :, :, -1], bwd[:, :, :, -1]  # [B, H, N, G]

  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  intra, key_sums = intra_block(scores, u, fwd, bwd)

  # What each chunk adds to the state leaving it, per direction: forward Σ_c e^{F̄ − F_c} k_c u_cᵀ
  # (towards later chunks), backward Σ_c e^{A_c} k_c u_cᵀ (towards earlier ones).
  to_end = jnp.exp(fwd_total[:, :, :, None] - fwd)  # [B, H, N, C, G]
  to_start = jnp.exp(bwd)  # [B, H, N, C, G]
  leaving = jnp.concatenate([jnp.einsum("bhnck,bhnce->bhnke", k, u * to_end),
                             jnp.flip(jnp.einsum("bhnck,bhnce->bhnke", k, u * to_start), 2)])
  totals = jnp.concatenate([fwd_total, jnp.flip(bwd_total, 2)])  # [2B, H, N, G], chunks in scan order
  carried = (leaving,)  # [2B, H, N, K, E]
  if key_sums is not None:
    carried += (jnp.concatenate([jnp.einsum("bhnck,bhnc->bhnk", k, to_end[..., 0]),
                                 jnp.flip(jnp.einsum("bhnck,bhnc->bhnk", k, to_start[..., 0]),
                                          2)])[..., None],)  # [2B, H, N, K, 1]
  entering = entering_states(totals, carried)
  # Read-out: e^{F_r} q_r·S^fwd and e^{Ā − A_r} q_r·S^bwd, S the states entering chunk n.
  from_start = jnp.exp(fwd)  # [B, H, N, C, G]
  from_end = jnp.exp(bwd_total[:, :, :, None] - bwd)  # [B, H, N, C, G]

  def read_out(state):  # [2B, H, N, K, X] -> [B, H, N, C, X]
    forward_state, backward_state = state[:batch], jnp.flip(state[batch:], 2)
    return (jnp.einsum("bhnrk,bhnkx->bhnrx", q, forward_state) * from_start
            + jnp.einsum("bhnrk,bhnkx->bhnrx", q, backward_state) * from_end)

  out = intra + read_out(entering[0])
  if key_sums is not None:
    key_sums = key_sums + read_out(entering[1])
  return out, key_sums


# Not rematerialised as a whole (`dots_saveable`, as the factored block before it was): that
# recomputes the state scan in the backward pass, 10-15% slower at head width 64.
def _factored_kernel(q, k, u, fwd, bwd, entering_states, steep_slots=None):
  """The chunk kernel with one decay per carried channel, for chunks that factor whole.

  Every product of the mask splits at each chunk's middles R (of F) and R' (of A), as in
  `_factored_products`, and the same-chunk block and the chunk states then share their
  operands: with x_c = e^{R − F_c} u_c and y_c = e^{A_c − R'} u_c,
    same chunk, c < r:  e^{F_r − F_c} u_c = e^{F_r − R} · x_c
    earlier chunks:     e^{F_r} q_r·S = e^{F_r − R} · q_r·(e^{R} S)
    leaving forward:    Σ_c e^{F̄ − F_c} k_c u_cᵀ = e^{F̄ − R} · Σ_c k_c x_cᵀ
  (and mirrored for the backward direction), so the outputs are
    e^{F_r − R} ⊙ (Σ_{c<r} s_rc x_c + q_r·e^{R} S^fwd) + e^{R' − A_r} ⊙ (Σ_{c>r} s_rc y_c + q_r·e^{Ā − R'} S^bwd) + s_rr u_r:
  two scaled copies of the values and two output scales in all, where `_chunk_kernel` with a
  factored same-chunk block would scale values and outputs once for the block and again for
  the states. Each bracket is one matmul over the chunk's C keys and the state's K rows
  (fwd+bwd, B = 2, against the block-plus-states kernel: 0.90-0.92× at head width 32,
  0.94-1.00× at width 64, docs/benchmarks.md §1).
  Every factor is ≤ e^{W} (the factored range) and the chunk-level ones e^{R}, e^{F̄ − R},
  e^{R'}, e^{Ā − R'} are ≤ 1.

  Args:
    q, k: [B, H, N, C, K].
    u: [B, H, N, C, E] carried values.
    fwd, bwd: [B, H, N, C, E] chunk-local inclusive cumsums F of the forward gates and A of
      log λ, every chunk spanning at most 2W.
    entering_states: (totals, leaving) -> entering states, a value of `STATE_PASSES`.

  Returns:
    [B, H, N, C, E] outputs, and None (no key sums).
  """
  batch = q.shape[0]
  fwd_total, bwd_total = fwd[:, :, :, -1], bwd[:, :, :, -1]  # F̄, Ā: [B, H, N, E]
  if steep_slots is not None:
    # The steep chunks go through the factored products too, with clipped factors: wrong but
    # finite (each partial sum ≤ e^{W}·C·|s|·|u|), and overwritten below, so that their zero
    # cotangents meet only finite values in the backward pass.
    steep_inputs = [_gather_chunks(x, steep_slots) for x in (q, k, u, fwd, bwd)]  # [P, C, X]
  factor = _bounded_exp(factored_exponent_limit(u.dtype))
  middle = lambda x: jax.lax.stop_gradient(
      0.5 * (jnp.max(x, axis=-2) + jnp.min(x, axis=-2)))  # [B, H, N, E]
  fwd_mid, bwd_mid = middle(fwd), middle(bwd)  # R, R'
  below, above = fwd - fwd_mid[..., None, :], bwd - bwd_mid[..., None, :]  # [B, H, N, C, E]
  from_left, from_right = factor(-below) * u, factor(above) * u  # x, y: [B, H, N, C, E]
  per_chunk = lambda log_scale: jnp.exp(log_scale)[..., None, :]  # [B, H, N, 1, E], all ≤ 1

  forward_leaving = jnp.einsum("bhnck,bhnce->bhnke", k, from_left) * per_chunk(fwd_total - fwd_mid)
  backward_leaving = jnp.einsum("bhnck,bhnce->bhnke", k, from_right) * per_chunk(bwd_mid)
  if steep_slots is not None:
    exact_leaving = _steep_leaving(*steep_inputs[1:])
    forward_leaving, backward_leaving = (_overwrite_chunks(x, steep_slots, exact)
                                         for x, exact in zip((forward_leaving, backward_leaving),
                                                             exact_leaving))
  leaving = jnp.concatenate([forward_leaving, jnp.flip(backward_leaving, 2)])  # [2B, H, N, K, E]
  totals = jnp.concatenate([fwd_total, jnp.flip(bwd_total, 2)])  # [2B, H, N, E]
  (entering,) = entering_states(totals, (leaving,))  # [2B, H, N, K, E]
  forward_entering, backward_entering = entering[:batch], jnp.flip(entering[batch:], 2)
  forward_state = forward_entering * per_chunk(fwd_mid)  # e^{R} S^fwd
  backward_state = backward_entering * per_chunk(bwd_total - bwd_mid)

  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  size = scores.shape[-1]
  row = jnp.arange(size)[:, None]
  col = jnp.arange(size)[None, :]
  # Each direction's same-chunk keys and entering state in one contraction over C + K: one
  # larger matmul instead of two. Rematerialised, so that the concatenated copies are not kept
  # for the backward pass (they cost 7-13% more memory).
  @jax.checkpoint
  def keys_and_state(mask, values, state):  # [C, C], [B, H, N, C, E], [B, H, N, K, E]
    return jnp.einsum("bhnrj,bhnje->bhnre",
                      jnp.concatenate([jnp.where(mask, scores, 0.0), q], axis=-1),
                      jnp.concatenate([values, state], axis=-2))
  lower = keys_and_state(row > col, from_left, forward_state)  # [B, H, N, C, E]
  upper = keys_and_state(row < col, from_right, backward_state)
  on_diagonal = _diagonal_blocks(scores, 1)[..., 0] * u  # [B, H, N, C, 1] * [B, H, N, C, E]
  out = factor(below) * lower + factor(-above) * upper + on_diagonal
  if steep_slots is not None:
    states = [_gather_chunks(x, steep_slots) for x in (forward_entering, backward_entering)]
    out = _overwrite_chunks(out, steep_slots, _steep_outputs(*steep_inputs, *states))
  return out, None


def _steep_leaving(k, u, fwd, bwd):
  """What chunks of any span add to the states leaving them, with factors ≤ 1.

  Args:
    k: [P, C, K] keys of P chunks.
    u: [P, C, E] carried values.
    fwd, bwd: [P, C, E] chunk-local inclusive cumsums F and A.

  Returns:
    [P, K, E] forward Σ_c e^{F̄ − F_c} k_c u_cᵀ and [P, K, E] backward Σ_c e^{A_c} k_c u_cᵀ.
  """
  forward = jnp.einsum("pck,pce->pke", k, jnp.exp(fwd[:, -1:] - fwd) * u)
  backward = jnp.einsum("pck,pce->pke", k, jnp.exp(bwd) * u)
  return forward, backward


def _steep_outputs(q, k, u, fwd, bwd, forward_state, backward_state):
  """Outputs of chunks of any span from their entering states; every exponent taken is ≤ 0.

  Args:
    q, k: [P, C, K] queries and keys of P chunks.
    u: [P, C, E] carried values.
    fwd, bwd: [P, C, E] chunk-local inclusive cumsums F and A.
    forward_state, backward_state: [P, K, E] the states entering each chunk from the left and
      from the right (not rescaled).

  Returns:
    [P, C, E] Σ_j (q_r·k_j) M_rj u_j over all keys.
  """
  scores = jnp.einsum("prk,pck->prc", q, k)[:, None, None]  # [P, 1, 1, C, C]
  chunk = u.shape[-2]
  operands = (scores, u[:, None, None], fwd[:, None, None], bwd[:, None, None])
  if chunk % VECTOR_SUBCHUNK == 0 and chunk > VECTOR_SUBCHUNK:
    same_chunk = _vector_block_subchunked(*operands, VECTOR_SUBCHUNK)[:, 0, 0]
  else:
    same_chunk = _exact_block(*operands)[:, 0, 0]
  return (same_chunk
          + jnp.einsum("prk,pke->pre", q, forward_state) * jnp.exp(fwd)
          + jnp.einsum("prk,pke->pre", q, backward_state) * jnp.exp(bwd[:, -1:] - bwd))


def _scalar_block(scores, u, fwd, bwd):
  """Same-chunk outputs and key sums with one decay per head: one exact C×C mask.

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    u: [B, H, N, C, E] carried values.
    fwd, bwd: [B, H, N, C, 1] chunk-local inclusive cumsums F and A.

  Returns:
    [B, H, N, C, E] outputs and [B, H, N, C, 1] key sums (dropped by XLA when unused).
  """
  weights = scores * _block_decay(fwd[..., 0], bwd[..., 0])  # [B, H, N, C, C]
  return jnp.einsum("bhnrc,bhnce->bhnre", weights, u), weights.sum(-1, keepdims=True)


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


def _entering_states_associative(totals, leaving):
  """`_entering_states` in log depth: `lax.associative_scan` over the chunk axis.

  A chunk is the affine map S -> e^{a} S + c of the state passing through it (a its total
  log-decay, c what it adds). Two maps in a row compose to (a₁, c₁) then (a₂, c₂) =
  (a₁ + a₂, e^{a₂} c₁ + c₂), which is associative, so the inclusive prefix (the state leaving
  each chunk) takes O(log N) dependent steps instead of N. Every a ≤ 0, so no partial product
  grows. The entering state is the previous chunk's leaving state (zero before the first).

  Args and returns as `_entering_states`.
  """
  def compose(earlier, later):
    (total_1, states_1), (total_2, states_2) = earlier, later  # [2B, H, n, G], [2B, H, n, K, X]
    decay = jnp.exp(total_2)[..., None, :]  # [2B, H, n, 1, G]
    return total_1 + total_2, tuple(decay * s1 + s2 for s1, s2 in zip(states_1, states_2))

  _, leaving_states = jax.lax.associative_scan(compose, (totals, leaving), axis=2)
  # [2B, H, N, K, X]: shift by one chunk, zero state entering the first.
  return tuple(jnp.pad(x, [(0, 0), (0, 0), (1, 0), (0, 0), (0, 0)])[:, :, :-1]
               for x in leaving_states)


# How the chunk states pass between chunks, by `state_pass` value (lion_jax.options).
STATE_PASSES = {"scan": _entering_states, "associative": _entering_states_associative}


def resolve_state_pass(state_pass: str) -> str:
  """The concrete state pass ("scan" or "associative") for `state_pass` on the default backend.

  "auto" picks, per backend, the pass measured faster there. On the CPU that is "scan": the
  N-step `lax.scan` does about half the associative form's work and its steps are cheap there
  (fwd+bwd of vector-decay attention at L = 1K to 16K: the associative pass 5–14% slower;
  docs/benchmarks.md section 9). On GPU and TPU it is "associative", where each of the scan's
  N steps is a kernel launch. That accelerator default is not yet measured on a GPU or TPU
  (`bench/accelerator.py` times both passes).
  """
  state_pass = check_choice("state_pass", state_pass)
  if state_pass != "auto":
    return state_pass
  return "scan" if jax.default_backend() == "cpu" else "associative"


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


def factored_exponent_limit(dtype) -> float:
  """W: the largest |exponent| one factor of the factored block may take in `dtype`.

  Every product the factored kernel forms pairs a query-side factor e^{F_r − R} with key-side
  factors e^{R − F_c} of keys c the mask lets it see, for which F_c ≥ F_r: so the product is
  ≤ 1, and each partial sum, forward or backward, is at most e^{W} times C·|score|·|value| (or
  |cotangent|). W = 0.68·log(max) leaves that a factor e^{0.32·log(max)} of headroom: 60.3 in
  float32 (C·|s|·|u| up to 2e12), 482 in float64. It must also keep e^{−W} a normal number
  (not denormal), which any fraction below 1 does.
  """
  return 0.68 * math.log(float(jnp.finfo(dtype).max))


def _factored_products(scores, u, fwd, bwd):
  """Same-chunk outputs through e^{F_r − F_c} = e^{F_r − R} · e^{R − F_c}: one matmul a triangle.

  R is the middle of each chunk's range of F per channel (R' likewise for A), so each factor
  lies in [e^{−T/2}, e^{T/2}] for a spread T; `bidirectional_chunk_scan` runs this only when
  T ≤ 2W (`factored_exponent_limit`) in every chunk and channel.
  Rounding stays that of the exact sums: every product keeps its relative error, only its scale
  is moved between the key and the query side. R cancels from every product, so it is held
  constant under differentiation: its true gradient is zero, and skipping the max/min backward
  saves two passes over [B, H, N, C, E].

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    u: [B, H, N, C, E] carried values.
    fwd: [B, H, N, C, E] chunk-local inclusive cumsum F of the forward gates.
    bwd: [B, H, N, C, E] chunk-local inclusive cumsum A of log λ.

  Returns:
    [B, H, N, C, E] same-chunk outputs, and None (no key sums).
  """
  factor = _bounded_exp(factored_exponent_limit(u.dtype))
  middle = lambda x: jax.lax.stop_gradient(
      0.5 * (jnp.max(x, axis=-2, keepdims=True) + jnp.min(x, axis=-2, keepdims=True)))
  below, above = fwd - middle(fwd), bwd - middle(bwd)  # [B, H, N, C, E]
  size = scores.shape[-1]
  row = jnp.arange(size)[:, None]
  col = jnp.arange(size)[None, :]
  # Two dots rather than one on stacked triangles: the stack's copies cost more than the
  # second dot's dispatch on XLA:CPU (8% of a vector kernel's forward+backward).
  lower = jnp.einsum("bhnrc,bhnce->bhnre", jnp.where(row > col, scores, 0.0),
                     factor(-below) * u)  # [B, H, N, C, E]
  upper = jnp.einsum("bhnrc,bhnce->bhnre", jnp.where(row < col, scores, 0.0), factor(above) * u)
  on_diagonal = _diagonal_blocks(scores, 1)[..., 0] * u  # [B, H, N, C, 1] * [B, H, N, C, E]
  return factor(below) * lower + factor(-above) * upper + on_diagonal, None


def _bounded_exp(limit):
  """x ↦ e^{clip(x, −limit, limit)}, differentiated as if unclipped (d/dx = the value).

  The clip is a no-op wherever the factored branch is taken; it keeps the untaken branch
  finite (and its zero cotangents NaN-free) where `cond` lowers to `select` under `vmap`.
  Differentiating the clip itself would add a select-and-divide pass per factor (10% of a
  vector layer's forward+backward on XLA:CPU).
  """
  @jax.custom_jvp
  def bounded_exp(x):
    return jnp.exp(jnp.clip(x, -limit, limit))

  @bounded_exp.defjvp
  def _(primals, tangents):
    value = bounded_exp(primals[0])
    return value, value * tangents[0]

  return bounded_exp


def _exact_vector_block(scores, u, fwd, bwd):
  """The vector-decay fallback: exact masks (sub-chunked when C allows), one chunk at a time.

  Mapping over chunks with each step rematerialised keeps the working set at one chunk's
  masks, forward and backward; XLA gives a `cond` branch buffers of its own, so a batched
  fallback would cost its full size in memory even when the fast branch runs. The whole map is
  rematerialised too, so that what it saves for the backward pass is its four inputs in their
  [B, H, N, C, X] shapes: JAX pools a `cond`'s residuals by shape across branches and zero-fills
  the slots the taken branch does not use, and these shapes are ones the factored branch
  already fills (the chunks-first slices `lax.map` would save are not; zero-filling them cost
  ~5% of a vector layer's forward+backward).

  Args and returns as `_factored_products`.
  """
  chunk = u.shape[-2]

  def one_chunk(operands):  # [B, H, 1, C, ...] each
    if chunk % VECTOR_SUBCHUNK == 0 and chunk > VECTOR_SUBCHUNK:
      return _vector_block_subchunked(*operands, VECTOR_SUBCHUNK)
    return _exact_block(*operands)

  @jax.checkpoint
  def mapped(scores, u, fwd, bwd):
    chunks_first = tuple(jnp.moveaxis(x, 2, 0)[:, :, :, None] for x in (scores, u, fwd, bwd))
    out = jax.lax.map(jax.checkpoint(one_chunk), chunks_first)  # [N, B, H, 1, C, E]
    return jnp.moveaxis(out[:, :, :, 0], 0, 2)

  return mapped(scores, u, fwd, bwd), None


def _vector_block_subchunked(scores, u, fwd, bwd, sub):
  """Same-chunk outputs with one decay per carried channel, in O(C·E·(S + C/S)) memory per chunk.

  Exact [S, S, E] masks only on the diagonal S×S sub-blocks. A row r of sub-block p sees a key c
  of an earlier sub-block through the boundary just before p, and a key of a later one through
  the end of p:
    c < start_p:  e^{F_r − F_c} = e^{F_r − F_{start_p − 1}} · e^{F_{start_p − 1} − F_c}
    c > end_p:    e^{A_c − A_r} = e^{A_{end_p} − A_r} · e^{A_c − A_{end_p}}
  Both factors are ≤ 1 (stable), and the sums over c become one matmul per sub-block.

  Args:
    scores: [B, H, N, C, C] q_r·k_c.
    u: [B, H, N, C, E] carried values.
    fwd: [B, H, N, C, E] chunk-local inclusive cumsum F of the forward gates.
    bwd: [B, H, N, C, E] chunk-local inclusive cumsum A of log λ.
    sub: sub-chunk length S (divides C).

  Returns:
    [B, H, N, C, E] Σ_c q_r·k_c M_rc u_c over the keys c of the same chunk.
  """
  *lead, chunk, channels = u.shape
  blocks = chunk // sub  # P
  split = lambda x: x.reshape(*lead, blocks, sub, channels)  # [B, H, N, P, S, E]
  fwd_b, bwd_b, u_b = split(fwd), split(bwd), split(u)
  rows = scores.reshape(*lead, blocks, sub, chunk)  # [B, H, N, P, S, C]
  own = _diagonal_blocks(scores, sub)  # [B, H, N, P, S(r), S(c)]
  diagonal = _exact_block(own, u_b, fwd_b, bwd_b)  # [B, H, N, P, S, E]
  # F just before each sub-block (0 before the first) and A at its end.
  before = jnp.concatenate([jnp.zeros_like(fwd_b[..., :1, -1, :]), fwd_b[..., :-1, -1, :]],
                           axis=-2)  # [B, H, N, P, E]
  end = bwd_b[..., -1, :]  # [B, H, N, P, E]
  key = jnp.arange(chunk)[None, :, None]  # [1, C, 1]
  start = (jnp.arange(blocks) * sub)[:, None, None]  # [P, 1, 1]
  to_before = jnp.where(key < start, before[..., :, None, :] - fwd[..., None, :, :], -jnp.inf)
  from_end = jnp.where(key >= start + sub, bwd[..., None, :, :] - end[..., :, None, :], -jnp.inf)
  carried = jnp.concatenate([jnp.exp(to_before), jnp.exp(from_end)], axis=-1)  # [..., P, C, 2E]
  # Stacked copies, not a broadcast: the broadcast's transpose is a multiply-reduce over P that
  # XLA:CPU's YNN reduce fusion crashes on under `vmap` in `lax.map` (jaxlib 0.10.2, segfault;
  # `test_vmapped_examples_on_either_side_of_the_range_get_exact_finite_gradients`).
  carried = carried * jnp.stack([jnp.concatenate([u, u], axis=-1)] * blocks, axis=-3)
  both = jnp.einsum("bhnpsc,bhnpce->bhnpse", rows, carried)  # [B, H, N, P, S, 2E]
  off_diagonal = (both[..., :channels] * jnp.exp(fwd_b - before[..., None, :])
                  + both[..., channels:] * jnp.exp(end[..., None, :] - bwd_b))
  return (diagonal + off_diagonal).reshape(u.shape)


def _diagonal_blocks(square, size):
  """The S×S blocks on the diagonal of [..., C, C] matrices, by reshapes and a strided slice.

  Not `jnp.diagonal`, which lowers to a gather (and a scatter-add in the backward pass).

  Args:
    square: [..., C, C].
    size: S, dividing C.

  Returns:
    [..., C/S, S(r), S(c)].
  """
  *lead, chunk, _ = square.shape
  blocks = chunk // size
  tiles = square.reshape(*lead, blocks, size, blocks, size)
  tiles = jnp.swapaxes(tiles, -3, -2).reshape(*lead, blocks * blocks, size, size)  # [..., P·P, S, S]
  return tiles[..., ::blocks + 1, :, :]


def _exact_block(scores, u, fwd, bwd):
  """Σ_c scores_rc M_rc u_c with an exact per-channel mask, channels last (no relayout).

  Args:
    scores: [..., C(r), C(c)].
    u: [..., C, E] carried values.
    fwd: [..., C, E] inclusive cumsum F of the forward gates within the block.
    bwd: [..., C, E] inclusive cumsum A of log λ within the block.

  Returns:
    [..., C, E].
  """
  size = u.shape[-2]
  row = jnp.arange(size)[:, None, None]
  col = jnp.arange(size)[None, :, None]
  exponent = jnp.where(row > col, fwd[..., :, None, :] - fwd[..., None, :, :],
                       jnp.where(row < col, bwd[..., None, :, :] - bwd[..., :, None, :], 0.0))
  weights = scores[..., None] * jnp.exp(exponent)  # [..., C(r), C(c), E]
  # A contraction over keys, not a product summed over an inner axis: the sum's backward pass
  # (a reduce over a non-minor axis plus a transpose) segfaults XLA:CPU's YNN fusions on
  # AVX2-only CPUs (jaxlib 0.10.2); a dot_general and its transposes are dots.
  return jnp.einsum("...rce,...ce->...re", weights, u)
