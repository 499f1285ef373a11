"""LION-S's training step with chunk_scan's residuals stored, and recomputed at several segment
lengths, beside S5, on the same examples padded and packed, in one process.

  python3 bench/segments.py                                   # ListOps preset, batch 50
  python3 bench/segments.py --cases lion_s:recomputed:128:padded,lion_s:recomputed:max:padded
  .venv/bin/python bench/segments.py --quick                  # runlocal sizes, seconds

The recomputing kernel (`lion_jax/recomputed.py`) runs a row's segments of S tokens one after
another, and the number of segments a step runs grows as L / S per block. Its rule picks
128-512 tokens a row on a CPU (for a 2-core CPU's caches, docs/benchmarks.md §10) and up to
2^17 tokens over the batch on a GPU or TPU (one segment a row at the ListOps preset), which
this measured (§11). S is forced for each case while that case is traced ("auto": the rule;
"max" or any S at or above the row's length: one segment a row), next to the stored kernel,
which has no segment loop, and to S5.

Cases run in the order given by `--cases`, each compiled and then timed right away (medians
of `--repeats` steps), so that a run cut short by `--budget-s` or from outside keeps every case
it finished: the JSON is rewritten after each. Compile seconds and XLA's temp + output bytes
come with every case.

Writes segments.json to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import packing as packing_bench  # noqa: E402
import train_step  # noqa: E402
from lion_jax import recomputed  # noqa: E402
from lra.data import packing  # noqa: E402

# variant:residuals[:S]:layout, most informative first (a run cut short keeps the first ones).
DEFAULT_CASES = ("s5::padded,lion_s:stored:padded,lion_s:recomputed:max:padded,"
                 "lion_s:recomputed:512:padded,lion_s:recomputed:auto:padded,"
                 "lion_s:stored:packed,s5::packed,lion_s:recomputed:max:packed")


@contextlib.contextmanager
def segment_tokens(segment: str):
  """Forces the recomputing kernel's S while a step is traced ("auto": the kernel's own rule;
  "max": one segment per row)."""
  names = ("SEGMENT_MIN", "SEGMENT_MAX", "ACCELERATOR_SEGMENT_TOKENS")
  saved = [getattr(recomputed, name) for name in names]
  if segment != "auto":
    size = 1 << 30 if segment == "max" else int(segment)
    recomputed.SEGMENT_MIN = recomputed.SEGMENT_MAX = size
    recomputed.ACCELERATOR_SEGMENT_TOKENS = 0  # the target is then SEGMENT_MIN there too
  try:
    yield
  finally:
    for name, value in zip(names, saved):
      setattr(recomputed, name, value)


def parse_case(text: str) -> dict[str, str]:
  """'lion_s:recomputed:512:packed' -> fields; 's5::padded' (a baseline has no residuals)."""
  parts = text.split(":")
  if len(parts) == 3:
    parts.insert(2, "")
  variant, residuals, segment, layout = parts
  if layout not in ("padded", "packed") or (segment and residuals != "recomputed"):
    raise SystemExit(f"--cases {text!r}: expected variant:residuals[:S]:padded|packed, with S "
                     "(a number, auto or max) only for residuals=recomputed")
  return dict(variant=variant, residuals=residuals, segment=segment or "auto", layout=layout)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--task", default="listops")
  p.add_argument("--batch", type=int, default=50)
  p.add_argument("--preset", default="")
  p.add_argument("--cases", default=DEFAULT_CASES,
                 help="comma list of variant:residuals[:S]:layout, run in this order")
  p.add_argument("--budget-s", type=float, default=1e9,
                 help="start no case after this many seconds")
  harness.add_common_args(p, repeats=5, case_budget_s=30.0, mem_budget_gb=60.0)
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.batch, args.repeats = "runlocal", 8, 3
  cases = [parse_case(c) for c in args.cases.split(",") if c]
  out_dir, name = harness.output_path(args, "segments")
  start = time.monotonic()
  base, info, seq_len = train_step.task_config(
      args.task, "lion_s" + (f",{args.preset}" if args.preset else ""))
  split = packing_bench.split_of(packing_bench.sample_lengths(args.task, base, seq_len),
                                 info, seq_len)
  print(f"{harness.device_label()}: {args.task}, batch {args.batch}, L = {seq_len}", flush=True)
  records = []
  for spec in cases:
    label = (f"{spec['variant']} {spec['residuals'] or '-'} "
             f"S={spec['segment'] if spec['residuals'] == 'recomputed' else '-'} {spec['layout']}")
    if time.monotonic() - start > args.budget_s:
      records.append(dict(name=label, **spec, skipped="--budget-s"))
      continue
    padded, packed = packing_bench.cases_for(args.task, spec["variant"], args.batch, args.preset,
                                             split, spec["residuals"])
    case = padded if spec["layout"] == "padded" else packed
    del padded, packed
    case.name = label
    case.info.update(spec)
    with segment_tokens(spec["segment"]):
      if spec["residuals"] == "recomputed":
        rows = case.info["rows"] if spec["layout"] == "packed" else args.batch
        length = case.info["row_length"] if spec["layout"] == "packed" else seq_len
        case.info["segment_tokens"] = recomputed.segment_length(rows, length, base.model.chunk_size)
      harness.run_group([case], args.mem_budget_gb, repeats=args.repeats,
                        budget_s=args.case_budget_s, min_repeats=2)
    record = harness.record(case)
    if "median_s" in record:
      record["examples_per_s"] = args.batch / record["median_s"]
    records.append(record)
    print(f"  {label}: {harness.fmt_ms(record.get('median_s'))} ms, "
          f"{record.get('examples_per_s', float('nan')):.1f} examples/s, compile "
          f"{record.get('compile_s', float('nan')):.1f} s, "
          f"{harness.fmt_bytes(record.get('temp_plus_output_bytes'))}"
          + (f" ({record['skipped']})" if "skipped" in record else ""), flush=True)
    harness.write_json(name, records, out_dir, extra=dict(
        task=args.task, batch=args.batch, preset=args.preset or "paper", seq_len=seq_len,
        padding_share_padded=float(packing.padding_share(split.lengths, seq_len))))
    del case
    gc.collect()
  rows = [[r["name"], r.get("segment_tokens", "–"), harness.fmt_ms(r.get("median_s")),
           f"{r['examples_per_s']:.1f}" if "examples_per_s" in r else r.get("skipped", "–"),
           f"{r['compile_s']:.1f}" if "compile_s" in r else "–",
           harness.fmt_bytes(r.get("temp_plus_output_bytes"))] for r in records]
  print("\n" + harness.markdown_table(["case", "S", "step ms", "examples/s", "compile s",
                                       "temp+output"], rows))
  print(f"wrote {out_dir / (name + '.json')}  ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
  main()
