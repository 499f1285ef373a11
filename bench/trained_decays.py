r"""What trained LION-S decays look like to `chunk_scan`, and what they cost it.

    python bench/trained_decays.py                                # the committed fixture
    python bench/trained_decays.py --source runs/listops_lion_s   # every step kept in a run
    python bench/trained_decays.py --source runs/x --steps 0,500 --chunks 64,32
    python bench/trained_decays.py --time                         # init against trained, timed
    python bench/trained_decays.py --source runs/x --steps 1500 --save-fixture bench/fixtures/y

`--source` is a run folder (its `checkpoints/`; step 0 is the model at initialisation) or a
fixture folder (`config.json` and `model_state.npz`, one trained model state). The committed
fixture `bench/fixtures/lion_s_cpu_long` is LION-S at `configs/listops.py:lion_s,cpu_long`
(seed 0) after 1,500 steps on 48,000 generated training expressions (the preset's generator
with num_train=48000; 0.37 validation accuracy): 207 KB of weights. Its model is applied in
training mode to `--batches` training batches of the preset's own generated data (made on
first use), and every call of the chunk kernel is intercepted to read what it gets.

Per layer and step it prints, at each chunk length of `--chunks`:

  log λ         quantiles of the per-token, per-channel log-decays (padding included, as the
                kernel sees them);
  span          quantiles of the per-chunk spans Σ_t |log λ_t| (each token's gate raised to
                −W/2 first, as the kernel does); a chunk spanning more than 2W is steep;
  steep chunks  the share of (example, head, chunk) triples with a steep channel;
  branch        per batch: the factored kernel with that many steep chunks recomputed on the
                side, or the exact masks (more than `steep_chunk_capacity` steep).

`--time` times, in one process and interleaved, each layer's chunk kernel (forward + backward
on the captured operands) and the whole training step on the same real batch, with the
initial and the trained model state, at every `--chunks` length; it prints the trained / init
ratios (the number the LION-S speed claims rest on).

Shapes: B batch, L length, H heads, G decay channels (V, or 2V with the normaliser channels),
N chunks, C chunk length.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from configs import common  # noqa: E402
from configs import workdir as workdir_config  # noqa: E402
from lion_jax.ops import chunkwise  # noqa: E402
from lra import checkpoint, steps, train  # noqa: E402
from lra.data.batching import make_loader  # noqa: E402

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "lion_s_cpu_long"
QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0)


def capture_kernel_calls(model, batch):
  """The operands of every chunk-kernel call in one (eager) forward pass of `model`.

  Returns:
    list over calls (layers, in order) of (q, k, u, forward_gate, log_decay) numpy arrays, the
    positional operands of `chunkwise.bidirectional_chunk_scan`.
  """
  captured = []
  real = chunkwise.bidirectional_chunk_scan

  def recording(*operands, **kwargs):
    captured.append(tuple(np.asarray(x) for x in operands[:5]))
    return real(*operands, **kwargs)

  chunkwise.bidirectional_chunk_scan = recording
  try:
    model(jnp.asarray(batch["inputs"]), jnp.asarray(batch["lengths"]))
  finally:
    chunkwise.bidirectional_chunk_scan = real
  return captured


def capture_log_decays(model, batch):
  """[B, L, H, G] float32 log λ of every chunk-kernel call in one forward pass of `model`."""
  return [np.asarray(call[4], np.float32) for call in capture_kernel_calls(model, batch)]


def chunk_spans(log_decay, chunk):
  """[B, H, N, G] Σ_t |log λ_t| over each chunk (the sequence padded with zeros to N·C), each
  gate raised to −W/2 first as the kernel does."""
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  batch, length, heads, groups = log_decay.shape
  pad = -length % chunk
  clamped = np.minimum(np.abs(log_decay), 0.5 * limit)
  padded = np.pad(clamped, [(0, 0), (0, pad), (0, 0), (0, 0)])
  return padded.reshape(batch, -1, chunk, heads, groups).sum(2).transpose(0, 2, 1, 3)


def layer_stats(log_decays, chunk):
  """Summary of one layer's log-decays over several batches (each [B, L, H, G]) at chunk C."""
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  values = np.concatenate([x.ravel() for x in log_decays])
  spans = [chunk_spans(x, chunk) for x in log_decays]  # [B, H, N, G] each
  all_spans = np.concatenate([s.ravel() for s in spans])
  steep = [(s > 2 * limit).any(-1) for s in spans]  # [B, H, N] each
  capacity = chunkwise.steep_chunk_capacity(steep[0].size)
  branches = [f"factored, {int(s.sum())} recomputed" if s.sum() <= capacity else
              f"exact masks ({int(s.sum())} steep > {capacity})" for s in steep]
  return {
      "chunk": chunk,
      "log_decay_quantiles": dict(zip(map(str, QUANTILES), np.quantile(values, QUANTILES).tolist())),
      "share_log_decay_below": {str(t): float((values < t).mean()) for t in (-1.25, -5, -10, -30)},
      "span_quantiles": dict(zip(map(str, QUANTILES), np.quantile(all_spans, QUANTILES).tolist())),
      "steep_chunk_share": float(np.mean([s.mean() for s in steep])),
      "steep_capacity": capacity, "chunks_per_call": int(steep[0].size),
      "branches": branches,
  }


