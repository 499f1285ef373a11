"""The factored chunk kernel's per-chunk work as fused Pallas kernels, one chunk per program.

`lion_jax.ops.factored` writes each step of a chunk (its factors, the [C, C] scores, the two masked
products, the reads of the entering states, the states it leaves) as separate array ops, and
XLA runs them as many small fusions, each reading and writing a [B, H, N, C, ·] tensor in device
memory: on an H100 three quarters of LION-S's ListOps step are such passes, not matmuls
(docs/benchmarks.md §11). Here each of the kernel's four per-chunk stages is one Pallas kernel
that loads a chunk's operands once, keeps every intermediate on chip and writes only what the
next stage reads:

  `leaving_states`   k, u, F, A            -> the two states the chunk leaves      [K, E] ×2
  `chunk_outputs`    q, k, u, F, A, S→, S← -> the chunk's outputs                  [C, E]
  `entering_grads`   q, F, A, g            -> d S→, d S← (what the state pass needs backwards)
  `chunk_grads`      everything above and the state pass's gradients -> d q, d k, d u, d F, d A

The state pass between chunks, the steep chunks and the exact fallback stay in XLA
(`lion_jax.ops.factored`, `lion_jax.ops.chunkwise`): these kernels compute the same values as the
factored kernel's products, formula for formula, so they inherit its exactness and its
treatment of steep chunks (finite here, overwritten there).

On a GPU the kernels lower through Triton; everywhere else they run in Pallas's interpreter
(correct, slow: for tests). Triton wants power-of-two block sizes, so on a GPU C, K and E must
be powers of two of at least 16, and so must E′ (`check_shapes`).

Measured on an H100 (docs/benchmarks.md §11, "Fused per-chunk kernels"): level with the
array-op kernel in time, 29% less memory in a training step. Opt-in and experimental:
`factored.fused_kernels`.

Shapes: B batch, H heads, N chunks, C chunk length, K key width, E carried channels (E′ of them
a program, `CHANNEL_BLOCK`); the kernels see [B·H·N, C, X] and [B·H·N, K, E] arrays.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def check_shapes(chunk: int, key_width: int, channels: int) -> None:
  """Raises ValueError unless C, K, E and E′ suit the GPU kernels (powers of two, ≥ 16)."""
  sizes = [("chunk length C", chunk), ("key width K", key_width), ("carried channels E", channels),
           ("channels a program E′ (CHANNEL_BLOCK)", min(CHANNEL_BLOCK or channels, channels))]
  sizes += [(f"channels a program E′ (KERNEL_SETTINGS[{kernel!r}])", min(block or channels,
                                                                         channels))
            for kernel, (block, _) in KERNEL_SETTINGS.items()]
  bad = {name: size for name, size in sizes if size < 16 or size & (size - 1)}
  if bad:
    raise ValueError(
        "the fused chunk kernels need powers of two of at least 16 on a GPU, got "
        + ", ".join(f"{name} = {size}" for name, size in bad.items())
        + "; choose model.chunk_size (and a head width) that are, or trace outside "
        "factored.fused_kernels().")


# Triton's warps per program on a GPU (None: Pallas's default), and how many of the E carried
# channels one program takes (None: all); benchmarks set them.
NUM_WARPS: int | None = None
CHANNEL_BLOCK: int | None = None
# Per kernel ("leaving", "outputs", "entering_grads", "chunk_grads"): (E′, W) in place of the
# two above, for that kernel alone.
KERNEL_SETTINGS: dict[str, tuple[int | None, int | None]] = {}
KERNELS = ("leaving", "outputs", "entering_grads", "chunk_grads")


def _interpret() -> bool:
  return jax.default_backend() != "gpu"


def _compiler_params(num_warps: int | None):
  """Triton's parameters: they also choose Triton, where JAX's default for a Pallas call on a
  GPU is Mosaic GPU (whose layouts these kernels do not declare)."""
  if _interpret():
    return None
  from jax.experimental.pallas import triton as pallas_triton  # pylint: disable=import-outside-toplevel
  return pallas_triton.CompilerParams(num_warps=num_warps)


def _mm(a, b, transpose_a=False, transpose_b=False):
  """a @ b with either operand transposed (2-D, no batch dimension), accumulated in float32 or
  wider."""
  contract = ((0 if transpose_a else 1,), (1 if transpose_b else 0,))
  accumulate = jnp.promote_types(jnp.promote_types(a.dtype, b.dtype), jnp.float32)
  return jax.lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=accumulate)


def _factors(fwd, bwd, limit):
  """One chunk's factors (`factored._factors`), from its [C, E] cumsums F and A.

  Not `factored._factors` itself: that one takes the totals as the last row by slicing, which
  Pallas's Triton lowering has no rule for, so here the last row is a masked sum.

  Returns:
    [1, E] e^{R}, e^{F̄ − R}, e^{R'}, e^{Ā − R'}, and [C, E] e^{R − F}, e^{A − R'},
    e^{F − R}, e^{R' − A} (each clipped to e^{±W}), and [C, 1] a mask of the last row.
  """
  bounded = lambda x: jnp.exp(jnp.minimum(jnp.maximum(x, -limit), limit))
  middle = lambda x: 0.5 * (jnp.max(x, axis=0) + jnp.min(x, axis=0))[None, :]  # [1, E]
  last_row = (jnp.arange(fwd.shape[0]) == fwd.shape[0] - 1)[:, None]  # [C, 1]
  row_of = lambda x: jnp.sum(jnp.where(last_row, x, 0.0), axis=0)[None, :]  # [1, E]
  fwd_mid, bwd_mid = middle(fwd), middle(bwd)
  fwd_total, bwd_total = row_of(fwd), row_of(bwd)
  below, above = fwd - fwd_mid, bwd - bwd_mid
  per_chunk = (jnp.exp(fwd_mid), jnp.exp(fwd_total - fwd_mid), jnp.exp(bwd_mid),
               jnp.exp(bwd_total - bwd_mid))
  return (*per_chunk, bounded(-below), bounded(above), bounded(below), bounded(-above),
          last_row)


def _triangles(size):
  row = jnp.arange(size)[:, None]
  col = jnp.arange(size)[None, :]
  return row > col, row < col, row == col


def _leaving_kernel(k_ref, u_ref, fwd_ref, bwd_ref, forward_ref, backward_ref, *, limit):
  k, u = k_ref[...], u_ref[...]
  _, fwd_rest, bwd_mid, _, to_left, to_right, _, _, _ = _factors(fwd_ref[...], bwd_ref[...],
                                                                 limit)
  forward_ref[...] = (fwd_rest * _mm(k, to_left * u, transpose_a=True)).astype(forward_ref.dtype)
  backward_ref[...] = (bwd_mid * _mm(k, to_right * u, transpose_a=True)).astype(
      backward_ref.dtype)


def _outputs_kernel(q_ref, k_ref, u_ref, fwd_ref, bwd_ref, enter_forward_ref, enter_backward_ref,
                    out_ref, *, limit):
  q, k, u = q_ref[...], k_ref[...], u_ref[...]
  fwd_mid, _, _, bwd_rest, to_left, to_right, from_left, from_right, _ = _factors(
      fwd_ref[...], bwd_ref[...], limit)
  lower_mask, upper_mask, diagonal = _triangles(q.shape[0])
  scores = _mm(q, k, transpose_b=True)  # [C, C]
  lower = (_mm(jnp.where(lower_mask, scores, 0.0), to_left * u)
           + _mm(q, fwd_mid * enter_forward_ref[...]))
  upper = (_mm(jnp.where(upper_mask, scores, 0.0), to_right * u)
           + _mm(q, bwd_rest * enter_backward_ref[...]))
  same = jnp.sum(jnp.where(diagonal, scores, 0.0), axis=1, keepdims=True)  # [C, 1] s_rr
  out_ref[...] = (from_left * lower + from_right * upper + same * u).astype(out_ref.dtype)


def _entering_grads_kernel(q_ref, fwd_ref, bwd_ref, grad_ref, forward_ref, backward_ref, *,
                           limit):
  q, grad = q_ref[...], grad_ref[...]
  fwd_mid, _, _, bwd_rest, _, _, from_left, from_right, _ = _factors(fwd_ref[...], bwd_ref[...],
                                                                     limit)
  forward_ref[...] = (fwd_mid * _mm(q, from_left * grad, transpose_a=True)).astype(
      forward_ref.dtype)
  backward_ref[...] = (bwd_rest * _mm(q, from_right * grad, transpose_a=True)).astype(
      backward_ref.dtype)


def _chunk_grads_kernel(q_ref, k_ref, u_ref, fwd_ref, bwd_ref, enter_forward_ref,
                        enter_backward_ref, grad_ref, d_forward_leaving_ref,
                        d_backward_leaving_ref, d_fwd_scan_ref, d_bwd_scan_ref,
                        d_q_ref, d_k_ref, d_u_ref, d_fwd_ref, d_bwd_ref, *, limit):
  """`factored._backward_rule`'s per-chunk products, fused (its names, one chunk)."""
  q, k, u, grad = q_ref[...], k_ref[...], u_ref[...], grad_ref[...]
  (fwd_mid, fwd_rest, bwd_mid, bwd_rest, to_left, to_right, from_left, from_right,
   last_row) = _factors(fwd_ref[...], bwd_ref[...], limit)
  lower_mask, upper_mask, diagonal = _triangles(q.shape[0])
  x, y = to_left * u, to_right * u  # [C, E]
  state_forward = fwd_mid * enter_forward_ref[...]  # e^{R} S→ [K, E]
  state_backward = bwd_rest * enter_backward_ref[...]  # e^{Ā − R'} S←
  scores = _mm(q, k, transpose_b=True)
  lower_scores = jnp.where(lower_mask, scores, 0.0)
  upper_scores = jnp.where(upper_mask, scores, 0.0)
  same = jnp.sum(jnp.where(diagonal, scores, 0.0), axis=1, keepdims=True)  # [C, 1]

  lower_grad, upper_grad = from_left * grad, from_right * grad  # [C, E]
  lower = _mm(lower_scores, x) + _mm(q, state_forward)
  upper = _mm(upper_scores, y) + _mm(q, state_backward)
  d_fwd = from_left * lower * grad
  d_bwd = -(from_right * upper * grad)
  d_scores = (jnp.where(lower_mask, _mm(lower_grad, x, transpose_b=True), 0.0)
              + jnp.where(upper_mask, _mm(upper_grad, y, transpose_b=True), 0.0)
              + jnp.where(diagonal, jnp.sum(grad * u, axis=1, keepdims=True), 0.0))
  d_x = _mm(lower_scores, lower_grad, transpose_a=True)
  d_y = _mm(upper_scores, upper_grad, transpose_a=True)
  d_q = (_mm(d_scores, k) + _mm(lower_grad, state_forward, transpose_b=True)
         + _mm(upper_grad, state_backward, transpose_b=True))
  d_k = _mm(d_scores, q, transpose_a=True)
  d_u = same * grad
  d_state_backward = _mm(q, upper_grad, transpose_a=True)  # [K, E]
  d_bwd_total = (jnp.sum(state_backward * d_state_backward, axis=0)[None, :]
                 + d_bwd_scan_ref[...])  # [1, E]

  d_forward_products = fwd_rest * d_forward_leaving_ref[...]  # [K, E]
  d_backward_products = bwd_mid * d_backward_leaving_ref[...]
  forward_products = _mm(k, x, transpose_a=True)  # Σ_c k_c x_cᵀ
  d_fwd_total = (d_fwd_scan_ref[...]
                 + jnp.sum(d_forward_products * forward_products, axis=0)[None, :])
  d_k = (d_k + _mm(x, d_forward_products, transpose_b=True)
         + _mm(y, d_backward_products, transpose_b=True))
  d_x = d_x + _mm(k, d_forward_products)
  d_y = d_y + _mm(k, d_backward_products)
  d_u = d_u + to_left * d_x + to_right * d_y
  d_fwd = d_fwd - x * d_x + jnp.where(last_row, d_fwd_total, 0.0)  # F̄ = F at the last token
  d_bwd = d_bwd + y * d_y + jnp.where(last_row, d_bwd_total, 0.0)
  for ref, value in ((d_q_ref, d_q), (d_k_ref, d_k), (d_u_ref, d_u), (d_fwd_ref, d_fwd),
                     (d_bwd_ref, d_bwd)):
    ref[...] = value.astype(ref.dtype)


def _call(kernel, inputs, outputs, **static):
  """Runs `kernel` with one chunk and one block of carried channels per program.

  Everything but the scores is separate per carried channel, so a program takes E′ =
  `CHANNEL_BLOCK` (or the kernel's `KERNEL_SETTINGS`) of the E channels (smaller tiles on chip) and recomputes its chunk's [C, C]
  scores; what sums over the channels (d q, d k) comes out per block and is summed here.

  Args:
    kernel: a `_*_kernel` above.
    inputs: ([B, H, N, R, X] array, whether X is the E channels) pairs: a program sees [R, E′]
      of a channel array and all [R, X] of the others.
    outputs: (trailing [R, X] shape, dtype, kind) per output: kind "channels" (X = E, each
      program writes its block) or "summed" (each block's share, summed over the blocks).
    **static: the kernel's keyword arguments.

  Returns:
    [B, H, N, R, X] outputs.
  """
  lead = inputs[0][0].shape[:3]
  count = lead[0] * lead[1] * lead[2]
  channels = next(x.shape[-1] for x, blocked in inputs if blocked)
  name = kernel.__name__.strip("_").removesuffix("_kernel")
  assert name in KERNELS, f"{kernel.__name__} is not one of fused_chunks.KERNELS"
  if unknown := sorted(set(KERNEL_SETTINGS) - set(KERNELS)):
    raise ValueError(f"fused_chunks.KERNEL_SETTINGS names {unknown}, which are not kernels; "
                     f"the kernels are {', '.join(KERNELS)}")
  block, num_warps = KERNEL_SETTINGS.get(name, (CHANNEL_BLOCK, NUM_WARPS))
  block = min(block or channels, channels)
  if channels % block:
    raise ValueError(f"fused_chunks: {block} channels a program must divide E = {channels}")
  blocks = channels // block
  flat = [x.reshape(count, *x.shape[3:]) for x, _ in inputs]

  def in_spec(x, blocked):
    rows, width = x.shape[1:]
    if blocked:
      return pl.BlockSpec((None, rows, block), lambda i, j: (i, 0, j))
    return pl.BlockSpec((None, rows, width), lambda i, j: (i, 0, 0))

  def out_spec(shape, kind):
    if kind == "channels":
      return pl.BlockSpec((None, shape[0], block), lambda i, j: (i, 0, j))
    return pl.BlockSpec((None, None, *shape), lambda i, j: (i, j, 0, 0))

  results = pl.pallas_call(
      functools.partial(kernel, **static),
      out_shape=[jax.ShapeDtypeStruct((count, *shape) if kind == "channels"
                                      else (count, blocks, *shape),
                                      jnp.promote_types(dtype, jnp.float32)
                                      if kind == "summed" else dtype)
                 for shape, dtype, kind in outputs],
      grid=(count, blocks),
      in_specs=[in_spec(x, blocked) for x, (_, blocked) in zip(flat, inputs)],
      out_specs=[out_spec(shape, kind) for shape, _, kind in outputs],
      interpret=_interpret(),
      compiler_params=_compiler_params(num_warps),
  )(*flat)
  results = [r if kind == "channels" else jnp.sum(r, axis=1).astype(dtype)
             for r, (_, dtype, kind) in zip(results, outputs)]
  return [r.reshape(*lead, *r.shape[1:]) for r in results]


def leaving_states(k, u, fwd, bwd, *, limit: float):
  """What each chunk adds to the states leaving it, as `factored._entering` computes them.

  Args:
    k: [B, H, N, C, K]; u, fwd, bwd: [B, H, N, C, E].
    limit: W.

  Returns:
    [B, H, N, K, E] forward e^{F̄ − R} Σ_c k_c (e^{R − F_c} u_c)ᵀ and backward
    e^{R'} Σ_c k_c (e^{A_c − R'} u_c)ᵀ.
  """
  states = (k.shape[-1], u.shape[-1])
  inputs = ((k, False), (u, True), (fwd, True), (bwd, True))
  return tuple(_call(_leaving_kernel, inputs, [(states, u.dtype, "channels")] * 2, limit=limit))


def chunk_outputs(q, k, u, fwd, bwd, enter_forward, enter_backward, *, limit: float):
  """Every chunk's outputs from its operands and its entering states (`factored._forward`).

  Args:
    q, k: [B, H, N, C, K]; u, fwd, bwd: [B, H, N, C, E].
    enter_forward, enter_backward: [B, H, N, K, E] S→, S←.
    limit: W.

  Returns:
    [B, H, N, C, E] outputs (finite, not exact, on steep chunks).
  """
  inputs = ((q, False), (k, False), (u, True), (fwd, True), (bwd, True), (enter_forward, True),
            (enter_backward, True))
  (out,) = _call(_outputs_kernel, inputs, [(u.shape[-2:], u.dtype, "channels")], limit=limit)
  return out


def entering_grads(q, fwd, bwd, grad, *, limit: float):
  """d S→, d S← [B, H, N, K, E]: the output cotangent `grad` [B, H, N, C, E] pulled back to each
  chunk's entering states through its factored products."""
  states = (q.shape[-1], grad.shape[-1])
  inputs = ((q, False), (fwd, True), (bwd, True), (grad, True))
  return tuple(_call(_entering_grads_kernel, inputs, [(states, grad.dtype, "channels")] * 2,
                     limit=limit))


def chunk_grads(q, k, u, fwd, bwd, enter_forward, enter_backward, grad, d_forward_leaving,
                d_backward_leaving, d_fwd_scan, d_bwd_scan, *, limit: float):
  """d q, d k, d u, d F, d A of the factored products of every chunk.

  Args:
    q, k: [B, H, N, C, K]; u, fwd, bwd: [B, H, N, C, E].
    enter_forward, enter_backward: [B, H, N, K, E] the entering states of the forward pass.
    grad: [B, H, N, C, E] the output cotangent (zero on steep chunks).
    d_forward_leaving, d_backward_leaving: [B, H, N, K, E] the state pass's gradients with
      respect to the leaving states (zero on steep chunks).
    d_fwd_scan, d_bwd_scan: [B, H, N, E] its gradients with respect to the chunk totals.
    limit: W.

  Returns:
    [B, H, N, C, K] d q, d k and [B, H, N, C, E] d u, d F, d A.
  """
  inputs = ((q, False), (k, False)) + tuple(
      (x, True) for x in (u, fwd, bwd, enter_forward, enter_backward, grad, d_forward_leaving,
                          d_backward_leaving, d_fwd_scan[..., None, :], d_bwd_scan[..., None, :]))
  outputs = ([(q.shape[-2:], q.dtype, "summed"), (k.shape[-2:], k.dtype, "summed")]
             + [(u.shape[-2:], u.dtype, "channels")] * 3)
  return tuple(_call(_chunk_grads_kernel, inputs, outputs, limit=limit))
