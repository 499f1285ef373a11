"""Full training-step throughput per LRA preset and training form.

  .venv/bin/python bench/train_step.py            # every preset, reduced batch, full length
  .venv/bin/python bench/train_step.py --quick    # ListOps `runlocal` only
  .venv/bin/python bench/train_step.py --variants lion_s,s5,transformer --forms chunk_scan:64 --batch 1
  .venv/bin/python bench/train_step.py --tasks listops --preset cpu_long --batch 32 --forms chunk_scan:64
  .venv/bin/python bench/train_step.py --tasks pathfinder --preset cpu_order --batch 32 --forms chunk_scan:32
  .venv/bin/python bench/train_step.py --trained --forms chunk_scan:32,chunk_scan:64   # trained decays

`--variants` lists configs/<task>.py variants side by side (default: LION-S next to the Table 7
baselines S5 and Transformer, each at its own task preset). LION variants run every `--forms`
entry; a baseline has one form and runs once. A task whose config has no such variant (Path-X
has S5 but no Transformer) skips it.

The step is the real one (`lra.steps.jit_train_step`: AdamW with the config's parameter groups,
state donated) on synthetic batches of the task's shapes (`lra.tasks` TaskInfo), timed by the
shared harness (`harness.Case` with `threads_state`, so each call gets the state the previous
one returned). For each case: compile seconds (`lower().compile()`), XLA temp + output bytes,
then interleaved timed steps (median) -> examples/s. The `runlocal` ListOps step also runs
through the plain jitted path with a fresh batch each step, and checks that it compiled exactly
once (JAX's backend-compile events, a public `jax.monitoring` API) and within 30 s.

Writes train_step.json to bench/results/ (git-ignored; `--publish`: docs/bench/); no plot.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pathlib
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import trained_decays  # noqa: E402
from configs import common  # noqa: E402
from lra import optim, steps  # noqa: E402
from lra.tasks import get_task  # noqa: E402
from lra.train import check_config  # noqa: E402

TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
COMPILE_LIMIT_S = 30.0


def task_config(task, arg):
  """(experiment config, TaskInfo, sequence length) of `configs/<task>.py:<arg>`."""
  config = importlib.import_module(f"configs.{task}").get_config(arg)
  info = get_task(task).info
  seq_len = config.seq_len or info.seq_len
  return config, info, seq_len


def synthetic_batch(info, seq_len, batch, seed):
  rng = np.random.default_rng(seed)
  shape = (batch, 2, seq_len) if info.dual_input else (batch, seq_len)
  low = 1 if info.input_kind == "tokens" else 0
  inputs = rng.integers(low, info.vocab_size, shape).astype(np.int32)
  lengths = np.full(shape[:-1], seq_len, np.int32)
  if info.input_kind == "tokens":  # variable lengths, as padded real batches have
    lengths = rng.integers(seq_len // 2, seq_len + 1, shape[:-1]).astype(np.int32)
  return {"inputs": inputs, "lengths": lengths,
          "labels": rng.integers(0, info.num_classes, (batch,)).astype(np.int32),
          "example_mask": np.ones((batch,), bool)}


def make_setup(config, info, form, chunk, dtype=None, residuals=None):
  """The train setup of `config` with the model's form, chunk size, residuals and compute dtype
  replaced (form, chunk size and residuals: LION only; None keeps the config's, as baselines
  need)."""
  model_config = check_config(config)
  if form is not None:
    model_config = model_config.replace(form=form, chunk_size=chunk)
  if residuals:
    model_config = model_config.replace(residuals=residuals)
  if dtype:
    model_config = model_config.replace(dtype=dtype)
  tx = optim.make_optimizer(config, 1000, 100)
  return steps.create_train_setup(model_config, num_classes=info.num_classes,
                                  vocab_size=info.vocab_size, dual_input=info.dual_input, tx=tx,
                                  seed=0, mesh=steps.make_mesh()), model_config


class CompileCounter:
  """Counts XLA backend compilations reported through jax.monitoring."""

  def __init__(self):
    self.count = 0
    jax.monitoring.register_event_duration_secs_listener(self._listen)

  def _listen(self, event, duration, **kwargs):
    del duration, kwargs
    if event == "/jax/core/compile/backend_compile_duration":
      self.count += 1


def attention_mask_bytes(model_config, batch, seq_len, dual):
  groups = model_config.head_dim if (model_config.decay_shape == "vector"
                                     and model_config.decay != "lit") else 1
  rows = batch * (2 if dual else 1)
  return 4.0 * rows * model_config.num_heads * groups * seq_len ** 2


def step_case(task, config, info, seq_len, form, chunk, batch_size, dtype="float32",
              mem_budget_gb=None, residuals=None):
  """A harness case timing one training step of `task`, or a record saying why it is skipped.

  Returns:
    (case, None), or (None, record) when the attention form's L×L masks alone would not fit.
  """
  lion = config.model.mixer == "lion"
  setup, model_config = make_setup(config, info, form if lion else None, chunk, dtype,
                                   residuals if lion else None)
  if not lion:
    form, chunk, residuals = config.model.mixer, None, None
  label = (f"{task} {form}" + (f" C={chunk}" if form.startswith("chunk") else "")
           + (f" {residuals}" if residuals else "") + ("" if dtype == "float32" else f" {dtype}"))
  info_fields = dict(task=task, form=form, chunk_size=chunk, dtype=dtype, seq_len=seq_len,
                     residuals=model_config.residuals if lion else None,
                     mixer=model_config.mixer,
                     batch=batch_size, d_model=model_config.d_model,
                     layers=model_config.num_layers, heads=model_config.num_heads,
                     decay=model_config.decay, decay_shape=model_config.decay_shape,
                     num_params=setup.num_params)
  if form == "attention" and mem_budget_gb is not None:
    need = attention_mask_bytes(model_config, batch_size, seq_len, info.dual_input)
    if need > mem_budget_gb * harness.GB / 3:
      return None, dict(name=label, **info_fields, skipped=(
          f"would not fit: one L×L mask per layer is {harness.fmt_bytes(need)} "
          f"(budget {mem_budget_gb} GB)"))
  batch = steps.shard_batch(synthetic_batch(info, seq_len, batch_size, 0), setup.mesh)
  return harness.Case(label, steps.jit_train_step(setup), (setup.state, batch),
                      info=info_fields, threads_state=True), None


def examples_per_second(record):
  """Adds `examples_per_s` (batch / median step time) to a timed step record."""
  if "median_s" in record:
    record["examples_per_s"] = record["batch"] / record["median_s"]
  return record


def recompile_check(counter, args):
  """ListOps runlocal through the plain jitted path: compile time, compile count."""
  config, info, seq_len = task_config("listops", "lion_s,runlocal")
  setup, model_config = make_setup(config, info, config.model.form, config.model.chunk_size)
  step = steps.jit_train_step(setup)
  state = setup.state
  before = counter.count
  times = []
  for i in range(args.check_steps):
    batch = steps.shard_batch(synthetic_batch(info, seq_len, config.batch_size, i), setup.mesh)
    start = time.perf_counter()
    state, sums = step(state, batch)
    jax.block_until_ready(sums)
    times.append(time.perf_counter() - start)
  compiles = counter.count - before
  result = dict(task="listops", config="lion_s,runlocal", seq_len=seq_len, batch=config.batch_size,
                d_model=model_config.d_model, layers=model_config.num_layers,
                form=model_config.form, first_call_s=times[0],
                median_step_s=statistics.median(times[1:]), steps=len(times),
                backend_compiles=compiles,
                examples_per_s=config.batch_size / statistics.median(times[1:]),
                compile_ok=times[0] <= COMPILE_LIMIT_S, no_recompile=compiles <= 1)
  print(f"runlocal ListOps step: first call (compile + 1 step) {times[0]:.1f} s "
        f"(limit {COMPILE_LIMIT_S:.0f} s: {'ok' if result['compile_ok'] else 'EXCEEDED'}); "
        f"{len(times)} steps with fresh batches -> {compiles} backend compile(s) "
        f"({'no recompiles' if result['no_recompile'] else 'RECOMPILED'}); "
        f"steady step {1e3 * result['median_step_s']:.1f} ms", flush=True)
  return result


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  harness.add_common_args(p, repeats=5, case_budget_s=120.0)
  p.add_argument("--tasks", default=",".join(TASKS))
  p.add_argument("--variants", "--variant", dest="variants", default="lion_s,s5,transformer",
                 help="comma-separated configs/<task>.py variants, timed side by side")
  p.add_argument("--forms", default="chunk_scan:64,chunk_scan:16,rnn:64,attention:64",
                 help="form:chunk[:residuals] list, e.g. chunk_scan:32:stored,"
                      "chunk_scan:32:recomputed (residuals: the model's `residuals` field)")
  p.add_argument("--batch", type=int, default=2)
  p.add_argument("--preset", default="", choices=("", *common.PRESET_FLAGS),
                 help="a config flag added to every variant, e.g. cpu_long: time the steps a "
                      "sweep at that preset trains (its width, depth, heads and length)")
  p.add_argument("--check-steps", type=int, default=6)
  p.add_argument("--trained", nargs="?", const=str(trained_decays.FIXTURE), default="",
                 help="time a trained LION-S state against its initial one instead: a run "
                      "folder or fixture (default: the committed cpu_long fixture), at the "
                      "chunk lengths of --forms' chunk_scan entries, on a real batch")
  args = p.parse_args(argv)
  if args.trained:
    run = trained_decays.Run(pathlib.Path(args.trained), 1)
    chunks = [int(f.split(":")[1]) for f in args.forms.split(",") if f.startswith("chunk_scan")]
    out_dir, name = harness.output_path(args, "train_step_trained")
    records = trained_decays.time_steps(run, run.steps()[:1] + run.steps()[-1:], chunks,
                                        args.repeats, kinds=("train_step",))
    trained_decays.print_ratios(records, 0)
    harness.write_json(name, records, out_dir, extra={"source": args.trained})
    return
  out_dir, name = harness.output_path(args, "train_step")
  counter = CompileCounter()
  check = recompile_check(counter, args)
  records = [dict(name="runlocal recompile check", **check)]
  tasks = [] if args.quick else [t for t in args.tasks.split(",") if t]
  forms = [(f.split(":")[0], int(f.split(":")[1]), (f.split(":") + [None])[2])
           for f in args.forms.split(",") if f]

  variants = [v for v in args.variants.split(",") if v]

  for task in tasks:
    cases = []
    for variant in (v for v in variants if v in common.task_variants(task)):
      config, info, seq_len = task_config(task, ",".join(filter(None, (variant, args.preset))))
      print(f"{task} {variant}: L={seq_len}{' x2' if info.dual_input else ''}, "
            f"batch {args.batch}", flush=True)
      for form, chunk, residuals in (forms if config.model.mixer == "lion" else forms[:1]):
        case, skipped = step_case(task, config, info, seq_len, form, chunk, args.batch,
                                  mem_budget_gb=args.mem_budget_gb, residuals=residuals)
        if skipped:
          skipped.update(variant=variant, name=f"{task} {variant}" + skipped["name"].removeprefix(task))
          print(f"  {skipped['name']:<34s} skipped ({skipped['skipped']})", flush=True)
          records.append(skipped)
        else:
          case.info["variant"] = variant
          case.name = f"{task} {variant}" + case.name.removeprefix(task)
          cases.append(case)
    harness.run_group(cases, args.mem_budget_gb, args.repeats, args.case_budget_s)
    records += [examples_per_second(harness.record(c)) for c in cases]
    del cases
    gc.collect()

  rows = []
  for r in records[1:]:
    form = (r["form"] + (f" C={r['chunk_size']}" if r["form"].startswith("chunk") else "")
            + (f" {r['residuals']}" if r.get("residuals") else ""))
    rows.append([r["task"], r.get("variant", ""), form, f"{r['seq_len']}",
                 f"{r['examples_per_s']:.2f}" if "examples_per_s" in r else "skip",
                 harness.fmt_ms(r.get("median_s")) if "median_s" in r else "–",
                 f"{r['compile_s']:.1f}" if "compile_s" in r else "–",
                 harness.fmt_bytes(r.get("temp_plus_output_bytes"))])
  if rows:
    print(f"\nTraining step, LRA presets, batch {args.batch}\n"
          + harness.markdown_table(["task", "variant", "form", "L", "examples/s", "step ms",
                                    "compile s", "temp+output"], rows))
  harness.write_json(name, records, out_dir, extra={"compile_limit_s": COMPILE_LIMIT_S})


if __name__ == "__main__":
  main()
