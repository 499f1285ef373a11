"""Packed rows for the baselines: `segment_ids` in S5, softmax attention and their blocks.

A packed row holds several examples end to end (`lion_jax.ops.segments`). The specification: every
example's outputs, and the gradients of any loss on them, equal those of the example run alone
(at the start of a row of the same length, padded with `mask`), whatever else shares its row.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lion_jax import ModelConfig
from lion_jax.nn.blocks import S5Block, TransformerBlock
from lion_jax.nn.s5 import S5Mixer, linear_recurrence
from lion_jax.ops.segments import check_segment_ids, same_segment, segment_ends, segment_starts
from lion_jax.nn.softmax import SoftmaxMixer

L, M = 16, 4
S5_TINY = dict(mixer="s5", d_model=M, ssm_size=8, ssm_blocks=2)
SOFTMAX_TINY = dict(mixer="softmax", d_model=M, num_heads=2)

# One batch, each row as runs of (id, length); id 0 is padding.
LAYOUT = [
    # Six examples of lengths 1-4, some touching, padding between them and at the end.
    [(5, 1), (2, 3), (0, 2), (7, 4), (3, 1), (9, 2), (4, 2), (0, 1)],
    # One example filling the row.
    [(1, L)],
    # One example with trailing padding.
    [(3, 11), (0, 5)],
    # Leading padding, a length-1 example, and two examples that touch.
    [(0, 2), (8, 1), (6, 9), (2, 4)],
]


def _ids(layout):
  """[B, L] int32 segment ids from a layout's runs."""
  return np.array([np.repeat([i for i, _ in row], [n for _, n in row]) for row in layout],
                  np.int32)


def _examples(layout):
  """(row, start, length) of every example, in row order."""
  found = []
  for b, row in enumerate(layout):
    start = 0
    for i, n in row:
      if i > 0:
        found.append((b, start, n))
      start += n
  return found


def _unpack(x, layout):
  """[B, L, ...] packed → ([E, L, ...] every example alone at the start of a row, [E, L] mask).

  A gather, so gradients through it land on the packed positions.
  """
  examples = _examples(layout)
  index = np.zeros((len(examples), L), np.int32)
  mask = np.zeros((len(examples), L), bool)
  for e, (b, start, n) in enumerate(examples):
    index[e, :n] = b * L + start + np.arange(n)
    mask[e, :n] = True
  flat = x.reshape((-1,) + x.shape[2:])[index]  # [E, L, ...]
  keep = jnp.asarray(mask).reshape(mask.shape + (1,) * (x.ndim - 2))
  return jnp.where(keep, flat, 0), jnp.asarray(mask)


def _packed_and_alone(module, x, weights, layout, grads):
  """Loss values, gradients (parameters, x; None unless `grads`) and outputs, packed and alone,
  one jit each.

  The loss Σ y ⊙ weights reads real tokens only (weights are zero at padding).
  """
  ids = jnp.asarray(_ids(layout))

  def packed(module, x):
    y = module(x, ids > 0, segment_ids=ids)
    return jnp.sum(y * weights), y

  def alone(module, x):
    x_alone, mask = _unpack(x, layout)
    y = module(x_alone, mask)
    return jnp.sum(y * _unpack(weights, layout)[0]), y

  results = []
  for loss in (packed, alone):
    if grads:
      value_and_grad = nnx.jit(nnx.value_and_grad(loss, argnums=(0, 1), has_aux=True))
      (value, y), gradients = value_and_grad(nnx.clone(module), x)  # clone: BatchNorm's stats move
    else:
      (value, y), gradients = nnx.jit(loss)(nnx.clone(module), x), None
    results.append((value, gradients, y))
  return results


def _float64(module):
  graphdef, params, rest = nnx.split(module, nnx.Param, ...)
  return nnx.merge(graphdef, jax.tree.map(lambda a: a.astype(jnp.float64), params), rest)


