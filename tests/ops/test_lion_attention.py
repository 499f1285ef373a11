"""The specification of `lion_attention`: every form equals the float64 definition.

The reference (`tests/reference.py`) sums the definition entry by entry and shares no code with
`lion_jax`. Forms are compared with it, not only with each other.
"""

import functools

import jax
import jax.ad_checkpoint
import jax.test_util
import jax.numpy as jnp
import numpy as np
import pytest

from lion_jax import lion_attention, lion_mask, toeplitz_mask
from lion_jax.ops import chunkwise, factored, recurrent
from lion_jax.ops.masks import backward_gate_flipped
from tests.reference import expand_log_decay, reference_lion, reference_mask

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")
DECAY_KINDS = ("lit", "fixed_head", "fixed_channel", "selective", "selective_vector")
CHUNK = 16  # small, so L = 37 and 96 span several chunks (37 ends in a partial one); vector
# decays take the factored kernel unless many chunks are steep, then the exact masks in
# sub-chunks of 8 (chunkwise.VECTOR_SUBCHUNK); L = 7 is one short chunk, whose exact masks are
# plain
B, H, K, V = 2, 2, 3, 4


def make_inputs(length, decay_kind, seed=0, low=0.5, high=0.999, batch=B, heads=H):
  """Non-negative q, k (as after a positive feature map), any v, and λ in [low, high]."""
  rng = np.random.default_rng(seed)
  q = rng.uniform(0.05, 1.0, (batch, length, heads, K))
  k = rng.uniform(0.05, 1.0, (batch, length, heads, K))
  v = rng.normal(size=(batch, length, heads, V))
  shapes = {"lit": None, "fixed_head": (heads,), "fixed_channel": (heads, V),
            "selective": (batch, length, heads), "selective_vector": (batch, length, heads, V)}
  shape = shapes[decay_kind]
  log_decay = None if shape is None else np.log(rng.uniform(low, high, shape))
  key_mask = rng.uniform(size=(batch, length)) > 0.3
  key_mask[:, 0] = True  # every row keeps at least one key
  return q, k, v, log_decay, key_mask


@functools.lru_cache(maxsize=None)
def compiled(form, convention, normalize, use_mask):
  """One jitted function per option set, so repeated shapes compile once."""
  def run(q, k, v, log_decay, key_mask):
    return lion_attention(q, k, v, log_decay, form=form, convention=convention,
                          normalize=normalize, key_mask=key_mask if use_mask else None,
                          chunk_size=CHUNK)
  return jax.jit(run)


OPTIONS = [(c, n) for c in ("symmetric", "code") for n in ("after", "before", "none")]


@functools.lru_cache(maxsize=None)
def every_option(form):
  """All conventions × normalisations of one form in one jitted function (one compile per shape).

  The batch carries both key-mask cases: row 0 keeps every key, row 1 drops some.
  """
  def run(q, k, v, log_decay, key_mask):
    return [lion_attention(q, k, v, log_decay, form=form, convention=convention,
                           normalize=normalize, key_mask=key_mask, chunk_size=CHUNK)
            for convention, normalize in OPTIONS]
  return jax.jit(run)


@functools.lru_cache(maxsize=None)
def definition_outputs(decay_kind, length):
  q, k, v, log_decay, key_mask = make_inputs(length, decay_kind)
  key_mask[0] = True
  expected = [reference_lion(q, k, v, log_decay, convention=convention, normalize=normalize,
                             key_mask=key_mask) for convention, normalize in OPTIONS]
  return (q, k, v, log_decay, key_mask), expected


def definition_grid():
  """make test: every option at L = 37 (several chunks, a partial last one), in every form with
  the LRA's selective vector decays and in chunk_scan (the training form) with every decay kind;
  chunk_scan at L = 1 with a selective scalar; the rest (the other forms with the other decay
  kinds, L = 7, less than a chunk, and L = 96, six whole chunks, too) in make test-all."""
  for decay_kind in DECAY_KINDS:
    for length in (1, 7, 37, 96):
      for form in FORMS:
        fast = (length == 37 and (decay_kind == "selective_vector" or form == "chunk_scan")) or (
            form == "chunk_scan" and length == 1 and decay_kind == "selective")
        yield (decay_kind, length, form) if fast else pytest.param(
            decay_kind, length, form, marks=pytest.mark.slow)


@pytest.mark.parametrize("decay_kind,length,form", list(definition_grid()))
def test_every_form_equals_float64_definition(decay_kind, length, form):
  """Every decay shape × convention × normalisation × L, with and without a key mask."""
  inputs, expected = definition_outputs(decay_kind, length)
  with jax.enable_x64(True):
    outputs = every_option(form)(*inputs)
  for (convention, normalize), got, want in zip(OPTIONS, outputs, expected):
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10,
                               err_msg=f"convention={convention} normalize={normalize}")


# make test: the LRA's selective vector decays in the symmetric convention (each decay kind and
# convention in float64 above; every pair in float32: make test-all).
FLOAT32_FAST = {("selective_vector", "symmetric")}


@pytest.mark.parametrize("decay_kind,convention", [
    case if case in FLOAT32_FAST else pytest.param(*case, marks=pytest.mark.slow)
    for case in ((kind, convention) for kind in DECAY_KINDS for convention in ("symmetric", "code"))])
def test_float32_matches_definition(decay_kind, convention):
  q, k, v, log_decay, key_mask = make_inputs(37, decay_kind, seed=1)
  expected = reference_lion(q, k, v, log_decay, convention=convention, key_mask=key_mask)
  f32 = lambda x: None if x is None else np.asarray(x, np.float32)
  for form in FORMS:
    got = compiled(form, convention, "after", True)(f32(q), f32(k), f32(v), f32(log_decay),
                                                    key_mask)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"form={form}")


# make test-all; make test keeps bfloat16 inputs through chunk_scan in LION♮'s snake order
# (tests/ops/test_grid_order.py, test_bfloat16_inputs_keep_float32_sums).
@pytest.mark.slow
def test_bfloat16_inputs_stay_within_documented_tolerance():
  """bf16 q, k, v (8-bit mantissa): decays and sums run in float32, so the error is the inputs'."""
  q, k, v, log_decay, key_mask = make_inputs(96, "selective_vector", seed=2)
  bf16 = lambda x: jnp.asarray(x, jnp.bfloat16)
  # The reference sees the same rounded inputs: what is left is the computation's own error.
  rounded = [np.asarray(bf16(x), np.float64) for x in (q, k, v)]
  expected = reference_lion(*rounded, log_decay, key_mask=key_mask)
  for form in FORMS:
    got = compiled(form, "symmetric", "after", True)(bf16(q), bf16(k), bf16(v),
                                                     np.float32(log_decay), key_mask)
    assert got.dtype == jnp.bfloat16
    # bf16 output rounding: 2^-8 relative.
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=8e-3, atol=8e-3,
                               err_msg=f"form={form}")


