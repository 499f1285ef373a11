"""The LION recipes against S5 at every LRA preset: examples/s, the identity-mixer floor, memory.

  .venv/bin/python bench/recipes_vs_s5.py            # every task preset and the sweeps' CPU presets
  .venv/bin/python bench/recipes_vs_s5.py --quick    # ListOps `runlocal` at L = 128: seconds
  .venv/bin/python bench/recipes_vs_s5.py --settings listops:ladder --variants lion_s_s5_form,s5,lion_s
  .venv/bin/python bench/recipes_vs_s5.py --variants lion_complex,s5     # one LION against S5, everywhere

For each setting (a task's full preset, or `task:flag` with one of the CPU preset flags of
configs/common.py, e.g. `listops:ladder`), every `--variants` entry trains the real step
(`lra.steps.jit_train_step`, AdamW with the config's parameter groups, state donated; the pieces
of `bench/train_step.py`) on synthetic batches of the task's shapes, and beside each distinct
block shape its floor: the same model with `model.mixer="identity"` (`IdentityMixer`: norms,
GLU or MLP, encoder and head kept, no token mixing). All of a setting's steps are timed
interleaved in one process (`harness.time_cases`), so the printed ratios compare like with like:

  examples/s ÷ S5   each model's examples/s over S5's, measured side by side;
  step / floor      each model's step over its own block's identity-mixer step: 1 + what the
                    mixer costs, as a multiple of everything else in the step;
  memory at 32      XLA's plan of the step at batch 32 (temp + output bytes of the compiled
                    executable's `memory_analysis()`), and its ratio to S5's.

A step larger than `--stream-budget` at batch 32 (its residual stream, batch × L × documents ×
d_model floats, for the widest model of the setting) is timed at the largest power-of-two batch
that fits, every model of the setting at that batch, and only compiled at batch 32 for its memory
plan: Path-X, Text and Retrieval at full length do not run at batch 32 on two CPU cores. A
variant with no config at a setting (no Transformer for Path-X, no ladder width for it) is
skipped with the reason.

Writes recipes_vs_s5.json to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import train_step  # noqa: E402
from configs import common  # noqa: E402
from lion_jax.config import ModelConfig, foreign_fields  # noqa: E402
from lion_jax.options import ConfigError  # noqa: E402
from lra import steps  # noqa: E402
from lra.train import check_config  # noqa: E402

SETTINGS = ("listops,text,retrieval,image,pathfinder,pathx,"
            "listops:ladder,listops:ladder_long,listops:cpu_order,pathfinder:cpu_order")
VARIANTS = "lion,lion_complex,lion_s_s5_form,lion_s_s5_form_complex_input,s5,transformer"
REFERENCE = "s5"
MEMORY_BATCH = 32
# The block each mixer's floor keeps, for the table.
BLOCK_NAMES = {"lion": "LION's block", "s5": "S5's block", "softmax": "Transformer's block"}


@dataclasses.dataclass
class Model:
  """One model of a setting: a variant, or the identity-mixer floor of a variant's block."""

  name: str
  config: object  # the experiment ConfigDict
  model_config: ModelConfig
  floor: str | None = None  # the name of its block's identity-mixer model (None: it is one)


def identity_floor(config):
  """The experiment config with its model's mixer replaced by the identity, all else kept.

  The mixer's own fields go back to their defaults and its heads to one (the identity reads
  none of them; so LION's and S5's blocks of one width share a floor), and the position encoding
  the model had (`positional="auto"` resolves by mixer) is pinned, so the encoder, blocks, norms
  and head are the ones the model trains.

  Args:
    config: an experiment config (`configs/<task>.py`).

  Returns:
    A copy whose `check_config` is the model with `mixer="identity"`.
  """
  model = check_config(config)
  floor = config.copy_and_resolve_references()
  defaults = {field.name: field.default for field in dataclasses.fields(ModelConfig)}
  for name in foreign_fields("identity"):
    floor.model[name] = defaults[name]
  floor.model.mixer = "identity"
  floor.model.num_heads = 1
  floor.model.positional = model.position_encoding
  return floor