class Run:
  """A trained LION-S run's model states and real training batches (`--source`)."""

  def __init__(self, source: Path, num_batches: int):
    self.source = source
    self.fixture = (source / "model_state.npz").is_file()
    config = workdir_config.get_config(str(source))
    self.config = config
    self.model_config = train.check_config(config)
    splits, self.info = train.load_data(config)
    self.setup = train._setup(config, self.info, self.model_config, 1, 1)
    loader = make_loader(splits["train"], batch_size=config.batch_size, seed=config.seed,
                         shuffle=True, drop_remainder=True)
    batches = iter(loader)
    self.batches = [next(batches) for _ in range(num_batches)]

  def steps(self) -> list[int]:
    if self.fixture:
      return [0, int(json.loads((self.source / "fixture.json").read_text())["step"])]
    kept = (self.source / checkpoint.LATEST_DIR).iterdir()
    return [0] + sorted(int(p.name) for p in kept if p.name.isdigit())

  def state(self, step: int):
    """The split (model, optimizer) state with the model at `step` (0: at initialisation)."""
    if step == 0:
      return self.setup.state
    if self.fixture:
      arrays = dict(np.load(self.source / "model_state.npz"))
      return _with_model_arrays(self.setup.state, arrays)
    ckpt = checkpoint.Checkpointer(self.source, self.config.max_checkpoints_to_keep)
    try:
      return ckpt.restore(step, self.setup.state)[0]
    finally:
      ckpt.close()

  def model(self, step: int):
    return nnx.merge(self.setup.train_graphdef, self.state(step))[0]


def _model_arrays(state) -> dict[str, np.ndarray]:
  """The float arrays of the model part of a split state, by path."""
  leaves = jax.tree_util.tree_flatten_with_path(steps.model_state(state))[0]
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves
          if jnp.issubdtype(leaf.dtype, jnp.floating)}


def _with_model_arrays(state, arrays):
  """`state` with its model's float arrays replaced by `arrays` (by path)."""
  def replace(path, leaf):
    key = jax.tree_util.keystr(path[1:])
    if jax.tree_util.keystr(path[:1]) != "[0]" or key not in arrays:
      return leaf
    return jax.device_put(jnp.asarray(arrays[key], leaf.dtype), leaf.sharding)
  return jax.tree_util.tree_map_with_path(replace, state)


def save_fixture(run: Run, step: int, out: Path) -> None:
  """Writes `run`'s model state at `step` and its config, pointed at the preset's data."""
  out.mkdir(parents=True, exist_ok=True)
  np.savez_compressed(out / "model_state.npz", **_model_arrays(run.state(step)))
  values = json.loads((run.source / "config.json").read_text())
  preset = common.cpu_long_preset(values["task"])
  values["data_dir"], values["generate"] = preset["data_dir"], preset["generate"]
  (out / "config.json").write_text(json.dumps(values, indent=1))
  (out / "fixture.json").write_text(json.dumps({"source": str(run.source), "step": step}))
  print(f"wrote {out}")


def diagnose(run: Run, steps_wanted, chunks):
  """{step: [per-layer {chunk: stats}]}."""
  results = {}
  for step in steps_wanted:
    model = run.model(step)
    per_batch = [capture_log_decays(model, b) for b in run.batches]  # [batch][layer]
    results[step] = [{chunk: layer_stats(list(layer), chunk) for chunk in chunks}
                     for layer in zip(*per_batch)]
  return results