# make test: chunk_scan (the training form) with the LRA's selective vector decays; the other
# forms, and fixed and selective scalar decays, in make test-all.
@pytest.mark.parametrize("decay_kind, form", [
    case if case == ("selective_vector", "chunk_scan") else pytest.param(*case,
                                                                         marks=pytest.mark.slow)
    for case in ((kind, form) for kind in ("fixed_head", "selective", "selective_vector")
                 for form in FORMS[1:])])
def test_gradients_agree_between_forms_and_with_finite_differences(decay_kind, form):
  """The full form's float64 gradients equal finite differences, and `form`'s equal them."""
  q, k, v, log_decay, key_mask = make_inputs(20, decay_kind, seed=3)  # two chunks, the second partial
  weights = np.random.default_rng(4).normal(size=v.shape)

  def loss(form, q, k, v, log_decay):
    out = lion_attention(q, k, v, log_decay, form=form, key_mask=key_mask, chunk_size=CHUNK)
    return jnp.sum(out * weights)

  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x) for x in (q, k, v, log_decay))
    jax.test_util.check_grads(jax.jit(functools.partial(loss, "attention")), args, order=1,
                              modes=["rev"])
    expected = jax.jit(jax.grad(functools.partial(loss, "attention"), argnums=(0, 1, 2, 3)))(
        *args)
    got = jax.jit(jax.grad(functools.partial(loss, form), argnums=(0, 1, 2, 3)))(*args)
  for name, g, e in zip("q k v log_decay".split(), got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=f"{form} d/d{name}")


# make test: chunk_scan (the training form); the other forms in make test-all.
@pytest.mark.parametrize("form", [form if form == "chunk_scan" else
                                  pytest.param(form, marks=pytest.mark.slow) for form in FORMS])
def test_right_padding_with_key_mask_changes_nothing(form):
  q, k, v, log_decay, _ = make_inputs(29, "selective_vector", seed=5)
  pad = 11
  padded = [np.concatenate([x, np.random.default_rng(6).normal(size=(B, pad) + x.shape[2:])], 1)
            for x in (q, k, v, log_decay)]
  padded[3] = -np.abs(padded[3])  # padding decays are arbitrary but valid
  key_mask = np.arange(29 + pad)[None, :] < 29
  key_mask = np.broadcast_to(key_mask, (B, 29 + pad))
  f32 = lambda x: np.asarray(x, np.float32)
  run = jax.jit(functools.partial(lion_attention, form=form, chunk_size=CHUNK))
  unpadded = run(*map(f32, (q, k, v, log_decay)))
  with_padding = run(*map(f32, padded), key_mask=key_mask)
  np.testing.assert_allclose(with_padding[:, :29], unpadded, rtol=1e-5, atol=1e-6)


def reference_rows(q, k, v, log_decay, rows):
  """Float64 output rows for one sequence and head, by running products outwards from the row.

  Args:
    q, k: [L, K]; v: [L, V]; log_decay: [L] (symmetric convention); rows: query indices.
  """
  decay = np.exp(np.asarray(log_decay, np.float64))
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  out = []
  for i in rows:
    mask = np.ones(len(decay))
    for j in range(i - 1, -1, -1):  # M_ij = M_i,j+1 · λ_{j+1}
      mask[j] = mask[j + 1] * decay[j + 1]
    for j in range(i + 1, len(decay)):  # M_ij = M_i,j-1 · λ_j
      mask[j] = mask[j - 1] * decay[j]
    weights = (k @ q[i]) * mask
    out.append(weights @ v / (weights.sum() + 1e-6))
  return np.array(out)


@pytest.mark.parametrize("form, residuals, with_gradients", [
    ("chunk_scan", "auto", True),  # the default long-sequence path ("recomputed" at this L)
    pytest.param("chunk_scan", "stored", True, marks=pytest.mark.slow),
    pytest.param("rnn", "auto", True, marks=pytest.mark.slow),
])
def test_float32_is_stable_at_length_16384(form, residuals, with_gradients):
  """Path-X length in float32: sampled rows equal the float64 definition, gradients are finite."""
  length = 16384
  rng = np.random.default_rng(7)
  q = rng.uniform(0.05, 1.0, (1, length, 1, 8)).astype(np.float32)
  k = rng.uniform(0.05, 1.0, (1, length, 1, 8)).astype(np.float32)
  v = rng.normal(size=(1, length, 1, 8)).astype(np.float32)
  log_decay = np.log(rng.uniform(0.5, 0.9999, (1, length, 1))).astype(np.float32)
  rows = [0, 1, 5000, 9999, length - 2, length - 1]

  def loss(q, k, v, log_decay):
    out = lion_attention(q, k, v, log_decay, form=form, residuals=residuals)
    return jnp.sum(out ** 2), out

  if with_gradients:
    (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
        q, k, v, log_decay)
    for g in grads:
      assert np.all(np.isfinite(g))
  else:
    _, out = jax.jit(loss)(q, k, v, log_decay)
  expected = reference_rows(q[0, :, 0], k[0, :, 0], v[0, :, 0], log_decay[0, :, 0], rows)
  np.testing.assert_allclose(np.asarray(out)[0, rows, 0], expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("length", [37, pytest.param(7, marks=pytest.mark.slow)])
@pytest.mark.parametrize("log_range", [(-40.0, -20.0), (-1e-9, 0.0)], ids=["to_zero", "to_one"])
def test_extreme_decays_stay_finite_and_exact(log_range, length):
  rng = np.random.default_rng(8)
  q, k, v, _, key_mask = make_inputs(length, "lit", seed=9)
  log_decay = rng.uniform(*log_range, (B, length, H, V))
  expected = reference_lion(q, k, v, log_decay, key_mask=key_mask)
  with jax.enable_x64(True):
    for form in FORMS:
      got = compiled(form, "symmetric", "after", True)(q, k, v, log_decay, key_mask)
      np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10, err_msg=form)
  for form in FORMS:
    got = compiled(form, "symmetric", "after", True)(
        *(np.asarray(x, np.float32) for x in (q, k, v, log_decay)), key_mask)
    assert np.all(np.isfinite(got)), form
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=form)


