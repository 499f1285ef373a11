"""Time and memory of every `lion_attention` form, side by side in one process.

  .venv/bin/python bench/forms.py            # L ∈ {256, 1K, 4K, 16K}, ~15–25 min on 2 cores
  .venv/bin/python bench/forms.py --quick    # L = 1K, a minute or two

Shapes: B=2, H=4, K=V=32 (d_model 128), float32, normalize="after" (LION), selective decays
λ ∈ [0.9, 0.999]: scalar per head [B, L, H] (LION-S, the headline) and per value channel
[B, L, H, V] (the LRA setting). "fwd+bwd" is `jax.grad` of a scalar loss w.r.t. q, k, v and the
decays. Memory is XLA's `memory_analysis()` temp + output bytes of the compiled function; a form
whose compiled memory exceeds `--mem-budget-gb` is compiled but not run ("would not fit").

Prints markdown tables and the speed/memory targets; writes forms.json and forms.png to
bench/results/ (git-ignored; `--publish` writes docs/bench/, `--out DIR` anywhere).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from lion_jax import lion_attention  # noqa: E402

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")


def make_inputs(batch, length, heads, dim, decay_kind, seed=0):
  """Non-negative q, k (elu+1 feature map), normal v, log λ uniform in [log .9, log .999]."""
  keys = jax.random.split(jax.random.PRNGKey(seed), 5)
  shape = (batch, length, heads, dim)
  q = jax.nn.elu(jax.random.normal(keys[0], shape)) + 1.0
  k = jax.nn.elu(jax.random.normal(keys[1], shape)) + 1.0
  v = jax.random.normal(keys[2], shape)
  decay_shape = (batch, length, heads) if decay_kind == "scalar" else shape
  log_decay = jax.random.uniform(keys[3], decay_shape, minval=np.log(0.9), maxval=np.log(0.999))
  cotangent = jax.random.normal(keys[4], shape)
  return q, k, v, log_decay, cotangent


def forward_fn(form, chunk_size, state_pass="auto"):
  def fn(q, k, v, log_decay, cotangent):
    del cotangent
    return lion_attention(q, k, v, log_decay, form=form, chunk_size=chunk_size,
                          state_pass=state_pass)
  return fn


def grad_fn(form, chunk_size, state_pass="auto"):
  def loss(q, k, v, log_decay, cotangent):
    out = lion_attention(q, k, v, log_decay, form=form, chunk_size=chunk_size,
                         state_pass=state_pass)
    return jnp.sum(out * cotangent)
  return jax.grad(loss, argnums=(0, 1, 2, 3))


def analytic_flops(form, batch, length, heads, dim, groups, chunk_size, backward):
  """Matmul-type FLOPs (multiply-add = 2) of one call; elementwise mask work not counted.

  rnn and scan: two causal passes over E = V + G carried channels (values + normalisers).
  attention and chunk contract L×L (or chunk×L) scores once. chunk_scan: one C×C block per
  chunk (scores once, both triangles) plus two state updates and two read-outs per token
  (vector decays: the sub-chunked block is counted as if exact).
  """
  key_dim, carried = dim, dim + groups
  tokens = batch * heads * length
  if form in ("attention", "chunk"):
    # scores 2·L·K, weighted values 2·L·V, row sums L·G, mask ⊙ scores L·G per query
    per_token = length * (2 * key_dim + 2 * dim + 2 * groups)
  elif form == "chunk_scan":
    c = min(chunk_size, length)
    per_token = 2 * c * key_dim + 2 * c * carried + 8 * key_dim * carried
  elif form == "rnn":
    per_token = 2 * (5 * key_dim * carried)  # decay, outer product, add, read-out (paper: 5D²)
  elif form == "scan":
    # outer products, ~2 combines per element (decay-multiply + add), read-out, per direction
    per_token = 2 * (key_dim * carried + 2 * 2 * key_dim * carried + 2 * key_dim * carried)
  else:
    raise ValueError(form)
  fwd = float(tokens) * per_token
  return 3.0 * fwd if backward else fwd


def build_cases(length, decay_kinds, forms, passes, args, chunk_sizes=None):
  cases = []
  for decay_kind in decay_kinds:
    inputs = make_inputs(args.batch, length, args.heads, args.dim, decay_kind)
    groups = 1 if decay_kind == "scalar" else args.dim
    for form in forms:
      for chunk_size in (chunk_sizes if form == "chunk_scan" and chunk_sizes else [args.chunk]):
        if form == "chunk" and length > args.max_paper_chunk_len:
          continue  # O(L²) work; minutes per call at 16K
        for kind in passes:
          backward = kind == "fwd+bwd"
          fn = grad_fn(form, chunk_size) if backward else forward_fn(form, chunk_size)
          label = form if chunk_size == args.chunk else f"{form} C={chunk_size}"
          cases.append(harness.Case(
              name=f"L={length} {decay_kind} {label} {kind}", fn=fn, args=inputs,
              analytic_flops=analytic_flops(form, args.batch, length, args.heads, args.dim,
                                            groups, chunk_size, backward),
              info=dict(length=length, decays=decay_kind, form=form, chunk_size=chunk_size,
                        pass_=kind, batch=args.batch, heads=args.heads, dim=args.dim)))
  return cases


def tables(records, lengths, decay_kinds, chunk):
  out = []
  for decay_kind in decay_kinds:
    for kind in ("fwd+bwd", "fwd"):
      header = ["form"] + [f"L={l} ms" for l in lengths] + [f"mem L={l}" for l in lengths]
      rows = []
      for form in FORMS:
        cells, mems, any_ = [], [], False
        for length in lengths:
          r = harness.find(records, length=length, decays=decay_kind, form=form, pass_=kind,
                   chunk_size=chunk)
          if r is None:
            cells.append("–")
            mems.append("–")
            continue
          any_ = True
          if "median_s" in r:
            cells.append(harness.fmt_ms(r["median_s"]))
          else:
            cells.append("skip")
          mems.append(harness.fmt_bytes(r.get("temp_plus_output_bytes")))
        if any_:
          rows.append([form] + cells + mems)
      if rows:
        out.append(f"### {kind}, {decay_kind} selective decays (median ms; compiled temp+output)\n\n"
                   + harness.markdown_table(header, rows))
  return "\n\n".join(out)


def targets(records, chunk):
  """The targets (chunk_scan ≥ 30x attention and ≥ 5x rnn at 4K, memory growth ≤ 4.5x from 4K
  to 16K), on scalar selective decays (the headline) and vector ones."""
  lines, checks = [], []
  for decay_kind in ("scalar", "vector"):
    def t(form, length, kind="fwd+bwd", c=chunk):
      r = harness.find(records, length=length, decays=decay_kind, form=form, pass_=kind,
                       chunk_size=c)
      return None if r is None else r.get("median_s")

    def m(form, length, kind="fwd+bwd"):
      r = harness.find(records, length=length, decays=decay_kind, form=form, pass_=kind,
                       chunk_size=chunk)
      return None if r is None else r.get("temp_plus_output_bytes")

    cs, att, rnn = t("chunk_scan", 4096), t("attention", 4096), t("rnn", 4096)
    if cs and att:
      checks.append((decay_kind, "L=4K chunk_scan vs attention (fwd+bwd)", att / cs, ">= 30x",
                     att / cs >= 30))
    if cs and rnn:
      checks.append((decay_kind, "L=4K chunk_scan vs rnn (fwd+bwd)", rnn / cs, ">= 5x",
                     rnn / cs >= 5))
    m4, m16 = m("chunk_scan", 4096), m("chunk_scan", 16384)
    if m4 and m16:
      checks.append((decay_kind, "chunk_scan temp+output growth 4K->16K", m16 / m4, "<= 4.5x",
                     m16 / m4 <= 4.5))
  for decay_kind, what, value, goal, ok in checks:
    lines.append(f"| {decay_kind} | {what} | {value:.1f}x | {goal} | {'met' if ok else 'MISSED'} |")
  if not lines:
    return "", []
  head = "| decays | target | measured | goal | |\n|---|---|---|---|---|"
  return head + "\n" + "\n".join(lines), checks


def ratio_table(records, lengths, decay_kinds, chunk):
  rows = []
  for decay_kind in decay_kinds:
    for form in ("attention", "rnn", "scan", "chunk"):
      cells = []
      for length in lengths:
        base = harness.find(records, length=length, decays=decay_kind, form="chunk_scan",
                            pass_="fwd+bwd", chunk_size=chunk)
        other = harness.find(records, length=length, decays=decay_kind, form=form,
                             pass_="fwd+bwd", chunk_size=chunk)
        if base and other and "median_s" in base and "median_s" in other:
          cells.append(f"{other['median_s'] / base['median_s']:.1f}x")
        else:
          cells.append("–")
      rows.append([decay_kind, f"{form} / chunk_scan"] + cells)
  return harness.markdown_table(["decays", "time ratio (fwd+bwd)"] + [f"L={l}" for l in lengths],
                                rows)


def plot(records, lengths, decay_kinds, chunk, path):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(len(decay_kinds), 2, figsize=(10, 3.6 * len(decay_kinds)), squeeze=False)
  for row, decay_kind in enumerate(decay_kinds):
    for form in FORMS:
      pts = [(l, r) for l in lengths
             if (r := harness.find(records, length=l, decays=decay_kind, form=form, pass_="fwd+bwd",
                           chunk_size=chunk)) and "median_s" in r]
      if not pts:
        continue
      xs = [l for l, _ in pts]
      axes[row, 0].plot(xs, [1e3 * r["median_s"] for _, r in pts], "o-", label=form)
      axes[row, 1].plot(xs, [r["temp_plus_output_bytes"] / harness.MB for _, r in pts], "o-",
                        label=form)
    harness.style_log_axes(axes[row], ("fwd+bwd median (ms)", "compiled temp+output (MB)"),
                           legend_size=8)
    for ax in axes[row]:
      ax.set_title(f"{decay_kind} selective decays")
  fig.suptitle(f"lion_attention forms, B=2 H=4 K=V=32, f32, {harness.device_label()}")
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  print(f"wrote {path}")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p)
  p.add_argument("--decays", default="scalar,vector")
  p.add_argument("--forms", default=",".join(FORMS))
  p.add_argument("--passes", default="fwd+bwd,fwd")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--dim", type=int, default=32)
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--chunk-sweep", default=None,
                 help="extra chunk_scan chunk sizes at L=4K (default 32,64,128 unless --quick)")
  p.add_argument("--max-paper-chunk-len", type=int, default=4096,
                 help="skip the O(L²) paper-style 'chunk' form above this L")
  args = p.parse_args(argv)

  lengths = harness.lengths_from_args(args, quick=[1024], full=[256, 1024, 4096, 16384])
  decay_kinds = [d for d in args.decays.split(",") if d]
  forms = [f for f in args.forms.split(",") if f]
  passes = [x for x in args.passes.split(",") if x]
  if args.quick and args.passes == "fwd+bwd,fwd":
    passes = ["fwd+bwd"]
  sweep = ([int(c) for c in args.chunk_sweep.split(",")] if args.chunk_sweep else
           ([] if args.quick else [32, 64, 128]))
  out_dir, name = harness.output_path(args, "forms")

  print(f"jax {jax.__version__} on {harness.environment()['cpu_model']}, "
        f"B={args.batch} H={args.heads} K=V={args.dim}, C={args.chunk}")
  records = []
  for length in lengths:
    print(f"L = {length}", flush=True)
    cases = build_cases(length, decay_kinds, forms, passes, args,
                        chunk_sizes=sorted(set(sweep) | {args.chunk}) if length == 4096 and sweep
                        else None)
    harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
    records += [harness.record(c) for c in cases]

  peak = harness.matmul_peak()
  print(f"XLA f32 matmul peak: {peak['gflops_per_s_best']:.0f} GF/s (n={peak['n']})")
  text = tables(records, lengths, decay_kinds, args.chunk)
  print("\n" + text)
  print("\n" + ratio_table(records, lengths, decay_kinds, args.chunk))
  target_text, checks = targets(records, args.chunk)
  if target_text:
    print("\n" + target_text)
  if sweep:
    rows = []
    for decay_kind in decay_kinds:
      for c in sorted(set(sweep) | {args.chunk}):
        cells = []
        for kind in ("fwd", "fwd+bwd"):
          r = harness.find(records, length=4096, decays=decay_kind, form="chunk_scan", pass_=kind,
                   chunk_size=c)
          cells.append(harness.fmt_ms(r.get("median_s")) if r else "–")
        rows.append([decay_kind, c] + cells)
    print("\nchunk_scan chunk-size sweep at L=4K (median ms)\n"
          + harness.markdown_table(["decays", "C", "fwd", "fwd+bwd"], rows))
  flops_rows = []
  for r in records:
    if r.get("form") == "chunk_scan" and r.get("chunk_size") == args.chunk and "median_s" in r:
      flops_rows.append([r["length"], r["decays"], r["pass_"],
                         f"{r['analytic_flops'] / 1e9:.3f}",
                         f"{(r.get('xla_flops') or 0) / 1e9:.3f}",
                         f"{r['gflops_per_s_median']:.1f}", f"{r['gflops_per_s_best']:.1f}",
                         f"{100 * r['gflops_per_s_best'] / peak['gflops_per_s_best']:.0f}%"])
  print(f"\nchunk_scan FLOP/s (analytic matmul FLOPs; peak {peak['gflops_per_s_best']:.0f} GF/s)\n"
        + harness.markdown_table(["L", "decays", "pass", "GFLOP analytic", "GFLOP XLA",
                                  "GF/s median", "GF/s best", "best / peak"], flops_rows))
  harness.write_json(name, records, out_dir, extra={
      "matmul_peak": peak,
      "targets": [dict(decays=d, target=w, ratio=v, goal=g, met=ok) for d, w, v, g, ok in checks],
  })
  plot(records, lengths, decay_kinds, args.chunk, out_dir / f"{name}.png")


if __name__ == "__main__":
  main()
