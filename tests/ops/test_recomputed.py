"""The specification of `residuals="recomputed"`: the `chunk_scan` form that keeps only its
inputs for the backward pass (`lion_jax.ops.recomputed`) computes what the definition says, with
its gradients, and trains what the stored kernel trains.

Segments are made small here (two chunks of 16 tokens), so that every call crosses several
segment boundaries, the last segment padded.
"""

import contextlib
import functools
import io
import re

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
import pytest

from lion_jax import ModelConfig, lion_attention
from lion_jax.ops import recomputed
from lion_jax.ops.grid_order import grid_lion_attention
from lion_jax.ops.attention import resolve_residuals
from lion_jax.options import ConfigError
from tests.reference import reference_lion
from tests.ops.test_lion_attention import (BRANCH_SPANS, CHUNK, DECAY_KINDS, OPTIONS, STEEP_TOKENS,
                                       _inputs_with_steep_tokens, _vector_inputs_spanning,
                                       make_inputs)


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
  monkeypatch.setattr(recomputed, "SEGMENT_MIN", 1)
  monkeypatch.setattr(recomputed, "SEGMENT_MAX", 2 * CHUNK)


def attention(q, k, v, log_decay, key_mask, *, residuals="recomputed", form="chunk_scan",
              convention="symmetric", normalize="after", state_pass="auto"):
  return lion_attention(q, k, v, log_decay, form=form, convention=convention,
                        normalize=normalize, key_mask=key_mask, chunk_size=CHUNK,
                        residuals=residuals, state_pass=state_pass)


def every_option(q, k, v, log_decay, key_mask):
  return [attention(q, k, v, log_decay, key_mask, convention=c, normalize=n) for c, n in OPTIONS]


def test_segments_are_equal_runs_of_whole_chunks_near_a_token_target_per_platform(monkeypatch):
  assert recomputed.segment_length(2, 96, 16) == 32  # at most SEGMENT_MAX (here 32)
  assert recomputed.segment_length(2, 20, 16) == 32  # a padded row of 2 chunks
  assert recomputed.segment_length(1, 8, 16) == 16  # never less than a chunk
  monkeypatch.undo()  # the real bounds
  # CPU: about 2048 tokens over the batch, 128 to 512 a row.
  assert recomputed.segment_length(2, 4096, 32) == 512  # SEGMENT_MAX per row
  assert recomputed.segment_length(32, 2048, 32) == 128  # SEGMENT_MIN per row
  assert recomputed.segment_length(8, 2048, 32) == 256  # SEGMENT_TOKENS over the batch
  assert recomputed.segment_length(64, 4000, 32) == 128  # padded to 4096, not 125 segments
  assert recomputed.segment_length(2, 600, 32) == 320  # 19 chunks as 10 + 9, not 16 + 3
  # GPU and TPU: up to 2^17 tokens over the batch, rows of any length.
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert recomputed.segment_length(50, 2048, 32) == 2048  # ListOps: one segment a row
  assert recomputed.segment_length(13, 4608, 32) == 4608  # ListOps packed
  assert recomputed.segment_length(50, 4096, 32) == 2048  # Text: two equal, not 2592 + 1504
  assert recomputed.segment_length(32, 16384, 32) == 4096  # Path-X: four a row


# make test: the scalar decay shapes (fixed and selective) at L = 37 (3 segments, the last
# padded); the LRA's selective vector decays meet the definition in make test through steep
# chunks inside segments (float32, with gradients) and the dropped-state control (float64).
# Every other decay shape and length (the vector decays at L = 96 in float32 and at one token
# too) in `make test-all`.
DEFINITION_CASES = [(kind, length) for kind in DECAY_KINDS for length in (1, 37, 96)]
FAST_DEFINITION_CASES = [("fixed_head", 37), ("selective", 37)]


@pytest.mark.parametrize("decay_kind, length", [
    case if case in FAST_DEFINITION_CASES else pytest.param(*case, marks=pytest.mark.slow)
    for case in DEFINITION_CASES])