def time_steps(run: Run, steps_wanted, chunks, repeats: int, kinds=("kernel", "train_step")):
  """Kernel (per layer) and training-step times, interleaved in one process.

  Returns:
    harness records, each with `kind`, `chunk`, `step` (and `layer` for kernels).
  """
  cases = []
  batch = steps.shard_batch(run.batches[0], run.setup.mesh)
  for step in steps_wanted:
    calls = capture_kernel_calls(run.model(step), run.batches[0]) if "kernel" in kinds else []
    for chunk in chunks:
      for layer, operands in enumerate(calls):
        operands = tuple(jnp.asarray(x) for x in operands)
        weights = jnp.asarray(np.random.default_rng(layer).normal(size=operands[2].shape),
                              operands[2].dtype)
        def loss(*operands, chunk=chunk, weights=weights):
          return jnp.sum(chunkwise.bidirectional_chunk_scan(*operands, chunk)[0] * weights)
        cases.append(harness.Case(f"kernel layer {layer} C={chunk} step {step}",
                                  jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4)), operands,
                                  info=dict(kind="kernel", layer=layer, chunk=chunk, step=step)))
      if "train_step" not in kinds:
        continue
      setup = train._setup(run.config, run.info,
                           dataclasses.replace(run.model_config, chunk_size=chunk), 1, 1)
      state = _with_model_arrays(setup.state, _model_arrays(run.state(step)))
      cases.append(harness.Case(f"train step C={chunk} step {step}", steps.jit_train_step(setup),
                                (state, batch), threads_state=True,
                                info=dict(kind="train_step", chunk=chunk, step=step)))
  harness.run_group(cases, 20.0, repeats)
  return [harness.record(c) for c in cases]


def print_ratios(records, base_step: int) -> None:
  """Each timed case against the same case at `base_step`."""
  rows = []
  for r in records:
    if r["step"] == base_step or "median_s" not in r:
      continue
    base = next(b for b in records if b["name"] == r["name"].replace(
        f"step {r['step']}", f"step {base_step}"))
    rows.append([r["name"], harness.fmt_ms(base["median_s"]), harness.fmt_ms(r["median_s"]),
                 f"{r['median_s'] / base['median_s']:.2f}x", f"{r['min_s'] / base['min_s']:.2f}x",
                 harness.fmt_bytes(r.get("temp_plus_output_bytes"))])
  print(f"\ntrained against step {base_step}, fwd+bwd\n"
        + harness.markdown_table(["case", f"step {base_step} ms", "trained ms", "ratio (median)",
                                  "ratio (min)", "memory"], rows))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--source", default=str(FIXTURE),
                      help="a run folder with checkpoints/, or a fixture folder")
  parser.add_argument("--steps", default="", help="comma-separated steps (default: all kept)")
  parser.add_argument("--chunks", default="", help="chunk lengths (default: the run's)")
  parser.add_argument("--batches", type=int, default=2, help="training batches per step")
  parser.add_argument("--time", action="store_true", help="time init against trained")
  parser.add_argument("--repeats", type=int, default=7)
  parser.add_argument("--json", default="", help="also write the numbers to this file")
  parser.add_argument("--save-fixture", default="", help="write --steps' last step here")
  args = parser.parse_args(argv)
  run = Run(Path(args.source), args.batches)
  wanted = [int(s) for s in args.steps.split(",")] if args.steps else run.steps()
  chunks = [int(c) for c in args.chunks.split(",")] if args.chunks else [run.model_config.chunk_size]
  if args.save_fixture:
    save_fixture(run, wanted[-1], Path(args.save_fixture))
    return 0
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  output = {"source": args.source, "environment": harness.environment()}
  if args.time:
    output["timings"] = time_steps(run, wanted, chunks, args.repeats)
    print_ratios(output["timings"], wanted[0])
  else:
    results = diagnose(run, wanted, chunks)
    print(f"2W = {2 * limit:.1f}; gates raised to −W/2 = {-0.5 * limit:.1f} first")
    print("| step | layer | C | log λ p1 / p10 / p50 / min | span p50 / p90 / p99 / max | "
          "steep chunks | branch per batch |")
    print("|---|---|---|---|---|---|---|")
    for step, layers in results.items():
      for index, per_chunk in enumerate(layers):
        for chunk, s in per_chunk.items():
          lq, sq = s["log_decay_quantiles"], s["span_quantiles"]
          print(f"| {step} | {index} | {chunk} | {lq['0.01']:.2f} / {lq['0.1']:.2f} / "
                f"{lq['0.5']:.3f} / {lq['0.0']:.1f} | {sq['0.5']:.1f} / {sq['0.9']:.1f} / "
                f"{sq['0.99']:.1f} / {sq['1.0']:.1f} | {100 * s['steep_chunk_share']:.2f}% "
                f"(capacity {100 * s['steep_capacity'] / s['chunks_per_call']:.2f}%) | "
                f"{'; '.join(s['branches'])} |")
    output["results"] = results
  if args.json:
    Path(args.json).write_text(json.dumps(output, indent=1, default=float))
  return 0


if __name__ == "__main__":
  sys.exit(main())
