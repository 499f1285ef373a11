"""The specification of packed batches in the models: `LraClassifier.packed` gives every example
the logits it gets padded alone, and a packed step the loss and gradients of the padded step.

Rows hold several examples end to end (`lion_jax.ops.segments`); each example is compared with the
same example in a padded batch of one example per row, in training mode (BatchNorm batch
statistics over real tokens) and in evaluation mode, for LION's three decay families, S5 and
the Transformer (sinusoidal positions, LayerNorm), and Retrieval's paired documents.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lion_jax import LraClassifier, ModelConfig, preset
from lion_jax.nn.models import example_means

ROW = 24  # tokens a packed row holds; every example alone is padded to it too
# (row, start, length) per example: an example of one token, two touching, padding between,
# a row holding one example that fills it.
LAYOUT = ((0, 0, 1), (0, 1, 9), (0, 10, 6), (0, 19, 5), (1, 0, ROW), (2, 0, 13), (2, 13, 8))
MODELS = {
    "lion_s": dict(),
    "lion_d": dict(decay="fixed"),
    "lion_lit": dict(decay="lit"),
    "s5": dict(mixer="s5", ssm_size=16, ssm_blocks=2),
    # positional="auto": sinusoidal positions, counted from each example's start
    "transformer": dict(mixer="softmax", block="transformer", norm="layer", num_heads=2),
}


def build(dual=False, seed=0, **overrides):
  fields = dict(d_model=16, num_layers=1, dropout=0.0)
  if overrides.get("mixer", "lion") == "lion":  # the ListOps preset's LION, made small
    config = preset("listops", **fields, num_heads=2, chunk_size=8, v_init="lecun", **overrides)
  else:
    config = ModelConfig(**fields, **overrides)
  return LraClassifier(config, num_classes=5, vocab_size=12, dual_input=dual,
                       rngs=nnx.Rngs(seed))


def packed_batch(layout, seed=1):
  """Packed rows and, for the same examples, one padded row per example."""
  rng = np.random.default_rng(seed)
  rows = 1 + max(row for row, _, _ in layout)
  inputs = np.zeros((rows, ROW), np.int32)
  segment_ids = np.zeros((rows, ROW), np.int32)
  positions = np.zeros((rows, ROW), np.int32)
  example_rows, example_ids, padded, lengths = [], [], [], []
  for row, start, length in layout:
    tokens = rng.integers(1, 12, length)
    example = 1 + int(segment_ids[row].max())
    inputs[row, start:start + length] = tokens
    segment_ids[row, start:start + length] = example
    positions[row, start:start + length] = np.arange(length)
    example_rows.append(row)
    example_ids.append(example)
    padded.append(np.pad(tokens, (0, ROW - length)))
    lengths.append(length)
  packed = (inputs, segment_ids, positions, np.asarray(example_rows), np.asarray(example_ids))
  return packed, (np.stack(padded), np.asarray(lengths, np.int32))


# make test: LION-S (the mixers of S5 and the Transformer are checked alone in
# tests/nn/test_segments_baselines.py); every model in make test-all.
@pytest.mark.parametrize("name", [
    n if n == "lion_s" else pytest.param(n, marks=pytest.mark.slow) for n in MODELS])
def test_packed_examples_get_their_padded_logits_and_gradients(name):
  model = build(**MODELS[name])
  packed, (padded, lengths) = packed_batch(LAYOUT)
  labels = jnp.asarray(np.random.default_rng(2).integers(0, 5, len(LAYOUT)))

  def loss(model, logits_fn):
    logits = logits_fn(model)
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(labels)), labels]), logits

  @nnx.jit
  def both(model):
    results = []
    for logits_fn in (lambda m: m.packed(*packed), lambda m: m(padded, lengths)):
      copy = nnx.clone(model)
      copy.train()  # BatchNorm batch statistics over the real tokens
      (value, train_logits), grads = nnx.value_and_grad(loss, has_aux=True)(copy, logits_fn)
      copy.eval()
      results.append((value, train_logits, logits_fn(copy), grads,
                      nnx.state(copy, nnx.BatchStat)))
    return results

  (packed_result, padded_result) = both(model)
  names = ("loss", "train logits", "eval logits", "gradients", "batch statistics")
  for what, got, want in zip(names, packed_result, padded_result):
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-6,
                                                         err_msg=f"{name} {what}"), got, want)


@pytest.mark.slow  # make test: the equality above; make test-all adds its negative control
def test_without_segment_ids_packed_rows_would_mix():
  """Negative control: pooling packed rows per example but mixing whole rows differs."""
  model = build()
  model.eval()
  packed, (padded, lengths) = packed_batch(LAYOUT)
  inputs, segment_ids, positions, rows, ids = packed
  def mixed(m):
    features = m.encoder(inputs, segment_ids > 0, positions=positions)  # no segment_ids
    return m.head(example_means(features, segment_ids, rows, ids))

  mixed = nnx.jit(mixed)(model)
  alone = nnx.jit(lambda m: m(padded, lengths))(model)
  assert not np.allclose(mixed[1:4], alone[1:4], rtol=1e-3)


@pytest.mark.slow  # make test: single documents above; make test-all adds the pairs
def test_retrieval_documents_stay_paired_across_rows():
  """Each Retrieval example's two documents may lie in different rows; the head pairs them."""
  model = build(dual=True)
  model.eval()
  layout = ((0, 0, 7), (1, 0, 5), (0, 7, 11), (2, 0, 24), (1, 5, 3), (1, 8, 16))
  packed, (padded, lengths) = packed_batch(layout)
  inputs, segment_ids, positions, rows, ids = packed
  pairs = np.asarray([[0, 1], [2, 3], [4, 5]])  # documents (u, v) of three examples
  logits = nnx.jit(lambda m: m.packed(inputs, segment_ids, positions, rows[pairs],
                                      ids[pairs]))(model)
  expected = nnx.jit(lambda m: m(padded[pairs], lengths[pairs]))(model)
  np.testing.assert_allclose(logits, expected, rtol=2e-4, atol=2e-6)


def test_ids_beyond_a_row_are_named():
  """Pooling groups tokens by (row, id): an id above L would pool into another row's example."""
  model = build()
  packed, _ = packed_batch(LAYOUT)
  inputs, segment_ids, positions, rows, ids = packed
  with pytest.raises(ValueError, match=f"segment_ids row 0 has id {ROW + 5} > {ROW}"):
    model.packed(inputs, np.where(segment_ids == 2, ROW + 5, segment_ids), positions, rows, ids)
