"""Whether another way of passing the states beats the token loop on XLA:CPU.

  .venv/bin/python bench/probes/token_loop_alternatives.py
  .venv/bin/python bench/probes/token_loop_alternatives.py --batch 32 --length 2048 --channels 8

On a CPU the `scan` form runs `recurrent.causal_rnn`: one `lax.scan` iteration a token, whose
fixed cost dominates a step at the ListOps preset (docs/benchmarks.md). This times the causal
kernel alone, forward and backward, for `lion`'s shapes (one key feature, P complex channels,
both directions stacked on the batch axis as `recurrent.bidirectional_halves` stacks them),
against three algorithms with fewer sequential iterations, each the same sum in another order:

  associative  `recurrent.causal_associative_scan` (log-depth `lax.associative_scan`);
  blocked S    a two-level scan: inside blocks of S tokens the states from zero (S unrolled
               steps, every block at once), then one `lax.scan` iteration a block for the state
               entering it, then every token's state as its block-local state plus the entering
               state decayed, every block at once: L / S iterations instead of L;
  doubling     Hillis-Steele: log2 L rounds, each adding every state's predecessor d tokens back.

(`recurrent.causal_chunk_scan` is the library's two-level scan, with C×C matmul blocks; it takes
real gates only, so the blocked scan here is written out for complex ones.)

Each result is checked against `causal_rnn` (largest absolute difference over the largest
output) and the fwd+bwd steps are timed interleaved in one process: medians and ratios to the
token loop. Writes nothing; docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lion_jax.ops import recurrent  # noqa: E402


def complex_multiply(a, b):
  """(a_re + i a_im)(b_re + i b_im) on (Re, Im) pairs."""
  return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def complex_add(a, b):
  return a[0] + b[0], a[1] + b[1]


def multipliers_and_increments(k, u, gate, phase):
  """Each token's λ_t e^{iθ} ([B, L, H, 1, P] pairs) and k_t u_tᵀ ([B, L, H, K, P] pairs)."""
  re, im = jnp.split(u, 2, axis=-1)  # [B, L, H, P] each
  decay = jnp.exp(gate)
  a = ((decay * jnp.cos(phase))[..., None, :], (decay * jnp.sin(phase))[..., None, :])
  b = (k[..., :, None] * re[..., None, :], k[..., :, None] * im[..., None, :])
  return a, b


def read_out(q, states):
  """[B, L, H, 2P] outputs Σ_K q ⊙ state, real parts then imaginary ones."""
  return jnp.concatenate([jnp.sum(q[..., :, None] * s, axis=-2) for s in states], axis=-1)


