"""LRA models: input encoders, the block stack, masked mean pooling and classification heads.

The sequence mixer inside every block is `config.mixer`: "lion" (default), "s5" or "softmax"
(the baselines of the paper's Table 7); everything around it is shared.

    from flax import nnx
    from lion_jax import LraClassifier, preset
    model = LraClassifier(preset("listops"), num_classes=10, vocab_size=20, rngs=nnx.Rngs(0))
    logits = model(tokens, lengths)                      # [B, 10], training mode (dropout, BN stats)
    model.eval(); logits = model(tokens, lengths, form="rnn")   # same weights, recurrent form
    logits = model.packed(tokens, segment_ids, positions, example_rows, example_ids)  # [N, 10]

Packed rows (`LraClassifier.packed`): several examples end to end in each row, told apart by
`segment_ids` (`lion_jax.ops.segments`). Every mixer keeps the examples apart, positions count
from each example's start, BatchNorm sees the same real tokens as in a padded batch, and each
example is pooled over its own tokens, so an example gets the logits it gets padded alone (to
float32 rounding; dropout masks, shared over time, are shared by the examples of a row).

Padding: positions ≥ length are padding. They are masked from the attention (no key enters a sum),
from BatchNorm statistics and from pooling, and the residual stream is zeroed there after the
encoder and after every block, so real examples do not depend on how a batch is padded.
Positions: LION-S's gated decays and S5's two directions carry position and direction, so they
get no positional encoding; softmax attention and LION-LIT/LION-D (masks λ^|i−j|, blind to
direction) get fixed sinusoidal positions by default (`positional="auto"`, docs/math.md §5.2).

Parameter paths of an `LraClassifier` (for optimiser partitions):
  encoder/inputs/embed/embedding | encoder/inputs/dense/{kernel,bias}
  encoder/blocks/<i>/norm/{scale,bias}                       (s5; transformer: norm1, norm2)
  encoder/blocks/<i>/mixer/{q_proj,k_proj,v_proj}/kernel, mixer/out_proj/{kernel,bias}
  encoder/blocks/<i>/mixer/decay_base                        the base (HiPPO/Δ) decay, [H, G]
  encoder/blocks/<i>/mixer/decay_gate/{kernel,bias}          the selective gate
  encoder/blocks/<i>/mixer/{lambda_re,lambda_im,b_re,b_im,c_re,c_im,d,log_step}   (mixer="s5")
  encoder/blocks/<i>/mixer/qkv/kernel, mixer/out/{kernel,bias}                      (mixer="softmax")
  encoder/blocks/<i>/{gate,value}/{kernel,bias}              GLU (transformer: mlp_in, mlp_out)
  head/{kernel,bias} | head/hidden/..., head/out/...          (retrieval)
BatchNorm running statistics (nnx.BatchStat): encoder/blocks/<i>/norm/{mean,var}.
Shapes: B batch, L length, M = d_model, C classes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from lion_jax.ops import segments
from lion_jax.ops.barrier import gradient_barrier
from lion_jax.nn.blocks import make_block, zero_padding
from lion_jax.config import ModelConfig


class InputEncoder(nnx.Module):
  """Maps raw inputs to d_model features, plus fixed position encodings where
  `config.position_encoding` is "sinusoidal".

  encoder="embed": token ids (or 8-bit pixel values used as tokens) → embedding table. It is
  initialised like S5's one-hot → Dense encoder (std 1/√vocab), without the bias.
  encoder="dense": pixel values v ∈ [0, 255] → (v/255 − input_mean)/input_std → Dense(1 → M).

  Args:
    config: model configuration (encoder, d_model, input_mean, input_std).
    vocab_size: number of token ids (ignored by the dense encoder).
    rngs: parameter randomness.
  """

  def __init__(self, config: ModelConfig, vocab_size: int, *, rngs: nnx.Rngs):
    self.kind = config.encoder
    self.positional = config.position_encoding
    self.mean, self.std = float(config.input_mean), float(config.input_std)
    if config.encoder == "embed":
      init = nnx.initializers.normal(vocab_size ** -0.5)
      self.embed = nnx.Embed(vocab_size, config.d_model, embedding_init=init,
                             dtype=config.compute_dtype, rngs=rngs)
      self.dense = None
    else:
      self.embed = None
      self.dense = nnx.Linear(1, config.d_model, dtype=config.compute_dtype, rngs=rngs)

  def __call__(self, inputs, positions=None):
    """[B, L] ids or pixel values → [B, L, M] features (plus positions with "sinusoidal").

    `positions` [B, L] int counts each token's place from its example's start in packed rows
    (None: 0, 1, …, L − 1 in every row).
    """
    if self.embed is not None:
      x = self.embed(inputs.astype(jnp.int32))
    else:
      pixels = (inputs.astype(jnp.float32) / 255.0 - self.mean) / self.std  # [B, L]
      x = self.dense(pixels[..., None])
    if self.positional == "sinusoidal":
      table = sinusoidal_positions(x.shape[1], x.shape[2]).astype(x.dtype)  # [L, M]
      x = x + (table if positions is None else table[positions])
    return x


def sinusoidal_positions(length: int, width: int):
  """Fixed position encodings (Vaswani et al. 2017, Sec. 3.5): [L, M] float32.

  Column 2i is sin(t / 10000^(2i/M)) and column 2i + 1 is cos of the same angle.
  """
  position = jnp.arange(length, dtype=jnp.float32)[:, None]  # [L, 1]
  frequency = 10000.0 ** (-jnp.arange(0, width, 2, dtype=jnp.float32) / width)  # [⌈M/2⌉]
  angles = position * frequency  # [L, ⌈M/2⌉]
  table = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(length, -1)
  return table[:, :width]


class LionEncoder(nnx.Module):
  """Input encoder followed by `num_layers` residual blocks; the shared tower of every model.

  Args:
    config: model configuration.
    vocab_size: number of token ids for encoder="embed".
    rngs: parameter and dropout randomness.
  """

  def __init__(self, config: ModelConfig, vocab_size: int, *, rngs: nnx.Rngs):
    self.remat = config.remat
    self.inputs = InputEncoder(config, vocab_size, rngs=rngs)
    self.blocks = nnx.List([make_block(config, rngs=rngs) for _ in range(config.num_layers)])

  def __call__(self, inputs, mask, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None, positions=None):
    """Encodes a batch.

    Args:
      inputs: [B, L] token ids or pixel values.
      mask: [B, L] bool, False at padding.
      form, chunk_size: mixer evaluation form (None: the config's).
      segment_ids: [B, L] integers of packed rows (`lion_jax.ops.segments`), or None.
      positions: [B, L] each token's place in its example (packed rows), or None.

    Returns:
      [B, L, M] features, zero at padding.
    """
    def run(block, x, mask, segment_ids):
      return block(x, mask, form=form, chunk_size=chunk_size, segment_ids=segment_ids)

    if self.remat:  # recompute each block's activations in the backward pass
      run = nnx.remat(run)
    x = zero_padding(self.inputs(inputs, positions), mask)  # [B, L, M]
    for depth, block in enumerate(self.blocks):
      if depth:  # XLA:CPU would otherwise rebuild x's gradient inside every block below
        x = gradient_barrier(x)
      x = zero_padding(run(block, x, mask, segment_ids), mask)
    return x


def token_mask(lengths, length: int):
  """[B] (or any shape) lengths → [..., L] bool mask, True at real positions (< length)."""
  return jnp.arange(length) < jnp.asarray(lengths)[..., None]


def masked_mean(x, mask):
  """Mean over real positions only.

  Args:
    x: [B, L, M] features.
    mask: [B, L] bool.

  Returns:
    [B, M] float32; an empty sequence pools to zeros.
  """
  weights = mask.astype(jnp.float32)[..., None]  # [B, L, 1]
  count = jnp.maximum(weights.sum(axis=1), 1.0)  # [B, 1]
  return (x.astype(jnp.float32) * weights).sum(axis=1) / count  # float32 sums over long L


def example_means(x, segment_ids, example_rows, example_ids):
  """Mean features of packed examples, each over its own tokens.

  Args:
    x: [R, L, M] features of packed rows.
    segment_ids: [R, L] ids, 0 at padding, each example's id in 1 … L.
    example_rows, example_ids: [N, ...] int: the row holding each example and its id there.

  Returns:
    [N, ..., M] float32; an example with no tokens pools to zeros.
  """
  rows, length, width = x.shape
  groups = (jnp.arange(rows)[:, None] * (length + 1) + segment_ids).reshape(-1)  # [R·L]
  sums = jax.ops.segment_sum(x.reshape(rows * length, width).astype(jnp.float32), groups,
                             num_segments=rows * (length + 1))  # [R·(L+1), M]
  counts = jax.ops.segment_sum(jnp.ones(groups.shape, jnp.float32), groups,
                               num_segments=rows * (length + 1))  # [R·(L+1)]
  index = example_rows * (length + 1) + example_ids  # [N, ...]
  return sums[index] / jnp.maximum(counts[index], 1.0)[..., None]


class RetrievalHead(nnx.Module):
  """Two-tower matching head (S5/S4, Tay et al. 2020): [u, v, u − v, u ⊙ v] → Dense → GELU → Dense.

  Args:
    d_model: M, width of each pooled document.
    num_classes: C.
    rngs: parameter randomness.
  """

  def __init__(self, d_model: int, num_classes: int, *, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(4 * d_model, d_model, rngs=rngs)
    self.out = nnx.Linear(d_model, num_classes, rngs=rngs)

  def __call__(self, u, v):
    """[B, M], [B, M] → [B, C] logits."""
    features = jnp.concatenate([u, v, u - v, u * v], axis=-1)  # [B, 4M]
    return self.out(jax.nn.gelu(self.hidden(features)))


class LraClassifier(nnx.Module):
  """A model for one LRA task: encoder tower, masked mean pooling, classification head.

  Args:
    config: the model configuration (e.g. `preset("listops")`).
    num_classes: C.
    vocab_size: number of token ids (encoder="embed"; 256 for 8-bit pixels as tokens).
    dual_input: two documents per example sharing one tower (Retrieval); then `inputs` is
      [B, 2, L] and `lengths` [B, 2].
    rngs: parameter and dropout randomness (`nnx.Rngs(params=..., dropout=...)` or one seed).

  Train/eval: `model.train()` (dropout on, BatchNorm batch statistics over real tokens, running
  averages updated) and `model.eval()` (dropout off, running averages). A new model is in train mode.
  """

  def __init__(self, config: ModelConfig, *, num_classes: int, vocab_size: int,
               dual_input: bool = False, rngs: nnx.Rngs):
    self.config = config
    self.dual_input = dual_input
    self.encoder = LionEncoder(config, vocab_size, rngs=rngs)
    if dual_input:
      self.head = RetrievalHead(config.d_model, num_classes, rngs=rngs)
    else:
      self.head = nnx.Linear(config.d_model, num_classes, rngs=rngs)

  def __call__(self, inputs, lengths, *, form: str | None = None, chunk_size: int | None = None):
    """Classifies a batch.

    Args:
      inputs: int [B, L] token ids or 8-bit pixel values; [B, 2, L] with dual_input.
      lengths: int [B] real lengths ([B, 2] with dual_input); positions ≥ length are padding.
      form: "attention", "rnn", "scan", "chunk", "chunk_scan" or "auto" for every mixer
        (None: `config.form`). All forms give the same logits up to float rounding.
      chunk_size: chunk length for the chunked forms (None: `config.chunk_size`).

    Returns:
      [B, C] logits (float32).
    """
    inputs, lengths = jnp.asarray(inputs), jnp.asarray(lengths)
    expected = 3 if self.dual_input else 2
    if inputs.ndim != expected or lengths.shape != inputs.shape[:-1]:
      layout = "[B, 2, L] inputs and [B, 2] lengths" if self.dual_input else "[B, L] inputs and [B] lengths"
      raise ValueError(f"Expected {layout}; got inputs {inputs.shape} and lengths {lengths.shape}.")
    if self.dual_input:
      batch, _, length = inputs.shape
      inputs, lengths = inputs.reshape(2 * batch, length), lengths.reshape(2 * batch)  # [2B, L]
    mask = token_mask(lengths, inputs.shape[-1])  # [B', L]
    x = self.encoder(inputs, mask, form=form, chunk_size=chunk_size)  # [B', L, M]
    pooled = masked_mean(x, mask)  # [B', M]
    if self.dual_input:
      pooled = pooled.reshape(batch, 2, -1)  # [B, 2, M]
    return self._classify(pooled)

  def packed(self, inputs, segment_ids, positions, example_rows, example_ids, *,
             form: str | None = None, chunk_size: int | None = None):
    """Classifies examples packed end to end in rows (`lra.data.packing`).

    Args:
      inputs: int [R, L] tokens of R rows.
      segment_ids: int [R, L], 0 at padding, one id in 1 … L per example (or document) of a row.
      positions: int [R, L] each token's place in its example, from 0.
      example_rows, example_ids: int [N] (or [N, 2] with dual_input: both documents, which may
        lie in different rows) the row and id of each example.
      form, chunk_size: as in `__call__`.

    Returns:
      [N, C] logits (float32), example n's equal to those of `__call__` on it padded alone.
    """
    # Pooling groups tokens by (row, id), so ids must stay within 1 … L.
    segments.check_segment_ids(segment_ids, *inputs.shape, max_id=inputs.shape[-1])
    mask = segment_ids > 0  # [R, L]
    x = self.encoder(inputs, mask, form=form, chunk_size=chunk_size, segment_ids=segment_ids,
                     positions=positions)  # [R, L, M]
    return self._classify(example_means(x, segment_ids, example_rows, example_ids))

  def _classify(self, pooled):
    """[B, M] (or [B, 2, M] with dual_input) pooled features → [B, C] logits."""
    if self.dual_input:
      return self.head(pooled[:, 0], pooled[:, 1])
    return self.head(pooled)


def count_params(model: nnx.Module) -> int:
  """Number of trainable scalars (nnx.Param leaves; BatchNorm running statistics excluded)."""
  return sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
