"""chunk_scan's two state passes side by side in one process: the N-step `lax.scan` against the
log-depth `lax.associative_scan` (`lion_attention(state_pass=...)`).

  .venv/bin/python bench/probes/state_pass.py          # L = 1K, 4K; vector decays; ~2 min on 2 cores
  .venv/bin/python bench/probes/state_pass.py --quick  # L = 256

Shapes as `bench/forms.py`: B=2, H=4, K=V=32 (d_model 128), float32, normalize="after",
selective decays λ ∈ [0.9, 0.999], forward + backward (`jax.grad` w.r.t. q, k, v and the
decays). Cases are timed interleaved; the table gives each pass's median and the ratio
associative / scan (> 1: the associative pass is slower). Writes state_pass.json like the other
benchmarks (`--out`, `--publish`).

  .venv/bin/python bench/probes/state_pass.py --two-way --batch 8   # ListOps preset's training step

`--two-way` times the vector kernel's "scan" pass both ways it can run, interleaved: the loop
that reads and writes both directions where they lie (`chunkwise.TWO_WAY_PASSES["scan"]`, the
default), against the same N-step scan run once over both directions stacked on the batch axis,
the backward one flipped (`chunkwise._two_way_stacked`, the form the associative pass keeps).
It times LION-S's whole training step at a task preset (`--task`, `--preset`, `--batch`), on
packed rows of the generated lengths (`bench/packing.py`), with chunk_scan's residuals stored
and recomputed, and writes state_pass_two_way.json.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import pathlib
import sys

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import forms  # noqa: E402
import harness  # noqa: E402
import packing as packing_bench  # noqa: E402
import train_step  # noqa: E402
from lion_jax.ops import chunkwise  # noqa: E402

STATE_PASSES = ("scan", "associative")
# The two ways `--two-way` runs the "scan" pass for the vector kernel.
TWO_WAY_FORMS = {
    "loop": chunkwise.TWO_WAY_PASSES["scan"],
    "stacked": functools.partial(chunkwise._two_way_stacked, chunkwise.STATE_PASSES["scan"]),
}


@contextlib.contextmanager
def two_way_form(name: str):
  """Functions traced inside run the vector kernel's "scan" pass the way `name` says."""
  default = chunkwise.TWO_WAY_PASSES["scan"]
  chunkwise.TWO_WAY_PASSES["scan"] = TWO_WAY_FORMS[name]
  try:
    yield
  finally:
    chunkwise.TWO_WAY_PASSES["scan"] = default


def two_way_step_cases(args, split, residuals: str) -> list[harness.Case]:
  """LION-S's packed training step with `residuals`, once with each two-way form, compiled
  (each form traced inside its context) and ready to time."""
  cases = []
  for form in TWO_WAY_FORMS:
    _, case = packing_bench.cases_for(args.task, "lion_s", args.batch, args.preset, split,
                                      residuals)
    case.name = f"{args.task} lion_s {residuals} packed, {form}"
    case.info.update(two_way=form, state_pass="scan")
    with two_way_form(form):
      cases += harness.compile_within_budget([case], args.mem_budget_gb)
  return cases


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p)
  p.add_argument("--decays", default="vector", help="comma list of scalar, vector")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--heads", type=int, default=4)
  p.add_argument("--dim", type=int, default=32)
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--two-way", action="store_true",
                 help="time the scan pass's in-place loop against its stacked form in a "
                      "task's training step (module docstring)")
  p.add_argument("--task", default="listops", choices=packing_bench.STATED_LENGTHS,
                 help="with --two-way")
  p.add_argument("--preset", default="", help="with --two-way: the task's preset")
  args = p.parse_args(argv)
  if not args.two_way and (args.task != "listops" or args.preset):
    p.error("--task and --preset choose the training step that --two-way times; add --two-way")
  if args.two_way:
    if args.quick:
      args.preset = args.preset or "runlocal"
    if jax.default_backend() != "cpu":
      raise SystemExit("--two-way: the scan pass runs on the CPU; on a GPU or TPU "
                       "state_pass='auto' takes the associative pass")
    return two_way_main(args)
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


def two_way_main(args):
  out_dir, name = harness.output_path(args, "state_pass_two_way")
  print(f"jax {jax.__version__} on {harness.environment()['cpu_model']}: {args.task} "
        f"{args.preset or 'paper'} preset, LION-S packed, batch {args.batch}, fwd+bwd step")
  base, info, seq_len = train_step.task_config(
      args.task, "lion_s" + (f",{args.preset}" if args.preset else ""))
  split = packing_bench.split_of(
      packing_bench.sample_lengths(args.task, base, seq_len), info, seq_len)
  records = []
  # One pair at a time: with all four steps compiled at once, the first of them (the stored
  # step, 3.3 GB planned at batch 8) ran 1.7x slower in every round; in pairs, either order
  # gave the same ratio.
  for residuals in ("stored", "recomputed"):
    cases = two_way_step_cases(args, split, residuals)
    harness.time_cases(cases, repeats=args.repeats, budget_s=args.case_budget_s)
    records += [harness.record(c) for c in cases]
    del cases
    gc.collect()
  rows = []
  for stacked, loop in zip(records[1::2], records[0::2]):
    rows.append([loop["residuals"], harness.fmt_ms(loop.get("median_s")),
                 harness.fmt_ms(stacked.get("median_s")),
                 f"{stacked['median_s'] / loop['median_s']:.3f}"
                 if "median_s" in loop and "median_s" in stacked else "-",
                 harness.fmt_bytes(loop.get("temp_plus_output_bytes")),
                 harness.fmt_bytes(stacked.get("temp_plus_output_bytes"))])
  print("\n" + harness.markdown_table(
      ["residuals", "loop ms", "stacked ms", "stacked / loop", "loop temp+output",
       "stacked temp+output"], rows))
  harness.write_json(name, records, out_dir)


if __name__ == "__main__":
  main()
