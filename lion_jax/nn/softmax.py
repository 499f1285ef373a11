"""Multi-head softmax attention: the Transformer baseline's mixer (LION paper Table 7).

    q, k, v = x W_q, x W_k, x W_v               per head, D = A / H (A = attention_dim or M)
    y = softmax(q kᵀ / √D + mask) v W_o           bidirectional: every real key, no causal mask

On a single CPU device the attention is taken one batch row at a time, heads first, each row's
[H, L, L] weights recomputed in the backward pass instead of stored: the batched form writes and
rereads B·H·L² weights several times over, which bounds it by memory traffic on a CPU, while one
row's weights stay near the cores. At the presets the sweeps train it at, the Transformer's whole
training step is then 1.8-3.3x faster in 5-14x less memory (`bench/probes/softmax_rows.py`,
docs/benchmarks.md section 3), so every equal-steps table spends less of its budget on this
baseline. Everywhere else it is flax's `nnx.dot_product_attention` over the whole batch (the XLA
reference implementation), what a Flax user gets by default: with the batch split over several
devices (data parallel) a loop over its rows would make the partitioner gather the whole batch
onto every device, and on GPU or TPU (not measured) it would serialise the work.

Packed rows (`segment_ids`, `lion_jax.ops.segments`) make the mask block-diagonal: a query sees the
keys of its own example only.

Shapes: B batch, L length, M = d_model, A = attention_dim (default M), H heads, D = A / H.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lion_jax.ops import segments
from lion_jax.config import ModelConfig


def softmax_attention(q, k, v, key_mask=None, segment_ids=None, *,
                      one_example_at_a_time: bool | None = None):
  """Bidirectional scaled dot-product attention.

  Args:
    q, k, v: [B, L, H, D] queries, keys and values.
    key_mask: optional [B, L] bool, False at padded keys (they get zero weight).
    segment_ids: optional [B, L] integer ids of a packed row: query i weighs key j only when both
      lie in one example (`segments.same_segment`); id 0 is padding.
    one_example_at_a_time: how the B rows are evaluated; the outputs are the same to rounding.
      True: a loop over the rows (`lax.map`), each row's [H, L, L] weights recomputed in the
      backward pass instead of stored. False: flax's `nnx.dot_product_attention` on the whole
      batch. None (default): True on a single CPU device, False elsewhere (see the module
      docstring).

  Returns:
    [B, L, H, D]. A query that may see no key (all keys padding, or itself padding in a packed
    row) gets the mean of all the row's values: the masked logits are one finite large negative
    number, so its softmax is uniform, never 0/0.
  """
  if one_example_at_a_time is None:
    one_example_at_a_time = jax.default_backend() == "cpu" and jax.device_count() == 1
  if not one_example_at_a_time:
    mask = None if key_mask is None else key_mask[:, None, None, :]  # [B, 1, 1, L] over keys
    if segment_ids is not None:
      same = segments.same_segment(segment_ids)[:, None]  # [B, 1, L, L] query i sees key j
      mask = same if mask is None else mask & same
    return nnx.dot_product_attention(q, k, v, mask=mask)
  batch, length = q.shape[:2]
  keys = jnp.ones((batch, length), bool) if key_mask is None else key_mask  # [B, L]
  ids = jnp.ones((batch, length), jnp.int32) if segment_ids is None else segment_ids  # [B, L]

  @jax.checkpoint
  def attend(q, k, v, keys, ids):  # one row; its [L, L] mask is built here, never for all B
    mask = keys[None, :]  # [1, L] over keys
    if segment_ids is not None:
      mask = mask & segments.same_segment(ids[None])[0]  # [L, L] query i sees key j
    return _attend_one_row(q, k, v, mask[None])

  return jax.lax.map(lambda row: attend(*row), (q, k, v, keys, ids))  # [B, L, H, D]


def _attend_one_row(q, k, v, mask):
  """Softmax attention of one row.

  Args:
    q, k, v: [L, H, D].
    mask: [1, 1 or L, L] bool, True where query i may see key j.

  Returns:
    [L, H, D].
  """
  # heads first, so that each head's products run over contiguous [L, D] blocks
  q, k, v = (jnp.swapaxes(x, 0, 1) for x in (q * q.shape[-1] ** -0.5, k, v))  # [H, L, D]
  logits = jnp.einsum("hqd,hkd->hqk", q, k)  # [H, L, L]
  logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  # the row maximum only keeps exp in range; softmax does not depend on it, so it takes no gradient
  weights = jnp.exp(logits - jax.lax.stop_gradient(logits.max(-1, keepdims=True)))
  total = weights.sum(-1, keepdims=True, dtype=jnp.promote_types(weights.dtype, jnp.float32))
  # normalised after the product: an [H, L, D] division instead of an [H, L, L] one
  y = (jnp.einsum("hqk,hkd->hqd", weights, v) / total).astype(weights.dtype)  # [H, L, D]
  return jnp.swapaxes(y, 0, 1)


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
    integer packs several examples in a row (`lion_jax.ops.segments`): attention within each only.
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
