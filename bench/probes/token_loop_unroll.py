"""Whether unrolling the token loop's inner scan speeds a training step on XLA:CPU.

  .venv/bin/python bench/probes/token_loop_unroll.py
  .venv/bin/python bench/probes/token_loop_unroll.py --settings listops:ladder --unrolls 1,8,32

`lion_jax.ops.recurrent._token_loop` runs a `lax.scan` over stretches of `STATES_KEPT_EVERY`
tokens, each a `lax.scan` over its tokens, `TOKENS_UNROLLED` tokens laid out an iteration: at
1, one loop iteration a token, whose fixed cost on XLA:CPU is large beside the few channels a
token updates. For each setting (`task:preset`, a CPU preset flag of configs/common.py) this
compiles the variant's real training step at batch 32 once per unroll, then times the steps
interleaved in one process and prints each median and its ratio to the first of `--unrolls`,
per repeat. Writes nothing; docs/benchmarks.md quotes its output.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "bench" / "probes")]

import recipes_vs_s5  # noqa: E402  (bench/, for the settings' configs)
from lion_jax.ops import recurrent  # noqa: E402
from token_loop_states import compiled_step, time_interleaved  # noqa: E402


def probe(task, preset, variant, unrolls, repeats):
  models, info, length, skipped = recipes_vs_s5.setting_models(task, preset, [variant])
  if skipped:
    raise SystemExit(f"{task}:{preset}: {skipped[variant]}")
  kept = recurrent.TOKENS_UNROLLED
  cases = {}
  for unroll in unrolls:
    recurrent.TOKENS_UNROLLED = unroll  # read when the step is traced, inside compiled_step
    try:
      tic = time.perf_counter()
      cases[unroll] = list(compiled_step(models[0].config, info, length))
      print(f"{task}:{preset} {variant}, unroll {unroll}: compiled in "
            f"{time.perf_counter() - tic:.0f} s", flush=True)
    finally:
      recurrent.TOKENS_UNROLLED = kept
  seconds = time_interleaved(cases, repeats)
  base = seconds[unrolls[0]]
  for unroll, s in seconds.items():
    print(f"  unroll {unroll}: median {1000 * np.median(s):.0f} ms, min {1000 * s.min():.0f} ms, "
          f"÷ unroll {unrolls[0]} median {np.median(s) / np.median(base):.2f}; by repeat "
          + " ".join(f"{r:.2f}" for r in s / base), flush=True)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--settings", default="pathfinder:cpu_order,listops:long_testbed",
                      help="comma list of task:preset")
  parser.add_argument("--variant", default="lion")
  parser.add_argument("--unrolls", default="1,4,8,32", help="comma list; the ratios are to the first")
  parser.add_argument("--repeats", type=int, default=7)
  args = parser.parse_args(argv)
  unrolls = [int(u) for u in args.unrolls.split(",")]
  for setting in args.settings.split(","):
    task, _, preset = setting.partition(":")
    probe(task, preset, args.variant, unrolls, args.repeats)


if __name__ == "__main__":
  main()
