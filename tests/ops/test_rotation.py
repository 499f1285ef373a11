"""The specification of complex decays λ e^{iθ} (`rotating_lion_attention`).

Every form equals the float64 definition h_i = Σ_j (q_i·k_j) M_ij e^{iθ|i−j|} v_j summed entry by
entry (`tests/reference.py`), each half of it too, with real and complex values, padding, packed
rows, gradients, and at L = 16,384 in float32.
"""

import functools

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from lion_jax.ops.attention import lion_attention
from lion_jax.ops.rotation import rotating_lion_attention
from tests.ops.test_lion_attention import make_inputs
from tests.reference import reference_lion

# On a CPU "scan" passes its states token by token, as "rnn" does; "scan/associative" is its
# log-depth pass (complex log-gates in `lax.associative_scan`), the accelerators'.
FORMS = ("attention", "rnn", "scan", "scan/associative", "chunk", "chunk_scan")
CHUNK = 8
V = 4


def make_phase(decay_kind, heads=2, seed=0):
  """θ per head ([H, 1]) for decays per head, per value channel ([H, V]) for vector decays:
  rotations of up to 2 rad a token, so that pairs a few tokens apart turn by whole circles."""
  groups = V if decay_kind in ("fixed_channel", "selective_vector") else 1
  return np.random.default_rng(seed).uniform(-2.0, 2.0, (heads, groups))


def form_options(form):
  """`rotating_lion_attention`'s form and state pass from a FORMS entry."""
  name, _, state_pass = form.partition("/")
  return dict(form=name, state_pass=state_pass or "auto")


def as_complex(out):
  """[..., 2V] (Re parts, then Im parts) -> [..., V] complex."""
  return out[..., :V] + 1j * out[..., V:]


@functools.lru_cache(maxsize=None)
def both_ways(form):
  """The whole output and its two halves, in one jitted function."""
  def run(q, k, v, log_decay, phase, key_mask):
    options = dict(chunk_size=CHUNK, key_mask=key_mask, **form_options(form))
    whole = rotating_lion_attention(q, k, v, log_decay, phase, **options)
    halves = rotating_lion_attention(q, k, v, log_decay, phase, split_directions=True, **options)
    return whole, halves
  return jax.jit(run)


def grid():
  """make test: every form with the LRA's selective vector decays; the other decay kinds in
  chunk_scan, the training form, in make test-all."""
  for decay_kind in ("selective_vector", "selective", "fixed_channel", "fixed_head"):
    for form in FORMS:
      fast = decay_kind == "selective_vector"
      yield (decay_kind, form) if fast else pytest.param(decay_kind, form,
                                                         marks=pytest.mark.slow)


@pytest.mark.parametrize("decay_kind,form", list(grid()))
def test_every_form_equals_the_float64_complex_definition(decay_kind, form):
  """Whole and halves (keys left of the query with half its own, and right), a key mask in row 1."""
  q, k, v, log_decay, key_mask = make_inputs(19, decay_kind, seed=31)
  key_mask[0] = True
  phase = make_phase(decay_kind)
  with jax.enable_x64(True):
    whole, (left, right) = both_ways(form)(q, k, v, log_decay, phase, key_mask)
  per_channel = np.broadcast_to(phase, (2, V))
  for side, got in ((None, whole), ("left", left), ("right", right)):
    want = reference_lion(q, k, v, log_decay, normalize="none", key_mask=key_mask, side=side,
                          phase=per_channel)
    np.testing.assert_allclose(as_complex(np.asarray(got)), want, rtol=1e-10, atol=1e-10,
                               err_msg=f"side={side}")
  # Not a test of real numbers: the rotations give the output an imaginary part as large as its
  # real one, and change the real part too.
  real_only = reference_lion(q, k, v, log_decay, normalize="none", key_mask=key_mask)
  assert np.abs(want.imag).mean() > 0.3 * np.abs(want.real).mean()
  assert np.abs(as_complex(np.asarray(whole)).real - real_only).max() > 0.1


@functools.lru_cache(maxsize=None)
def complex_halves(form):
  """The halves for complex values (`v_imag`), in one jitted function."""
  return jax.jit(functools.partial(rotating_lion_attention, chunk_size=CHUNK,
                                   split_directions=True, **form_options(form)))


