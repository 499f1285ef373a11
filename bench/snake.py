"""LION♮ cost: one mixer layer with snake orders vs the same layer in raster order, fwd+bwd.

  .venv/bin/python bench/snake.py                  # L = 1024 (32×32) and 16384 (128×128)
  .venv/bin/python bench/snake.py --quick          # L = 1024 only

Each case is `lion_jax.LionMixer` ([B, L, d_model] -> [B, L, d_model] with its projections) at
d_model 128, 4 heads, chunk_scan (C = 64), vector decays (the LRA setting), for LION-S and
LION-D, with scan_order "raster", "snake" (masks averaged) and "snake_outputs" (outputs
averaged) on the square grid of L. "fwd+bwd" is the gradient of a scalar loss w.r.t. all
parameters and the input. All cases of one L are timed interleaved in one process, so the
ratio snake / raster is what to read (target: ≤ 1.3×); memory is XLA's compiled temp+output.

Writes docs/bench/snake.json.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from lion_jax import LionMixer, ModelConfig  # noqa: E402

ORDERS = ("raster", "snake", "snake_outputs")
VARIANTS = {"LION-S": "selective", "LION-D": "fixed"}
TARGET = 1.3  # snake / raster fwd+bwd time


def build_cases(length, args):
  side = math.isqrt(length)
  if side * side != length:
    raise ValueError(f"--lengths must be squares (a square grid); got L = {length}.")
  key = jax.random.split(jax.random.PRNGKey(length), 2)
  x = jax.random.normal(key[0], (args.batch, length, args.d_model))
  cotangent = jax.random.normal(key[1], x.shape)
  cases = []
  for variant in args.variants.split(","):
    for order in args.orders.split(","):
      config = ModelConfig(d_model=args.d_model, num_heads=args.heads, decay=VARIANTS[variant],
                           decay_shape=args.decay_shape, form="chunk_scan", chunk_size=args.chunk,
                           grid=(side, side), scan_order=order)
      graphdef, params = nnx.split(LionMixer(config, rngs=nnx.Rngs(0)))

      def loss(params, x, cotangent, graphdef=graphdef):
        return jnp.sum(nnx.merge(graphdef, params)(x) * cotangent)

      cases.append(harness.Case(
          f"L={length} {variant} {order} fwd+bwd", jax.grad(loss, argnums=(0, 1)),
          (params, x, cotangent),
          info=dict(length=length, grid=side, variant=variant, scan_order=order, pass_="fwd+bwd",
                    batch=args.batch, d_model=args.d_model, heads=args.heads, chunk=args.chunk,
                    decay_shape=args.decay_shape)))
  return cases


def find(records, **match):
  for r in records:
    if all(r.get(k) == v for k, v in match.items()):
      return r
  return None


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--lengths", default=None, help="comma-separated squares (default 1024,16384)")
  p.add_argument("--variants", default="LION-S,LION-D")
  p.add_argument("--orders", default=",".join(ORDERS))
  p.add_argument("--decay-shape", default="vector")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--repeats", type=int, default=7)
  p.add_argument("--case-budget-s", type=float, default=120.0)
  p.add_argument("--mem-budget-gb", type=float, default=8.0)
  p.add_argument("--out", default=str(harness.DOCS))
  p.add_argument("--name", default=None)
  args = p.parse_args(argv)
  lengths = harness.parse_lengths(args.lengths) if args.lengths else (
      [1024] if args.quick else [1024, 16384])
  name = args.name or ("snake_quick" if args.quick else "snake")

  records = []
  for length in lengths:
    print(f"L = {length}", flush=True)
    cases = build_cases(length, args)
    harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
    records += [harness.record(c) for c in cases]

  rows, checks = [], []
  for variant in args.variants.split(","):
    for order in args.orders.split(","):
      row = [f"{variant} {order}"]
      for length in lengths:
        r = find(records, length=length, variant=variant, scan_order=order)
        base = find(records, length=length, variant=variant, scan_order="raster")
        if r and base and "median_s" in r and "median_s" in base:
          ratio = r["median_s"] / base["median_s"]
          row += [harness.fmt_ms(r["median_s"]), f"{ratio:.2f}x",
                  harness.fmt_bytes(r.get("temp_plus_output_bytes"))]
          if order != "raster":
            checks.append(dict(variant=variant, scan_order=order, length=length, ratio=ratio,
                               ratio_min=r["min_s"] / base["min_s"], target=TARGET,
                               met=ratio <= TARGET))
        else:
          row += ["skip", "–", "–"]
      rows.append(row)
  header = ["layer"] + [h for l in lengths for h in (f"L={l} ms", "/ raster", "mem")]
  print("\nfwd+bwd, median ms, ratio to the raster layer, compiled temp+output\n"
        + harness.markdown_table(header, rows))
  if checks:
    print(f"\ntarget: snake / raster <= {TARGET}x\n" + harness.markdown_table(
        ["variant", "order", "L", "ratio (median)", "ratio (min)", ""],
        [[c["variant"], c["scan_order"], c["length"], f"{c['ratio']:.2f}x",
          f"{c['ratio_min']:.2f}x", "met" if c["met"] else "MISSED"] for c in checks]))
  harness.write_json(name, records, pathlib.Path(args.out), extra={"targets": checks})


if __name__ == "__main__":
  main()
