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
When a chunk's log-decays span at most 2W (`factored_exponent_limit`: 120 in float32), each
triangle factors through a per-chunk middle R, e^{F_r − R} · e^{R − F_c} = e^{F_r − F_c}, and
the block is two matmuls with O(C·E) scaling, whose scaled values also make the chunk states
(`lion_jax.ops.factored`, which has its own backward pass and passes the states of both directions
in one loop that reads and writes them where they lie, `TWO_WAY_PASSES`). Chunks that span more
(steep chunks, which trained selective gates make) are recomputed exactly on the side, up to
`steep_chunk_capacity` of them; a call with more takes exact [S, S, E] masks in sub-chunks of
S = 8, one chunk at a time. A token's log-gate below −W/2 is raised to −W/2 first: the mask
across it is below e^{−W/2} (1e-13 in float32) either way (docs/math.md §4.3).

Unlike running a causal kernel on the sequence and on its flip (`lion_jax.ops.recurrent`), this
computes each C×C score block once and never flips the sequence, and it works heads-first
([B, H, N, C, X]) so that every contraction is a batched matmul.

Shapes follow the legend in `lion_jax.ops.masks`; additionally N = number of chunks, C = chunk
length.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from lion_jax.ops import factored
from lion_jax.options import check_choice

# The exact vector-decay masks split a chunk into sub-chunks of this size: only the diagonal
# sub-blocks get [S, S, E] masks, the rest goes through matmuls.
VECTOR_SUBCHUNK = 8

# The factored kernel recomputes up to max(MIN, B·H·N / DIVISOR) steep chunks exactly on the side
# (`steep_chunk_capacity`); more than that, and the whole call takes the exact masks.
STEEP_CHUNKS_MIN = 4
STEEP_CHUNKS_DIVISOR = 16