def _vector_inputs_spanning(span_per_chunk, length=37, seed=11):
  """Inputs whose vector log-decays add up to `span_per_chunk` over each full chunk of CHUNK
  (in channel 0 exactly, in the others up to 10% less)."""
  q, k, v, _, key_mask = make_inputs(length, "lit", seed=seed)
  jitter = np.random.default_rng(seed).uniform(0.9, 1.0, (B, length, H, V))
  log_decay = -span_per_chunk / CHUNK * jitter
  full = length // CHUNK * CHUNK
  log_decay[:, :full, :, 0] = -span_per_chunk / CHUNK
  return q, k, v, log_decay, key_mask


def _inputs_with_steep_tokens(steep_log_decay, length=96, seed=14, places=((0, 20, 1, 2),)):
  """Gentle vector log-decays (λ in [0.5, 0.999]) but for runs of 4 tokens of `steep_log_decay`
  from each of `places` (batch, position, head, channel): a few steep chunks among gentle ones."""
  q, k, v, log_decay, key_mask = make_inputs(length, "selective_vector", seed=seed)
  for batch, start, head, channel in places:
    log_decay[batch, start:start + 4, head, channel] = steep_log_decay
  return q, k, v, log_decay, key_mask


W = chunkwise.factored_exponent_limit(np.float32)
# Spans per chunk of CHUNK = 16, in every full chunk, on either side of the factored kernel's
# range (each chunk ≤ 2W). With B·H·N = 12 chunks, all steep is more than
# `steep_chunk_capacity` = 4 recomputed on the side: the whole call takes the exact masks.
# (branch name -> span per 16 tokens, the function that computes the outputs)
BRANCH_SPANS = {"factored": (2 * W - 0.5, "factored_chunks"),
                "exact": (2 * W + 0.5, "_exact_vector_block"),
                "exact_far": (3 * W, "_exact_vector_block")}
STEEP_TOKENS = ((0, 20, 1, 2), (1, 68, 0, 0), (1, 92, 1, 3))  # 3 of 24 chunks at L = 96
FEW_STEEP_TOKENS = ((0, 4, 1, 2), (1, 20, 0, 0), (0, 26, 0, 3))  # 3 of 12 chunks at L = 37


def test_steep_chunks_are_those_with_a_channel_spanning_more_than_2W_in_either_gate():
  gates = np.full((2, 48, 2, 3), -0.01)
  forward, backward = gates.copy(), gates.copy()
  forward[1, 17, 0, 2] = -81.0  # batch 1, chunk 1, head 0 (the forward gate alone)
  backward[0, 47, 1, 0] = -79.0  # within 2W = 80 with the rest of its chunk: not steep
  backward[0, 0, 1, 1] = np.nan  # NaN is steep
  steep = np.asarray(chunkwise.steep_chunks(forward, backward, 16, 40.0))  # [B, H, N]
  expected = np.zeros((2, 2, 3), bool)
  expected[1, 0, 1] = expected[0, 1, 0] = True
  np.testing.assert_array_equal(steep, expected)
  assert chunkwise.steep_chunk_capacity(12) == 4 and chunkwise.steep_chunk_capacity(4096) == 256
  slots = chunkwise.steep_slots(jnp.asarray(expected), 4)
  np.testing.assert_array_equal(slots, [3, 7, 12, 12])  # flat [B·H·N] indices, then "none"


@functools.lru_cache(maxsize=None)
def weighted_gradients(form, convention, normalize):
  """d/d(q, k, v, log λ) of Σ weights·outputs, one jitted function per option set (the weights
  and key mask are arguments: every call at one shape shares one compile)."""
  def loss(q, k, v, log_decay, weights, key_mask):
    out = lion_attention(q, k, v, log_decay, form=form, convention=convention,
                         normalize=normalize, key_mask=key_mask, chunk_size=CHUNK)
    return jnp.sum(out * weights)
  return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))


def _assert_exact_with_gradients(q, k, v, log_decay, key_mask, convention="symmetric",
                                 normalizations=("after", "before", "none"), float64=True):
  """chunk_scan in float32 (and float64, to 1e-10) equals the definition, and its float32
  gradients equal the float64 ones of the full form."""
  for normalize in normalizations:
    expected = reference_lion(q, k, v, log_decay, convention=convention, normalize=normalize,
                              key_mask=key_mask)
    run = compiled("chunk_scan", convention, normalize, True)
    got = run(*(np.asarray(x, np.float32) for x in (q, k, v, log_decay)), key_mask)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=normalize)
    if float64:
      with jax.enable_x64(True):
        np.testing.assert_allclose(run(q, k, v, log_decay, key_mask), expected, rtol=1e-10,
                                   atol=1e-10, err_msg=normalize)
  weights = np.random.default_rng(15).normal(size=v.shape)
  for normalize in normalizations[:1] + normalizations[-1:]:
    grads = weighted_gradients("chunk_scan", convention, normalize)(
        *(np.asarray(x, np.float32) for x in (q, k, v, log_decay, weights)), key_mask)
    with jax.enable_x64(True):
      expected_grads = weighted_gradients("attention", convention, normalize)(
          q, k, v, log_decay, weights, key_mask)
    for name, g, e in zip("q k v log_decay".split(), grads, expected_grads):
      assert np.all(np.isfinite(g)), f"d/d{name}"
      np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * np.abs(e).max(),
                                 err_msg=f"{normalize}: d/d{name}")


# make test-all; make test keeps trained decays through the kernel
# (test_decays_as_steep_as_training_makes_them_are_exact), a few steep chunks recomputed beside
# the factored ones (test_guard_sends_chunks_to_the_block_whose_range_holds) and, with
# gradients, inside the recomputing kernel's segments (tests/ops/test_recomputed.py).
@pytest.mark.slow
@pytest.mark.parametrize("steep_log_decay, convention", [(-35.0, "symmetric"), (-1e4, "code")],
                         ids=["steep", "reset"])