def test_recomputed_chunk_scan_equals_the_float64_definition(decay_kind, length):
  """Every decay shape, both conventions, all normalisations, padded keys: float64 to 1e-10,
  float32 to 1e-5."""
  q, k, v, log_decay, key_mask = make_inputs(length, decay_kind, seed=length)
  key_mask[0] = True  # row 0 keeps every key, row 1 drops some
  expected = [reference_lion(q, k, v, log_decay, convention=c, normalize=n, key_mask=key_mask)
              for c, n in OPTIONS]
  if length != 96:  # float64 at 1 and 37 tokens, float32 at 96
    with jax.enable_x64(True):
      got = jax.jit(every_option)(q, k, v, log_decay, key_mask)
    for (c, n), g, e in zip(OPTIONS, got, expected):
      assert g.dtype == jnp.float64
      np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10, err_msg=f"{c} {n}")
  else:
    f32 = [None if x is None else np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
    for (c, n), g, e in zip(OPTIONS, jax.jit(every_option)(*f32, key_mask), expected):
      np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"float32 {c} {n}")


def gradients(q, k, v, log_decay, key_mask, residuals, form="chunk_scan", **options):
  """d/dq, d/dk, d/dv (and d/d log λ) of a weighted sum of the outputs."""
  weights = np.random.default_rng(15).normal(size=v.shape).astype(q.dtype)
  arguments = (q, k, v) + (() if log_decay is None else (log_decay,))

  def loss(*arguments):
    decay = arguments[3] if len(arguments) == 4 else None
    out = attention(*arguments[:3], decay, key_mask, residuals=residuals, form=form, **options)
    return jnp.sum(out * weights)
  return jax.jit(jax.grad(loss, argnums=tuple(range(len(arguments)))))(*arguments)


# make test: the LRA's vector decays with the associative pass (the other tests here take
# "auto", on a CPU the scan pass); the rest in make test-all.
@pytest.mark.parametrize("decay_kind, convention, normalize, state_pass", [
    pytest.param("lit", "symmetric", "after", "scan", marks=pytest.mark.slow),
    pytest.param("fixed_head", "code", "after", "scan", marks=pytest.mark.slow),
    pytest.param("fixed_channel", "symmetric", "before", "associative", marks=pytest.mark.slow),
    pytest.param("selective", "code", "none", "scan", marks=pytest.mark.slow),
    pytest.param("selective_vector", "symmetric", "after", "scan", marks=pytest.mark.slow),
    ("selective_vector", "code", "after", "associative"),
])
def test_recomputed_gradients_equal_the_full_forms_in_float64(decay_kind, convention, normalize,
                                                               state_pass):
  """The full form's float64 gradients (which `test_lion_attention` checks against finite
  differences) to 1e-9, through every segment boundary, with either state pass."""
  q, k, v, log_decay, key_mask = make_inputs(37, decay_kind, seed=5)
  options = dict(convention=convention, normalize=normalize)
  with jax.enable_x64(True):
    got = gradients(q, k, v, log_decay, key_mask, "recomputed", state_pass=state_pass, **options)
    expected = gradients(q, k, v, log_decay, key_mask, "stored", form="attention", **options)
  for name, g, e in zip("q k v log_decay".split(), got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10 * np.abs(e).max(), err_msg=name)


def test_a_row_of_one_segment_passes_no_states_and_keeps_exact_gradients():
  """A row that is one segment (a GPU's rule at most presets) skips the summaries, which nothing
  would read: the outputs and gradients stay the full form's."""
  q, k, v, log_decay, key_mask = make_inputs(12, "selective_vector", seed=6)
  assert recomputed.segment_length(q.shape[0], 12, CHUNK) >= 12  # one segment
  with jax.enable_x64(True):
    got = gradients(q, k, v, log_decay, key_mask, "recomputed", convention="code")
    expected = gradients(q, k, v, log_decay, key_mask, "stored", form="attention",
                         convention="code")
  for name, g, e in zip("q k v log_decay".split(), got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10 * np.abs(e).max(), err_msg=name)


