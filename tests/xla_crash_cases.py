"""Computations that have segfaulted XLA:CPU, runnable one per process.

`python -m tests.xla_crash_cases CASE` runs one case and prints a JSON report on its last line.
`tests/test_xla_cpu_crashes.py` runs each case in a fresh subprocess, so that a crash fails one
test instead of killing a pytest worker (and the tests queued on it). Each case compares with
float64: gradients entry by entry with the float64 `attention` form, and one directional
derivative with central differences of the NumPy definition in `tests/reference.py`.

Known crashes (jaxlib 0.10.2, XLA:CPU's YNN fusions, AVX2-only CPUs):
  grad_beyond_factored_range: `jit(grad)` of `chunk_scan` with vector log-decays whose every chunk
    spans well over 2W (beyond the factored kernel, too many chunks to recompute on the side), i.e.
    the exact vector fallback's backward pass.
  vmapped_grad_both_branches: `vmap(grad)` over one example inside the factored range and one far
    beyond it; under `vmap` both branches run on every example.
"""

import functools
import json
import sys

import numpy as np

import lion_jax  # noqa: F401  (first: lion-jax's XLA flags, unless the caller set its own)
import jax
import jax.numpy as jnp

from lion_jax import lion_attention
from lion_jax.ops import chunkwise
from tests.reference import reference_lion

CHUNK, LENGTH, B, H, K, V = 16, 37, 2, 2, 3, 4
LIMIT = chunkwise.factored_exponent_limit(np.float32)  # W


def _inputs(span_per_chunk, seed=11):
  """float64 q, k, v and vector log-decays that add up to about `span_per_chunk` per chunk."""
  rng = np.random.default_rng(seed)
  q = rng.uniform(0.05, 1.0, (B, LENGTH, H, K))
  k = rng.uniform(0.05, 1.0, (B, LENGTH, H, K))
  v = rng.normal(size=(B, LENGTH, H, V))
  log_decay = -span_per_chunk / CHUNK * rng.uniform(0.9, 1.0, (B, LENGTH, H, V))
  key_mask = rng.uniform(size=(B, LENGTH)) > 0.3
  key_mask[:, 0] = True
  return q, k, v, log_decay, key_mask


def _loss(form, weights, key_mask, q, k, v, log_decay):
  out = lion_attention(q, k, v, log_decay, form=form, key_mask=key_mask, chunk_size=CHUNK)
  return jnp.sum(out * weights)


def _directional_check(grads, inputs, weights, key_mask):
  """Σ_x ⟨∂loss/∂x, d_x⟩ vs a central difference of the NumPy definition along d (float64)."""
  rng = np.random.default_rng(5)
  directions = [rng.normal(size=x.shape) for x in inputs]
  step = 1e-5
  def definition_loss(sign):
    moved = [x + sign * step * d for x, d in zip(inputs, directions)]
    return np.sum(reference_lion(*moved, key_mask=key_mask) * weights)
  numeric = (definition_loss(1) - definition_loss(-1)) / (2 * step)
  analytic = sum(float(np.sum(np.asarray(g, np.float64) * d)) for g, d in zip(grads, directions))
  return abs(analytic - numeric) / abs(numeric)


def _entrywise_errors(grads, expected):
  """Largest |g − e| per argument, relative to that argument's largest expected entry."""
  return {name: float(np.max(np.abs(np.asarray(g) - e)) / np.max(np.abs(e)))
          for name, g, e in zip(("q", "k", "v", "log_decay"), grads, expected)}


def grad_beyond_factored_range():
  inputs = _inputs(2 * LIMIT + 45.0)  # every chunk of 16 steep (about 10 per token)
  q, k, v, log_decay, key_mask = inputs
  weights = np.random.default_rng(12).normal(size=v.shape)
  f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
  grads = jax.jit(jax.grad(functools.partial(_loss, "chunk_scan", weights.astype(np.float32),
                                             key_mask), argnums=(0, 1, 2, 3)))(*f32)
  with jax.enable_x64(True):
    expected = jax.jit(jax.grad(functools.partial(_loss, "attention", weights, key_mask),
                                argnums=(0, 1, 2, 3)))(*(jnp.asarray(x) for x in (q, k, v, log_decay)))
  return {"finite": all(bool(np.all(np.isfinite(g))) for g in grads),
          "entrywise": _entrywise_errors(grads, expected),
          "directional": _directional_check(grads, (q, k, v, log_decay), weights, key_mask)}


def vmapped_grad_both_branches():
  gentle, steep = _inputs(0.5 * LIMIT), _inputs(20 * LIMIT)
  q, k, v, log_decay, key_mask = (np.stack([a[:1], b[:1]]) for a, b in zip(gentle, steep))
  weights = np.random.default_rng(13).normal(size=v.shape)
  per_example = lambda form, w, *x: jax.vmap(jax.grad(
      lambda w, m, *args: _loss(form, w, m, *args), argnums=(2, 3, 4, 5)))(w, key_mask, *x)
  grads = jax.jit(functools.partial(per_example, "chunk_scan", weights.astype(np.float32)))(
      *(np.asarray(x, np.float32) for x in (q, k, v, log_decay)))
  with jax.enable_x64(True):
    expected = jax.jit(functools.partial(per_example, "attention", weights))(
        *(jnp.asarray(x) for x in (q, k, v, log_decay)))
  return {"finite": all(bool(np.all(np.isfinite(g))) for g in grads),
          "entrywise": _entrywise_errors(grads, expected)}


CASES = {case.__name__: case for case in (grad_beyond_factored_range, vmapped_grad_both_branches)}


if __name__ == "__main__":
  report = CASES[sys.argv[1]]()
  print(json.dumps(report))
