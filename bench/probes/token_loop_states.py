"""What keeping one state in 32 saves and costs in a training step of the token loop.

  .venv/bin/python bench/probes/token_loop_states.py
  .venv/bin/python bench/probes/token_loop_states.py --settings listops:long_testbed --repeats 20

The `rnn` form, and the `scan` form on a CPU, pass their states by a `lax.scan` over tokens
(`lion_jax.ops.recurrent._token_loop`). A plain scan keeps every token's states for the backward
pass; the loop keeps one state in `STATES_KEPT_EVERY` and recomputes the stretch between two of
them when the gradient passes. For each setting (`task:preset`, a CPU preset flag of
configs/common.py) this compiles the variant's real training step at batch 32 twice, with the
plain scan and with the loop as it is, prints XLA's memory plan of each (temp + output bytes of
`memory_analysis()`), then times the two steps interleaved in one process and prints their
median step and the per-repeat ratios. Writes nothing; docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import recipes_vs_s5  # noqa: E402  (bench/, for the settings' configs)
import train_step  # noqa: E402
from lion_jax.ops import recurrent  # noqa: E402
from lra import steps  # noqa: E402

BATCH = 32


def plain_token_loop(step, state0, tokens):
  """`recurrent._token_loop` as a plain `lax.scan`: every token's states kept for the backward."""
  _, out = jax.lax.scan(step, state0, jax.tree.map(lambda x: jnp.moveaxis(x, 1, 0), tokens))
  return jax.tree.map(lambda x: jnp.moveaxis(x, 0, 1), out)


def compiled_step(config, info, length):
  """(compiled train step, state, batch) of `config` at batch `BATCH` on synthetic data."""
  setup, _ = train_step.make_setup(config, info, None, None)
  batch = steps.shard_batch(train_step.synthetic_batch(info, length, BATCH, 0), setup.mesh)
  return steps.jit_train_step(setup).lower(setup.state, batch).compile(), setup.state, batch


def time_interleaved(cases, repeats):
  """{name: [repeats] seconds} of each case's step, the cases run in turn each round, after a
  warm-up round. `cases`: {name: [compiled step, state, batch]}; the state is donated, so each
  case carries its new one."""
  seconds = {name: [] for name in cases}
  for _ in range(repeats + 1):
    for name, case in cases.items():
      compiled, state, batch = case
      start = time.perf_counter()
      out = jax.block_until_ready(compiled(state, batch))
      seconds[name].append(time.perf_counter() - start)
      case[1] = out[0]
  return {name: np.array(s[1:]) for name, s in seconds.items()}


def probe(task, preset, variant, repeats):
  """Prints the two plans and the interleaved timings of one setting."""
  models, info, length, skipped = recipes_vs_s5.setting_models(task, preset, [variant])
  if skipped:
    raise SystemExit(f"{task}:{preset}: {skipped[variant]}")
  kept = recurrent._token_loop
  cases = {}
  for name, loop in (("every state", plain_token_loop),
                     (f"one in {recurrent.STATES_KEPT_EVERY}", kept)):
    recurrent._token_loop = loop  # read when the step is traced, inside compiled_step
    try:
      cases[name] = list(compiled_step(models[0].config, info, length))
    finally:
      recurrent._token_loop = kept
    plan = cases[name][0].memory_analysis()
    print(f"{task}:{preset} {variant}, {name}: plan "
          f"{(plan.temp_size_in_bytes + plan.output_size_in_bytes) / 2**20:.0f} MiB", flush=True)
  seconds = time_interleaved(cases, repeats)
  (plain, plain_s), (loop, loop_s) = seconds.items()
  for name, s in ((plain, plain_s), (loop, loop_s)):
    print(f"  {name}: median {1000 * np.median(s):.0f} ms, min {1000 * s.min():.0f} ms")
  print(f"  {loop} ÷ {plain}, median {np.median(loop_s) / np.median(plain_s):.2f}; by repeat "
        + " ".join(f"{r:.2f}" for r in loop_s / plain_s))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--settings", default="pathfinder:cpu_order,listops:long_testbed",
                      help="comma list of task:preset")
  parser.add_argument("--variant", default="lion_complex")
  parser.add_argument("--repeats", type=int, default=11)
  args = parser.parse_args(argv)
  for setting in args.settings.split(","):
    task, _, preset = setting.partition(":")
    probe(task, preset, args.variant, args.repeats)


if __name__ == "__main__":
  main()
