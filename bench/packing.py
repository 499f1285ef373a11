"""Training examples per second, packed rows against padded ones, side by side in one process.

  .venv/bin/python bench/packing.py                                     # ListOps preset, batch 8
  .venv/bin/python bench/packing.py --preset cpu_long --batch 32        # the cpu_long preset
  .venv/bin/python bench/packing.py --tasks text --batch 8              # Text (lengths below)
  .venv/bin/python bench/packing.py --quick                             # runlocal, seconds
  .venv/bin/python bench/packing.py --tasks retrieval --batch 8         # Retrieval (lengths below)
  .venv/bin/python bench/packing.py --tasks retrieval --data-dir data   # lengths of real files

For each task × variant × batch size: the same B examples (lengths drawn as below, tokens
random) as one padded batch (B rows of L) and as one packed batch (`lra.data.packing`: R rows
of L' chosen by `choose_rows` from the sampled lengths, as `config.packing` does), each through
the real training step (`lra.steps.jit_train_step`), timed interleaved by the shared harness.
Reports examples/s for both, their ratio, XLA's temp + output bytes per example, and the
padding share of the token slots.

Lengths:
  listops  the generator's own (`lra.data.generators.listops.sample`, 2000 expressions with the
           config's min/max lengths: 501-1999 for the preset, median 953).
  text     IMDB reviews as bytes: log-normal with median 979 and σ = 0.74 (mean ≈ 1290), cut
           to [10, L]. IMDB's reviews average 230 words (Maas et al., 2011), about 1300
           characters, and are right-skewed with a long tail; the LRA byte-level task truncates
           at L = 4096, which this keeps (about 3% of the samples are cut).
  retrieval  AAN documents as bytes: log-normal with median 20,000 (`--retrieval-median`) and
           σ = 0.75, cut to [10, L = 4000], each of an example's two documents drawn alone.
           AAN pairs full-text ACL Anthology papers (the LRA paper's "long-form document
           matching"); the text of a 4-8 page paper runs to 15-50 KB, and the LRA release's own
           pipeline cuts each text at 10,000 bytes before encoding, a cut that would do nothing
           were the texts shorter. A median of 20,000 is the short end of that range; it puts
           1.6% of the documents under the 4000-byte cap, so the padded rows are almost full
           and no packed layout saves a token slot (the trainer then keeps padded rows).
           `--retrieval-median 4000` (half the documents short) shows what packing would give
           a copy of the data with many short documents; `--data-dir` measures the real ones.
  --data-dir DIR  any token task: the lengths of the first 2000 training examples of a seeded
           shuffle of the task's files under DIR, as the trainer loads them (`lra.tasks`; the
           Retrieval release's tsv_data/ copied to DIR/aan). Retrieval's two documents per
           example are two segments, packed together.

Writes packing.json to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import train_step  # noqa: E402
from configs import common  # noqa: E402
from lion_jax.ops.attention import resolve_residuals  # noqa: E402
from lra import steps  # noqa: E402
from lra.train import check_config  # noqa: E402
from lra.data import listops as listops_data  # noqa: E402
from lra.data import packing  # noqa: E402
from lra.data.generators import listops as listops_generator  # noqa: E402
from lra.data.split import Split  # noqa: E402
from lra.tasks import TASKS, load_task  # noqa: E402

SAMPLES = 2000
# The token tasks whose length distribution the docstring states (others need --data-dir).
STATED_LENGTHS = ("listops", "text", "retrieval")
# Retrieval's stated document lengths (module docstring): log-normal bytes, this σ.
RETRIEVAL_SIGMA = 0.75


def sample_lengths(task: str, config, seq_len: int, seed: int = 0,
                   data_dir: str | None = None, retrieval_median: float = 20_000) -> np.ndarray:
  """[SAMPLES] example lengths of `task` ([SAMPLES, 2] for Retrieval; module docstring)."""
  if TASKS[task].info.input_kind != "tokens":
    raise SystemExit(f"task {task!r}: packing is for token tasks ("
                     f"{', '.join(t for t in TASKS if TASKS[t].info.input_kind == 'tokens')}); "
                     f"every {task} example has the same length")
  if data_dir:
    splits, _ = load_task(task, data_dir, seq_len=seq_len)
    lengths = splits["train"].lengths
    return lengths[np.random.default_rng(seed).permutation(len(lengths))[:SAMPLES]]
  if task == "listops":
    generate = dict(config.generate or {})
    rows = listops_generator.sample(SAMPLES, min_length=generate.get("min_length", 500),
                                    max_length=generate.get("max_length", 2000), seed=seed)
    return np.minimum([len(listops_data.tokenize(text)) for text, _ in rows], seq_len)
  if task == "text":
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(979), 0.74, SAMPLES).astype(int), 10, seq_len)
  if task == "retrieval":
    rng = np.random.default_rng(seed)
    documents = rng.lognormal(np.log(retrieval_median), RETRIEVAL_SIGMA, (SAMPLES, 2))
    return np.clip(documents.astype(int), 10, seq_len)
  raise SystemExit(f"task {task!r}: no length distribution is stated for it here (only for "
                   f"{', '.join(STATED_LENGTHS)}); give the folder of its real files with "
                   "--data-dir")


def split_of(lengths: np.ndarray, info, seq_len: int, seed: int = 0) -> Split:
  """Random tokens at the given lengths: inputs [N, L] ([N, 2, L] for lengths [N, 2])."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(1, info.vocab_size, (*lengths.shape, seq_len))
  inputs = (tokens * (np.arange(seq_len) < lengths[..., None])).astype(np.int32)
  return Split(inputs, lengths.astype(np.int32), rng.integers(0, info.num_classes,
                                                              len(lengths)).astype(np.int32))