@pytest.mark.parametrize("form", FORMS)
def test_complex_values_enter_both_directions_by_the_definition(form):
  """v_imag: h = Σ_j (q_i·k_j) M_ij e^{iθ|i−j|} (v_j + i·w_j), a key mask in row 1. The keys
  right of the query turn the values the other way, so each direction must carry its own
  rotated pair: the conjugate shortcut of real values, or either pair in the other direction,
  would give Σ_j ... (v_j − i·w_j) there instead, off by twice the imaginary inputs' share."""
  q, k, v, log_decay, key_mask = make_inputs(19, "selective_vector", seed=39)
  key_mask[0] = True
  w = np.random.default_rng(40).normal(size=v.shape)
  phase = make_phase("selective_vector", seed=41)
  with jax.enable_x64(True):
    halves = complex_halves(form)(q, k, v, log_decay, phase, v_imag=w, key_mask=key_mask)
  for side, got in zip(("left", "right"), halves):
    real_part, imaginary_part = (reference_lion(q, k, part, log_decay, normalize="none",
                                                key_mask=key_mask, side=side, phase=phase)
                                 for part in (v, w))
    np.testing.assert_allclose(as_complex(np.asarray(got)), real_part + 1j * imaginary_part,
                               rtol=1e-10, atol=1e-10, err_msg=side)
    assert np.abs(imaginary_part).max() > 0.5  # the wrong pair would be off by twice this


def test_a_zero_phase_is_the_real_plain_sum_with_a_zero_imaginary_part():
  q, k, v, log_decay, key_mask = make_inputs(13, "selective_vector", seed=32)
  with jax.enable_x64(True):
    got = rotating_lion_attention(q, k, v, log_decay, np.zeros((2, V)), form="chunk_scan",
                                  chunk_size=CHUNK, key_mask=key_mask)
  want = reference_lion(q, k, v, log_decay, normalize="none", key_mask=key_mask)
  np.testing.assert_allclose(np.asarray(got)[..., :V], want, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(np.asarray(got)[..., V:], 0.0, atol=1e-12)


# make test: chunk_scan and scan, the training forms; make test-all adds the recurrence.
@pytest.mark.parametrize("form", ["chunk_scan", "scan", "scan/associative",
                                  pytest.param("rnn", marks=pytest.mark.slow)])
def test_gradients_equal_the_full_forms_and_finite_differences(form):
  """Through q, k, v, v_imag, log λ and θ, of both halves (complex values: each direction's own
  rotated pair)."""
  q, k, v, log_decay, key_mask = make_inputs(14, "selective_vector", seed=33)
  phase = make_phase("selective_vector", seed=34)
  rng = np.random.default_rng(35)
  v_imag = rng.normal(size=v.shape)
  weights = rng.normal(size=v.shape[:-1] + (2 * V,)), rng.normal(size=v.shape[:-1] + (2 * V,))

  def loss(form, q, k, v, v_imag, log_decay, phase):
    halves = rotating_lion_attention(q, k, v, log_decay, phase, v_imag=v_imag,
                                     chunk_size=CHUNK, key_mask=key_mask, split_directions=True,
                                     **form_options(form))
    return sum(jnp.sum(half * w) for half, w in zip(halves, weights))

  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x) for x in (q, k, v, v_imag, log_decay, phase))
    argnums = tuple(range(len(args)))
    jax.test_util.check_grads(jax.jit(functools.partial(loss, form)), args, order=1,
                              modes=["rev"])
    expected = jax.jit(jax.grad(functools.partial(loss, "attention"), argnums=argnums))(*args)
    got = jax.jit(jax.grad(functools.partial(loss, form), argnums=argnums))(*args)
  for name, g, e in zip("q k v v_imag log_decay phase".split(), got, expected):
    assert np.abs(e).max() > 0, name
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=f"{form} d/d{name}")


