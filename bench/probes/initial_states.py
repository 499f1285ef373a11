"""The recomputing kernel with the entering states read through the chunk kernel's own state
pass (`initial_states`, today's) against reading them with two products of their own, as before:
one training step compiled each way and timed interleaved in one process.

    python bench/probes/initial_states.py [--batch 8] [--layouts packed,padded] [--repeats 5]

The earlier form is rebuilt here by patching `recomputed._segment_output` while a step is
traced; both give the same values (tests/ops/test_state_pass.py, tests/ops/test_recomputed.py).
Writes initial_states.json to bench/results/ (`--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import harness  # noqa: E402
import packing as packing_bench  # noqa: E402
import train_step  # noqa: E402
from lion_jax.ops import chunkwise, recomputed  # noqa: E402


def _separate_products(options, seg, whole, key_mask, s, states):
  """`_segment_output` as it was: the kernel from zero states, then q_i·S per direction."""
  # pylint: disable=protected-access
  q, k, u, f, a = recomputed._gates(options, seg, whole, key_mask, s)
  from_left, from_right = states
  out, _ = chunkwise.bidirectional_chunk_scan(q, k, u, f, a, options.chunk,
                                              state_pass=options.state_pass,
                                              branch_axis=options.branch_axis)
  f_prefix, _ = recomputed._log_sums(f, options.chunk)
  _, a_after = recomputed._log_sums(a, options.chunk)
  out = (out + jnp.einsum("bshk,bhke->bshe", q, from_left) * jnp.exp(f_prefix)
         + jnp.einsum("bshk,bhke->bshe", q, from_right) * jnp.exp(a_after))
  return recomputed._normalised(options, whole, q, out, seg["v"].shape[-1])


@contextlib.contextmanager
def segment_output(form: str):
  saved = recomputed._segment_output  # pylint: disable=protected-access
  if form == "separate":
    recomputed._segment_output = _separate_products  # pylint: disable=protected-access
  try:
    yield
  finally:
    recomputed._segment_output = saved  # pylint: disable=protected-access


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--task", default="listops")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--preset", default="")
  p.add_argument("--layouts", default="packed,padded")
  harness.add_common_args(p, repeats=5, case_budget_s=60.0, mem_budget_gb=16.0)
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.batch, args.repeats = "runlocal", 4, 3
  layouts = [x for x in args.layouts.split(",") if x]
  if not layouts or set(layouts) - {"padded", "packed"}:
    raise SystemExit(f"--layouts {args.layouts}: give a comma list of padded, packed")
  out_dir, name = harness.output_path(args, "initial_states")
  base, info, seq_len = train_step.task_config(
      args.task, "lion_s" + (f",{args.preset}" if args.preset else ""))
  split = packing_bench.split_of(packing_bench.sample_lengths(args.task, base, seq_len), info,
                                 seq_len)
  print(f"{harness.device_label()}: {args.task}, batch {args.batch}, L = {seq_len}", flush=True)
  cases = []
  for layout in layouts:
    for form in ("initial_states", "separate"):
      padded, packed = packing_bench.cases_for(args.task, "lion_s", args.batch, args.preset,
                                               split, "recomputed")
      case = padded if layout == "padded" else packed
      case.name = f"lion_s recomputed {layout}, entering states: {form}"
      case.info.update(layout=layout, entering_states=form)
      with segment_output(form):
        cases += harness.compile_within_budget([case], args.mem_budget_gb)
  harness.time_cases(cases, repeats=args.repeats, budget_s=args.case_budget_s, min_repeats=3)
  records = [harness.record(case) for case in cases]
  for record in records:
    if "median_s" in record:
      record["examples_per_s"] = args.batch / record["median_s"]
  harness.write_json(name, records, out_dir, extra=dict(task=args.task, batch=args.batch,
                                                         preset=args.preset or "paper"))
  print(harness.markdown_table(
      ["case", "step ms", "examples/s", "temp+output"],
      [[r["name"], harness.fmt_ms(r.get("median_s")), f"{r.get('examples_per_s', 0):.2f}",
        harness.fmt_bytes(r.get("temp_plus_output_bytes"))] for r in records]))


if __name__ == "__main__":
  main()
