"""LION♮ cost: one mixer layer with snake orders vs the same layer in raster order, fwd+bwd.

  .venv/bin/python bench/probes/snake.py                  # L = 1024 (32×32) and 16384 (128×128)
  .venv/bin/python bench/probes/snake.py --quick          # L = 1024 only

Each layer case is `lion_jax.LionMixer` ([B, L, d_model] -> [B, L, d_model] with its
projections) at d_model 128, 4 heads, chunk_scan (C = 64), vector decays (the LRA setting), for
LION-S and LION-D, with scan_order "raster", "snake" (masks averaged) and "snake_outputs"
(outputs averaged) on the square grid of L. Each attention case is the attention alone at the
layer's shapes: `lion_attention` (raster) or `grid_lion_attention` (snake). "fwd+bwd" is the
gradient of a scalar loss w.r.t. every input and parameter. All cases of one L are timed
interleaved in one process, so the ratios are what to read; memory is XLA's compiled
temp+output.

Two scans cost two scans: a snake layer runs the attention once per order (as one batch of 2B
sequences), and only the projections and gates outside it are shared. The table therefore
also prints the *floor*, 1 + (snake attention − raster attention) / raster layer: the layer
ratio if nothing but the extra attention cost anything. The target (≤ 1.3× the raster layer)
can only be met where the attention is a small part of the layer.

Writes bench/results/snake.json (`--publish`: docs/bench/snake.json).
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import harness  # noqa: E402
from lion_jax import LionMixer, ModelConfig, grid_lion_attention, lion_attention  # noqa: E402

ORDERS = ("raster", "snake", "snake_outputs")
VARIANTS = {"LION-S": "selective", "LION-D": "fixed"}
TARGET = 1.3  # snake / raster fwd+bwd time of the layer


def _layer_case(length, side, variant, order, x, cotangent, args):
  config = ModelConfig(d_model=args.d_model, num_heads=args.heads, decay=VARIANTS[variant],
                       decay_shape=args.decay_shape, form="chunk_scan", chunk_size=args.chunk,
                       grid=(side, side), scan_order=order)
  graphdef, params = nnx.split(LionMixer(config, rngs=nnx.Rngs(0)))

  def loss(params, x, cotangent):
    return jnp.sum(nnx.merge(graphdef, params)(x) * cotangent)

  return harness.Case(
      f"L={length} {variant} {order} layer fwd+bwd", jax.grad(loss, argnums=(0, 1)),
      (params, x, cotangent),
      info=dict(length=length, grid=side, variant=variant, scan_order=order, part="layer",
                pass_="fwd+bwd", batch=args.batch, d_model=args.d_model, heads=args.heads,
                chunk=args.chunk, decay_shape=args.decay_shape))


def _attention_case(length, side, variant, order, x, args):
  """The attention alone, on the layer's q, k, v shapes and its decays at init.

  The decays come from a snake mixer at init, not from random draws: steep random decays
  would send `chunk_scan` to its exact fallback, which the layer at init does not take.
  """
  head_dim = args.d_model // args.heads
  keys = jax.random.split(jax.random.PRNGKey(length + 1), 4)
  shape = (args.batch, length, args.heads, head_dim)  # [B, L, H, D]
  q = jax.nn.softplus(jax.random.normal(keys[0], shape))
  k = jax.nn.softplus(jax.random.normal(keys[1], shape))
  v = jax.random.normal(keys[2], shape)
  cotangent = jax.random.normal(keys[3], shape)
  config = ModelConfig(d_model=args.d_model, num_heads=args.heads, decay=VARIANTS[variant],
                       decay_shape=args.decay_shape, grid=(side, side), scan_order="snake")
  decays = LionMixer(config, rngs=nnx.Rngs(0)).scan_log_decays(x)  # 2 × [H, G] or [B, L, H, G]

  def attend(q, k, v, decays):
    if order == "raster":
      return lion_attention(q, k, v, decays[0], form="chunk_scan", chunk_size=args.chunk)
    return grid_lion_attention(q, k, v, decays, grid=(side, side), scan_order=order,
                               form="chunk_scan", chunk_size=args.chunk)

  def loss(q, k, v, decays, cotangent):
    return jnp.sum(attend(q, k, v, decays) * cotangent)

  return harness.Case(
      f"L={length} {variant} {order} attention fwd+bwd", jax.grad(loss, argnums=(0, 1, 2, 3)),
      (q, k, v, decays, cotangent),
      info=dict(length=length, grid=side, variant=variant, scan_order=order, part="attention",
                pass_="fwd+bwd", batch=args.batch, d_model=args.d_model, heads=args.heads,
                chunk=args.chunk, decay_shape=args.decay_shape))


def build_cases(length, args):
  side = math.isqrt(length)
  if side * side != length:
    raise ValueError(f"--lengths must be squares (a square grid); got L = {length}.")
  key = jax.random.split(jax.random.PRNGKey(length), 2)
  x = jax.random.normal(key[0], (args.batch, length, args.d_model))  # [B, L, d_model]
  cotangent = jax.random.normal(key[1], x.shape)
  cases = []
  for variant in args.variants.split(","):
    for order in args.orders.split(","):
      cases.append(_layer_case(length, side, variant, order, x, cotangent, args))
      if order != "snake_outputs":  # its attention differs from "snake" only in the division
        cases.append(_attention_case(length, side, variant, order, x, args))
  return cases


def summarise(records, lengths, args):
  """The table rows and the per-(variant, order, L) target checks."""
  rows, checks = [], []
  for variant in args.variants.split(","):
    for order in args.orders.split(","):
      row = [f"{variant} {order}"]
      for length in lengths:
        def median(part, scan_order, length=length):
          r = harness.find(records, length=length, variant=variant, scan_order=scan_order,
                           part=part)
          return r.get("median_s") if r else None, r
        layer, record = median("layer", order)
        base, _ = median("layer", "raster")
        attention, _ = median("attention", "snake" if order != "raster" else "raster")
        base_attention, _ = median("attention", "raster")
        if None in (layer, base):
          row += ["skip", "–", "–", "–"]
          continue
        ratio = layer / base
        floor = (1 + (attention - base_attention) / base
                 if None not in (attention, base_attention) else None)
        row += [harness.fmt_ms(layer), f"{ratio:.2f}x",
                "–" if floor is None or order == "raster" else f"{floor:.2f}x",
                harness.fmt_bytes(record.get("temp_plus_output_bytes"))]
        if order != "raster":
          checks.append(dict(variant=variant, scan_order=order, length=length, ratio=ratio,
                             floor=floor, attention_share=(base_attention / base
                                                           if base_attention else None),
                             target=TARGET, met=ratio <= TARGET))
      rows.append(row)
  header = ["layer"] + [h for l in lengths for h in (f"L={l} ms", "/ raster", "floor", "mem")]
  return header, rows, checks


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p, case_budget_s=120.0, mem_budget_gb=8.0)
  p.add_argument("--variants", default="LION-S,LION-D")
  p.add_argument("--orders", default=",".join(ORDERS))
  p.add_argument("--decay-shape", default="vector")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--chunk", type=int, default=64)
  args = p.parse_args(argv)
  lengths = harness.lengths_from_args(args, quick=[1024], full=[1024, 16384])
  out_dir, name = harness.output_path(args, "snake")

  records = []
  for length in lengths:
    print(f"L = {length}", flush=True)
    cases = build_cases(length, args)
    harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
    records += [harness.record(c) for c in cases]

  header, rows, checks = summarise(records, lengths, args)
  print("\nfwd+bwd of one mixer layer, median ms, ratio to the raster layer, the floor "
        "(1 + extra attention time / raster layer time), compiled temp+output\n"
        + harness.markdown_table(header, rows))
  if checks:
    print(f"\ntarget: snake layer / raster layer <= {TARGET}x\n" + harness.markdown_table(
        ["variant", "order", "L", "attention share of the raster layer", "floor", "ratio", ""],
        [[c["variant"], c["scan_order"], c["length"],
          "–" if c["attention_share"] is None else f"{c['attention_share']:.0%}",
          "–" if c["floor"] is None else f"{c['floor']:.2f}x", f"{c['ratio']:.2f}x",
          "met" if c["met"] else "missed"] for c in checks]))
  harness.write_json(name, records, out_dir, extra={"targets": checks})


if __name__ == "__main__":
  main()