def test_a_dropped_state_term_in_the_backward_pass_fails_the_gradient_check(monkeypatch):
  """Negative control: without the gradients that reach each segment's keys and values through
  the states it passes to the others, the gradients are wrong (and the outputs still right)."""
  q, k, v, log_decay, key_mask = make_inputs(37, "selective_vector", seed=5)
  real = recomputed._summarise  # pylint: disable=protected-access
  monkeypatch.setattr(recomputed, "_summarise",
                      lambda *a: jax.tree.map(jax.lax.stop_gradient, real(*a)))
  with jax.enable_x64(True):
    got = gradients(q, k, v, log_decay, key_mask, "recomputed")
    expected = gradients(q, k, v, log_decay, key_mask, "stored", form="attention")
    np.testing.assert_allclose(jax.jit(attention)(q, k, v, log_decay, key_mask),
                               reference_lion(q, k, v, log_decay, key_mask=key_mask), rtol=1e-10)
  for name in ("k", "v"):
    g, e = got["q k v".split().index(name)], expected["q k v".split().index(name)]
    assert np.max(np.abs(g - e)) > 1e-3 * np.max(np.abs(e)), name


# make test: a few steep chunks; all chunks beyond the factored range in make test-all.
@pytest.mark.parametrize("case", ["steep", pytest.param("exact", marks=pytest.mark.slow)])
def test_steep_chunks_and_the_exact_fallback_inside_segments(case):
  """float32, vector decays: a few steep chunks (recomputed on the side) and chunks all beyond
  the factored range (the exact masks), forward and backward, against the definition and the
  float64 full form."""
  if case == "steep":
    q, k, v, log_decay, key_mask = _inputs_with_steep_tokens(-35.0, places=STEEP_TOKENS)
  else:
    q, k, v, log_decay, key_mask = _vector_inputs_spanning(BRANCH_SPANS["exact"][0])
  f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
  np.testing.assert_allclose(jax.jit(attention)(*f32, key_mask),
                             reference_lion(q, k, v, log_decay, key_mask=key_mask),
                             rtol=1e-5, atol=1e-5)
  got = gradients(*f32, key_mask, "recomputed")
  with jax.enable_x64(True):
    expected = gradients(q, k, v, log_decay, key_mask, "stored", form="attention")
  for name, g, e in zip("q k v log_decay".split(), got, expected):
    assert np.all(np.isfinite(g)), name
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * np.abs(e).max(), err_msg=name)


# make test-all; make test takes extreme decays through the stored kernel
# (tests/ops/test_lion_attention.py, test_state_pass.py, test_segments.py).
@pytest.mark.slow
@pytest.mark.parametrize("log_range", [(-40.0, -20.0), (-1e-9, 0.0)], ids=["to_zero", "to_one"])
def test_extreme_decays_stay_finite_and_exact(log_range):
  """λ → 0 (every state dies within a token) and λ → 1 (nothing decays over the row): float64
  to 1e-10, float32 to 1e-5, gradients finite."""
  rng = np.random.default_rng(8)
  q, k, v, _, key_mask = make_inputs(37, "lit", seed=9)
  log_decay = rng.uniform(*log_range, v.shape)
  expected = reference_lion(q, k, v, log_decay, key_mask=key_mask)
  with jax.enable_x64(True):
    np.testing.assert_allclose(jax.jit(attention)(q, k, v, log_decay, key_mask), expected,
                               rtol=1e-10, atol=1e-10)
  f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
  np.testing.assert_allclose(jax.jit(attention)(*f32, key_mask), expected, rtol=1e-5, atol=1e-5)
  assert all(np.all(np.isfinite(g)) for g in gradients(*f32, key_mask, "recomputed"))


@pytest.mark.parametrize("scan_order", [
    "snake", pytest.param("snake_outputs", marks=pytest.mark.slow)])