def test_a_few_steep_chunks_are_recomputed_exactly_beside_the_factored_ones(steep_log_decay,
                                                                          convention):
  """Trained gates make single tokens steep (log λ of −12 and below after 250 ListOps steps,
  bench/trained_decays.py): their chunks are recomputed with factors ≤ 1 while every other chunk
  stays factored. A gate below −W/2 (−30 in float32) counts as −W/2: the mask across it is
  e^{−30} = 1e-13 or less either way, and the float32 sums after it keep their digits."""
  q, k, v, log_decay, key_mask = _inputs_with_steep_tokens(steep_log_decay, places=STEEP_TOKENS)
  padded = np.pad(log_decay, [(0, 0), (0, 96 % CHUNK), (0, 0), (0, 0)])
  padded = np.maximum(padded, -0.5 * W)
  steep = chunkwise.steep_chunks(padded, padded, CHUNK, W)
  assert int(steep.sum()) == 3 <= chunkwise.steep_chunk_capacity(steep.size)
  _assert_exact_with_gradients(q, k, v, log_decay, key_mask, convention,
                               normalizations=("after", "none"))


def test_decays_as_steep_as_training_makes_them_are_exact():
  """Log-decays drawn like those of a LION-S layer trained for 1,000 steps on long ListOps
  (bench/trained_decays.py: per-token log λ with 10% below −1.6, 1% below −9, a few resets
  below −60; one at this L = 37). In float32 each gate counts −W/2 = −30 at most, so no chunk
  of 16 spans 2W here: the factored kernel takes every chunk, the reset included."""
  rng = np.random.default_rng(16)
  q, k, v, _, key_mask = make_inputs(37, "lit", seed=16)
  log_decay = np.log(rng.uniform(0.6, 0.95, v.shape))
  share = rng.uniform(size=v.shape)
  log_decay[share < 0.10] = -rng.uniform(1.6, 9.0, (share < 0.10).sum())
  log_decay[share < 0.01] = -rng.uniform(9.0, 14.0, (share < 0.01).sum())
  log_decay[share < 0.002] = -rng.uniform(60.0, 110.0, (share < 0.002).sum())
  _assert_exact_with_gradients(q, k, v, log_decay, key_mask, normalizations=("after", "none"))


# make test: just under and just over 2W; far beyond it, unnormalised, in make test-all.
@pytest.mark.parametrize("branch, normalize", [
    ("factored", "after"), ("exact", "after"),
    pytest.param("exact_far", "none", marks=pytest.mark.slow)])
def test_vector_chunk_scan_is_exact_on_both_sides_of_the_factored_range(branch, normalize):
  """float32, vector decays: chunks whose log-decays span just under 2W go through the factored
  kernel with factors up to e^{±W}; just over 2W, and far beyond, through the exact masks. All
  match the definition, forward and backward."""
  span, _ = BRANCH_SPANS[branch]
  q, k, v, log_decay, key_mask = _vector_inputs_spanning(span)
  _assert_exact_with_gradients(q, k, v, log_decay, key_mask, normalizations=(normalize,),
                               float64=False)


def _poisoned(real):
  """`real` with its (first) result turned into NaN."""
  def poisoned(*operands, **options):
    result = real(*operands, **options)
    return (result[0] * np.nan, None) if isinstance(result, tuple) else result * np.nan
  return poisoned


@pytest.mark.parametrize("branch", list(BRANCH_SPANS) + ["few_steep"])
def test_guard_sends_chunks_to_the_block_whose_range_holds(monkeypatch, branch):
  """The fast path must really run inside its range (else the speed is lost silently) and never
  outside it: poisoning every other branch with NaN leaves the output finite, while poisoning a
  branch said to be taken (the positive control) turns it into NaN. A few steep chunks take the
  factored kernel with their chunks recomputed (`_steep_outputs`); many take the exact masks."""
  if branch == "few_steep":  # the factored inputs' gentle chunks, 3 of 12 made steep
    q, k, v, log_decay, key_mask = _vector_inputs_spanning(0.5 * W)
    for batch, start, head, channel in FEW_STEEP_TOKENS:
      log_decay[batch, start:start + 4, head, channel] = -100.0
    taken = {(factored, "factored_chunks"), (chunkwise, "_steep_outputs")}
  else:
    q, k, v, log_decay, key_mask = _vector_inputs_spanning(BRANCH_SPANS[branch][0])
    name = BRANCH_SPANS[branch][1]
    taken = {(factored if name == "factored_chunks" else chunkwise, name)}
  candidates = {(factored, "factored_chunks"), (chunkwise, "_steep_outputs"),
                (chunkwise, "_exact_vector_block")}
  inputs = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]

  def output_with_poisoned(module, name):
    with monkeypatch.context() as patch:
      patch.setattr(module, name, _poisoned(getattr(module, name)))
      run = jax.jit(lambda *x: lion_attention(*x, form="chunk_scan", key_mask=key_mask,
                                              chunk_size=CHUNK))
      return np.asarray(run(*inputs))

  for other in candidates - taken:
    assert np.all(np.isfinite(output_with_poisoned(*other))), f"{other[1]} ran, not {taken}"
  for module, name in taken:
    assert not np.all(np.isfinite(output_with_poisoned(module, name))), f"{name} was not used"


def test_vmapped_examples_on_either_side_of_the_range_get_exact_finite_gradients():
  """Under `vmap` the branch choice is per example, so `switch` becomes `select` and every
  branch runs on every example: the factored kernels see decays far beyond their range (their
  clipped factors must stay finite) and their zero cotangents must not turn into NaN
  gradients."""
  gentle = _vector_inputs_spanning(0.5 * W)
  halved = _vector_inputs_spanning(3 * W)
  steep = _vector_inputs_spanning(7.9 * W)
  q, k, v, log_decay, key_mask = (np.stack(x) for x in zip(gentle, halved, steep))
  weights = np.random.default_rng(13).normal(size=v.shape)

  def loss(form, q, k, v, log_decay, key_mask, weights):
    out = lion_attention(q, k, v, log_decay, form=form, key_mask=key_mask, chunk_size=CHUNK)
    return jnp.sum(out * weights)

  per_example = jax.vmap(jax.value_and_grad(functools.partial(loss, "chunk_scan"),
                                            argnums=(0, 1, 2, 3)))
  values, grads = jax.jit(per_example)(*(np.asarray(x, np.float32) for x in (q, k, v, log_decay)),
                                       key_mask, np.asarray(weights, np.float32))
  with jax.enable_x64(True):  # the full form, example by example
    expected_values = [np.sum(compiled("attention", "symmetric", "after", True)(
        q[i], k[i], v[i], log_decay[i], key_mask[i]) * weights[i]) for i in range(len(q))]
    expected_grads = [np.stack(g) for g in zip(*(
        weighted_gradients("attention", "symmetric", "after")(
            q[i], k[i], v[i], log_decay[i], weights[i], key_mask[i]) for i in range(len(q))))]
  np.testing.assert_allclose(values, expected_values, rtol=1e-5)
  for name, g, e in zip("q k v log_decay".split(), grads, expected_grads):
    assert np.all(np.isfinite(g)), f"d/d{name}"
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4 * np.abs(e).max(), err_msg=f"d/d{name}")


