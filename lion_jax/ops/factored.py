"""The factored chunk kernel for per-channel decays, with a hand-written backward pass.

`chunkwise.bidirectional_chunk_scan` with one decay per carried channel (vector decays) runs
this kernel on chunks whose log-decays span at most 2W (`chunkwise.factored_exponent_limit`),
and recomputes up to P steep chunks exactly on the side. Every product of the mask splits at
each chunk's middles R (of F) and R' (of A), so the same-chunk block and the chunk states share
their operands: with x_c = e^{R − F_c} u_c and y_c = e^{A_c − R'} u_c,

  out_r = e^{F_r − R} ⊙ (Σ_{c<r} s_rc x_c + q_r·e^{R} S→) + e^{R' − A_r} ⊙ (Σ_{c>r} s_rc y_c
          + q_r·e^{Ā − R'} S←) + s_rr u_r,
  leaving the chunk:  e^{F̄ − R} ⊙ Σ_c k_c x_cᵀ (forward),  e^{R'} ⊙ Σ_c k_c y_cᵀ (backward),

S→, S← the states entering the chunk from the left and from the right (docs/math.md §4.3).

Why by hand: under automatic differentiation the steep chunks' gathers and overwrites turn into
full-size scatter-adds of zeros for every operand, which cost 12–15% of the kernel whether or
not a chunk is steep, and a `cond` between this kernel and the exact masks keeps the residuals
of both (docs/benchmarks.md §1). Here the backward pass writes the steep chunks' gradients into
its own buffers in place, and keeps only the operands and the chunk states: O(L·(K + E)) plus
O(N·K·E), never a [C, C] block per chunk.

Shapes: B batch, H heads, N chunks, C chunk length, K key width, E carried channels, P steep
chunks recomputed on the side.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp

from lion_jax.ops import fused_chunks

# Whether calls traced now run the per-chunk products as fused Pallas kernels
# (`lion_jax.ops.fused_chunks`) instead of XLA array ops; `fused_kernels` sets it.
_FUSED = contextvars.ContextVar("fused_chunk_kernels", default=False)


@contextlib.contextmanager
def fused_kernels(enabled: bool = True):
  """Within this context, vector-decay `chunk_scan` calls traced use the fused Pallas kernels;
  a scalar-decay one raises instead of running unfused.

  Same values as the array-op kernel (the same formulas, one chunk per program); on a GPU C, K
  and E must be powers of two of at least 16 (`fused_chunks.check_shapes`). Experimental. Read
  while tracing: it decides for functions first traced (called or lowered) inside the context;
  a jitted function traced before keeps the kernel it was traced with, since JAX's trace cache
  does not see this setting, so jit a fresh function (as `bench/segments.py` does per case).
  """
  token = _FUSED.set(enabled)
  try:
    yield
  finally:
    _FUSED.reset(token)


def fused_kernels_on() -> bool:
  """Whether `fused_kernels` is in effect for what is traced now."""
  return _FUSED.get()


def _stage(name: str):
  """Traces the decorated function under the name scope "stage:<name>".

  Profiles map each op to its source through the compiled HLO's stack frames, but a custom
  VJP's backward pass carries the forward call's frames, so every op of `_backward_rule` would
  read as `factored_chunks`; the scope, kept in each op's name, tells its stages apart
  (bench/segments.py --profile-steps). Values are unchanged.
  """
  def decorate(fn):
    @functools.wraps(fn)
    def named(*args, **kwargs):
      with jax.named_scope(f"stage:{name}"):
        return fn(*args, **kwargs)
    return named
  return decorate


def factored_chunks(q, k, u, fwd, bwd, slots, *, two_way_states, limit: float, exact_chunks,
                    initial=None):
  """Σ_j (q_i·k_j) M_ij u_j over all keys, chunk by chunk, for per-channel decays.

  Args:
    q, k: [B, H, N, C, K] queries and keys.
    u: [B, H, N, C, E] carried values.
    fwd, bwd: [B, H, N, C, E] chunk-local inclusive cumsums F of the forward gates and A of
      log λ; every chunk not in `slots` spans at most 2W.
    slots: [P] int32 flat indices into [B·H·N] of the chunks to recompute exactly, padded with
      B·H·N (no chunk).
    two_way_states: (F̄, forward leaving, Ā, backward leaving, initial) -> the states entering
      each chunk from the left and from the right, a value of `chunkwise.TWO_WAY_PASSES`.
    limit: W, the largest |exponent| of one factor.
    exact_chunks: (q, k, u, F, A, S→, S←) on [P, C, X] chunks and [P, K, E] entering states ->
      ([P, C, E] outputs, ([P, K, E], [P, K, E]) forward and backward leaving states), exact for
      any span.
    initial: [2B, H, K, E] the states entering each row's first chunk from the left, then
      (rows B..2B) those entering its last chunk from the right; None: zero.

  Returns:
    [B, H, N, C, E] outputs.
  """
  fused = fused_kernels_on()
  if fused and jax.default_backend() == "gpu":
    fused_chunks.check_shapes(q.shape[-2], q.shape[-1], u.shape[-1])
  return _factored(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots,
                   initial)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2, 3))
def _factored(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots, initial):
  return _forward(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots,
                  initial)[0]


def _factors(fwd, bwd, limit):
  """The chunk middles and the factors both passes use.

  Returns:
    middles R, R' and totals F̄, Ā ([B, H, N, E]); key-side factors e^{R − F}, e^{A − R'} and
    query-side factors e^{F − R}, e^{R' − A} ([B, H, N, C, E]), each clipped to e^{±W}: a no-op
    on the chunks the kernel is exact for, and finite on the steep ones it overwrites.
  """
  bounded = lambda x: jnp.exp(jnp.clip(x, -limit, limit))
  middle = lambda x: 0.5 * (jnp.max(x, axis=-2) + jnp.min(x, axis=-2))  # [B, H, N, E]
  fwd_mid, bwd_mid = middle(fwd), middle(bwd)  # R, R' (they cancel: no gradient)
  below, above = fwd - fwd_mid[..., None, :], bwd - bwd_mid[..., None, :]  # [B, H, N, C, E]
  return (fwd_mid, bwd_mid, fwd[..., -1, :], bwd[..., -1, :],
          bounded(-below), bounded(above), bounded(below), bounded(-above))


def _masks(size):
  row = jnp.arange(size)[:, None]
  col = jnp.arange(size)[None, :]
  return row > col, row < col


def _diagonal(scores):
  """[..., C, C] -> [..., C, 1] s_rr."""
  return jnp.sum(scores * jnp.eye(scores.shape[-1], dtype=scores.dtype), axis=-1, keepdims=True)


def _gather(x, slots):
  """[B, H, N, ...] -> [P, ...]: the chunks at `slots`, zeros past the end."""
  return jnp.take(x.reshape(-1, *x.shape[3:]), slots, axis=0, mode="fill", fill_value=0)


def _set(x, slots, values):
  """`x` [B, H, N, ...] with the chunks at `slots` replaced (nothing written past the end)."""
  flat = x.reshape(-1, *x.shape[3:])
  return flat.at[slots].set(values.astype(x.dtype), mode="drop").reshape(x.shape)


def _add(x, slots, values):
  """`x` [B, H, N, ...] with `values` [P, ...] added at the chunks at `slots`."""
  flat = x.reshape(-1, *x.shape[3:])
  return flat.at[slots].add(values.astype(x.dtype), mode="drop").reshape(x.shape)


def _forward(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots, initial):
  """Outputs, and what the backward pass keeps: the operands and the entering states."""
  enter_forward, enter_backward = _entering(two_way_states, limit, exact_chunks, fused, q, k, u,
                                            fwd, bwd, slots, initial)
  steep = [_gather(a, slots) for a in (q, k, u, fwd, bwd)]  # [P, C, X]
  if fused:
    out = fused_chunks.chunk_outputs(q, k, u, fwd, bwd, enter_forward, enter_backward,
                                     limit=limit)
  else:
    out = _outputs(limit, q, k, u, fwd, bwd, enter_forward, enter_backward)
  steep_out, _ = exact_chunks(*steep, _gather(enter_forward, slots),
                              _gather(enter_backward, slots))
  out = _set(out, slots, steep_out)
  return out, (q, k, u, fwd, bwd, slots, enter_forward, enter_backward, initial)


def _outputs(limit, q, k, u, fwd, bwd, enter_forward, enter_backward):
  """[B, H, N, C, E] every chunk's factored products (finite, not exact, on steep chunks)."""
  fwd_mid, bwd_mid, _, bwd_total, to_left, to_right, from_left, from_right = _factors(
      fwd, bwd, limit)
  x, y = to_left * u, to_right * u  # [B, H, N, C, E]
  per_chunk = lambda log_scale: jnp.exp(log_scale)[..., None, :]  # [B, H, N, 1, E], all ≤ 1
  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  lower_mask, upper_mask = _masks(scores.shape[-1])
  lower = (jnp.einsum("bhnrc,bhnce->bhnre", jnp.where(lower_mask, scores, 0.0), x)
           + jnp.einsum("bhnrk,bhnke->bhnre", q, per_chunk(fwd_mid) * enter_forward))
  upper = (jnp.einsum("bhnrc,bhnce->bhnre", jnp.where(upper_mask, scores, 0.0), y)
           + jnp.einsum("bhnrk,bhnke->bhnre", q, per_chunk(bwd_total - bwd_mid) * enter_backward))
  return from_left * lower + from_right * upper + _diagonal(scores) * u


def _forward_rule(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots,
                  initial):
  return _forward(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots,
                  initial)


def _backward_rule(two_way_states, limit, exact_chunks, fused, saved, grad):
  """Gradients with respect to q, k, u, F, A and the initial states from the output cotangent
  `grad`."""
  q, k, u, fwd, bwd, slots, enter_forward, enter_backward, initial = saved
  fwd_total, bwd_total = fwd[..., -1, :], bwd[..., -1, :]  # [B, H, N, E]

  # The steep chunks' outputs came from `exact_chunks`: their cotangent goes there, and the
  # factored products (finite, but not theirs) see zeros.
  steep = [_gather(a, slots) for a in (q, k, u, fwd, bwd)]
  steep_grad = _gather(grad, slots)
  grad = _set(grad, slots, jnp.zeros_like(steep_grad))
  if fused:
    d_enter_forward, d_enter_backward = fused_chunks.entering_grads(q, fwd, bwd, grad,
                                                                    limit=limit)
  else:
    products = _output_grads(limit, q, k, u, fwd, bwd, enter_forward, enter_backward, grad)
    d_enter_forward, d_enter_backward = products[-2:]

  # The steep chunks' outputs: their share of every gradient, entering states included.
  _, pull_outputs = jax.vjp(lambda *a: exact_chunks(*a)[0], *steep,
                            _gather(enter_forward, slots), _gather(enter_backward, slots))
  steep_grads = list(pull_outputs(steep_grad))
  d_enter_forward = _add(d_enter_forward, slots, steep_grads[5])
  d_enter_backward = _add(d_enter_backward, slots, steep_grads[6])

  # The state pass backwards: the same two-way pass, each direction now from the other end.
  d_forward_leaving, d_backward_leaving, d_fwd_scan, d_bwd_scan = _states_backward(
      two_way_states, fwd_total, bwd_total, enter_forward, enter_backward, d_enter_forward,
      d_enter_backward)
  d_initial = None
  if initial is not None:
    # The state before the first chunk (in each direction's order) reaches it directly and the
    # rest through that chunk's decay: d_enter there plus e^{total} times its d(leaving).
    d_initial = jnp.concatenate([
        d_enter_forward[:, :, 0] + jnp.exp(fwd_total[:, :, 0])[..., None, :]
        * d_forward_leaving[:, :, 0],
        d_enter_backward[:, :, -1] + jnp.exp(bwd_total[:, :, -1])[..., None, :]
        * d_backward_leaving[:, :, -1]]).astype(initial.dtype)  # [2B, H, K, E]

  # Leaving states: the steep chunks' from `exact_chunks`, the others' from the products.
  zero_states = jnp.zeros(steep[1].shape[:1] + enter_forward.shape[3:], u.dtype)
  _, pull_leaving = jax.vjp(lambda *a: exact_chunks(*a, zero_states, zero_states)[1], *steep)
  steep_d_leaving = (_gather(d_forward_leaving, slots), _gather(d_backward_leaving, slots))
  steep_grads = [a + b for a, b in zip(steep_grads, pull_leaving(steep_d_leaving))]
  d_forward_leaving = _set(d_forward_leaving, slots, jnp.zeros_like(steep_d_leaving[0]))
  d_backward_leaving = _set(d_backward_leaving, slots, jnp.zeros_like(steep_d_leaving[1]))
  if fused:
    grads = fused_chunks.chunk_grads(q, k, u, fwd, bwd, enter_forward, enter_backward, grad,
                                     d_forward_leaving, d_backward_leaving, d_fwd_scan,
                                     d_bwd_scan, limit=limit)
  else:
    grads = _leaving_grads(limit, k, u, fwd, bwd, *products[:-2], d_forward_leaving,
                           d_backward_leaving, d_fwd_scan, d_bwd_scan)
  grads = [_add(d, slots, s) for d, s in zip(grads, steep_grads[:5])]
  return (*grads, None, d_initial)


@_stage("output_grads")
def _output_grads(limit, q, k, u, fwd, bwd, enter_forward, enter_backward, grad):
  """The factored products' gradients from the output cotangent (zero on steep chunks).

  Returns:
    [B, H, N, C, ·] d q, d k, d u, d F, d A, d x, d y (x = e^{R − F} u, y = e^{A − R'} u),
    [B, H, N, E] d Ā so far, and [B, H, N, K, E] d S→, d S←.
  """
  fwd_mid, bwd_mid, _, bwd_total, to_left, to_right, from_left, from_right = _factors(
      fwd, bwd, limit)
  x, y = to_left * u, to_right * u
  per_chunk = lambda log_scale: jnp.exp(log_scale)[..., None, :]
  state_forward = per_chunk(fwd_mid) * enter_forward  # e^{R} S→
  state_backward = per_chunk(bwd_total - bwd_mid) * enter_backward  # e^{Ā − R'} S←
  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)
  lower_mask, upper_mask = _masks(scores.shape[-1])
  lower_scores = jnp.where(lower_mask, scores, 0.0)
  upper_scores = jnp.where(upper_mask, scores, 0.0)

  lower_grad, upper_grad = from_left * grad, from_right * grad  # [B, H, N, C, E]
  lower = (jnp.einsum("bhnrc,bhnce->bhnre", lower_scores, x)
           + jnp.einsum("bhnrk,bhnke->bhnre", q, state_forward))
  upper = (jnp.einsum("bhnrc,bhnce->bhnre", upper_scores, y)
           + jnp.einsum("bhnrk,bhnke->bhnre", q, state_backward))
  d_fwd = from_left * lower * grad  # through e^{F_r − R}
  d_bwd = -(from_right * upper * grad)  # through e^{R' − A_r}
  d_scores = (jnp.where(lower_mask, jnp.einsum("bhnre,bhnce->bhnrc", lower_grad, x), 0.0)
              + jnp.where(upper_mask, jnp.einsum("bhnre,bhnce->bhnrc", upper_grad, y), 0.0)
              + jnp.eye(scores.shape[-1], dtype=scores.dtype)
              * jnp.sum(grad * u, axis=-1, keepdims=True))  # s_rr u_r
  d_x = jnp.einsum("bhnrc,bhnre->bhnce", lower_scores, lower_grad)
  d_y = jnp.einsum("bhnrc,bhnre->bhnce", upper_scores, upper_grad)
  d_q = (jnp.einsum("bhnrc,bhnck->bhnrk", d_scores, k)
         + jnp.einsum("bhnre,bhnke->bhnrk", lower_grad, state_forward)
         + jnp.einsum("bhnre,bhnke->bhnrk", upper_grad, state_backward))
  d_k = jnp.einsum("bhnrc,bhnrk->bhnck", d_scores, q)
  d_u = _diagonal(scores) * grad
  d_state_forward = jnp.einsum("bhnrk,bhnre->bhnke", q, lower_grad)  # d(e^{R} S→)
  d_state_backward = jnp.einsum("bhnrk,bhnre->bhnke", q, upper_grad)
  d_bwd_total = jnp.sum(state_backward * d_state_backward, axis=-2)  # through e^{Ā − R'}
  d_enter_forward = per_chunk(fwd_mid) * d_state_forward
  d_enter_backward = per_chunk(bwd_total - bwd_mid) * d_state_backward
  return d_q, d_k, d_u, d_fwd, d_bwd, d_x, d_y, d_bwd_total, d_enter_forward, d_enter_backward


