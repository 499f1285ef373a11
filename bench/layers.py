"""One sequence-mixing layer vs L: LION-LIT/D/S (chunk_scan), softmax attention, S5-style.

  .venv/bin/python bench/layers.py            # L ∈ {1K, 4K, 16K}
  .venv/bin/python bench/layers.py --quick    # L = 1K
  .venv/bin/python bench/layers.py --fallback --lengths 4k   # vector-decay branches of chunk_scan
  .venv/bin/python bench/layers.py --preset listops          # LION against S5 at a task's presets
  .venv/bin/python bench/layers.py --trained --chunk 32      # a trained LION-S's decays, per layer

Every layer maps [B, L, d_model] -> [B, L, d_model] with its projections (q/k/v/o, or S5's
B/C/D): `lion_jax.LionMixer` at d_model 128 with 4 heads (d_head 32) in form chunk_scan (C=64);
`lion_jax.nn.softmax.SoftmaxMixer` (flax `nnx.dot_product_attention`) with the same d_model and
heads; `lion_jax.nn.s5.S5Mixer` with d_model 128 and P = 256 (J = 16, 128 complex states after
conjugate symmetry: S5's Path-X/AAN configuration), with S5's associative scan and with a linear
`lax.scan`. "fwd+bwd" is the gradient of a scalar loss w.r.t. all parameters and the input.
All cases of one L are timed interleaved in one process; ratios are what to read.

`--fallback` times only the LION-S vector layer, once per way `chunk_scan`'s vector-decay kernel
can go: HiPPO-initialised decays (log λ ∈ [−0.05, −0.0005]: the factored kernel, no chunk
steep), randomly initialised ones (λ = σ(N(0, 1)), the "w/o HiPPO" init), and the random decays forced into the exact masks (every chunk counted steep).
Prints each case's branch and its time relative to the HiPPO case. Decays as training makes
them: `bench/trained_decays.py --time`.

`--preset TASK` sizes every layer as configs/<TASK>.py trains it: LION at `:lion_s`'s d_model,
heads and chunk, S5 at `:s5`'s d_model, P and J (the release script's), and drops the softmax
layer. It adds XLA's FLOP and byte counts of each fwd+bwd, so that a time ratio can be read
against the work ratio: S5's ListOps layer (P = 16) does a small fraction of LION's FLOPs. It
also times "LION projections only", the five d×d matmuls of a LION-S vector layer without
the attention between them: no LION layer of that width can be faster.

Writes layers.json and layers.png to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import trained_decays  # noqa: E402
from lion_jax import LionMixer, ModelConfig  # noqa: E402
from lion_jax.ops import chunkwise  # noqa: E402
from lion_jax.nn.s5 import S5Mixer  # noqa: E402
from lion_jax.nn.softmax import SoftmaxMixer  # noqa: E402


def lion_config(variant, d_model, heads, chunk, decay_shape, residuals="auto"):
  decay = {"LION-LIT": "lit", "LION-D": "fixed", "LION-S": "selective"}[variant]
  return ModelConfig(d_model=d_model, num_heads=heads, decay=decay, decay_shape=decay_shape,
                     form="chunk_scan", chunk_size=chunk, residuals=residuals)


def apply_preset(args):
  """Sets the layer sizes of `--preset TASK` from configs/<TASK>.py (`:lion_s` and `:s5`)."""
  module = importlib.import_module(f"configs.{args.preset}")
  lion, s5 = (module.get_config(variant).model for variant in ("lion_s", "s5"))
  if lion.d_model != s5.d_model:
    raise ValueError(f"--preset {args.preset}: LION's d_model {lion.d_model} differs from "
                     f"S5's {s5.d_model}; time them with explicit --d-model instead")
  args.d_model, args.heads, args.chunk = lion.d_model, lion.num_heads, lion.chunk_size
  args.ssm_size, args.ssm_blocks = s5.ssm_size, s5.ssm_blocks
  args.with_softmax = False


class ProjectionsOnly(nnx.Module):
  """A LION-S vector layer's dense maps alone (W_q, W_k, W_v, the gate and W_o: five d×d
  matmuls per token), with no attention between them: the floor under any LION layer this wide."""

  def __init__(self, d_model, *, rngs):
    linear = lambda bias: nnx.Linear(d_model, d_model, use_bias=bias, rngs=rngs)
    self.q, self.k, self.v, self.gate, self.out = (linear(False), linear(False), linear(False),
                                                   linear(True), linear(True))

  def __call__(self, x):
    return self.out(self.q(x) * self.k(x) + self.v(x) * jax.nn.sigmoid(self.gate(x)))


def make_layers(args):
  """name -> (module factory, info)."""
  layers = {}
  all_residuals = [r for r in args.residuals.split(",") if r]
  for variant in ("LION-LIT", "LION-D", "LION-S"):
    shapes = ("scalar",) if variant == "LION-LIT" else tuple(args.lion_decays.split(","))
    for shape in shapes:
      for residuals in all_residuals:
        name = (variant if shape == "scalar" else f"{variant} vector") + (
            f", {residuals}" if len(all_residuals) > 1 else "")
        cfg = lion_config(variant, args.d_model, args.heads, args.chunk, shape, residuals)
        layers[name] = (lambda cfg=cfg: LionMixer(cfg, rngs=nnx.Rngs(0)),
                        dict(family="lion", variant=variant, decay_shape=shape,
                             form="chunk_scan", chunk_size=args.chunk, residuals=residuals))
  if args.preset:
    layers["LION projections only"] = (lambda: ProjectionsOnly(args.d_model, rngs=nnx.Rngs(0)),
                                       dict(family="floor"))
  if args.with_softmax:
    softmax = ModelConfig(mixer="softmax", d_model=args.d_model, num_heads=args.heads)
    layers["softmax"] = (lambda: SoftmaxMixer(softmax, rngs=nnx.Rngs(0)), dict(family="softmax"))
  for method in args.s5_methods.split(","):
    layers[f"S5 {method}"] = (
        lambda method=method: S5Mixer(
            ModelConfig(mixer="s5", d_model=args.d_model, ssm_size=args.ssm_size,
                        ssm_blocks=args.ssm_blocks, ssm_scan=method), rngs=nnx.Rngs(0)),
        dict(family="s5", method=method, ssm_size=args.ssm_size))
  return layers


def make_fallback_layers(args):
  """name -> (module factory, info, forced branch or None): the LION-S vector layer per branch."""
  layers = {}
  for name, init, bias, forced in (
      ("LION-S vector, HiPPO init", "hippo", None, None),
      ("LION-S vector, random init", "random", None, None),
      ("LION-S vector, random init, exact masks", "random", None, "exact")):
    cfg = dataclasses.replace(lion_config("LION-S", args.d_model, args.heads, args.chunk, "vector"),
                              decay_init=init, selective_bias_init=bias)
    layers[name] = (lambda cfg=cfg: LionMixer(cfg, rngs=nnx.Rngs(0)),
                    dict(family="lion", variant="LION-S", decay_shape="vector", form="chunk_scan",
                         chunk_size=args.chunk, decay_init=init, selective_bias_init=bias,
                         forced_branch=forced))
  return layers


def forcing_exact_masks(fn):
  """`fn`, traced with every chunk counted steep, so that the whole call takes the exact masks
  at run time (the factored kernel still runs beside them, as in any call that falls back)."""
  def traced(*operands):
    real = chunkwise.steep_chunks
    chunkwise.steep_chunks = lambda *args: jnp.ones_like(real(*args))
    try:
      return fn(*operands)
    finally:
      chunkwise.steep_chunks = real
  return traced


def branch_taken(factory, x, chunk):
  """The vector-decay branch a layer's decays take at input x, as a name."""
  mixer = factory()
  log_decay, = mixer.scan_log_decays(x)  # [B, L, H, G]
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  padded = jnp.pad(jnp.maximum(log_decay, -0.5 * limit),
                   [(0, 0), (0, -log_decay.shape[1] % chunk), (0, 0), (0, 0)])
  # The code convention's forward gate is log λ shifted by one: the same per-chunk sums but for
  # the chunk edges, so log λ's sums decide the branch here.
  steep = chunkwise.steep_chunks(padded, padded, chunk, limit)
  count, capacity = int(steep.sum()), chunkwise.steep_chunk_capacity(steep.size)
  if count > capacity:
    return f"exact masks ({count} of {steep.size} chunks steep)"
  return f"factored C={chunk}, {count} of {steep.size} chunks recomputed"