@pytest.mark.parametrize("limits, works", [(0.5, True), (1.99, True), (3.0, False)],
                         ids=["within", "at_the_limit", "beyond"])
def test_the_factored_kernel_alone_breaks_beyond_its_range_which_is_why_it_is_guarded(
    limits, works):
  """Run directly on chunks (no chunk recomputed on the side), the factored kernel equals the
  definition while a chunk's decays span less than 2W (the positive controls: this harness
  chunks correctly); at 3W its factors leave float32's range and it is far off. The public
  function takes the exact masks there."""
  span = limits * W
  q, k, v, log_decay, _ = _vector_inputs_spanning(span, length=2 * CHUNK)
  to_chunks = lambda x: jnp.moveaxis(jnp.asarray(x, jnp.float32), 2, 1).reshape(
      B, H, 2, CHUNK, x.shape[-1])
  within_chunks = log_decay.reshape(B, 2, CHUNK, H, V).cumsum(2).reshape(log_decay.shape)
  chunked = tuple(map(to_chunks, (q, k, v, within_chunks, within_chunks)))
  nothing_steep = jnp.full((1,), B * H * 2, jnp.int32)
  out = jax.jit(functools.partial(factored.factored_chunks,
                                  two_way_states=chunkwise.TWO_WAY_PASSES["scan"], limit=W,
                                  exact_chunks=chunkwise._exact_chunks))(*chunked, nothing_steep)
  expected = reference_lion(q, k, v, log_decay, normalize="none")
  out = np.asarray(jnp.moveaxis(out.reshape(B, H, 2 * CHUNK, V), 1, 2))
  if works:
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
  else:
    assert not np.allclose(out, expected, rtol=1e-3, atol=1e-3)
  got = compiled("chunk_scan", "symmetric", "none", False)(
      *(np.asarray(x, np.float32) for x in (q, k, v, log_decay)), None)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_symmetric_mask_is_symmetric_and_code_mask_is_the_release_products():
  decay = np.random.default_rng(10).uniform(0.3, 0.99, (19, 3))  # [L, channels]
  with jax.enable_x64(True):
    symmetric = np.asarray(lion_mask(jnp.log(decay.T), "symmetric"))  # [channels, L, L]
    code = np.asarray(lion_mask(jnp.log(decay.T), "code"))
  np.testing.assert_allclose(symmetric, np.swapaxes(symmetric, -1, -2), rtol=1e-14)
  np.testing.assert_allclose(symmetric, np.moveaxis(reference_mask(decay, "symmetric"), -1, 0),
                             rtol=1e-12)
  np.testing.assert_allclose(code, np.moveaxis(reference_mask(decay, "code"), -1, 0), rtol=1e-12)
  assert not np.allclose(code, np.swapaxes(code, -1, -2))


def test_fixed_decay_mask_is_toeplitz():
  log_decay = np.log(np.array([0.9, 0.5]))
  with jax.enable_x64(True):
    constant = jnp.broadcast_to(jnp.asarray(log_decay)[:, None], (2, 13))
    np.testing.assert_allclose(lion_mask(constant), toeplitz_mask(jnp.asarray(log_decay), 13),
                               rtol=1e-13)


def test_bidirectional_output_is_forward_recurrence_plus_flipped_one():
  """Theorem 3.3: the unnormalised output is a causal pass plus the causal pass on the flipped
  sequence (decays flipped and shifted right by one), with the diagonal counted once."""
  q, k, v, log_decay, _ = make_inputs(23, "selective", seed=11)
  expected = reference_lion(q, k, v, log_decay, normalize="none")
  with jax.enable_x64(True):
    q, k, v = (jnp.asarray(x) for x in (q, k, v))
    gate = jnp.asarray(log_decay)[..., None]  # [B, L, H, 1]
    forward = recurrent.causal_rnn(q, k, v, gate)
    flip = lambda x: jnp.flip(x, axis=1)
    backward = flip(recurrent.causal_rnn(flip(q), flip(k), flip(v), backward_gate_flipped(gate)))
    diagonal = jnp.einsum("blhk,blhk->blh", q, k)[..., None] * v
    np.testing.assert_allclose(forward + backward - diagonal, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("state_pass", ["scan", "associative"])
def test_the_scan_form_passes_its_states_either_way(state_pass):
  """The scan form runs `causal_rnn` on a CPU (state_pass "auto" or "scan") and
  `lax.associative_scan` elsewhere: both equal the definition, with gradients, a key mask and
  split directions."""
  q, k, v, log_decay, key_mask = make_inputs(21, "selective_vector", seed=13)
  weights = np.random.default_rng(14).normal(size=(2,) + v.shape)

  def loss(form, state_pass, q, k, v, log_decay):
    halves = lion_attention(q, k, v, log_decay, form=form, state_pass=state_pass,
                            normalize="none", key_mask=key_mask, split_directions=True)
    return sum(jnp.sum(half * w) for half, w in zip(halves, weights))

  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x) for x in (q, k, v, log_decay))
    got = jax.jit(jax.value_and_grad(functools.partial(loss, "scan", state_pass),
                                     argnums=(0, 1, 2, 3)))(*args)
    want = jax.jit(jax.value_and_grad(functools.partial(loss, "attention", "auto"),
                                      argnums=(0, 1, 2, 3)))(*args)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
  for name, g, e in zip(("q", "k", "v", "log_decay"), got[1], want[1]):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=name)


