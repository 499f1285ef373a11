"""A gradient barrier for XLA:CPU: the identity, whose gradient is built as one array.

XLA:CPU fuses elementwise gradients into the matmuls that consume them, recomputed and read in
strided order; `gradient_barrier` keeps such a gradient whole where that costs more than the
array it writes (docs/benchmarks.md §12, §13).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


@jax.custom_vjp
def gradient_barrier(x):
  """The identity, whose gradient XLA:CPU must build whole before the layers below use it.

  Left alone, XLA:CPU fuses an elementwise gradient into each matmul operand that reads it,
  written in the transposed order a weight gradient's matmul wants: a loop fusion that reads
  all its inputs in strided order and recomputes them. Two places call it:
  - The encoder, between blocks. In the backward pass of a stack of blocks the gradient of the
    residual stream is a sum of elementwise terms, one per later block, and every layer
    recomputed the terms of all the layers after it (its fusions grow by ~45 operations a
    layer). On the 8-block ListOps S5 such fusions took more than half of the training step's
    CPU time; the barrier makes the step 3x faster (docs/benchmarks.md §13).
  - LION's mixer, on the q, k and v projections' outputs. Their gradients come out of the chunk
    kernel heads-first ([B, H, N, C, X]) and pass through φ's backward pass; fused into the
    projections' weight gradients, one transposing fusion per layer and operand took 20-45 ms
    for a [128, 10240] array. With the barrier the step is about 10% faster
    (docs/benchmarks.md §12).
  Other backends fuse differently, so there the gradient passes unchanged.

  Args:
    x: any array, e.g. the [B, L, M] residual stream.

  Returns:
    x, unchanged; its gradient is unchanged too, exactly.
  """
  return x


def _gradient_barrier_forward(x):
  return x, None


def _gradient_barrier_backward(_, grad):
  if jax.default_backend() != "cpu":
    return (grad,)
  return (_through_one_loop_trip(grad),)


@jax.custom_jvp
def _through_one_loop_trip(x):
  """x, passed through one trip of a loop: XLA fuses nothing across a loop's boundary, so x
  enters it as an array. The trip count and the factor are a value XLA cannot know at compile
  time (1, or 0 when the first entry is NaN, which skips the loop), so neither XLA nor JAX
  removes the loop as one that does nothing; multiplying by 1 is exact."""
  first = x.reshape(-1)[0]
  one = (first == first).astype(x.dtype)  # []
  _, x = jax.lax.while_loop(lambda carry: carry[0] < one,
                            lambda carry: (carry[0] + 1, carry[1] * one),
                            (jnp.zeros((), x.dtype), x))
  return x


@_through_one_loop_trip.defjvp
def _through_one_loop_trip_jvp(primals, tangents):
  # The identity's tangent, declared linear: JAX cannot reverse a loop of dynamic length, and a
  # gradient of a gradient (a gradient penalty) must pass back through here.
  return _through_one_loop_trip(primals[0]), tangents[0]


gradient_barrier.defvjp(_gradient_barrier_forward, _gradient_barrier_backward)