@_stage("leaving_grads")
def _leaving_grads(limit, k, u, fwd, bwd, d_q, d_k, d_u, d_fwd, d_bwd, d_x, d_y, d_bwd_total,
                   d_forward_leaving, d_backward_leaving, d_fwd_scan, d_bwd_scan):
  """`_output_grads`' d q, d k, d u, d F, d A completed with the leaving states' share (the state
  pass's gradients d_*_leaving, zero on steep chunks, and d_*_scan of the totals)."""
  fwd_mid, bwd_mid, fwd_total, _, to_left, to_right, _, _ = _factors(fwd, bwd, limit)
  x, y = to_left * u, to_right * u
  per_chunk = lambda log_scale: jnp.exp(log_scale)[..., None, :]
  forward_products = jnp.einsum("bhnck,bhnce->bhnke", k, x)  # Σ_c k_c x_cᵀ
  backward_products = jnp.einsum("bhnck,bhnce->bhnke", k, y)
  d_forward_products = per_chunk(fwd_total - fwd_mid) * d_forward_leaving
  d_backward_products = per_chunk(bwd_mid) * d_backward_leaving
  d_fwd_total = d_fwd_scan + jnp.sum(d_forward_products * forward_products, axis=-2)
  d_bwd_total = d_bwd_total + d_bwd_scan
  d_k = (d_k + jnp.einsum("bhnce,bhnke->bhnck", x, d_forward_products)
         + jnp.einsum("bhnce,bhnke->bhnck", y, d_backward_products))
  d_x = d_x + jnp.einsum("bhnck,bhnke->bhnce", k, d_forward_products)
  d_y = d_y + jnp.einsum("bhnck,bhnke->bhnce", k, d_backward_products)

  # x = e^{R − F} u, y = e^{A − R'} u.
  d_u = d_u + to_left * d_x + to_right * d_y
  d_fwd = d_fwd - x * d_x
  d_bwd = d_bwd + y * d_y
  d_fwd = d_fwd.at[..., -1, :].add(d_fwd_total)  # F̄ = F at the chunk's last token
  d_bwd = d_bwd.at[..., -1, :].add(d_bwd_total)
  return d_q, d_k, d_u, d_fwd, d_bwd


