"""The specification of `chunk_scan`'s state pass: the log-depth associative form equals the
N-step scan and the float64 definition, values and gradients."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from lion_jax import LionMixer, lion_attention
from lion_jax.ops import chunkwise
from lion_jax.config import ModelConfig
from tests.reference import reference_lion
from tests.ops.test_lion_attention import B, CHUNK, H, V, make_inputs

STATE_PASSES = ("scan", "associative")


def entering_by_definition(totals, leaving):
  """Σ_{m < n} exp(Σ_{m < p < n} totals_p) leaving_m, summed term by term in float64."""
  entering = np.zeros_like(leaving)
  for n in range(totals.shape[2]):
    for m in range(n):
      decay = np.exp(totals[:, :, m + 1:n].sum(2))[..., None, :]  # [2B, H, 1, G]
      entering[:, :, n] += decay * leaving[:, :, m]
  return entering


@pytest.mark.parametrize("groups, channels", [(1, 1), (1, 3), (3, 3)],
                         ids=["scalar_key_sums", "scalar", "vector"])
@pytest.mark.parametrize("num_chunks", [1, 2, 13])
def test_both_passes_equal_the_definition_of_the_entering_states(num_chunks, groups, channels):
  rng = np.random.default_rng(0)
  totals = -rng.exponential(2.0, (2, 2, num_chunks, groups))  # [2B, H, N, G]
  totals[0, 0, num_chunks // 2] = -np.inf  # a chunk that forgets everything before it
  leaving = rng.normal(size=(2, 2, num_chunks, 4, channels))  # [2B, H, N, K, X]
  expected = entering_by_definition(totals, leaving)
  with jax.enable_x64(True):
    for state_pass in STATE_PASSES:
      (got,) = jax.jit(chunkwise.STATE_PASSES[state_pass])(totals, (leaving,))
      np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=state_pass)


def entering_from_the_right_by_definition(totals, leaving):
  """Σ_{m > n} exp(Σ_{n < p < m} totals_p) leaving_m: the mirror image of the pass above."""
  return entering_by_definition(totals[:, :, ::-1], leaving[:, :, ::-1])[:, :, ::-1]


@pytest.mark.parametrize("with_initial", [False, True], ids=["from_zero", "from_initial"])
@pytest.mark.parametrize("num_chunks", [1, 13])
def test_both_two_way_passes_equal_the_definition_in_each_direction(num_chunks, with_initial):
  """`TWO_WAY_PASSES`: the states entering each chunk from the left (forward totals and
  leaving states) and from the right (backward ones), read and written where they lie; an
  initial state enters like a chunk of its own before the first (or after the last) chunk."""
  rng = np.random.default_rng(2)
  batch, heads, keys, channels = 2, 2, 4, 3
  fwd_totals, bwd_totals = -rng.exponential(2.0, (2, batch, heads, num_chunks, channels))
  fwd_totals[0, 0, num_chunks // 2] = -np.inf  # forgets everything before it
  bwd_totals[1, 1, num_chunks // 2] = -np.inf
  fwd_leaving, bwd_leaving = rng.normal(size=(2, batch, heads, num_chunks, keys, channels))
  initial = rng.normal(size=(2 * batch, heads, keys, channels)) if with_initial else None
  if with_initial:  # one more chunk before the first (from the left) and after the last
    zero = np.zeros_like(fwd_totals[:, :, :1])
    expected_left = entering_by_definition(
        np.concatenate([zero, fwd_totals], 2),
        np.concatenate([initial[:batch, :, None], fwd_leaving], 2))[:, :, 1:]
    expected_right = entering_from_the_right_by_definition(
        np.concatenate([bwd_totals, zero], 2),
        np.concatenate([bwd_leaving, initial[batch:, :, None]], 2))[:, :, :-1]
  else:
    expected_left = entering_by_definition(fwd_totals, fwd_leaving)
    expected_right = entering_from_the_right_by_definition(bwd_totals, bwd_leaving)
  with jax.enable_x64(True):
    for state_pass in STATE_PASSES:
      left, right = jax.jit(chunkwise.TWO_WAY_PASSES[state_pass])(
          fwd_totals, fwd_leaving, bwd_totals, bwd_leaving, initial)
      np.testing.assert_allclose(left, expected_left, rtol=1e-12, atol=1e-12,
                                 err_msg=state_pass)
      np.testing.assert_allclose(right, expected_right, rtol=1e-12, atol=1e-12,
                                 err_msg=state_pass)


def test_a_pass_from_an_initial_state_equals_the_definition():
  """`with_initial_states`: the state before the first chunk enters like a chunk of its own
  before it, decayed by every chunk it passes, including one that forgets everything."""
  rng = np.random.default_rng(1)
  totals = -rng.exponential(2.0, (2, 2, 6, 3))  # [2B, H, N, G]
  totals[1, 0, 2] = -np.inf
  leaving = rng.normal(size=(2, 2, 6, 4, 3))
  initial = rng.normal(size=(2, 2, 4, 3))  # [2B, H, K, X]
  padded_totals = np.concatenate([np.zeros_like(totals[:, :, :1]), totals], axis=2)
  expected = entering_by_definition(padded_totals, np.concatenate(
      [initial[:, :, None], leaving], axis=2))[:, :, 1:]
  with jax.enable_x64(True):
    got = chunkwise.with_initial_states(entering_by_definition(totals, leaving), totals, initial)
  np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def _initial_states_by_hand(q, k, u, f, a, initial, chunk, **options):
  """The kernel without initial states, plus what they add to query i: q_i·S→ decayed by the
  forward gates up to i, q_i·S← by the log-decays after i."""
  out, _ = chunkwise.bidirectional_chunk_scan(q, k, u, f, a, chunk, **options)
  prefix = jnp.cumsum(f, axis=1)
  suffix = jnp.flip(jnp.cumsum(jnp.flip(a, 1), axis=1), 1) - a
  return (out + jnp.einsum("blhk,bhke->blhe", q, initial[0]) * jnp.exp(prefix)
          + jnp.einsum("blhk,bhke->blhe", q, initial[1]) * jnp.exp(suffix))


# make test: scalar gates in float64; steep chunks from initial states run in make test inside
# the recomputing kernel's segments (tests/ops/test_recomputed.py), and here, with vector gates
# and the exact fallback, in make test-all.
@pytest.mark.parametrize("groups, dtype, gates, state_pass", [
    pytest.param(4, "float64", "mild", "scan", marks=pytest.mark.slow),
    (1, "float64", "mild", "associative"),
    pytest.param(4, "float32", "few_steep", "scan", marks=pytest.mark.slow),
    pytest.param(4, "float32", "all_steep", "associative", marks=pytest.mark.slow)],
    ids=["vector", "scalar", "steep_chunks_on_the_side", "exact_fallback"])
def test_initial_states_enter_the_kernels_own_state_pass(groups, dtype, gates, state_pass):
  """`bidirectional_chunk_scan(..., initial_states=)` (what the recomputing kernel passes each
  segment) equals adding their contribution by hand, outputs and every gradient, on the
  factored path, its steep chunks and its exact fallback."""
  rng = np.random.default_rng(2)
  batch, length, heads, key, channels, chunk = 2, 45, 2, 3, 4, 8
  q, k = (rng.uniform(0.1, 1.0, (batch, length, heads, key)) for _ in range(2))
  u, weights = (rng.normal(size=(batch, length, heads, channels)) for _ in range(2))
  f, a = (-rng.exponential(0.05, (batch, length, heads, groups)) for _ in range(2))
  if gates == "few_steep":  # two chunks spanning more than 2W (gates are clipped at −W/2 first)
    a[0, 8:14, 0], f[1, 24:30, 1] = -60.0, -60.0
  elif gates == "all_steep":
    f, a = 800 * f, 800 * a
  initial = tuple(rng.normal(size=(batch, heads, key, channels)) for _ in range(2))
  with jax.enable_x64(dtype == "float64"):
    cast = lambda x: jax.tree.map(lambda y: jnp.asarray(y, dtype), x)
    args = cast((q, k, u, f, a, initial))
    if gates != "mild":
      clipped = [jnp.maximum(g, -0.5 * chunkwise.factored_exponent_limit(dtype)) for g in args[3:5]]
      steep = int(jnp.sum(chunkwise.steep_chunks(*[jnp.pad(g, [(0, 0), (0, 3), (0, 0), (0, 0)])
                                                   for g in clipped], chunk,
                                                 chunkwise.factored_exponent_limit(dtype))))
      assert (steep == 2) if gates == "few_steep" else (steep > chunkwise.STEEP_CHUNKS_MIN)
    results = []
    for fn in (_initial_states_by_hand, lambda *x, **o: chunkwise.bidirectional_chunk_scan(
        *x[:5], x[6], initial_states=x[5], **o)[0]):
      loss = lambda *x, fn=fn: jnp.sum(fn(*x, chunk, state_pass=state_pass) * weights)
      results.append(jax.jit(jax.value_and_grad(loss, argnums=range(6)))(*args))
  tolerance = 1e-12 if dtype == "float64" else 1e-5
  for got, expected in zip(jax.tree.leaves(results[1]), jax.tree.leaves(results[0])):
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=tolerance,
                               atol=tolerance * np.max(np.abs(expected)))


def test_initial_states_refuse_key_sums_and_wrong_shapes_naming_the_way_out():
  q = k = jnp.ones((1, 8, 1, 2))
  u, gates = jnp.ones((1, 8, 1, 3)), -jnp.ones((1, 8, 1, 1))
  state = jnp.zeros((1, 1, 2, 3))
  with pytest.raises(ValueError, match="initial_states.*channel of ones"):
    chunkwise.bidirectional_chunk_scan(q, k, u, gates, gates, 4, with_key_sums=True,
                                       initial_states=(state, state))
  with pytest.raises(ValueError, match=r"initial_states: expected two \[B, H, K, E\] = \[1, 1, 2, 3\]"):
    chunkwise.bidirectional_chunk_scan(q, k, u, gates, gates, 4, initial_states=(state, state.T))


@functools.lru_cache(maxsize=None)
def loss_and_grads(state_pass, convention):
  def loss(q, k, v, log_decay, key_mask, weights):
    out = lion_attention(q, k, v, log_decay, form="chunk_scan", convention=convention,
                         key_mask=key_mask, chunk_size=CHUNK, state_pass=state_pass)
    return jnp.sum(out * weights), out
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))


DECAY_CASES = {"scalar": ("selective", None), "vector": ("selective_vector", None),
               "vector_to_zero": ("selective_vector", (-40.0, -20.0)),
               "vector_to_one": ("selective_vector", (-1e-9, 0.0))}
# make test: vector decays at both extremes, in the convention whose first gate differs (the
# other convention, scalar and mild vector decays: `make test-all`).
STATE_PASS_FAST = {("vector_to_zero", "code"), ("vector_to_one", "code")}


@pytest.mark.parametrize("length, convention, decay_kind, log_range", [
    pytest.param(length, convention, *DECAY_CASES[name], id=f"{length}-{convention}-{name}",
                 marks=() if length == 37 and (name, convention) in STATE_PASS_FAST
                 else pytest.mark.slow)
    for length in (37, 96) for convention in ("symmetric", "code") for name in DECAY_CASES])
def test_associative_pass_equals_scan_and_definition_with_gradients(length, convention,
                                                                    decay_kind, log_range):
  """Odd L (a partial last chunk), a key mask, both conventions, scalar, vector and extreme
  decays; in float64 the two passes agree to rounding, gradients included."""
  q, k, v, log_decay, key_mask = make_inputs(length, decay_kind, seed=5)
  if log_range is not None:
    log_decay = np.random.default_rng(6).uniform(*log_range, log_decay.shape)
  weights = np.random.default_rng(7).normal(size=v.shape)
  expected = reference_lion(q, k, v, log_decay, convention=convention, key_mask=key_mask)
  with jax.enable_x64(True):
    results = {p: loss_and_grads(p, convention)(q, k, v, log_decay, key_mask, weights)
               for p in STATE_PASSES}
  (_, scan_out), scan_grads = results["scan"]
  (_, assoc_out), assoc_grads = results["associative"]
  assert assoc_out.dtype == jnp.float64
  np.testing.assert_allclose(assoc_out, expected, rtol=1e-10, atol=1e-10)
  np.testing.assert_allclose(assoc_out, scan_out, rtol=1e-12, atol=1e-12)
  for name, got, want in zip("q k v log_decay".split(), assoc_grads, scan_grads):
    assert np.all(np.isfinite(got)), name
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"d/d{name}")


def test_associative_pass_in_float32_matches_the_definition():
  q, k, v, log_decay, key_mask = make_inputs(96, "selective_vector", seed=8)
  expected = reference_lion(q, k, v, log_decay, key_mask=key_mask)
  f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
  (_, got), _ = loss_and_grads("associative", "symmetric")(*f32, key_mask,
                                                           np.ones(v.shape, np.float32))
  assert got.dtype == jnp.float32
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_auto_resolves_to_a_concrete_pass_and_unknown_values_are_named():
  assert chunkwise.resolve_state_pass("auto") in STATE_PASSES
  assert chunkwise.resolve_state_pass("associative") == "associative"
  q, k, v, log_decay, _ = make_inputs(7, "selective")
  with pytest.raises(ValueError, match="state_pass='tree' is not one of 'auto', 'scan', "
                                       "'associative'"):
    lion_attention(q, k, v, log_decay, state_pass="tree")
  with pytest.raises(ValueError, match="ModelConfig.state_pass='tree'"):
    ModelConfig(state_pass="tree")


@pytest.mark.parametrize("order", [
    dict(), pytest.param(dict(scan_order="snake", grid=(3, 7)), marks=pytest.mark.slow)],
    ids=["raster", "snake"])
def test_model_config_state_pass_reaches_the_chunk_kernel(order, monkeypatch):
  """`ModelConfig.state_pass` picks the pass every scan of the mixer runs, with equal outputs."""
  used = []
  for registry in (chunkwise.STATE_PASSES, chunkwise.TWO_WAY_PASSES):
    for name, state_pass in list(registry.items()):
      monkeypatch.setitem(registry, name,
                          lambda *a, _n=name, _f=state_pass: used.append(_n) or _f(*a))
  x = jax.random.normal(jax.random.key(1), (2, 21, 16))
  outputs = {}
  for state_pass in STATE_PASSES:
    config = ModelConfig(d_model=16, num_heads=2, num_layers=1, chunk_size=8, decay="selective",
                         decay_shape="vector", state_pass=state_pass, **order)
    used.clear()
    outputs[state_pass] = nnx.jit(lambda mixer, x: mixer(x, None))(
        LionMixer(config, rngs=nnx.Rngs(0)), x)
    assert used and set(used) == {state_pass}
  np.testing.assert_allclose(outputs["associative"], outputs["scan"], rtol=1e-5, atol=1e-6)


def test_state_pass_reaches_every_shard_under_a_sequence_axis(monkeypatch):
  used = []
  for registry in (chunkwise.STATE_PASSES, chunkwise.TWO_WAY_PASSES):
    associative = registry["associative"]
    monkeypatch.setitem(registry, "associative",
                        lambda *a, _f=associative: used.append("associative") or _f(*a))
  q, k, v, log_decay, key_mask = make_inputs(37, "selective_vector", seed=9)
  mesh = Mesh(np.asarray(jax.devices()[:1]), ("seq",))
  with jax.enable_x64(True), jax.set_mesh(mesh):
    got = jax.jit(lambda *x: lion_attention(*x, key_mask=key_mask, chunk_size=CHUNK,
                                            sequence_axis="seq", state_pass="associative")
                  )(q, k, v, log_decay)
  assert used
  np.testing.assert_allclose(got, reference_lion(q, k, v, log_decay, key_mask=key_mask),
                             rtol=1e-10, atol=1e-10)
