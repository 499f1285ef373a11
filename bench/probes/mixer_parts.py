"""Where a LION mixer's time goes in a training step on XLA:CPU: its kernel against the rest.

  .venv/bin/python bench/probes/mixer_parts.py
  .venv/bin/python bench/probes/mixer_parts.py --task pathfinder --variant lion --batch 16
  .venv/bin/python bench/probes/mixer_parts.py --variant lion,runlocal --batch 2   # seconds

Builds one `LionMixer` of `configs/<task>.py:<variant>` (the task's full preset) and times,
forward and backward, interleaved in one process (medians):

  mixer                the whole layer, x [B, L, M] -> [B, L, M], gradients for its parameters
                       and x (a weighted sum as the loss);
  mixer, <field>=<v>   the same layer with one part changed or removed, so that the difference
                       is what that part costs: the selective gate (decay="fixed"), D
                       (feedthrough=False), the gain 1 − λ (value_gain="none"), complex inputs
                       (complex_input=False), or the kernel's residuals stored instead of
                       recomputed (residuals="stored": negative savings are costs);
  kernel               `lion_attention` alone on the layer's shapes (both directions, the layer's
                       form, state pass, residuals, phase and key mask): what the recurrence costs;
  loss only            the weighted sum and its gradient, included in every case above.

Writes nothing; docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lion_jax.nn.mixer import LionMixer  # noqa: E402
from lion_jax.ops.attention import lion_attention  # noqa: E402
from lra.train import check_config  # noqa: E402

CHANGES = (("decay", "fixed"), ("feedthrough", False), ("value_gain", "none"),
           ("complex_input", False), ("residuals", "stored"))


def mixer_case(model_config, x, mask, weights):
  """A jitted fwd+bwd of one layer, and its parameters."""
  graphdef, params = nnx.split(LionMixer(model_config, rngs=nnx.Rngs(0)))

  def loss(params, x):
    return jnp.sum(weights * nnx.merge(graphdef, params)(x, mask))

  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  return lambda: step(params, x)


def kernel_case(model_config, batch, length, mask, rng):
  """A jitted fwd+bwd of `lion_attention` alone, on the layer's shapes."""
  heads, channels = model_config.num_heads, model_config.head_dim  # P complex channels a head
  ones = jnp.ones((batch, length, heads, 1), jnp.float32)  # q·k = 1: one feature a head
  values = jnp.asarray(rng.normal(size=(batch, length, heads, 2 * channels)), jnp.float32)
  log_decay = jnp.asarray(-rng.uniform(1e-3, 0.1, size=(batch, length, heads, channels)),
                          jnp.float32)
  phase = jnp.asarray(rng.uniform(0.0, 0.5, size=(heads, channels)), jnp.float32)
  weights = jnp.asarray(rng.normal(size=values.shape), jnp.float32)

  def loss(values, log_decay):
    halves = lion_attention(ones, ones, values, log_decay, normalize="none",
                            split_directions=True, phase=phase, form=model_config.form,
                            key_mask=mask, chunk_size=model_config.chunk_size,
                            state_pass=model_config.state_pass,
                            residuals=model_config.residuals)
    return sum(jnp.sum(weights * half) for half in halves)

  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
  return lambda: step(values, log_decay)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", default="listops")
  parser.add_argument("--variant", default="lion",
                      help="a variant with q·k = 1 and complex decays (the kernel case assumes it)")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--repeats", type=int, default=5)
  args = parser.parse_args(argv)
  config = importlib.import_module(f"configs.{args.task}").get_config(args.variant)
  model_config = check_config(config)
  if model_config.feature_map != "constant" or model_config.decay_phase == "none":
    raise SystemExit(f"{args.variant}: the kernel case needs q·k = 1 and complex decays")
  from lra.tasks import get_task
  length = config.seq_len or get_task(args.task).info.seq_len
  rng = np.random.default_rng(0)
  shape = (args.batch, length, model_config.d_model)
  x = jnp.asarray(rng.normal(size=shape), jnp.float32)
  weights = jnp.asarray(rng.normal(size=shape), jnp.float32)
  mask = jnp.ones(shape[:2], bool)
  cases = {"mixer": mixer_case(model_config, x, mask, weights)}
  for field, value in CHANGES:
    changed = dataclasses.replace(model_config, **{field: value})
    cases[f"mixer, {field}={value}"] = mixer_case(changed, x, mask, weights)
  cases["kernel"] = kernel_case(model_config, args.batch, length, mask, rng)
  loss_only = jax.jit(jax.value_and_grad(lambda x: jnp.sum(weights * x)))
  cases["loss only"] = lambda: loss_only(x)
  for case in cases.values():
    jax.block_until_ready(case())  # compile
  seconds = {name: [] for name in cases}
  for _ in range(args.repeats):
    for name, case in cases.items():
      tic = time.perf_counter()
      jax.block_until_ready(case())
      seconds[name].append(time.perf_counter() - tic)
  median = {name: 1000 * float(np.median(times)) for name, times in seconds.items()}
  print(f"{args.task}:{args.variant}, one layer, B = {args.batch}, L = {length}, "
        f"M = {model_config.d_model}, form {model_config.form}; fwd+bwd medians of "
        f"{args.repeats} interleaved rounds:")
  for name, ms in median.items():
    saved = f"   (saves {median['mixer'] - ms:5.1f} ms)" if name.startswith("mixer, ") else ""
    print(f"  {name:<32} {ms:7.1f} ms{saved}")
  net = median["mixer"] - median["loss only"]
  print(f"  the layer without the loss: {net:.1f} ms, of which the kernel "
        f"{median['kernel']:.1f} ms ({median['kernel'] / net:.0%})")


if __name__ == "__main__":
  main()
