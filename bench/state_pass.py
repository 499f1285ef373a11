"""chunk_scan's two state passes side by side in one process: the N-step `lax.scan` against the
log-depth `lax.associative_scan` (`lion_attention(state_pass=...)`).

  .venv/bin/python bench/state_pass.py                 # L = 1K, 4K; vector decays; ~2 min on 2 cores
  .venv/bin/python bench/state_pass.py --quick         # L = 256

Shapes as `bench/forms.py`: B=2, H=4, K=V=32 (d_model 128), float32, normalize="after",
selective decays λ ∈ [0.9, 0.999], forward + backward (`jax.grad` w.r.t. q, k, v and the
decays). Cases are timed interleaved; the table gives each pass's median and the ratio
associative / scan (> 1: the associative pass is slower). Writes state_pass.json like the other
benchmarks (`--out`, `--publish`).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import forms  # noqa: E402
import harness  # noqa: E402

STATE_PASSES = ("scan", "associative")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p)
  p.add_argument("--decays", default="vector", help="comma list of scalar, vector")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--dim", type=int, default=32)
  p.add_argument("--chunk", type=int, default=64)
  args = p.parse_args(argv)
  lengths = harness.lengths_from_args(args, quick=[256], full=[1024, 4096])
  out_dir, name = harness.output_path(args, "state_pass")

  print(f"jax {jax.__version__} on {harness.environment()['cpu_model']} ({jax.default_backend()}), "
        f"B={args.batch} H={args.heads} K=V={args.dim}, C={args.chunk}, fwd+bwd")
  records, rows = [], []
  for decays in [d for d in args.decays.split(",") if d]:
    for length in lengths:
      inputs = forms.make_inputs(args.batch, length, args.heads, args.dim, decays)
      cases = [harness.Case(f"L={length} {decays} {state_pass}",
                            forms.grad_fn("chunk_scan", args.chunk, state_pass), inputs,
                            info=dict(length=length, decays=decays, state_pass=state_pass,
                                      chunk_size=args.chunk, pass_="fwd+bwd"))
               for state_pass in STATE_PASSES]
      harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
      records += [harness.record(c) for c in cases]
      scan, assoc = (c.result.get("median_s") for c in cases)
      rows.append([length, decays, harness.fmt_ms(scan), harness.fmt_ms(assoc),
                   f"{assoc / scan:.2f}" if scan and assoc else "-"])
  print("\n" + harness.markdown_table(["L", "decays", "scan", "associative", "assoc / scan"],
                                      rows))
  harness.write_json(name, records, out_dir)


if __name__ == "__main__":
  main()