@_stage("state_pass_backward")
def _states_backward(two_way_states, fwd_total, bwd_total, enter_forward, enter_backward,
                     d_enter_forward, d_enter_backward):
  """The state pass's gradients: with respect to each chunk's leaving states and its total.

  The forward states obey S_{n+1} = e^{F̄_n} S_n + leaving_n, so the gradient with respect to
  leaving_n is Σ_{m>n} exp(Σ_{n<p<m} F̄_p) d S→_m: the pass from the right over the entering
  gradients with the same totals; the backward direction's, mirrored, is the pass from the
  left. The gradient with respect to F̄_n is Σ_K d leaving_n ⊙ e^{F̄_n} S→_n (Ā_n likewise).

  Returns:
    [B, H, N, K, E] d(forward leaving), d(backward leaving) and [B, H, N, E] d F̄, d Ā.
  """
  d_backward_leaving, d_forward_leaving = two_way_states(bwd_total, d_enter_backward,
                                                         fwd_total, d_enter_forward)
  d_total = lambda d_leaving, total, entering: jnp.sum(
      d_leaving * jnp.exp(total)[..., None, :] * entering, axis=-2)
  return (d_forward_leaving, d_backward_leaving,
          d_total(d_forward_leaving, fwd_total, enter_forward),
          d_total(d_backward_leaving, bwd_total, enter_backward))