def resolve(task, preset, variant):
  """(config, TaskInfo, L) of `configs/<task>.py:<variant>,<preset>`, or a string saying why that
  variant has no config there."""
  if variant not in common.task_variants(task):
    return f"configs/{task}.py has no variant {variant!r}"
  try:
    return train_step.task_config(task, ",".join(filter(None, (variant, preset))))
  except ConfigError as error:
    return str(error).split(":")[0]


def setting_models(task, preset, variants):
  """The models of one setting: each variant with a config, then one floor per distinct block.

  Args:
    task, preset: the setting (preset "" is the task's full preset).
    variants: variant names.

  Returns:
    (models, info, L, skipped): `Model`s, the task's TaskInfo, the length and {variant: why}.
  """
  models, floors, skipped, info, length = [], {}, {}, None, None
  for variant in variants:
    resolved = resolve(task, preset, variant)
    if isinstance(resolved, str):
      skipped[variant] = resolved
      continue
    config, info, length = resolved
    floor_config = identity_floor(config)
    floors.setdefault(check_config(floor_config), (floor_config, []))[1].append(variant)
    models.append(Model(variant, config, check_config(config)))
  for floor_model, (floor_config, owners) in floors.items():
    mixers = dict.fromkeys(m.model_config.mixer for m in models if m.name in owners)
    name = "identity in " + " = ".join(BLOCK_NAMES[mixer] for mixer in mixers)
    if any(f.name == name for f in models):  # two blocks of one mixer: name them by variant
      name = f"identity in {owners[0]}'s block"
    for model in models:
      if model.name in owners:
        model.floor = name
    models.append(Model(name, floor_config, floor_model))
  return models, info, length, skipped


def timed_batch(models, info, length, stream_budget):
  """The largest power-of-two batch ≤ 32 whose residual stream fits `stream_budget` floats for
  every model (at least 1)."""
  stream = (2 if info.dual_input else 1) * length * max(m.model_config.d_model for m in models)
  batch = MEMORY_BATCH
  while batch > 1 and batch * stream > stream_budget:
    batch //= 2
  return batch


def step_case(model, info, length, batch):
  """A harness case of one training step of `model` at `batch` (the state threaded through)."""
  setup, _ = train_step.make_setup(model.config, info, None, None)
  data = steps.shard_batch(train_step.synthetic_batch(info, length, batch, 0), setup.mesh)
  return harness.Case(model.name, steps.jit_train_step(setup), (setup.state, data),
                      info=dict(model=model.name, mixer=model.model_config.mixer,
                                floor=model.floor, batch=batch, seq_len=length,
                                d_model=model.model_config.d_model,
                                layers=model.model_config.num_layers,
                                num_params=setup.num_params), threads_state=True)


def planned_memory(model, info, length):
  """XLA's temp + output bytes of `model`'s step at batch 32, compiled and never run."""
  case = harness.compile_case(step_case(model, info, length, MEMORY_BATCH))
  case.compiled = None
  return case.result.get("temp_plus_output_bytes")


def run_setting(task, preset, variants, args):
  """Times one setting's models interleaved; returns their records and the skipped variants."""
  models, info, length, skipped = setting_models(task, preset, variants)
  for variant, why in skipped.items():
    print(f"  {variant}: skipped ({why})", flush=True)
  if not models:
    return [], skipped
  batch = timed_batch(models, info, length, args.stream_budget)
  print(f"{task}{':' + preset if preset else ''}: L={length}{' x2' if info.dual_input else ''}, "
        f"timed at batch {batch}, memory planned at batch {MEMORY_BATCH}", flush=True)
  cases = [step_case(m, info, length, batch) for m in models]
  harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
  records = []
  for model, case in zip(models, cases):
    record = train_step.examples_per_second(harness.record(case))
    record.update(task=task, preset=preset or "full")
    record["memory_batch_32_bytes"] = (record.get("temp_plus_output_bytes")
                                       if batch == MEMORY_BATCH
                                       else planned_memory(model, info, length))
    records.append(record)
  del cases
  gc.collect()
  return add_ratios(records), skipped


