"""Multi-head softmax attention: the Transformer baseline's mixer (LION paper Table 7).

    q, k, v = x W_q, x W_k, x W_v               per head, D = A / H (A = attention_dim or M)
    y = softmax(q kᵀ / √D + mask) v W_o           bidirectional: every real key, no causal mask

The attention is flax's `nnx.dot_product_attention` (the XLA reference implementation), so LION
is compared against what a Flax user gets by default. Packed rows (`segment_ids`,
`lion_jax.segments`) make the mask block-diagonal: a query sees the keys of its own example only.

Shapes: B batch, L length, M = d_model, A = attention_dim (default M), H heads, D = A / H.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from lion_jax import segments
from lion_jax.config import ModelConfig


def softmax_attention(q, k, v, key_mask=None, segment_ids=None):
  """Bidirectional scaled dot-product attention.

  Args:
    q, k, v: [B, L, H, D] queries, keys and values.
    key_mask: optional [B, L] bool, False at padded keys (they get zero weight).
    segment_ids: optional [B, L] integer ids of a packed row: query i weighs key j only when both
      lie in one example (`segments.same_segment`); id 0 is padding.

  Returns:
    [B, L, H, D]. A query that may see no key (all keys padding, or itself padding in a packed
    row) gets the mean of all the row's values: the masked logits are one finite large negative
    number, so its softmax is uniform, never 0/0.
  """
  mask = None if key_mask is None else key_mask[:, None, None, :]  # [B, 1, 1, L] over keys
  if segment_ids is not None:
    same = segments.same_segment(segment_ids)[:, None]  # [B, 1, L, L] query i sees key j
    mask = same if mask is None else mask & same
  return nnx.dot_product_attention(q, k, v, mask=mask)


class SoftmaxMixer(nnx.Module):
  """Multi-head softmax attention over [B, L, M] sequences, a drop-in for `LionMixer`.

  Parameter names: qkv/kernel [M, 3A] (no bias); out/kernel [A, M], out/bias [M].

  Args:
    config: the model configuration (d_model, num_heads, attention_dim, dtype).
    rngs: parameter randomness.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.config = config
    m, dtype = config.d_model, config.compute_dtype
    self.width = config.attention_dim or m  # A
    self.qkv = nnx.Linear(m, 3 * self.width, use_bias=False, dtype=dtype, rngs=rngs)
    self.out = nnx.Linear(self.width, m, dtype=dtype, rngs=rngs)

  def __call__(self, x, mask=None, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None):
    """Mixes [B, L, M] → [B, L, M]; `mask` [B, L] bool is False at padded keys.

    `form` and `chunk_size` pick LION's evaluation form; softmax attention has one, so only None
    or the config's own values are accepted (the trainer passes those). `segment_ids` [B, L]
    integer packs several examples in a row (`lion_jax.segments`): attention within each only.
    """
    self.config.check_single_form(form, chunk_size)
    batch, length, _ = x.shape
    if segment_ids is not None:
      segments.check_segment_ids(segment_ids, batch, length)
    heads = self.config.num_heads
    qkv = self.qkv(x).reshape(batch, length, 3 * heads, self.width // heads)
    q, k, v = jnp.split(qkv, 3, axis=2)  # [B, L, H, D] each
    y = softmax_attention(q, k, v, mask, segment_ids)  # [B, L, H, D]
    return self.out(y.reshape(batch, length, -1))