def _entering(two_way_states, limit, exact_chunks, fused, q, k, u, fwd, bwd, slots,
              initial=None):
  """[B, H, N, K, E] the states entering each chunk from the left and from the right.

  The steep chunks' leaving states come from `exact_chunks` with zero entering states (they do
  not depend on them).
  """
  fwd_total, bwd_total = fwd[..., -1, :], bwd[..., -1, :]  # [B, H, N, E]
  if fused:
    forward_leaving, backward_leaving = fused_chunks.leaving_states(k, u, fwd, bwd, limit=limit)
  else:
    fwd_mid, bwd_mid, _, _, to_left, to_right, _, _ = _factors(fwd, bwd, limit)
    per_chunk = lambda log_scale: jnp.exp(log_scale)[..., None, :]
    forward_leaving = per_chunk(fwd_total - fwd_mid) * jnp.einsum("bhnck,bhnce->bhnke", k,
                                                                  to_left * u)
    backward_leaving = per_chunk(bwd_mid) * jnp.einsum("bhnck,bhnce->bhnke", k, to_right * u)
  steep = [_gather(a, slots) for a in (q, k, u, fwd, bwd)]
  zero_states = jnp.zeros(steep[1].shape[:1] + forward_leaving.shape[3:], u.dtype)
  _, (steep_forward, steep_backward) = exact_chunks(*steep, zero_states, zero_states)
  return two_way_states(fwd_total, _set(forward_leaving, slots, steep_forward),
                        bwd_total, _set(backward_leaving, slots, steep_backward), initial)


_factored.defvjp(_forward_rule, _backward_rule)
