"""The specification of packed rows (`segment_ids`) in `lion_attention`.

Several examples packed end to end in one row give each example exactly what the float64
definition (`tests/reference.py`) gives that example alone: outputs and gradients, in every
form, for every decay shape, both conventions and all normalisations, with both residual modes
of `chunk_scan`, including examples of one token, of exactly C and C + 1 tokens, a row holding
one example, padding between examples and at the end.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lion_jax import lion_attention
from lion_jax.ops import segments
from tests.reference import reference_lion

CHUNK = 8
B, L, H, K, V = 3, 40, 2, 3, 4
# (start, length, id) per row: row 0 holds many examples (1 token, exactly C, C + 1, with
# padding between and after), row 1 one example filling the row, row 2 one example and padding.
LAYOUT = (
    ((0, 1, 1), (1, CHUNK, 2), (9, CHUNK + 1, 5), (20, 5, 3), (25, 13, 4)),
    ((0, L, 7),),
    ((0, 29, 1),),
)
DECAY_SHAPES = {"lit": None, "fixed_head": (H,), "fixed_channel": (H, V),
                "selective": (B, L, H), "selective_vector": (B, L, H, V)}
FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")


def segment_ids():
  ids = np.zeros((B, L), np.int32)
  for row, examples in enumerate(LAYOUT):
    for start, length, example in examples:
      ids[row, start:start + length] = example
  return ids


def make_inputs(decay, seed=0, low=0.5, high=0.999):
  rng = np.random.default_rng(seed)
  q = rng.uniform(0.05, 1.0, (B, L, H, K))
  k = rng.uniform(0.05, 1.0, (B, L, H, K))
  v = rng.normal(size=(B, L, H, V))
  shape = DECAY_SHAPES[decay]
  log_decay = None if shape is None else np.log(rng.uniform(low, high, shape))
  return q, k, v, log_decay


def alone(x, row, start, length):
  """Token operand x (or a fixed decay) restricted to one example, as a batch of one."""
  if x is None or x.ndim < 3:
    return x
  return x[row:row + 1, start:start + length]


def definition(q, k, v, log_decay, convention, normalize):
  """[B, L, H, V] each example's float64 definition alone, NaN at padding."""
  out = np.full((B, L, H, V), np.nan)
  for row, examples in enumerate(LAYOUT):
    for start, length, _ in examples:
      args = [alone(x, row, start, length) for x in (q, k, v, log_decay)]
      out[row, start:start + length] = reference_lion(*args, convention=convention,
                                                      normalize=normalize)[0]
  return out


@functools.lru_cache(maxsize=None)
def packed(form, convention, normalize, residuals):
  def run(q, k, v, log_decay, ids):
    return lion_attention(q, k, v, log_decay, form=form, convention=convention,
                          normalize=normalize, chunk_size=CHUNK, residuals=residuals,
                          segment_ids=ids)
  return jax.jit(run)


def check_outputs(form, decay, convention="symmetric", normalize="after", residuals="stored"):
  q, k, v, log_decay = make_inputs(decay)
  expected = definition(q, k, v, log_decay, convention, normalize)
  with jax.enable_x64(True):
    out = np.asarray(packed(form, convention, normalize, residuals)(
        q, k, v, log_decay, jnp.asarray(segment_ids())))
  real = segment_ids() > 0
  np.testing.assert_allclose(out[real], expected[real], rtol=1e-10, atol=1e-11)


# make test: every form with the LRA setting (selective vector decays); through chunk_scan every
# decay shape but the fixed per-channel one (packed, it becomes per-token vector decays like the
# LRA's), the code convention, normalisation before (its own key sums per example) and the
# recomputing kernel; the rest of the grid (the unnormalised outputs too) in make test-all.
@pytest.mark.parametrize("form", FORMS)
def test_every_form_gives_each_packed_example_its_definition(form):
  check_outputs(form, "selective_vector")


@pytest.mark.parametrize("decay", ["lit", "fixed_head",
                                   pytest.param("fixed_channel", marks=pytest.mark.slow),
                                   "selective"])
