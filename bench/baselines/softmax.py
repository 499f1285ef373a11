"""Multi-head softmax attention layer (the Transformer mixer), a benchmark peer of `LionMixer`.

    q, k, v = x W_q, x W_k, x W_v  (per head, d_head = d_model / heads)
    y = softmax(q kᵀ / √d_head) v W_o                    (bidirectional: no causal mask)

The attention itself is flax's `nnx.dot_product_attention` (the XLA reference implementation),
so the comparison is against what a Flax user gets by default.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx


class SoftmaxAttention(nnx.Module):
  """[B, L, d_model] -> [B, L, d_model] multi-head softmax attention.

  Args:
    d_model: width of the residual stream.
    num_heads: heads (d_model must be divisible by it).
    rngs: initialisation randomness.
  """

  def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs):
    if d_model % num_heads:
      raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}.")
    self.num_heads = num_heads
    self.head_dim = d_model // num_heads
    self.qkv = nnx.Linear(d_model, 3 * d_model, use_bias=False, rngs=rngs)
    self.out = nnx.Linear(d_model, d_model, rngs=rngs)

  def __call__(self, x, mask=None):
    """Mixes [B, L, d_model]; `mask` is an optional [B, L] bool key mask (False = padding)."""
    batch, length, _ = x.shape
    q, k, v = jnp.split(self.qkv(x).reshape(batch, length, 3 * self.num_heads, self.head_dim), 3,
                        axis=2)  # [B, L, H, D] each
    attn_mask = None if mask is None else mask[:, None, None, :]  # [B, 1, 1, L] keys
    y = nnx.dot_product_attention(q, k, v, mask=attn_mask)  # [B, L, H, D]
    return self.out(y.reshape(batch, length, -1))