def bidirectional_chunk_scan(q, k, u, forward_gate, log_decay, chunk_size: int = 64,
                             with_key_sums: bool = False, state_pass: str = "auto",
                             branch_axis: str | None = None, initial_states=None):
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
    initial_states: ([B, H, K, E], [B, H, K, E]) states entering the sequence from the left
      (before its first token) and from the right (after its last), which query i reads
      decayed by the gates between; None: zero. Not with `with_key_sums`.

  Returns:
    [B, L, H, E] outputs, and [B, L, H, 1] key sums (or None).
  """
  state_pass = resolve_state_pass(state_pass)
  entering_states = STATE_PASSES[state_pass]
  batch, length, heads, _ = k.shape
  groups = log_decay.shape[-1]
  if with_key_sums and groups != 1:
    raise ValueError("with_key_sums needs one decay per head (G = 1); carry a channel of ones "
                     "per decay channel instead.")
  if with_key_sums and initial_states is not None:
    raise ValueError("initial_states carry no key sums: carry a channel of ones instead of "
                     "with_key_sums.")
  if initial_states is not None:
    expected = (batch, heads, q.shape[-1], u.shape[-1])
    shapes = [tuple(getattr(state, "shape", ())) for state in initial_states]
    if len(shapes) != 2 or any(shape != expected for shape in shapes):
      raise ValueError(f"initial_states: expected two [B, H, K, E] = {list(expected)} states "
                       f"(from the left, from the right), got shapes {shapes}")
  # [2B, H, K, E] in the state pass's order: the forward direction's, then the backward's.
  initial = None if initial_states is None else jnp.concatenate(initial_states)
  chunk = max(1, min(chunk_size, length))
  pad = -length % chunk
  padded = [jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
            for x in (q, k, u, forward_gate, log_decay)]  # [B, L', H, X]
  unchunk = lambda x: _unchunk(x)[:, :length]  # [B, H, N, C, X] -> [B, L, H, X]

  if groups == 1:
    if factored.fused_kernels_on():
      raise ValueError(
          "factored.fused_kernels() covers vector decays (one per carried channel), but this "
          "chunk_scan call has one decay per head (scalar decays, or none): trace it outside "
          "the fused_kernels() context, or use model.decay_shape='vector'.")
    out, key_sums = _chunk_kernel(*_to_chunks(padded, chunk), _scalar_block, entering_states,
                                  initial)
    return unchunk(out), unchunk(key_sums) if with_key_sums else None
  # Vector decays. A token's log-gate below −W/2 only scales the mask across it by less than
  # e^{−W/2} (1e-13 in float32), under every rounding of the sums it enters; raising it to −W/2
  # bounds what one token adds to a chunk's span.
  limit = factored_exponent_limit(u.dtype)
  padded[3:] = [jnp.maximum(gate, -0.5 * limit) for gate in padded[3:]]
  # The factored kernel (`factored.factored_chunks`) needs each chunk to span at most 2W, but
  # for up to `steep_chunk_capacity` steep chunks, which it recomputes exactly on the side. It
  # runs unconditionally: XLA:CPU runs it 24-35% slower inside a `cond` or `switch` (fwd+bwd,
  # L = 512, B = 32, H = 4, E = 32), and every branch enlarges the memory plan. A call with more
  # steep chunks takes the exact masks instead, under a `cond` whose other branch is empty.
  chunked = _to_chunks(padded, chunk)
  steep = steep_chunks(*padded[3:], chunk, limit)  # [B, H, N]
  capacity = steep_chunk_capacity(steep.size)
  out = factored.factored_chunks(*chunked, steep_slots(steep, capacity),
                                 two_way_states=TWO_WAY_PASSES[state_pass],
                                 limit=limit,
                                 exact_chunks=_exact_chunks, initial=initial)
  too_steep = jnp.sum(steep) > capacity
  if branch_axis is not None:
    too_steep = jax.lax.pmax(too_steep.astype(jnp.int32), branch_axis) > 0
  # The initial states are an operand, not a closure: their gradient passes through here too.
  operands = chunked if initial is None else (*chunked, initial)
  exact = lambda *ops: _chunk_kernel(*ops[:5], _exact_vector_block, entering_states,
                                     *ops[5:])[0]
  out = jnp.where(too_steep, _only_if(too_steep, exact, *operands), out)
  return unchunk(out), None


def _only_if(predicate, fn, *operands):
  """fn(*operands) where `predicate` holds, else zeros of its shape; forward and backward.

  A differentiated `lax.cond` keeps every residual its branches could need and zero-fills the
  slots of the branch not taken: 15% of a vector kernel's forward+backward, and 229 MB on its
  201 (L = 512, B = 32, H = 4, E = 32), for a fallback that almost never runs. Here the
  backward pass recomputes fn's forward instead, only where it runs, and keeps nothing but the
  operands, which are alive anyway.
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


def steep_chunks(forward_gate, log_decay, chunk: int, limit):
  """Which chunks the factored kernel cannot take: a channel spanning more than 2W, or NaN.

  Args:
    forward_gate, log_decay: [B, L', H, G] log-gates, L' a multiple of `chunk`.
    chunk: C.
    limit: W (`factored_exponent_limit`).

  Returns:
    [B, H, N] bool.
  """
  return _steep(_chunk_spans(forward_gate, log_decay, chunk), limit)