def test_every_decay_shape_packs(decay):
  check_outputs("chunk_scan", decay)


@pytest.mark.parametrize("convention,normalize", [
    ("code", "after"), ("symmetric", "before"),
    pytest.param("symmetric", "none", marks=pytest.mark.slow),
    pytest.param("code", "before", marks=pytest.mark.slow)])
def test_conventions_and_normalisations_pack(convention, normalize):
  check_outputs("chunk_scan", "selective_vector", convention, normalize)


@pytest.mark.parametrize("decay,convention", [
    ("selective_vector", "symmetric"), ("selective", "code"),
    pytest.param("selective_vector", "code", marks=pytest.mark.slow),
    pytest.param("selective", "symmetric", marks=pytest.mark.slow)])
def test_recomputed_residuals_pack(decay, convention):
  check_outputs("chunk_scan", decay, convention, residuals="recomputed")


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("decay", list(DECAY_SHAPES))
@pytest.mark.parametrize("convention", ["symmetric", "code"])
@pytest.mark.parametrize("normalize", ["after", "before", "none"])
def test_full_grid_packs(form, decay, convention, normalize):
  check_outputs(form, decay, convention, normalize)


def weighted_loss(out, weights, real):
  return jnp.sum(jnp.where(real[:, :, None, None], out * weights, 0.0))


@functools.lru_cache(maxsize=None)
def gradient_case():
  """Inputs, loss weights and each example's float64 gradients alone, summed into the row.

  Each example alone runs the full form (itself checked against the definition's finite
  differences in tests/ops/test_lion_attention.py).
  """
  q, k, v, log_decay = make_inputs("selective_vector")
  weights = np.random.default_rng(1).normal(size=(B, L, H, V))
  expected = [np.zeros_like(x) for x in (q, k, v, log_decay)]
  loss = lambda q, k, v, a, w: jnp.sum(lion_attention(q, k, v, a, form="attention") * w)
  grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
  with jax.enable_x64(True):
    for row, examples in enumerate(LAYOUT):
      for start, length, _ in examples:
        args = [alone(x, row, start, length) for x in (q, k, v, log_decay, weights)]
        for total, part in zip(expected, grad(*args)):
          total[row, start:start + length] += np.asarray(part)[0]
  return (q, k, v, log_decay), weights, expected


# make test: the stored kernel (the recomputing one packs its outputs in make test, above).
@pytest.mark.parametrize("form,residuals", [
    ("chunk_scan", "stored"), pytest.param("chunk_scan", "recomputed", marks=pytest.mark.slow),
    pytest.param("rnn", "stored", marks=pytest.mark.slow),
    pytest.param("attention", "stored", marks=pytest.mark.slow)])
def test_gradients_equal_those_of_each_example_alone(form, residuals):
  """d(Σ_i w_i·y_i)/d(q, k, v, log λ) of the packed call = the sum of each example's alone."""
  inputs, weights, expected = gradient_case()
  ids = segment_ids()
  with jax.enable_x64(True):
    run = packed(form, "symmetric", "after", residuals)
    grads = jax.jit(jax.grad(lambda *x: weighted_loss(run(*x, jnp.asarray(ids)), weights,
                                                      ids > 0), argnums=(0, 1, 2, 3)))(*inputs)
  for name, got, want in zip("q k v log_decay".split(), grads, expected):
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-9, atol=1e-10, err_msg=name)


def test_without_segment_ids_the_examples_mix():
  """Negative control: the same packed row without segment_ids is not each example alone."""
  q, k, v, log_decay = (x.astype(np.float32) for x in make_inputs("selective_vector"))
  expected = definition(q, k, v, log_decay, "symmetric", "after")
  out = np.asarray(jax.jit(functools.partial(lion_attention, form="attention"))(
      q, k, v, log_decay, key_mask=jnp.asarray(segment_ids() > 0)))
  real = segment_ids() > 0
  assert np.abs(out[real] - expected[real]).max() > 1e-3