def _inputs(layout, dtype):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(len(layout), L, M))
  x[_ids(layout) == 0] = 50.0  # padding: garbage that must reach no example
  weights = rng.normal(size=x.shape) * (_ids(layout) > 0)[..., None]
  return jnp.asarray(x, dtype), jnp.asarray(weights, dtype)


def _assert_packed_equals_alone(module, layout, dtype, rtol, atol, grads=True):
  x, weights = _inputs(layout, dtype)
  (packed_loss, packed_grads, packed_y), (alone_loss, alone_grads, alone_y) = _packed_and_alone(
      module, x, weights, layout, grads)
  assert np.all(np.isfinite(packed_y)), "padding outputs must stay finite"
  for e, (b, start, n) in enumerate(_examples(layout)):
    np.testing.assert_allclose(packed_y[b, start:start + n], alone_y[e, :n], rtol=rtol, atol=atol,
                               err_msg=f"outputs of row {b}'s example at {start}:{start + n}")
  np.testing.assert_allclose(packed_loss, alone_loss, rtol=rtol, atol=atol)
  if not grads:
    return
  np.testing.assert_allclose(packed_grads[1], alone_grads[1], rtol=rtol, atol=atol,
                             err_msg="gradient with respect to x")
  jax.tree.map(lambda p, a: np.testing.assert_allclose(p, a, rtol=rtol, atol=atol,
                                                       err_msg="parameter gradient"),
               packed_grads[0], alone_grads[0])


@pytest.mark.parametrize("method", ["associative", pytest.param("linear", marks=pytest.mark.slow)])
def test_s5_packed_examples_equal_each_example_alone(method):
  """In float64, to 1e-10; the float32 default is tested inside `S5Block` below."""
  with jax.enable_x64(True):
    mixer = _float64(S5Mixer(ModelConfig(**S5_TINY, ssm_scan=method), rngs=nnx.Rngs(0)))
    _assert_packed_equals_alone(mixer, LAYOUT, jnp.float64, rtol=1e-10, atol=1e-12)


def test_softmax_packed_examples_equal_each_example_alone():
  """Also: queries at padding, which may see no key, stay finite."""
  mixer = SoftmaxMixer(ModelConfig(**SOFTMAX_TINY), rngs=nnx.Rngs(0))
  _assert_packed_equals_alone(mixer, LAYOUT, jnp.float32, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block,options", [
    (S5Block, dict(S5_TINY, norm="batch")),  # S5 in float32, associative scan
    (TransformerBlock, dict(SOFTMAX_TINY, block="transformer", norm="layer")),
])
def test_blocks_pass_segment_ids_to_the_mixer(block, options):
  """Outputs (the mixers' gradients are tested above). Training mode: a packed batch and the
  alone batch hold the same real tokens, so even BatchNorm's batch statistics (which skip the
  tokens where mask = segment_ids > 0 is False) agree."""
  module = block(ModelConfig(**options), rngs=nnx.Rngs(0))
  module.train()
  _assert_packed_equals_alone(module, LAYOUT, jnp.float32, rtol=1e-4, atol=1e-5, grads=False)


def _two_touching_examples(mixer, segment_ids):
  """How far each of two touching examples (tokens 0-5 and 6-15) moves when the other's inputs
  change: (change of the second example's outputs, change of the first's)."""
  x = jax.random.normal(jax.random.key(0), (1, L, M))
  ids = jnp.asarray(_ids([[(1, 6), (2, 10)]]))
  call = jax.jit(lambda x: mixer(x, segment_ids=ids if segment_ids else None))
  first_moved = call(x.at[:, :6].add(1.0)) - call(x)
  second_moved = call(x.at[:, 6:].add(1.0)) - call(x)
  return float(jnp.abs(first_moved[:, 6:]).max()), float(jnp.abs(second_moved[:, :6]).max())


