"""The Transformer baseline's training step with its attention over the whole batch against one row
at a time (`lion_jax.nn.softmax.softmax_attention(..., one_example_at_a_time=...)`).

  .venv/bin/python bench/probes/softmax_rows.py        # the presets below, batch 32 (8 at L = 2048)
  .venv/bin/python bench/probes/softmax_rows.py --quick    # ListOps `runlocal` only
  .venv/bin/python bench/probes/softmax_rows.py --publish  # docs/bench/softmax_rows.json

Both cases are the real step (`bench/train_step.step_case`, AdamW, state donated) on the same
synthetic batch, compiled one after the other and timed interleaved in one process; the ratio
is batched / one row at a time, > 1 when the loop is faster. Memory is XLA's temp + output plan.
The outputs agree to float32 rounding (tests/nn/test_baselines.py tests both against the float64
definition), so only speed and memory are at stake.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import train_step  # noqa: E402
from lion_jax.nn import softmax  # noqa: E402

# (label, task, preset, batch, overrides of config.model): the presets the sweeps train the
# Transformer at, and the 6-block ListOps depth probe (docs/paper_notes.md section 17).
CASES = (
    ("ListOps cpu_long", "listops", "cpu_long", 32, {}),
    ("ListOps cpu_order", "listops", "cpu_order", 32, {}),
    ("ListOps 6 blocks, width 32", "listops", "cpu_long", 32, dict(num_layers=6, d_model=32)),
    ("Pathfinder cpu_order", "pathfinder", "cpu_order", 32, {}),
    ("ListOps preset (L = 2048)", "listops", "", 8, {}),
)
QUICK_CASES = (("ListOps runlocal", "listops", "runlocal", 4, {}),)


@contextlib.contextmanager
def attention_rows(one_example_at_a_time: bool):
  """Within: `SoftmaxMixer` traces its attention with the given evaluation."""
  original = softmax.softmax_attention
  softmax.softmax_attention = functools.partial(
      original, one_example_at_a_time=one_example_at_a_time)
  try:
    yield
  finally:
    softmax.softmax_attention = original


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(parser, repeats=5, case_budget_s=60.0, mem_budget_gb=16.0)
  parser.add_argument("--only", default=None, help="comma list of case numbers (0-based)")
  args = parser.parse_args(argv)
  cases = QUICK_CASES if args.quick else CASES
  if args.only:
    cases = [cases[int(i)] for i in args.only.split(",")]
  records = []
  for label, task, preset, batch, overrides in cases:
    config, info, seq_len = train_step.task_config(task, ",".join(filter(None, ("transformer",
                                                                                preset))))
    for field, value in overrides.items():
      config.model[field] = value
    print(f"{label}: L = {seq_len}, batch {batch}", flush=True)
    pair = []
    for loop in (False, True):
      case, _ = train_step.step_case(task, config, info, seq_len, None, None, batch)
      case.name = f"{label} ({'one row at a time' if loop else 'whole batch'})"
      case.info.update(label=label, one_example_at_a_time=loop)
      with attention_rows(loop):
        harness.compile_case(case)
      pair.append(case)
    harness.time_cases(pair, repeats=args.repeats, budget_s=args.case_budget_s)
    batched, looped = (case.result for case in pair)
    ratio = batched["median_s"] / looped["median_s"]
    print(f"  one row at a time: {ratio:.2f}x the batched speed, memory "
          f"{harness.fmt_bytes(batched['temp_plus_output_bytes'])} -> "
          f"{harness.fmt_bytes(looped['temp_plus_output_bytes'])}", flush=True)
    for case in pair:
      case.compiled = None
      records.append(train_step.examples_per_second(harness.record(case)))
  folder, name = harness.output_path(args, "softmax_rows")
  harness.write_json(name, records, folder)


if __name__ == "__main__":
  main()
