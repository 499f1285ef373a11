"""The paper's inference trade-off (LION Sec. 4.3, Fig. 3): time and memory vs L for every form.

  .venv/bin/python bench/inference.py            # L ∈ {256, 1K, 4K, 16K}
  .venv/bin/python bench/inference.py --quick    # L ∈ {256, 1K}

One model, one set of weights: an `LraClassifier` in eval mode (LION-D as in Fig. 3: a learnt
scalar decay per head; `--decay selective --decay-shape vector` gives the LRA LION-S), d_model
128, 4 heads, 2 layers, batch 2, token inputs. Each form ("attention", "rnn", "scan", "chunk" at
several chunk sizes, "chunk_scan") runs the same weights; its encoder features and logits are
checked equal to chunk_scan's (max |difference| / max |reference| ≤ 1e-4, also recorded). Memory
is XLA's compiled temp + output bytes (what the forward pass allocates beyond weights/inputs).

Writes inference.json and inference.png (time and memory vs L, as in Fig. 3) to bench/results/
(git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from lion_jax import LraClassifier, ModelConfig  # noqa: E402
from lion_jax.nn.models import token_mask  # noqa: E402

TOLERANCE = 1e-4


def variants(args):
  """(label, form, chunk_size) in plotting order."""
  out = [("attention", "attention", args.chunk), ("rnn", "rnn", args.chunk),
         ("scan", "scan", args.chunk)]
  out += [(f"chunk C={c}", "chunk", c) for c in args.chunk_sizes]
  out += [(f"chunk_scan C={c}", "chunk_scan", c) for c in args.scan_chunk_sizes]
  return out


def make_model(args):
  config = ModelConfig(d_model=args.d_model, num_layers=args.layers, num_heads=args.heads,
                       decay=args.decay, decay_shape=args.decay_shape, chunk_size=args.chunk)
  model = LraClassifier(config, num_classes=10, vocab_size=20, rngs=nnx.Rngs(0))
  model.eval()
  return model


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p, case_budget_s=45.0)
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--d-model", type=int, default=128)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--layers", type=int, default=2)
  p.add_argument("--decay", default="fixed", help="lit | fixed (LION-D, Fig. 3) | selective")
  p.add_argument("--decay-shape", default="scalar")
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--chunk-sizes", default="64,256", help="for the paper's 'chunk' form")
  p.add_argument("--scan-chunk-sizes", default="64", help="for 'chunk_scan'")
  args = p.parse_args(argv)
  args.chunk_sizes = [int(c) for c in args.chunk_sizes.split(",") if c]
  args.scan_chunk_sizes = [int(c) for c in args.scan_chunk_sizes.split(",") if c]
  lengths = harness.lengths_from_args(args, quick=[256, 1024], full=[256, 1024, 4096, 16384])
  out_dir, name = harness.output_path(args, "inference")

  model = make_model(args)
  graphdef, state = nnx.split(model)
  forms = variants(args)
  reference_label = f"chunk_scan C={args.scan_chunk_sizes[0]}"
  records = []
  for length in lengths:
    print(f"L = {length}", flush=True)
    rng = np.random.default_rng(length)
    tokens = jnp.asarray(rng.integers(1, 20, (args.batch, length)), jnp.int32)
    lengths_ = jnp.asarray([length, max(1, (3 * length) // 4)], jnp.int32)[:args.batch]

    cases = []
    for label, form, chunk in forms:
      def infer(state, tokens, lens, form=form, chunk=chunk):
        m = nnx.merge(graphdef, state)
        mask = token_mask(lens, tokens.shape[-1])
        features = m.encoder(tokens, mask, form=form, chunk_size=chunk)
        return features, m(tokens, lens, form=form, chunk_size=chunk)
      cases.append(harness.Case(f"L={length} {label}", infer, (state, tokens, lengths_),
                                info=dict(length=length, label=label, form=form, chunk_size=chunk,
                                          batch=args.batch, d_model=args.d_model,
                                          layers=args.layers, decay=args.decay,
                                          decay_shape=args.decay_shape)))
    runnable = harness.compile_within_budget(cases, args.mem_budget_gb)
    # Equality first (one call each), against chunk_scan.
    outputs = {c.info["label"]: jax.device_get(c.compiled(*c.args)) for c in runnable}
    ref = outputs.get(reference_label)
    for case in runnable:
      if ref is None:
        break
      feats, logits = outputs[case.info["label"]]
      err_f = float(np.max(np.abs(feats - ref[0])) / max(np.max(np.abs(ref[0])), 1e-30))
      err_l = float(np.max(np.abs(logits - ref[1])) / max(np.max(np.abs(ref[1])), 1e-30))
      case.result.update(max_rel_diff_features=err_f, max_rel_diff_logits=err_l,
                         equal=bool(max(err_f, err_l) <= TOLERANCE))
      if max(err_f, err_l) > TOLERANCE:
        print(f"  WARNING {case.name}: differs from {reference_label} by {max(err_f, err_l):.2e}")
    del outputs
    harness.time_cases(runnable, repeats=args.repeats, budget_s=args.case_budget_s)
    for case in cases:
      case.compiled = None
    records += [harness.record(c) for c in cases]
    gc.collect()

  rows = []
  for label, _, _ in forms:
    cells, mems, eq = [], [], []
    for length in lengths:
      r = next((r for r in records if r["length"] == length and r["label"] == label), None)
      cells.append(harness.fmt_ms(r.get("median_s")) if r and "median_s" in r else "skip")
      mems.append(harness.fmt_bytes(r.get("temp_plus_output_bytes")) if r else "–")
      if r and "max_rel_diff_features" in r:
        eq.append(max(r["max_rel_diff_features"], r["max_rel_diff_logits"]))
    rows.append([label] + cells + mems + [f"{max(eq):.1e}" if eq else "–"])
  print(f"\nInference (forward, eval mode), {args.layers}-layer LION-{args.decay} model, "
        f"d_model {args.d_model}, batch {args.batch}: median ms; compiled temp+output\n")
  print(harness.markdown_table(["form"] + [f"L={l} ms" for l in lengths]
                               + [f"mem L={l}" for l in lengths] + ["max rel diff"], rows))
  harness.write_json(name, records, out_dir, extra={"tolerance": TOLERANCE,
                                                    "reference": reference_label})
  plot(records, lengths, [f[0] for f in forms], out_dir / f"{name}.png", args)


def plot(records, lengths, labels, path, args):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for label in labels:
    pts = [r for r in records if r["label"] == label and "median_s" in r]
    if not pts:
      continue
    xs = [r["length"] for r in pts]
    axes[0].plot(xs, [1e3 * r["median_s"] for r in pts], "o-", label=label)
    axes[1].plot(xs, [r["temp_plus_output_bytes"] / harness.MB for r in pts], "o-", label=label)
  harness.style_log_axes(axes, ("inference time, median (ms)", "compiled temp+output (MB)"))
  fig.suptitle(f"Inference trade-off (cf. LION Fig. 3): LION-{args.decay}, {args.layers} layers, "
               f"d_model {args.d_model}, batch {args.batch}, {harness.device_label()}")
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  print(f"wrote {path}")


if __name__ == "__main__":
  main()