@pytest.mark.parametrize("mixer_class,options", [(S5Mixer, S5_TINY), (SoftmaxMixer, SOFTMAX_TINY)])
def test_nothing_crosses_a_boundary_in_either_direction_and_would_without_segment_ids(
    mixer_class, options):
  """The first example reaches the second only through S5's forward scan, the second the first
  only through the backward scan: both resets are needed. Without segment_ids both leak, so the
  equality tests above could fail."""
  mixer = mixer_class(ModelConfig(**options), rngs=nnx.Rngs(0))
  assert _two_touching_examples(mixer, segment_ids=True) == (0.0, 0.0)
  forward_leak, backward_leak = _two_touching_examples(mixer, segment_ids=False)
  assert forward_leak > 1e-3 and backward_leak > 1e-3


@pytest.mark.parametrize("method", ["associative", "linear"])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_resets_drop_the_carried_state(method, reverse):
  """x_t = bu_t where resets is True, else Λ̄ x_{t∓1} + bu_t (a Python loop in complex128)."""
  rng = np.random.default_rng(0)
  lam = np.exp((-0.5 + 1j * rng.normal(size=3)) * 0.3)
  bu = rng.normal(size=(2, 9, 3)) + 1j * rng.normal(size=(2, 9, 3))
  resets = rng.random((2, 9)) < 0.3
  want = np.zeros_like(bu)
  for b in range(2):
    x = np.zeros(3, complex)
    for t in (reversed(range(9)) if reverse else range(9)):
      x = (0 if resets[b, t] else lam) * x + bu[b, t]
      want[b, t] = x
  got = linear_recurrence(jnp.asarray(lam, jnp.complex64), jnp.asarray(bu, jnp.complex64),
                          reverse=reverse, method=method, resets=jnp.asarray(resets))
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_segment_starts_ends_and_same_segment():
  ids = jnp.asarray([[4, 4, 0, 0, 2, 4, 4, 4]], jnp.int32)
  assert np.asarray(segment_starts(ids))[0].tolist() == [1, 0, 1, 0, 1, 1, 0, 0]
  assert np.asarray(segment_ends(ids))[0].tolist() == [0, 1, 0, 1, 1, 0, 0, 1]
  same = np.asarray(same_segment(ids))[0]
  examples = [[0, 1], [4], [5, 6, 7]]  # the two runs of id 4 are two examples
  want = np.zeros((8, 8), bool)
  for tokens in examples:
    want[np.ix_(tokens, tokens)] = True
  np.testing.assert_array_equal(same, want)


SHAPE_ERROR = r"segment_ids has shape .*; expected \[B, L\]=\[2, 16\]"


@pytest.mark.parametrize("segment_ids,error,expected", [
    (np.ones((2, L - 1), np.int32), ValueError, SHAPE_ERROR),
    (np.ones((L,), np.int32), ValueError, SHAPE_ERROR),
    (np.ones((2, L), np.float32), TypeError, r"segment_ids must be integers .*float32"),
    (np.ones((2, L), bool), TypeError, r"segment_ids must be integers .*bool"),
    ([[1] * L] * 2, TypeError, r"segment_ids must be an integer array .*list"),
])
@pytest.mark.parametrize("mixer_class,options", [(S5Mixer, S5_TINY), (SoftmaxMixer, SOFTMAX_TINY)])
def test_wrong_segment_ids_are_an_error_naming_them(segment_ids, error, expected, mixer_class,
                                                    options):
  mixer = mixer_class(ModelConfig(**options), rngs=nnx.Rngs(0))
  with pytest.raises(error, match=expected):
    mixer(jnp.zeros((2, L, M)), segment_ids=segment_ids)


def test_check_segment_ids_runs_under_jit():
  @jax.jit
  def check(ids):
    check_segment_ids(ids, 2, L)
    return ids

  check(jnp.zeros((2, L), jnp.uint8))
  with pytest.raises(ValueError, match="segment_ids"):
    check(jnp.zeros((2, L + 1), jnp.int32))