def causal_blocked_scan(q, k, u, gate, phase, block):
  """`causal_rnn`'s sum by a two-level scan over blocks of `block` tokens."""
  batch, length = k.shape[:2]
  a, b = multipliers_and_increments(k, u, gate, phase)
  blocks = -(-length // block)

  def position_first(x):  # [B, L, ...] -> [S, B, N, ...]
    x = jnp.pad(x, [(0, 0), (0, blocks * block - length)] + [(0, 0)] * (x.ndim - 2))
    return jnp.moveaxis(x.reshape((batch, blocks, block) + x.shape[2:]), 2, 0)

  a, b, q = jax.tree.map(position_first, (a, b, q))
  local, product = [jax.tree.map(lambda x: x[0], b)], [jax.tree.map(lambda x: x[0], a)]
  for j in range(1, block):  # every block at once, from a zero state
    a_j = jax.tree.map(lambda x: x[j], a)
    local.append(complex_add(complex_multiply(a_j, local[-1]),
                             jax.tree.map(lambda x: x[j], b)))
    product.append(complex_multiply(a_j, product[-1]))

  def step(entering, block_end):  # one iteration a block: [B, H, K, P] pairs
    decay, state = block_end
    return complex_add(complex_multiply(decay, entering), state), entering

  block_major = lambda x: jnp.moveaxis(x, 1, 0)  # [B, N, ...] -> [N, B, ...]
  zeros = jnp.zeros_like(local[-1][0][:, 0])
  _, entering = jax.lax.scan(step, (zeros, zeros),
                             jax.tree.map(block_major, (product[-1], local[-1])))
  entering = jax.tree.map(block_major, entering)  # [B, N, H, K, P] pairs
  states = [complex_add(local[j], complex_multiply(product[j], entering)) for j in range(block)]
  outputs = [read_out(q[j], states[j]) for j in range(block)]  # [B, N, H, 2P] each
  out = jnp.stack(outputs, axis=2)  # [B, N, S, H, 2P]
  return out.reshape((batch, blocks * block) + out.shape[3:])[:, :length]


def causal_doubling_scan(q, k, u, gate, phase):
  """`causal_rnn`'s sum by log2 L rounds of state += multiplier · (state d tokens back)."""
  length = k.shape[1]
  a, states = multipliers_and_increments(k, u, gate, phase)

  def back(x, d, fill):  # x d tokens back, `fill` before the first token
    return jnp.concatenate([jnp.full_like(x[:, :d], fill), x[:, :-d]], axis=1)

  d = 1
  while d < length:
    earlier = (back(states[0], d, 0.0), back(states[1], d, 0.0))
    states = complex_add(states, complex_multiply(a, earlier))
    if 2 * d < length:
      a = complex_multiply(a, (back(a[0], d, 1.0), back(a[1], d, 0.0)))
    d *= 2
  return read_out(q, states)


def kernels(blocks):
  found = {"token loop": recurrent.causal_rnn,
           "associative": recurrent.causal_associative_scan}
  for block in blocks:
    found[f"blocked {block}"] = functools.partial(causal_blocked_scan, block=block)
  found["doubling"] = causal_doubling_scan
  return found


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--batch", type=int, default=32,
                      help="rows, both directions (the ListOps preset's batch 16 stacks to 32)")
  parser.add_argument("--length", type=int, default=2048)
  parser.add_argument("--channels", type=int, default=8, help="complex channels P")
  parser.add_argument("--blocks", default="8,16,32", help="block lengths S of the blocked scan")
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args(argv)
  rng = np.random.default_rng(0)
  shape = (args.batch, args.length, 1)
  q, k = (jnp.asarray(rng.normal(size=shape + (1,)), jnp.float32) for _ in range(2))
  u = jnp.asarray(rng.normal(size=shape + (2 * args.channels,)), jnp.float32)
  gate = jnp.asarray(-rng.uniform(1e-3, 0.1, size=shape + (args.channels,)), jnp.float32)
  phase = jnp.asarray(rng.uniform(0.0, 0.5, size=(1, args.channels)), jnp.float32)
  weights = jnp.asarray(rng.normal(size=shape + (2 * args.channels,)), jnp.float32)
  expected = recurrent.causal_rnn(q, k, u, gate, phase)
  largest = float(jnp.max(jnp.abs(expected)))
  steps = {}
  for name, kernel in kernels([int(b) for b in args.blocks.split(",")]).items():
    error = float(jnp.max(jnp.abs(kernel(q, k, u, gate, phase) - expected)))
    print(f"{name:<12} largest difference to the token loop {error:.1e} "
          f"(largest output {largest:.1f})")
    if error > 1e-5 * max(largest, 1.0):  # float32 rounding of sums in another order
      raise SystemExit(f"{name} computes another sum than the token loop: its timing means "
                       "nothing (tests/test_probes.py checks the algorithms in float64)")
    loss = lambda q, k, u, gate, kernel=kernel: jnp.sum(weights * kernel(q, k, u, gate, phase))
    steps[name] = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    jax.block_until_ready(steps[name](q, k, u, gate))  # compile
  seconds = {name: [] for name in steps}
  for _ in range(args.repeats):
    for name, step in steps.items():
      tic = time.perf_counter()
      jax.block_until_ready(step(q, k, u, gate))
      seconds[name].append(time.perf_counter() - tic)
  loop = np.median(seconds["token loop"])
  print(f"\nfwd+bwd of one causal kernel, B = {args.batch}, L = {args.length}, "
        f"P = {args.channels} complex channels, medians of {args.repeats} interleaved rounds:")
  for name, times in seconds.items():
    print(f"  {name:<12} {1000 * np.median(times):8.1f} ms   {np.median(times) / loop:5.2f}x the "
          f"token loop")


if __name__ == "__main__":
  main()