def test_snake_orders_pass_residuals_to_every_scan(scan_order, monkeypatch):
  """LION♮ (`grid_lion_attention`) runs its snakes through the recomputing kernel: the stored
  kernel's outputs and gradients to float32 rounding."""
  calls = []
  real = recomputed.recomputed_chunk_scan
  monkeypatch.setattr(recomputed, "recomputed_chunk_scan",
                      lambda *a, **o: calls.append(1) or real(*a, **o))
  q, k, v, _, key_mask = make_inputs(64, "lit", seed=2)
  rng = np.random.default_rng(3)
  decays = tuple(np.log(rng.uniform(0.5, 0.99, v.shape)).astype(np.float32) for _ in range(2))
  q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))

  def loss(residuals, q, k, v):
    out = grid_lion_attention(q, k, v, decays, grid=(8, 8), scan_order=scan_order,
                              form="chunk_scan", chunk_size=8, key_mask=key_mask,
                              residuals=residuals)
    return jnp.sum(out ** 2), out

  results = {residuals: jax.jit(jax.value_and_grad(functools.partial(loss, residuals),
                                                   argnums=(0, 1, 2), has_aux=True))(q, k, v)
             for residuals in ("stored", "recomputed")}
  assert calls  # traced for "recomputed" only
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
               results["recomputed"], results["stored"])


def saved_bytes(fn, *args):
  """Bytes of what the backward pass of `fn` keeps (JAX's own account of its residuals), and
  the residuals' shapes."""
  printed = io.StringIO()
  with contextlib.redirect_stdout(printed):
    jax.ad_checkpoint.print_saved_residuals(fn, *args)
  shapes = re.findall(r"^(\w+)\[([\d,]*)\]", printed.getvalue(), flags=re.MULTILINE)
  size = lambda dims: int(np.prod([int(d) for d in dims.split(",") if d]))
  return sum(size(dims) * np.dtype(kind.replace("f", "float").replace("i", "int")
                                   .replace("bool", "bool")).itemsize
             for kind, dims in shapes), shapes


def test_what_the_backward_pass_keeps_is_the_inputs_and_a_few_states():
  """At L = 4096 (64 segments of 64 tokens) no saved residual is a chunk block, a per-chunk
  state or a copy of an input: the inputs themselves and [P, B, H, K, E] segment states. The
  stored kernel keeps more than three times as much."""
  batch, length, heads, key_dim, value_dim = 1, 4096, 2, 8, 8
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.uniform(0.1, 1, (batch, length, heads, key_dim)), jnp.float32)
          for _ in range(2))
  v = jnp.asarray(rng.normal(size=(batch, length, heads, value_dim)), jnp.float32)
  log_decay = jnp.asarray(-rng.uniform(0.01, 1, (batch, length, heads, value_dim)), jnp.float32)
  input_bytes = sum(x.size * 4 for x in (q, k, v, log_decay))
  kept, shapes = saved_bytes(lambda *a: attention(*a, None).sum(), q, k, v, log_decay)
  assert kept <= 1.5 * input_bytes, shapes
  kept_stored, _ = saved_bytes(lambda *a: attention(*a, None, residuals="stored").sum(),
                               q, k, v, log_decay)
  assert kept_stored > 3 * input_bytes


def test_residuals_is_checked_and_auto_resolves(monkeypatch):
  with pytest.raises(ConfigError, match=r"residuals='kept' is not one of 'auto', 'stored', "
                                        r"'recomputed'"):
    ModelConfig(residuals="kept")
  q, k, v, log_decay, key_mask = make_inputs(7, "lit")
  with pytest.raises(ConfigError, match="residuals="):
    attention(q, k, v, log_decay, key_mask, residuals="none")
  assert resolve_residuals("stored", 4096) == "stored"
  assert resolve_residuals("recomputed", 64) == "recomputed"
  # "auto": one segment a row keeps the stored kernel; longer rows recompute.
  monkeypatch.undo()  # the real segment bounds
  assert resolve_residuals("auto", 512) == "stored"
  assert resolve_residuals("auto", 513) == "recomputed"