@pytest.mark.parametrize("form", ["chunk_scan", "scan", "scan/associative"])
def test_packed_rows_equal_each_example_alone(form):
  """An example's rotations do not depend on where in the row it starts (complex values)."""
  q, k, v, log_decay, _ = make_inputs(30, "selective_vector", seed=36, batch=1)
  v_imag = np.random.default_rng(42).normal(size=v.shape)
  phase = make_phase("selective_vector", seed=37)
  segment_ids = np.repeat([[1, 2, 3]], [11, 13, 6], axis=1)
  run = jax.jit(functools.partial(rotating_lion_attention, chunk_size=CHUNK,
                                  split_directions=True, **form_options(form)))
  with jax.enable_x64(True):
    packed = run(q, k, v, log_decay, phase, v_imag=v_imag, segment_ids=segment_ids)
    for start, stop in ((0, 11), (11, 24), (24, 30)):
      q_e, k_e, v_e, w_e, decay_e = (x[:, start:stop] for x in (q, k, v, v_imag, log_decay))
      alone = run(q_e, k_e, v_e, decay_e, phase, v_imag=w_e)
      for got, want in zip(packed, alone):
        np.testing.assert_allclose(got[:, start:stop], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("form", ["chunk_scan", "scan"])
def test_float32_at_length_16384_is_within_the_rounding_of_the_angles(form):
  """Path-X length: sampled rows equal the float64 definition to about 1e-7·|Θ| (chunk_scan:
  the float32 rounding of θ·i, here up to 0.1·16,383 rad; scan turns its states by e^{iθ} a
  token and has no Θ), and gradients are finite."""
  length, rows = 16384, [0, 7, 9000, 16383]
  rng = np.random.default_rng(38)
  q = rng.uniform(0.05, 1.0, (1, length, 1, 2)).astype(np.float32)
  k = rng.uniform(0.05, 1.0, (1, length, 1, 2)).astype(np.float32)
  v = rng.normal(size=(1, length, 1, V)).astype(np.float32)
  log_decay = np.log(rng.uniform(0.9, 0.9999, (1, length, 1, V))).astype(np.float32)
  log_decay[0, 3000:3010] = -40.0
  phase = rng.uniform(-0.1, 0.1, (1, V)).astype(np.float32)

  def loss(q, k, v, log_decay, phase):
    out = rotating_lion_attention(q, k, v, log_decay, phase, form=form, chunk_size=64)
    return jnp.sum(out ** 2), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True))(
      q, k, v, log_decay, phase)
  assert all(np.all(np.isfinite(g)) for g in grads)
  decay = np.exp(log_decay[0, :, 0].astype(np.float64))  # [L, V]
  q64, k64, v64 = (np.asarray(x[0, :, 0], np.float64) for x in (q, k, v))
  turn = np.asarray(phase[0], np.float64)  # [V]
  for i in rows:  # the mask of row i by running products outwards from it
    mask = np.ones((length, V), np.complex128)
    for j in range(i - 1, -1, -1):
      mask[j] = mask[j + 1] * decay[j + 1] * np.exp(1j * turn)
    for j in range(i + 1, length):
      mask[j] = mask[j - 1] * decay[j] * np.exp(1j * turn)
    want = ((k64 @ q64[i])[:, None] * mask * v64).sum(0)  # [V]
    scale = np.abs(want).max()
    np.testing.assert_allclose(as_complex(np.asarray(out[0, i, 0], np.float64)), want,
                               rtol=0, atol=2e-4 * scale, err_msg=f"row {i}")


def test_only_the_plain_sum_and_fitting_phases_are_accepted():
  q, k, v, log_decay, _ = make_inputs(5, "selective_vector")
  with pytest.raises(ValueError, match="needs normalize='none' .* would be complex"):
    rotating_lion_attention(q, k, v, log_decay, np.zeros((2, V)), normalize="after")
  with pytest.raises(ValueError, match=r"phase must be \[H, G\] = \[2, 1 or 4\]"):
    rotating_lion_attention(q, k, v, log_decay, np.zeros((2, 3)))
  with pytest.raises(ValueError, match=r"v_imag must have v's shape \(2, 5, 2, 4\)"):
    rotating_lion_attention(q, k, v, log_decay, np.zeros((2, V)), v_imag=v[..., :2])
  # lion_attention's own complex decays: the recurrences only, each value a complex pair.
  with pytest.raises(ValueError, match="phase needs form 'rnn' or 'scan'"):
    lion_attention(q, k, v, log_decay[..., :2], form="chunk_scan", normalize="none",
                   phase=np.zeros((2, 2)))
  with pytest.raises(ValueError, match=r"shape \[H, 1 or V/2\] = \[2, 1 or 2\]"):
    lion_attention(q, k, v, log_decay[..., :2], form="scan", normalize="none",
                   phase=np.zeros((2, V)))