def _chunk_spans(forward_gate, log_decay, chunk: int):
  """[B, L'/C, H, G] Σ_t max(|f_t|, |a_t|) over each chunk: at least either gate's span there
  (one pass over both gates instead of one per gate)."""
  batch, length, heads, groups = log_decay.shape
  return jnp.maximum(jnp.abs(forward_gate), jnp.abs(log_decay)).reshape(
      batch, length // chunk, chunk, heads, groups).sum(2)


def _steep(spans, limit):
  """[B, N, H, G] spans -> [B, H, N] whether any channel spans more than 2W (or is NaN)."""
  return jnp.moveaxis(~jnp.all(spans <= 2 * limit, axis=-1), 1, 2)


def steep_chunk_capacity(num_chunks: int) -> int:
  """P: how many steep chunks the factored kernel recomputes exactly on the side
  (`factored.factored_chunks`); a call with more takes the exact masks for every chunk."""
  return max(STEEP_CHUNKS_MIN, num_chunks // STEEP_CHUNKS_DIVISOR)


def steep_slots(steep, capacity: int):
  """[P] flat indices into [B·H·N] of the first P steep chunks, then B·H·N (no chunk)."""
  flat = steep.reshape(-1)
  return jnp.nonzero(flat, size=capacity, fill_value=flat.shape[0])[0].astype(jnp.int32)


def _chunk_kernel(q, k, u, fwd, bwd, intra_block, entering_states, initial=None):
  """The chunk kernel on chunked inputs, with a given same-chunk block.

  Args:
    q, k: [B, H, N, C, K].
    u: [B, H, N, C, E].
    fwd, bwd: [B, H, N, C, G] chunk-local inclusive cumsums F of the forward gates and A of
      log λ.
    intra_block: (scores, u, F, A) -> ([B, H, N, C, E] same-chunk outputs, [B, H, N, C, 1]
      same-chunk key sums or None).
    entering_states: (totals, leaving) -> entering states, a value of `STATE_PASSES`.
    initial: [2B, H, K, E] the states entering the first chunk of each direction (forward
      directions first), or None (zero); not with key sums.

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
  if initial is not None:
    entering = (with_initial_states(entering[0], totals, initial), *entering[1:])
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


def _exact_chunks(q, k, u, fwd, bwd, forward_state, backward_state):
  """Outputs and leaving states of chunks of any span (`factored.factored_chunks`).

  Args:
    q, k: [P, C, K]; u, fwd, bwd: [P, C, E]; forward_state, backward_state: [P, K, E] the
      states entering each chunk from the left and from the right.

  Returns:
    [P, C, E] outputs and ([P, K, E], [P, K, E]) the forward and backward leaving states.
  """
  return (_steep_outputs(q, k, u, fwd, bwd, forward_state, backward_state),
          _steep_leaving(k, u, fwd, bwd))


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


def with_initial_states(entering, totals, initial):
  """Entering states of a state pass that started from `initial` instead of zero.

  The pass is linear in its starting state, which reaches chunk n decayed by every chunk before
  it: exp(Σ_{m<n} totals_m), a sum of log-decays ≤ 0 taken directly (never as a difference).

  Args:
    entering: [2B, H, N, K, X] the entering states of a pass started from zero.
    totals: [2B, H, N, G] whole-chunk log-decays, in the pass's chunk order.
    initial: [2B, H, K, X] the state before the first chunk of each row.

  Returns:
    [2B, H, N, K, X].
  """
  before = jnp.cumsum(jnp.pad(totals[:, :, :-1], [(0, 0), (0, 0), (1, 0), (0, 0)]), axis=2)
  return entering + jnp.exp(before)[..., None, :] * initial[:, :, None].astype(entering.dtype)


# How the chunk states pass between chunks, by `state_pass` value (lion_jax.options).
STATE_PASSES = {"scan": _entering_states, "associative": _entering_states_associative}


def _two_way_scan(fwd_totals, fwd_leaving, bwd_totals, bwd_leaving, initial=None):
  """The states entering each chunk from the left and from the right, by one N-step loop.

  Step i moves the forward state past chunk i and the backward state past chunk N − 1 − i,
  reading each direction's chunks where they lie and writing each entering state in place. The
  stacked form (`_two_way_stacked`) flips the backward direction, stacks both on the batch axis
  and moves the chunk axis to the front and back: a copy of the [2B, H, N, K, E] states at each
  of those steps, and at the ListOps preset they are twice the size of the layer's token
  activations. Its gradient is the same loop with the directions' roles swapped
  (`factored._states_backward`); with both, LION-S's training step at the ListOps preset runs
  1.05-1.09x faster on a 2-core CPU (docs/benchmarks.md §9, `bench/probes/state_pass.py --two-way`).
  Not differentiable by JAX at a usable cost (its loop carries the whole
  output); the factored kernel differentiates it by hand.

  Args:
    fwd_totals, bwd_totals: [B, H, N, G] whole-chunk log-decays F̄ and Ā, in sequence order.
    fwd_leaving, bwd_leaving: [B, H, N, K, X] what each chunk adds to the state leaving it
      towards later chunks (forward) and towards earlier ones (backward).
    initial: [2B, H, K, X] the state before the first chunk from the left (rows 0..B), then
      after the last chunk from the right (rows B..2B); None: zero.

  Returns:
    [B, H, N, K, X] S→_n = Σ_{m<n} exp(Σ_{m<p<n} F̄_p) leaving→_m (plus the initial state
    decayed by every chunk before n), and [B, H, N, K, X] S←_n = Σ_{m>n} exp(Σ_{n<p<m} Ā_p)
    leaving←_m (likewise).
  """
  num_chunks = fwd_totals.shape[2]
  take = lambda x, n: jax.lax.dynamic_index_in_dim(x, n, axis=2, keepdims=False)

  def step(i, carry):
    state_f, state_b, enter_f, enter_b = carry  # [B, H, K, X] ×2, [B, H, N, K, X] ×2
    j = num_chunks - 1 - i
    enter_f = jax.lax.dynamic_update_index_in_dim(enter_f, state_f, i, axis=2)
    enter_b = jax.lax.dynamic_update_index_in_dim(enter_b, state_b, j, axis=2)
    state_f = jnp.exp(take(fwd_totals, i))[..., None, :] * state_f + take(fwd_leaving, i)
    state_b = jnp.exp(take(bwd_totals, j))[..., None, :] * state_b + take(bwd_leaving, j)
    return state_f, state_b, enter_f, enter_b

  if initial is None:
    start_f = start_b = jnp.zeros(fwd_leaving[:, :, 0].shape, fwd_leaving.dtype)
  else:
    batch = fwd_leaving.shape[0]
    start_f, start_b = (x.astype(fwd_leaving.dtype) for x in (initial[:batch], initial[batch:]))
  carry = (start_f, start_b, jnp.zeros_like(fwd_leaving), jnp.zeros_like(bwd_leaving))
  return jax.lax.fori_loop(0, num_chunks, step, carry)[2:]


def _two_way_stacked(entering_states, fwd_totals, fwd_leaving, bwd_totals, bwd_leaving,
                     initial=None):
  """`_two_way_scan` by a one-direction pass (`STATE_PASSES`) over both directions stacked on
  the batch axis, the backward one flipped. Args and returns as `_two_way_scan`."""
  batch = fwd_totals.shape[0]
  totals = jnp.concatenate([fwd_totals, jnp.flip(bwd_totals, 2)])  # [2B, H, N, G]
  leaving = jnp.concatenate([fwd_leaving, jnp.flip(bwd_leaving, 2)])  # [2B, H, N, K, X]
  (entering,) = entering_states(totals, (leaving,))
  if initial is not None:
    entering = with_initial_states(entering, totals, initial)
  return entering[:batch], jnp.flip(entering[batch:], 2)


# Both directions' entering states at once, by `state_pass` value, for the factored kernel
# (`factored.factored_chunks`, which differentiates them by hand). The associative pass stays
# stacked: on a GPU each of the loop's N steps would be a kernel launch.
TWO_WAY_PASSES = {
    "scan": _two_way_scan,
    "associative": functools.partial(_two_way_stacked, _entering_states_associative),
}


def resolve_state_pass(state_pass: str) -> str:
  """The concrete state pass ("scan" or "associative") for `state_pass` on the default backend.

  "auto" picks, per backend, the pass measured faster there. On the CPU that is "scan": the
  N-step `lax.scan` does about half the associative form's work and its steps are cheap there
  (fwd+bwd of vector-decay attention at L = 1K to 16K: the associative pass 5–14% slower;
  docs/benchmarks.md section 9). On GPU and TPU it is "associative", where each of the scan's
  N steps is a kernel launch: on an H200 the associative pass was 1.40x faster at 4K and 1.36x
  at 16K, on an H100 1.23x at 4K (vector decays, C = 64; docs/benchmarks.md section 11). Not
  yet measured on a TPU.
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
