"""The training step with and without a gradient barrier, side by side in one process.

  .venv/bin/python bench/probes/gradient_barrier.py                 # ListOps preset, batch 8
  .venv/bin/python bench/probes/gradient_barrier.py --where projections --variants lion_s,lion_d
  .venv/bin/python bench/probes/gradient_barrier.py --variants s5 --batch 50
  .venv/bin/python bench/probes/gradient_barrier.py --quick         # runlocal, seconds
  .venv/bin/python bench/probes/gradient_barrier.py --task text --variants s5 --batch 2 \
      --layouts padded

`lion_jax.ops.barrier.gradient_barrier` makes XLA:CPU build a gradient as one array instead of
fusing it, recomputed, into every consumer (its docstring). `--where` picks which barriers are
replaced: "blocks", the encoder's between blocks (the residual stream's gradient), or
"projections", LION's mixer's on its q, k and v projections (LION variants only).
For each variant and layout (the same B generated ListOps examples, padded and packed as
`bench/packing.py` builds them) the real training step (`lra.steps.jit_train_step`) is compiled
twice: as the code stands, and with the barrier replaced by the plain identity while it is
traced. All cases are timed interleaved. Reports step time, examples/s, the ratio and XLA's
temp + output bytes. On a GPU or TPU the barrier is the identity already, so both columns run
the same program. Token tasks (ListOps, Text; Retrieval with `--data-dir`, as
`bench/packing.py` states) run on generated example lengths, padded and packed; image tasks
(Image, Pathfinder, Path-X), which are never padded, on one synthetic batch of full rows
(`--layouts padded`, their only layout).

Writes gradient_barrier.json to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import harness  # noqa: E402
import packing as packing_bench  # noqa: E402
import train_step  # noqa: E402
from lion_jax.ops import barrier  # noqa: E402
from lion_jax.nn import mixer, models  # noqa: E402
from lra.tasks import TASKS  # noqa: E402

BARRIERS = {"without": lambda x: x, "barrier": barrier.gradient_barrier}
# The module whose `gradient_barrier` each `--where` replaces while a step is traced.
PLACES = {"blocks": models, "projections": mixer}


def _full_rows_case(task, variant, batch, preset):
  """The training step of an image task on one synthetic batch (`train_step.step_case`)."""
  config, info, seq_len = train_step.task_config(task, variant + (f",{preset}" if preset else ""))
  lion = config.model.mixer == "lion"
  case, _ = train_step.step_case(task, config, info, seq_len, "chunk_scan" if lion else None,
                                 config.model.chunk_size if lion else None, batch)
  case.info.update(variant=variant, layout="padded")
  return case


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--task", default="listops", help=f"one of {', '.join(TASKS)}")
  p.add_argument("--data-dir", default=None,
                 help="take the example lengths from the task's real files in DIR (needed for "
                      "retrieval; bench/packing.py's docstring)")
  p.add_argument("--variants", default="s5,lion_s,transformer")
  p.add_argument("--batch", type=int, default=8)
  p.add_argument("--preset", default="")
  p.add_argument("--where", default="blocks", choices=sorted(PLACES),
                 help="which barriers the 'without' cases replace by the identity")
  p.add_argument("--layouts", default=None,
                 help="comma list of padded, packed (default: both; image tasks: padded)")
  harness.add_common_args(p, repeats=5, case_budget_s=60.0, mem_budget_gb=20.0)
  args = p.parse_args(argv)
  if args.task not in TASKS:
    p.error(f"--task {args.task}: no such task; choose from {', '.join(TASKS)}")
  tokens = TASKS[args.task].info.input_kind == "tokens"
  layouts = [x for x in (args.layouts or ("padded,packed" if tokens else "padded")).split(",")
             if x]
  if not layouts or set(layouts) - {"padded", "packed"}:
    p.error(f"--layouts {args.layouts}: give a comma list of padded, packed")
  if not tokens and layouts != ["padded"]:
    p.error(f"--layouts {args.layouts}: {args.task} is an image task, whose rows are always "
            "full: give --layouts padded")
  variants = [v for v in args.variants.split(",") if v]
  if args.where == "projections" and (others := [
      v for v in variants if train_step.task_config(args.task, v)[0].model.mixer != "lion"]):
    p.error(f"--where projections: {', '.join(others)} has no LION mixer; give LION variants")
  if args.quick:
    args.preset, args.repeats = "runlocal", 3
  out_dir, name = harness.output_path(args, "gradient_barrier")
  base, info, seq_len = train_step.task_config(
      args.task, "lion_s" + (f",{args.preset}" if args.preset else ""))
  split = packing_bench.split_of(
      packing_bench.sample_lengths(args.task, base, seq_len, data_dir=args.data_dir), info,
      seq_len) if tokens else None
  print(f"{harness.device_label()}: {args.task}, batch {args.batch}, L = {seq_len}", flush=True)
  cases = []
  for variant in variants:
    for barrier, function in BARRIERS.items():
      made = dict(zip(("padded", "packed"), packing_bench.cases_for(
          args.task, variant, args.batch, args.preset, split))) if tokens else {
              "padded": _full_rows_case(args.task, variant, args.batch, args.preset)}
      for layout in layouts:
        case = made[layout]
        case.name = f"{variant} {layout} {barrier}"
        case.info.update(barrier=barrier, where=args.where)
        place = PLACES[args.where]
        place.gradient_barrier = function  # read while the step is traced
        try:
          cases += harness.compile_within_budget([case], args.mem_budget_gb)
        finally:
          place.gradient_barrier = BARRIERS["barrier"]
  harness.time_cases(cases, repeats=args.repeats, budget_s=args.case_budget_s)
  records = [harness.record(case) for case in cases]
  rows = []
  for record in records:
    if record.get("barrier") != "barrier" or "median_s" not in record:
      continue
    without = harness.find(records, variant=record["variant"], layout=record["layout"],
                           barrier="without")
    ratio = (without["median_s"] / record["median_s"]) if without and "median_s" in without else None
    rows.append([record["variant"], record["layout"],
                 harness.fmt_ms(without.get("median_s") if without else None),
                 harness.fmt_ms(record["median_s"]), f"{ratio:.2f}x" if ratio else "-",
                 f"{args.batch / record['median_s']:.2f}",
                 harness.fmt_bytes(without.get("temp_plus_output_bytes") if without else None),
                 harness.fmt_bytes(record.get("temp_plus_output_bytes"))])
  print("\n" + harness.markdown_table(
      ["variant", "layout", "without", "barrier", "speed-up", "examples/s (barrier)",
       "memory without", "memory barrier"], rows))
  harness.write_json(name, records, out_dir)


if __name__ == "__main__":
  main()