def build_cases(length, layers, passes, args):
  key = jax.random.split(jax.random.PRNGKey(length), 2)
  x = jax.random.normal(key[0], (args.batch, length, args.d_model))
  cotangent = jax.random.normal(key[1], x.shape)
  cases = []
  for name, (factory, info) in layers.items():
    if args.fallback:
      info = dict(info, branch=(branch_taken(factory, x, args.chunk)
                                if info["forced_branch"] is None else "exact masks"))
    graphdef, params = nnx.split(factory())

    def forward(params, x, cotangent, graphdef=graphdef):
      del cotangent
      return nnx.merge(graphdef, params)(x)

    def loss(params, x, cotangent, graphdef=graphdef):
      return jnp.sum(nnx.merge(graphdef, params)(x) * cotangent)

    for kind in passes:
      fn = jax.grad(loss, argnums=(0, 1)) if kind == "fwd+bwd" else forward
      if info.get("forced_branch") == "exact":
        fn = forcing_exact_masks(fn)
      cases.append(harness.Case(
          f"L={length} {name} {kind}", fn, (params, x, cotangent),
          info=dict(length=length, layer=name, pass_=kind, batch=args.batch, d_model=args.d_model,
                    heads=args.heads, **info)))
  return cases


def plot(records, lengths, names, path, d_model):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for name in names:
    pts = [(l, r) for l in lengths
           if (r := harness.find(records, length=l, layer=name, pass_="fwd+bwd"))
           and "median_s" in r]
    if not pts:
      continue
    style = "o-" if name.startswith("LION") else "s--"
    axes[0].plot([l for l, _ in pts], [1e3 * r["median_s"] for _, r in pts], style, label=name)
    axes[1].plot([l for l, _ in pts], [r["temp_plus_output_bytes"] / harness.MB for _, r in pts],
                 style, label=name)
  harness.style_log_axes(axes, ("fwd+bwd median (ms)", "compiled temp+output (MB)"))
  fig.suptitle(f"one mixing layer, d_model {d_model}, B=2, f32, {harness.device_label()}")
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  print(f"wrote {path}")