def test_float32_packs_to_rounding():
  q, k, v, log_decay = make_inputs("selective_vector", low=0.9, high=0.9999)
  expected = definition(q, k, v, log_decay, "symmetric", "after")
  f32 = [None if x is None else x.astype(np.float32) for x in (q, k, v, log_decay)]
  out = np.asarray(packed("chunk_scan", "symmetric", "after", "stored")(
      *f32, jnp.asarray(segment_ids())))
  real = segment_ids() > 0
  np.testing.assert_allclose(out[real], expected[real], rtol=2e-5, atol=2e-5)


def test_extreme_decays_pack():
  """λ → 0 and λ → 1 inside the examples: the barrier stays below what the gates do."""
  for low, high in ((1e-6, 1e-3), (0.999999, 1.0)):
    q, k, v, log_decay = make_inputs("selective_vector", low=low, high=high)
    expected = definition(q, k, v, log_decay, "symmetric", "after")
    with jax.enable_x64(True):
      out = np.asarray(packed("chunk_scan", "symmetric", "after", "stored")(
          q, k, v, log_decay, jnp.asarray(segment_ids())))
    real = segment_ids() > 0
    np.testing.assert_allclose(out[real], expected[real], rtol=1e-9, atol=1e-10)


def test_key_mask_and_segment_ids_combine():
  q, k, v, log_decay = make_inputs("selective")
  ids = segment_ids()
  key_mask = np.random.default_rng(2).uniform(size=(B, L)) > 0.3
  key_mask[ids == 0] = True  # padding is masked by the ids alone
  expected = np.full((B, L, H, V), np.nan)
  for row, examples in enumerate(LAYOUT):
    for start, length, _ in examples:
      args = [alone(x, row, start, length) for x in (q, k, v, log_decay)]
      expected[row, start:start + length] = reference_lion(
          *args, key_mask=key_mask[row:row + 1, start:start + length])[0]
  with jax.enable_x64(True):
    out = np.asarray(jax.jit(functools.partial(lion_attention, form="attention"))(
        q, k, v, log_decay, key_mask=jnp.asarray(key_mask), segment_ids=jnp.asarray(ids)))
  real = ids > 0
  np.testing.assert_allclose(out[real], expected[real], rtol=1e-10, atol=1e-11)


def test_bad_segment_ids_are_named():
  q, k, v, _ = make_inputs("lit")
  with pytest.raises(ValueError, match=r"segment_ids has shape \(3, 39\); expected \[B, L\]"):
    lion_attention(q, k, v, segment_ids=np.zeros((B, L - 1), np.int32))
  with pytest.raises(TypeError, match="segment_ids must be integers"):
    lion_attention(q, k, v, segment_ids=np.zeros((B, L), np.float32))
  split = segment_ids()
  split[0, 30:32] = 2  # example 2 appears again later in row 0
  with pytest.raises(ValueError, match="row 0: example id 2 is not one contiguous run"):
    lion_attention(q, k, v, segment_ids=split)
  with pytest.raises(ValueError, match="negative ids"):
    lion_attention(q, k, v, segment_ids=-segment_ids())


def test_barrier_is_below_rounding_squared():
  for dtype in (np.float32, np.float64):
    assert np.exp(-segments.barrier(dtype)) <= np.finfo(dtype).eps ** 2 * 1.0001


def test_code_convention_under_a_sequence_axis_is_refused():
  q, k, v, _ = make_inputs("lit")
  mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("seq",))
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="convention='code' cannot run with "
                                                         "sequence_axis='seq'"):
    lion_attention(q, k, v, convention="code", sequence_axis="seq", segment_ids=segment_ids())


def test_snake_orders_refuse_packed_rows():
  from lion_jax import grid_lion_attention  # pylint: disable=import-outside-toplevel
  q = np.ones((1, 16, 1, 2), np.float32)
  with pytest.raises(ValueError, match="scan_order='snake' cannot take packed rows"):
    grid_lion_attention(q, q, q, [None, None], grid=(4, 4), scan_order="snake",
                        segment_ids=np.ones((1, 16), np.int32))