def test_reversing_inputs_and_realigning_decays_reverses_outputs():
  q, k, v, log_decay, _ = make_inputs(37, "selective_vector", seed=12)
  every_key = np.ones((B, 37), bool)  # keeps all keys; compiled as in test_extreme_decays_...
  flip = lambda x: x[:, ::-1]
  # Symmetric convention: the edge between t-1 and t carries λ_t; reversed, that edge carries
  # the decay now at the later position, i.e. the flipped decays shifted right by one.
  realigned = np.concatenate([np.zeros_like(log_decay[:, :1]), flip(log_decay)[:, :-1]], axis=1)
  with jax.enable_x64(True):
    for form in FORMS:
      out = compiled(form, "symmetric", "after", True)(q, k, v, log_decay, every_key)
      out_reversed = compiled(form, "symmetric", "after", True)(flip(q), flip(k), flip(v),
                                                                realigned, every_key)
      np.testing.assert_allclose(flip(np.asarray(out_reversed)), out, rtol=1e-10, err_msg=form)


def test_vector_normaliser_is_the_decayed_row_sum_of_the_definition():
  """normalize="after" divides each value channel by its own decayed row sum Σ_j (q_i·k_j) M_ij
  (the numerator with v ≡ 1); both sums come from the float64 definition, not from lion_attention."""
  q, k, v, log_decay, key_mask = make_inputs(37, "selective_vector", seed=13)
  numerator = reference_lion(q, k, v, log_decay, normalize="none", key_mask=key_mask)
  row_sums = reference_lion(q, k, np.ones_like(v), log_decay, normalize="none", key_mask=key_mask)
  assert np.ptp(row_sums, axis=-1).max() > 1e-3  # the channels' decays differ, so do their sums
  with jax.enable_x64(True):
    for form in FORMS:
      scaled = compiled(form, "symmetric", "after", True)(q, k, v, log_decay, key_mask)
      np.testing.assert_allclose(scaled, numerator / (row_sums + 1e-6), rtol=1e-10, err_msg=form)


def test_auto_picks_attention_for_one_chunk_and_chunk_scan_beyond():
  from lion_jax import resolve_form
  assert resolve_form("auto", 64, 64).value == "attention"
  assert resolve_form("auto", 65, 64).value == "chunk_scan"
  assert resolve_form("rnn", 10_000, 64).value == "rnn"


FORMS_LISTED = "'auto', 'attention', 'rnn', 'scan', 'chunk', 'chunk_scan'"
BAD_ARGUMENTS = [  # (changed arguments, exception, message); the inputs are B, L, H, K, V = 2, 7, 2, 3, 4
    (dict(form="flash"), ValueError, f"form='flash' is not one of {FORMS_LISTED}"),
    (dict(form=None), TypeError, f"form must be a string, one of {FORMS_LISTED}; got NoneType"),
    (dict(convention="mirror"), ValueError,
     "convention='mirror' is not one of 'symmetric', 'code'"),
    (dict(normalize="sometimes"), ValueError,
     "normalize='sometimes' is not one of 'after', 'before', 'none'"),
    (dict(chunk_size=0), ValueError, "chunk_size=0 must be a positive integer"),
    (dict(chunk_size=-3), ValueError, "chunk_size=-3 must be a positive integer"),
    (dict(chunk_size=16.0), TypeError, "chunk_size must be a positive integer; got float 16.0"),
    (dict(eps=-1e-6), ValueError, "eps=-1e-06 must be a finite number >= 0"),
    (dict(q=np.ones((7, 2, 3), np.float32)), ValueError,
     r"q must be 4-D \[B, L, H, K\]; got shape \(7, 2, 3\)"),
    (dict(v=np.ones((2, 7, 2, 4, 1), np.float32)), ValueError,
     r"v must be 4-D \[B, L, H, V\]; got shape \(2, 7, 2, 4, 1\)"),
    (dict(k=np.ones((2, 7, 2, 5), np.float32)), ValueError,
     r"k must have the shape of q, \[B, L, H, K\]=\(2, 7, 2, 3\); got \(2, 7, 2, 5\)"),
    (dict(v=np.ones((2, 6, 2, 4), np.float32)), ValueError,
     r"v must share \[B, L, H\]=\(2, 7, 2\) with q; got shape \(2, 6, 2, 4\)"),
    (dict(q=[[[[1.0]]]]), TypeError, "q must be an array; got list"),
    (dict(k=np.ones((2, 7, 2, 3), np.int32)), TypeError,
     "k must be floating point .*; got dtype int32"),
    (dict(log_decay=np.zeros((3, 3), np.float32)), ValueError,
     r"log_decay has shape \(3, 3\); expected None, \[H\]=\[2\], \[H, V\]=\[2, 4\], "
     r"\[B, L, H\]=\[2, 7, 2\] or \[B, L, H, V\]=\[2, 7, 2, 4\]"),
    (dict(log_decay=np.zeros((2, 7, 2), np.int32)), TypeError,
     "log_decay must be floating point .*; got dtype int32"),
    (dict(key_mask=np.ones((2, 5), bool)), ValueError,
     r"key_mask has shape \(2, 5\); expected \[B, L\]=\[2, 7\]"),
    (dict(key_mask=np.ones((2, 7), np.float32)), TypeError,
     "key_mask must be bool .*; got dtype float32"),
]


@pytest.mark.parametrize("changes, error, message", BAD_ARGUMENTS,
                         ids=[next(iter(c)) + "-" + e.__name__ for c, e, _ in BAD_ARGUMENTS])
def test_bad_arguments_name_the_argument_and_what_it_accepts(changes, error, message):
  q, k, v, _, _ = (np.float32(x) for x in make_inputs(7, "lit"))
  arguments = dict(q=q, k=k, v=v) | changes
  with pytest.raises(error, match=message):
    lion_attention(**arguments)


def test_the_valid_arguments_of_the_bad_argument_table_run():
  """Positive control for the table above: with none of its changes, the same call succeeds."""
  q, k, v, log_decay, key_mask = make_inputs(7, "selective")
  f32 = lambda x: np.asarray(x, np.float32)
  out = lion_attention(f32(q), f32(k), f32(v), f32(log_decay), form="chunk", convention="code",
                       normalize="before", chunk_size=3, eps=0.0, key_mask=key_mask)
  assert out.shape == (2, 7, 2, 4) and np.all(np.isfinite(out))


def test_masks_reject_an_unknown_convention_listing_the_valid_ones():
  with pytest.raises(ValueError, match="convention='mirror' is not one of 'symmetric', 'code'"):
    lion_mask(jnp.zeros(5), "mirror")