def report_fallback(records, lengths, passes, layers, name, out_dir):
  """Each branch's time relative to the factored path (the HiPPO-initialised layer)."""
  rows = []
  factored = next(iter(layers))
  for kind in passes:
    for length in lengths:
      base = harness.find(records, length=length, layer=factored, pass_=kind)
      for layer in layers:
        r = harness.find(records, length=length, layer=layer, pass_=kind)
        if not (r and base and "median_s" in r and "median_s" in base):
          continue
        rows.append([kind, length, layer, r["branch"], harness.fmt_ms(r["median_s"]),
                     f"{r['median_s'] / base['median_s']:.2f}x",
                     f"{r['min_s'] / base['min_s']:.2f}x",
                     harness.fmt_bytes(r.get("temp_plus_output_bytes"))])
  print("\nvector-decay branches against the factored path\n" + harness.markdown_table(
      ["pass", "L", "layer", "branch", "median ms", "ratio (median)", "ratio (min)", "memory"],
      rows))
  harness.write_json(name, records, out_dir)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p)
  p.add_argument("--passes", default="fwd+bwd,fwd")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--lion-decays", default="scalar,vector",
                 help="decay shapes for LION-D/S (LIT has none)")
  p.add_argument("--residuals", default="auto",
                 help="comma list of ModelConfig.residuals values, each LION layer once per "
                      "value: stored,recomputed compares the two chunk_scan kernels")
  p.add_argument("--ssm-size", type=int, default=256)
  p.add_argument("--ssm-blocks", type=int, default=16)
  p.add_argument("--s5-methods", default="associative,linear")
  p.add_argument("--preset", choices=("listops", "text", "retrieval", "image", "pathfinder",
                                       "pathx"),
                 help="size LION and S5 as configs/<task>.py's lion_s and s5 presets")
  p.add_argument("--fallback", action="store_true",
                 help="only the LION-S vector layer, once per vector-decay branch of chunk_scan")
  p.add_argument("--trained", nargs="?", const=str(trained_decays.FIXTURE), default="",
                 help="time the chunk kernel of each layer of a trained LION-S state against "
                      "its initial one, on the operands it gets from a real batch: a run folder "
                      "or fixture (default: the committed cpu_long fixture), at --chunk")
  args = p.parse_args(argv)
  if args.trained:
    run = trained_decays.Run(pathlib.Path(args.trained), 1)
    out_dir, name = harness.output_path(args, "layers_trained")
    records = trained_decays.time_steps(run, run.steps()[:1] + run.steps()[-1:], [args.chunk],
                                        args.repeats, kinds=("kernel",))
    trained_decays.print_ratios(records, 0)
    harness.write_json(name, records, out_dir, extra={"source": args.trained})
    return
  args.with_softmax = True
  if args.preset:
    for name in ("d_model", "heads", "chunk", "ssm_size", "ssm_blocks"):
      if getattr(args, name) != p.get_default(name):
        p.error(f"--preset {args.preset} sets --{name.replace('_', '-')} from configs/"
                f"{args.preset}.py; leave --{name.replace('_', '-')} out, or drop --preset")
    apply_preset(args)
  lengths = harness.lengths_from_args(args, quick=[1024], full=[1024, 4096, 16384])
  passes = [x for x in args.passes.split(",") if x]
  if args.quick and args.passes == "fwd+bwd,fwd":
    passes = ["fwd+bwd"]
  out_dir, name = harness.output_path(
      args, "layers_fallback" if args.fallback else f"layers_{args.preset}" if args.preset else "layers")
  layers = make_fallback_layers(args) if args.fallback else make_layers(args)

  records = []
  for length in lengths:
    print(f"L = {length}", flush=True)
    cases = build_cases(length, layers, passes, args)
    harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
    records += [harness.record(c) for c in cases]

  tables = []
  for kind in passes:
    rows = []
    for layer in layers:
      cells, mems = [], []
      for length in lengths:
        r = harness.find(records, length=length, layer=layer, pass_=kind)
        cells.append(harness.fmt_ms(r.get("median_s")) if r and "median_s" in r else "skip")
        mems.append(harness.fmt_bytes(r.get("temp_plus_output_bytes")) if r else "–")
      rows.append([layer] + cells + mems)
    tables.append(f"### {kind} (median ms; compiled temp+output)\n\n" + harness.markdown_table(
        ["layer"] + [f"L={l} ms" for l in lengths] + [f"mem L={l}" for l in lengths], rows))
  print("\n" + "\n\n".join(tables))
  if args.fallback:
    report_fallback(records, lengths, passes, layers, name, out_dir)
    return

  # Ratios: other / LION (>1 means LION is faster), fwd+bwd.
  ratio_rows, checks = [], []
  lions = [n for n in layers if layers[n][1]["family"] == "lion"]
  peers = [n for n in layers if layers[n][1]["family"] in ("softmax", "s5")]
  for lion in lions:
    for peer in peers:
      cells = []
      for length in lengths:
        a = harness.find(records, length=length, layer=lion, pass_="fwd+bwd")
        b = harness.find(records, length=length, layer=peer, pass_="fwd+bwd")
        if a and b and "median_s" in a and "median_s" in b:
          ratio = b["median_s"] / a["median_s"]
          cells.append(f"{ratio:.1f}x")
          if length == 4096:
            goal = 10.0 if peer == "softmax" else 1.0
            checks.append(dict(lion=lion, peer=peer, length=length, ratio=ratio,
                               ratio_min=b["min_s"] / a["min_s"], goal=goal, met=ratio >= goal))
        else:
          cells.append("–")
      ratio_rows.append([f"{peer} / {lion}"] + cells)
  print("\nfwd+bwd time ratio (>1: LION faster)\n" + harness.markdown_table(
      ["ratio"] + [f"L={l}" for l in lengths], ratio_rows))
  work_rows = []
  for layer in layers:
    for length in lengths:
      r = harness.find(records, length=length, layer=layer, pass_="fwd+bwd")
      if r and r.get("xla_flops") and "median_s" in r:
        work_rows.append([layer, length, f"{r['xla_flops'] / 1e9:.2f}",
                          harness.fmt_bytes(r.get("xla_bytes_accessed")),
                          f"{r['xla_flops'] / r['median_s'] / 1e9:.1f}",
                          harness.fmt_ms(r["median_s"])])
  print(f"\nfwd+bwd work per layer (XLA cost analysis), d_model {args.d_model}, "
        f"{args.heads} heads, C = {args.chunk}, S5 P = {args.ssm_size} J = {args.ssm_blocks}\n"
        + harness.markdown_table(["layer", "L", "GFLOP", "bytes accessed", "GFLOP/s", "ms"],
                                 work_rows))
  if checks:
    print("\ntargets at L=4096 (chunk_scan ≥10x faster than softmax, ≥1x vs S5)\n"
          + harness.markdown_table(
              ["LION", "peer", "ratio (median)", "ratio (min)", "goal", ""],
              [[c["lion"], c["peer"], f"{c['ratio']:.1f}x", f"{c['ratio_min']:.1f}x",
                f">= {c['goal']:.0f}x", "met" if c["met"] else "MISSED"] for c in checks]))
  harness.write_json(name, records, out_dir, extra={"targets": checks})
  plot(records, lengths, list(layers), out_dir / f"{name}.png", args.d_model)


if __name__ == "__main__":
  main()