def cases_for(task, variant, batch_size, preset, split, residuals="", chunk=None):
  """(padded case, packed case) for one task × variant × batch size (`chunk`: LION's chunk
  length instead of the preset's)."""
  config, info, seq_len = train_step.task_config(task, variant + (f",{preset}" if preset else ""))
  config.batch_size = batch_size
  if config.model.mixer == "lion":  # as `config.packing` runs: the padded run's residuals
    config.model.residuals = residuals or resolve_residuals(config.model.residuals, seq_len)
    config.model.chunk_size = chunk or config.model.chunk_size
  model_config = check_config(config)
  rows, row_length = packing.choose_rows(
      split.lengths, batch_size=batch_size, length=seq_len, seed=0,
      max_factor=1 if model_config.mixer == "softmax" else 4)
  packed = next(packing.PackedBatchIterator(split, batch_size=batch_size, rows=rows,
                                            row_length=row_length, seed=0))
  # The padded batch holds the very examples the packed step placed, one per row (Retrieval:
  # both documents of an example, [B, 2, L]).
  docs = np.reshape(packed["example_rows"], (batch_size, -1)).shape[1]
  tokens = [packed["inputs"][r][packed["segment_ids"][r] == i]
            for r, i in zip(np.ravel(packed["example_rows"]), np.ravel(packed["example_ids"]))]
  lengths = np.asarray([len(t) for t in tokens]).reshape(batch_size, docs)
  inputs = np.stack([np.pad(t, (0, seq_len - len(t))) for t in tokens])
  padded = {"inputs": inputs.reshape(batch_size, docs, seq_len)[:, 0] if docs == 1 else
                      inputs.reshape(batch_size, docs, seq_len),
            "lengths": (lengths[:, 0] if docs == 1 else lengths).astype(np.int32),
            "labels": packed["labels"], "example_mask": packed["example_mask"]}
  info_fields = dict(task=task, variant=variant, preset=preset or "paper", batch=batch_size,
                     residuals=config.model.residuals if model_config.mixer == "lion" else None,
                     seq_len=seq_len, rows=rows, row_length=row_length,
                     mixer=model_config.mixer, d_model=model_config.d_model,
                     chunk_size=model_config.chunk_size if model_config.mixer == "lion" else None,
                     layers=model_config.num_layers,
                     padding_share_padded=packing.padding_share(lengths, seq_len, None,
                                                                batch_size),
                     padding_share_packed=packing.padding_share(lengths, row_length, rows,
                                                                batch_size))
  made = []
  for layout, batch in (("padded", padded), ("packed", packed)):
    setup, _ = train_step.make_setup(config, info, None, None)
    made.append(harness.Case(f"{task} {variant} B={batch_size} {layout}",
                             steps.jit_train_step(setup),
                             (setup.state, steps.shard_batch(batch, setup.mesh)),
                             info=dict(info_fields, layout=layout), threads_state=True))
  return made


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--tasks", default="listops")
  p.add_argument("--variants", default="lion_s,lion_d,s5,transformer")
  p.add_argument("--batch", default="8", help="comma list of batch sizes")
  p.add_argument("--preset", default="", choices=("", *common.PRESET_FLAGS))
  p.add_argument("--data-dir", default=None,
                 help="take each task's lengths from its real files under this folder "
                      "(module docstring)")
  p.add_argument("--retrieval-median", type=float, default=20_000,
                 help="median bytes of Retrieval's sampled documents (module docstring)")
  p.add_argument("--residuals", default="", choices=("", "stored", "recomputed"),
                 help="LION's model.residuals for both layouts (default: what config.packing "
                      "runs, the padded rows' \"auto\" choice)")
  harness.add_common_args(p, repeats=5, case_budget_s=120.0, mem_budget_gb=16.0)
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.variants, args.batch, args.repeats = "runlocal", "lion_s,s5", "8", 3
  out_dir, name = harness.output_path(args, "packing")
  records = []
  for task in args.tasks.split(","):
    base, info, seq_len = train_step.task_config(
        task, "lion_s" + (f",{args.preset}" if args.preset else ""))
    split = split_of(sample_lengths(task, base, seq_len, data_dir=args.data_dir,
                                    retrieval_median=args.retrieval_median), info, seq_len)
    print(f"{task}: {len(split)} {'examples of ' + args.data_dir if args.data_dir else 'sampled'}"
          f" lengths, median {np.median(split.lengths):.0f}, mean "
          f"{split.lengths.mean():.0f}, L = {seq_len}; padding share of padded rows "
          f"{packing.padding_share(split.lengths, seq_len):.3f}", flush=True)
    for batch_size in (int(b) for b in args.batch.split(",")):
      for variant in args.variants.split(","):
        cases = cases_for(task, variant, batch_size, args.preset, split, args.residuals)
        harness.run_group(cases, args.mem_budget_gb, repeats=args.repeats,
                          budget_s=args.case_budget_s)
        padded, packed = (harness.record(c) for c in cases)
        for r in (padded, packed):
          if "median_s" in r:
            r["examples_per_s"] = r["batch"] / r["median_s"]
            r["bytes_per_example"] = r.get("temp_plus_output_bytes", 0) / r["batch"]
        if "examples_per_s" in padded and "examples_per_s" in packed:
          packed["speedup"] = packed["examples_per_s"] / padded["examples_per_s"]
          print(f"  -> {variant} B={batch_size}: {packed['rows']} rows of {packed['row_length']}"
                f", padding {packed['padding_share_padded']:.2f} -> "
                f"{packed['padding_share_packed']:.2f}; examples/s "
                f"{padded['examples_per_s']:.2f} -> {packed['examples_per_s']:.2f} "
                f"({packed['speedup']:.2f}x); memory/example "
                f"{harness.fmt_bytes(padded['bytes_per_example'])} -> "
                f"{harness.fmt_bytes(packed['bytes_per_example'])}", flush=True)
        if not packing.saves_slots(packed["rows"], packed["row_length"], batch_size,
                                   split.inputs[0].size):
          packed["trains_padded"] = True  # as `lra.train` decides
          print("     no layout saves token slots here: training keeps padded rows", flush=True)
        records += [padded, packed]
        harness.write_json(name, records, out_dir)
  print(f"wrote {out_dir / (name + '.json')}")


if __name__ == "__main__":
  main()