def test_reference_expands_every_decay_shape_like_the_docs_say():
  """Guards the reference itself: [H] and [H, V] are per head / channel, constant in time."""
  a = expand_log_decay(np.array([-1.0, -2.0]), 1, 3, 2, 2)
  assert a.shape == (1, 3, 2, 2) and np.all(a[0, :, 1] == -2.0)


# --- split_directions: the output's left and right halves, for directional read-outs -------------


@functools.lru_cache(maxsize=None)
def every_option_split(form):
  """`every_option` with split_directions=True: a (left, right) pair per option."""
  def run(q, k, v, log_decay, key_mask):
    return [lion_attention(q, k, v, log_decay, form=form, convention=convention,
                           normalize=normalize, key_mask=key_mask, chunk_size=CHUNK,
                           split_directions=True)
            for convention, normalize in OPTIONS]
  return jax.jit(run)


def split_grid():
  """make test: chunk_scan (the training form) at L = 37 with the LRA's selective vector decays
  and with a selective scalar; the other forms and decay kinds in make test-all."""
  for decay_kind in DECAY_KINDS:
    for form in FORMS:
      fast = form == "chunk_scan" and decay_kind in ("selective_vector", "selective")
      yield (decay_kind, form) if fast else pytest.param(decay_kind, form, marks=pytest.mark.slow)


@pytest.mark.parametrize("decay_kind,form", list(split_grid()))
def test_every_form_splits_into_the_float64_left_and_right_halves(decay_kind, form):
  """Each half sums the keys on its side of the query and half the query's own key, over the
  whole row's normaliser: every convention × normalisation, with and without a key mask."""
  length = 37
  q, k, v, log_decay, key_mask = make_inputs(length, decay_kind, seed=21)
  key_mask[0] = True
  with jax.enable_x64(True):
    outputs = every_option_split(form)(q, k, v, log_decay, key_mask)
  for (convention, normalize), (left, right) in zip(OPTIONS, outputs):
    for side, got in (("left", left), ("right", right)):
      want = reference_lion(q, k, v, log_decay, convention=convention, normalize=normalize,
                            key_mask=key_mask, side=side)
      np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10,
                                 err_msg=f"{side} convention={convention} normalize={normalize}")
    whole = reference_lion(q, k, v, log_decay, convention=convention, normalize=normalize,
                           key_mask=key_mask)
    np.testing.assert_allclose(left + right, whole, rtol=1e-10, atol=1e-10)


def test_the_halves_tell_left_from_right_where_the_sum_cannot():
  """With a fixed decay the whole output of a reversed sequence is the reversed output; the
  halves swap instead: the left half of the reversed sequence is the right half reversed."""
  q, k, v, log_decay, _ = make_inputs(23, "fixed_channel", seed=22)
  flip = lambda x: np.flip(x, 1)
  run = jax.jit(functools.partial(lion_attention, form="chunk_scan", chunk_size=CHUNK,
                                  split_directions=True))
  with jax.enable_x64(True):
    left, right = run(q, k, v, log_decay)
    left_r, right_r = run(flip(q), flip(k), flip(v), log_decay)
  np.testing.assert_allclose(left_r, flip(right), rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(right_r, flip(left), rtol=1e-10, atol=1e-12)
  assert np.max(np.abs(left - right)) > 1e-2  # the halves differ: not a test of zeros


@pytest.mark.parametrize("form", ["chunk_scan", pytest.param("rnn", marks=pytest.mark.slow),
                                  pytest.param("chunk", marks=pytest.mark.slow)])
def test_split_gradients_equal_the_full_forms_and_finite_differences(form):
  q, k, v, log_decay, key_mask = make_inputs(20, "selective_vector", seed=23)
  rng = np.random.default_rng(24)
  weights = rng.normal(size=v.shape), rng.normal(size=v.shape)

  def loss(form, q, k, v, log_decay):
    halves = lion_attention(q, k, v, log_decay, form=form, key_mask=key_mask, chunk_size=CHUNK,
                            split_directions=True)
    return sum(jnp.sum(half * w) for half, w in zip(halves, weights))

  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x) for x in (q, k, v, log_decay))
    jax.test_util.check_grads(jax.jit(functools.partial(loss, form)), args, order=1,
                              modes=["rev"])
    expected = jax.jit(jax.grad(functools.partial(loss, "attention"), argnums=(0, 1, 2, 3)))(
        *args)
    got = jax.jit(jax.grad(functools.partial(loss, form), argnums=(0, 1, 2, 3)))(*args)
  for name, g, e in zip("q k v log_decay".split(), got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=f"{form} d/d{name}")