def add_ratios(records):
  """Adds each record's examples/s and memory over S5's and its step over its floor's."""
  by_name = {r["model"]: r for r in records}
  reference = by_name.get(REFERENCE, {})
  for r in records:
    floor = by_name.get(r["floor"] or r["model"], {})
    if "examples_per_s" in r and "examples_per_s" in reference:
      r["examples_per_s_over_s5"] = r["examples_per_s"] / reference["examples_per_s"]
    if "median_s" in r and "median_s" in floor:
      r["step_over_floor"] = r["median_s"] / floor["median_s"]
    if r.get("memory_batch_32_bytes") and reference.get("memory_batch_32_bytes"):
      r["memory_over_s5"] = r["memory_batch_32_bytes"] / reference["memory_batch_32_bytes"]
  return records


def table(records, skipped):
  """The markdown table of every setting's records, then one line per skipped variant."""
  def ratio(value):
    return "–" if value is None else f"{value:.2f}x"

  rows = [[r["task"] + ("" if r["preset"] == "full" else f" {r['preset']}"),
           r["model"], str(r["seq_len"]) + (" x2" if r["task"] == "retrieval" else ""),
           str(r["batch"]), harness.fmt_ms(r.get("median_s")),
           f"{r['examples_per_s']:.3g}" if "examples_per_s" in r else r.get("skipped", "–"),
           ratio(r.get("examples_per_s_over_s5")), ratio(r.get("step_over_floor")),
           harness.fmt_bytes(r.get("memory_batch_32_bytes")), ratio(r.get("memory_over_s5"))]
          for r in records]
  notes = [f"- {setting} {variant}: skipped ({why})" for setting, variants in skipped.items()
           for variant, why in variants.items()]
  return "\n".join([harness.markdown_table(
      ["preset", "model", "L", "batch timed", "ms/step", "examples/s", "examples/s ÷ S5",
       "step / floor", f"memory at batch {MEMORY_BATCH}", "memory ÷ S5"], rows), *notes])


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p, repeats=5, case_budget_s=60.0, mem_budget_gb=8.0)
  p.add_argument("--settings", default=SETTINGS,
                 help="comma-separated task or task:preset_flag (e.g. listops:ladder)")
  p.add_argument("--variants", default=VARIANTS,
                 help=f"comma-separated configs/<task>.py variants; {REFERENCE!r} is the "
                      "reference of the ratios")
  p.add_argument("--stream-budget", type=float, default=2 ** 22,
                 help="largest residual stream (floats) of a timed step; larger steps are "
                      f"timed at a smaller batch and only planned at batch {MEMORY_BATCH}")
  args = p.parse_args(argv)
  if args.quick:  # the LION to use, S5 and their shared floor, timed at 16, planned at 32
    args.settings, args.variants, args.repeats = "listops:runlocal", "lion,s5", 3
    args.stream_budget = 2 ** 16
  out_dir, name = harness.output_path(args, "recipes_vs_s5")
  variants = [v for v in args.variants.split(",") if v]
  records, skipped = [], {}
  for setting in (s for s in args.settings.split(",") if s):
    task, _, preset = setting.partition(":")
    setting_records, skipped[setting] = run_setting(task, preset, variants, args)
    records += setting_records
    # after every setting: a long run cut short keeps the settings it finished
    harness.write_json(name, records, out_dir, extra={"skipped": skipped,
                                                      "memory_batch": MEMORY_BATCH})
  print("\n" + table(records, skipped))


if __name__ == "__main__":
  main()
