"""Fast correctness checks of the benchmark peers in bench/baselines (not part of lion_jax)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bench.baselines import S5Layer, SoftmaxAttention, make_dplr_hippo, s5_scan


def _loop_scan(lambda_bar, bu, reverse=False):
  """x_t = Λ̄ x_{t∓1} + bu_t by a Python loop in complex128."""
  bu = np.asarray(bu, np.complex128)
  lam = np.asarray(lambda_bar, np.complex128)
  out = np.zeros_like(bu)
  x = np.zeros((bu.shape[0], bu.shape[2]), np.complex128)
  order = range(bu.shape[1] - 1, -1, -1) if reverse else range(bu.shape[1])
  for t in order:
    x = lam * x + bu[:, t]
    out[:, t] = x
  return out


@pytest.mark.parametrize("method", ["associative", "linear"])
@pytest.mark.parametrize("reverse", [False, True])
def test_s5_scan_equals_python_loop(method, reverse):
  rng = np.random.default_rng(0)
  lam = np.exp((-0.5 + 1j * rng.normal(size=8)) * 0.1).astype(np.complex64)
  bu = (rng.normal(size=(2, 37, 8)) + 1j * rng.normal(size=(2, 37, 8))).astype(np.complex64)
  got = s5_scan(jnp.asarray(lam), jnp.asarray(bu), reverse=reverse, method=method)
  np.testing.assert_allclose(np.asarray(got), _loop_scan(lam, bu, reverse), rtol=1e-5, atol=1e-5)


def test_hippo_eigenvalues():
  lam, v, _ = make_dplr_hippo(16)
  np.testing.assert_allclose(lam.real, -0.5, atol=1e-12)  # normal part: constant −½ real part
  np.testing.assert_allclose(v.conj().T @ v, np.eye(16), atol=1e-10)  # unitary eigenvectors
  assert np.all(np.abs(lam.imag) > 0)


def _zoh(layer):
  """Zero-order hold in complex128 from the layer's continuous parameters, written from the
  formula: Λ̄ = e^{ΛΔ} and B̄ = ∫₀^Δ e^{Λs} ds · B̃ = (Λ̄ − 1)/Λ · B̃ (the layer's `discretize` unused)."""
  lam = np.asarray(layer.lambda_re[...], np.float64) + 1j * np.asarray(layer.lambda_im[...])
  step = np.exp(np.asarray(layer.log_step[...], np.float64))
  b_tilde = np.asarray(layer.b_re[...], np.float64) + 1j * np.asarray(layer.b_im[...])
  lambda_bar = np.exp(lam * step)
  return lambda_bar, ((lambda_bar - 1.0) / lam)[:, None] * b_tilde


def test_zoh_closed_form_is_the_integral_it_stands_for():
  """Guards `_zoh` itself: (e^{λΔ} − 1)/λ equals ∫₀^Δ e^{λs} ds by the midpoint rule."""
  lam, step = -0.5 + 2.0j, 0.07
  s = (np.arange(10_000) + 0.5) * step / 10_000
  np.testing.assert_allclose((np.exp(lam * step) - 1.0) / lam, np.exp(lam * s).sum() * step / 10_000,
                             rtol=1e-8)


def test_s5_layer_matches_loop_reference():
  layer = S5Layer(8, ssm_size=8, blocks=2, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.PRNGKey(1), (2, 11, 8))
  lambda_bar, b_bar = _zoh(layer)
  bu = np.einsum("blh,ph->blp", np.asarray(x, np.complex128), np.asarray(b_bar, np.complex128))
  states = np.concatenate([_loop_scan(lambda_bar, bu), _loop_scan(lambda_bar, bu, True)], -1)
  c = np.asarray(layer.c_re[...]) + 1j * np.asarray(layer.c_im[...])
  want = 2 * np.einsum("blp,hp->blh", states, c).real + np.asarray(layer.d[...]) * np.asarray(x)
  for method in ("associative", "linear"):
    layer.method = method
    np.testing.assert_allclose(np.asarray(layer(x)), want, rtol=1e-4, atol=1e-4)
  assert np.all(np.abs(np.asarray(lambda_bar)) < 1)  # stable discretisation


def test_s5_layer_is_bidirectional():
  layer = S5Layer(4, ssm_size=8, blocks=1, rngs=nnx.Rngs(0))
  x = jnp.zeros((1, 9, 4)).at[0, 6].set(1.0)
  y = layer(x) - layer.d[...] * x
  assert float(jnp.abs(y[0, 2]).sum()) > 0 and float(jnp.abs(y[0, 8]).sum()) > 0


def test_softmax_layer_equals_naive_attention():
  layer = SoftmaxAttention(16, 4, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.PRNGKey(2), (2, 13, 16))
  mask = jnp.arange(13)[None, :] < jnp.array([[13], [9]])
  got = layer(x, mask)
  assert got.shape == (2, 13, 16)
  q, k, v = np.split(np.asarray(x) @ np.asarray(layer.qkv.kernel[...]), 3, axis=-1)
  heads = lambda t: t.reshape(2, 13, 4, 4)
  q, k, v = heads(q), heads(k), heads(v)
  logits = np.einsum("bihd,bjhd->bhij", q, k) / 2.0
  logits = np.where(np.asarray(mask)[:, None, None, :], logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  y = np.einsum("bhij,bjhd->bihd", weights, v).reshape(2, 13, 16)
  want = y @ np.asarray(layer.out.kernel[...]) + np.asarray(layer.out.bias[...])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