@pytest.mark.parametrize("with_gradients", [True])
def test_split_chunk_scan_is_stable_at_length_16384(with_gradients):
  """Path-X length in float32, decays from nearly 1 to e^−40: sampled rows of the halves equal
  the float64 definition's, gradients are finite."""
  length, rows = 16384, [0, 1, 5000, 16382, 16383]
  rng = np.random.default_rng(25)
  q = rng.uniform(0.05, 1.0, (1, length, 1, 4)).astype(np.float32)
  k = rng.uniform(0.05, 1.0, (1, length, 1, 4)).astype(np.float32)
  v = rng.normal(size=(1, length, 1, 4)).astype(np.float32)
  log_decay = np.log(rng.uniform(0.5, 0.9999, (1, length, 1, 4))).astype(np.float32)
  log_decay[0, 3000:3010] = -40.0

  def loss(q, k, v, log_decay):
    halves = lion_attention(q, k, v, log_decay, form="chunk_scan", chunk_size=64,
                            split_directions=True)
    return sum(jnp.sum(h ** 2) for h in halves), halves

  (_, halves), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
      q, k, v, log_decay)
  assert all(np.all(np.isfinite(g)) for g in grads)
  decay = np.exp(log_decay[0, :, 0].astype(np.float64))  # [L, V]
  q64, k64, v64 = (np.asarray(x[0, :, 0], np.float64) for x in (q, k, v))
  for i in rows:  # the mask of row i by running products outwards from it
    mask = np.ones((length, 4))
    for j in range(i - 1, -1, -1):
      mask[j] = mask[j + 1] * decay[j + 1]
    for j in range(i + 1, length):
      mask[j] = mask[j - 1] * decay[j]
    weights = (k64 @ q64[i])[:, None] * mask  # [L, V]
    share = np.where(np.arange(length) == i, 0.5, np.arange(length) < i)[:, None]
    denominator = weights.sum(0) + 1e-6
    np.testing.assert_allclose(halves[0][0, i, 0], (share * weights * v64).sum(0) / denominator,
                               rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(halves[1][0, i, 0],
                               ((1 - share) * weights * v64).sum(0) / denominator,
                               rtol=2e-5, atol=2e-5)


def test_split_packed_rows_equal_each_example_alone():
  """segment_ids: each example's halves equal those of the example alone (chunk_scan)."""
  q, k, v, log_decay, _ = make_inputs(30, "selective_vector", seed=26, batch=1)
  segment_ids = np.repeat([[1, 2, 3]], [11, 13, 6], axis=1)
  f32 = lambda x: np.asarray(x, np.float32)
  run = jax.jit(functools.partial(lion_attention, form="chunk_scan", chunk_size=8,
                                  split_directions=True))
  packed = run(*map(f32, (q, k, v, log_decay)), segment_ids=segment_ids)
  for start, stop in ((0, 11), (11, 24), (24, 30)):
    alone = run(*(f32(x[:, start:stop]) for x in (q, k, v, log_decay)))
    for got, want in zip(packed, alone):
      np.testing.assert_allclose(got[:, start:stop], want, rtol=1e-5, atol=1e-6)


@functools.lru_cache(maxsize=None)
def split_with_right_values(form):
  """Halves with values of the right half's own (`v_right`), normalize="none" and "after"."""
  def run(q, k, v, v_right, log_decay, key_mask):
    return [lion_attention(q, k, v, log_decay, form=form, normalize=normalize, key_mask=key_mask,
                           chunk_size=CHUNK, split_directions=True, v_right=v_right)
            for normalize in ("none", "after")]
  return jax.jit(run)


@pytest.mark.parametrize("form", [pytest.param(f, marks=pytest.mark.slow)
                                  if f in ("rnn", "chunk") else f for f in FORMS])
def test_split_directions_with_right_values_sum_each_sides_own(form):
  """v_right: the left half sums v, the right half v_right (complex decays turn the values one
  way for each side); the normaliser stays the row's. Mixing the two, in either half, fails."""
  q, k, v, log_decay, key_mask = make_inputs(37, "selective_vector", seed=28)
  key_mask[0] = True
  v_right = np.random.default_rng(29).normal(size=v.shape)
  with jax.enable_x64(True):
    outputs = split_with_right_values(form)(q, k, v, v_right, log_decay, key_mask)
  for normalize, halves in zip(("none", "after"), outputs):
    for side, values, other, got in (("left", v, v_right, halves[0]),
                                     ("right", v_right, v, halves[1])):
      want, wrong = (reference_lion(q, k, x, log_decay, normalize=normalize, key_mask=key_mask,
                                    side=side) for x in (values, other))
      np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10,
                                 err_msg=f"{side} normalize={normalize}")
      assert np.abs(want - wrong).max() > 0.1  # the other side's values would fail


def test_split_directions_right_values_need_the_split_and_vs_shape():
  q, k, v, _, _ = (np.float32(x) for x in make_inputs(7, "lit"))
  with pytest.raises(ValueError, match="v_right .* needs split_directions=True"):
    lion_attention(q, k, v, v_right=v)
  with pytest.raises(ValueError, match=r"v_right must have v's shape"):
    lion_attention(q, k, v, v_right=v[..., :2], split_directions=True)


def test_split_directions_refuse_a_sequence_axis():
  q, k, v, _, _ = (np.float32(x) for x in make_inputs(7, "lit"))
  with pytest.raises(ValueError, match="split_directions=True cannot run with sequence_axis"):
    lion_attention(q, k, v, sequence_axis="data", split_directions=True)
  with pytest.raises(ValueError, match="residuals='recomputed'.*use residuals='auto' or 'stored'"):
    lion_attention(q, k, v, residuals="recomputed", split_directions=True)


def test_causal_chunk_kernel_at_an_accelerators_chunk_length_gives_the_float64_halves():
  """On a CPU `lion_attention` runs the causal chunk kernel in chunks of at most
  `recurrent.CAUSAL_CHUNK_CPU`; an accelerator keeps the caller's C. Called directly at C = 16
  (L = 37: two whole chunks and a partial one), the two halves of the numerator are the
  definition's."""
  q, k, v, log_decay, _ = make_inputs(37, "selective_vector", seed=27)
  with jax.enable_x64(True):
    gate = jnp.asarray(log_decay)
    kernel = functools.partial(recurrent.causal_chunk_scan, chunk_size=16)
    halves = jax.jit(lambda *x: recurrent.bidirectional_halves(kernel, *x))(
        q, k, v, gate, backward_gate_flipped(gate))
  for side, got in zip(("left", "right"), halves):
    want = reference_lion(q, k, v, log_decay, normalize="none", side=side)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=side)


@pytest.mark.parametrize("phase", [None, "complex"])
def test_the_token_loop_keeps_one_state_in_32_for_the_backward_pass(phase, capsys):
  """The backward pass of the token loop keeps the state entering each stretch of
  `STATES_KEPT_EVERY` tokens, never one [K, E] state a token (what made LION plan 1.4x S5's
  memory, docs/benchmarks.md)."""
  batch, length, heads, key_dim, values = 2, 96, 1, 4, 6
  keys = jax.random.split(jax.random.PRNGKey(0), 4)
  q, k = (jax.random.normal(key, (batch, length, heads, key_dim)) for key in keys[:2])
  u = jax.random.normal(keys[2], (batch, length, heads, values))
  gate = -jax.random.uniform(keys[3], (batch, length, heads, values // 2 if phase else values))
  theta = None if phase is None else jnp.full((heads, values // 2), 0.1)
  jax.ad_checkpoint.print_saved_residuals(
      lambda q, k, u, gate: recurrent.causal_rnn(q, k, u, gate, theta), q, k, u, gate)
  shapes = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()]
  states = [s for s in shapes if s.endswith(f",{key_dim},{values}]")
            or s.endswith(f",{key_dim},{values // 2}]")]
  stretches = length // recurrent.STATES_KEPT_EVERY
  assert states and all(s.split("[")[1].startswith(f"{stretches},") for s in states), shapes
