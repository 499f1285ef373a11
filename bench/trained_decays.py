r"""What trained LION-S decays look like to `chunk_scan`: the branch, the spans, the steep chunks.

    python bench/trained_decays.py --workdir runs/listops_lion_s            # every kept step
    python bench/trained_decays.py --workdir runs/x --steps 0,500 --batches 4 --json out.json

For each checkpoint kept in `<workdir>/checkpoints/` (step 0 is the model at initialisation),
the run's model is applied in training mode to the first `--batches` training batches of its
own data, and every call of the chunk kernel is intercepted to read the log-decays it gets.
Per layer and step it prints:

  log λ         quantiles of the per-token, per-channel log-decays (padding included, as the
                kernel sees them; the code convention's forward gate is the same values shifted);
  span          quantiles of the per-chunk spans Σ_t |log λ_t| over each chunk of C tokens and
                each channel (what decides whether the factored block is exact: ≤ 2W);
  steep chunks  the share of (example, head, chunk) triples with a channel spanning > 2W (the
                unit a per-chunk fallback would recompute) and the share of (example, head,
                chunk, channel) quadruples;
  branch        the branch the kernel takes for the whole call (`chunkwise.vector_level`) on
                each batch: factored, halving to S, or the exact masks.

Shapes: B batch, L length, H heads, G decay channels (V, or 2V with the normaliser channels),
N chunks, C chunk length.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from configs import workdir as workdir_config  # noqa: E402
from lion_jax import chunkwise  # noqa: E402
from lra import checkpoint, steps, train  # noqa: E402
from lra.data.batching import make_loader  # noqa: E402

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
  """[B, H, N, G] Σ_t |log λ_t| over each chunk (the sequence padded with zeros to N·C)."""
  batch, length, heads, groups = log_decay.shape
  pad = -length % chunk
  padded = np.pad(np.abs(log_decay), [(0, 0), (0, pad), (0, 0), (0, 0)])
  return padded.reshape(batch, -1, chunk, heads, groups).sum(2).transpose(0, 2, 1, 3)


def layer_stats(log_decays, chunk):
  """Summary of one layer's log-decays over several batches (each [B, L, H, G])."""
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  sizes = chunkwise.vector_chunk_sizes(chunk)
  names = [f"factored C={sizes[0]}"] + [f"halving S={s}" for s in sizes[1:]] + ["exact masks"]
  values = np.concatenate([x.ravel() for x in log_decays])
  spans = [chunk_spans(x, chunk) for x in log_decays]  # [B, H, N, G] each
  all_spans = np.concatenate([s.ravel() for s in spans])
  steep = np.concatenate([(s > 2 * limit).any(-1).ravel() for s in spans])
  branches = []
  for x in log_decays:
    pad = -x.shape[1] % chunk
    padded = jnp.pad(jnp.asarray(x), [(0, 0), (0, pad), (0, 0), (0, 0)])
    branches.append(names[int(chunkwise.vector_level(padded, padded, sizes, limit))])
  return {
      "log_decay_quantiles": dict(zip(map(str, QUANTILES), np.quantile(values, QUANTILES).tolist())),
      "share_log_decay_below": {str(t): float((values < t).mean()) for t in (-1.25, -5, -10, -20)},
      "span_quantiles": dict(zip(map(str, QUANTILES), np.quantile(all_spans, QUANTILES).tolist())),
      "steep_chunk_share": float(steep.mean()),
      "steep_channel_chunk_share": float((all_spans > 2 * limit).mean()),
      "steep_chunks": int(steep.sum()), "chunks": int(steep.size),
      "branches": branches,
  }


def kept_steps(workdir: Path) -> list[int]:
  return sorted(int(p.name) for p in (workdir / checkpoint.LATEST_DIR).iterdir() if p.name.isdigit())


def diagnose(workdir: Path, steps_wanted, num_batches: int):
  """{step: [per-layer stats]} for the run in `workdir` (step 0: the model at init)."""
  config = workdir_config.get_config(str(workdir))
  model_config = train.check_config(config)
  splits, info = train.load_data(config)
  setup = train._setup(config, info, model_config, 1, 1)
  loader = make_loader(splits["train"], batch_size=config.batch_size, seed=config.seed,
                       shuffle=True, drop_remainder=True)
  it = iter(loader)
  batches = [next(it) for _ in range(num_batches)]
  ckpt = checkpoint.Checkpointer(workdir, config.max_checkpoints_to_keep)
  results = {}
  for step in steps_wanted:
    state = setup.state if step == 0 else ckpt.restore(step, setup.state)[0]
    model, _ = nnx.merge(setup.train_graphdef, state)
    per_batch = [capture_log_decays(model, b) for b in batches]  # [batch][layer]
    layers = list(zip(*per_batch))
    results[step] = [layer_stats(list(layer), model_config.chunk_size) for layer in layers]
  ckpt.close()
  return results, model_config.chunk_size


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True, help="a run folder with checkpoints/")
  parser.add_argument("--steps", default="", help="comma-separated steps (default: 0 and every kept step)")
  parser.add_argument("--batches", type=int, default=2, help="training batches per step")
  parser.add_argument("--json", default="", help="also write the numbers to this file")
  args = parser.parse_args(argv)
  workdir = Path(args.workdir)
  wanted = ([int(s) for s in args.steps.split(",")] if args.steps else [0] + kept_steps(workdir))
  results, chunk = diagnose(workdir, wanted, args.batches)
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  print(f"chunk C = {chunk}, factored limit 2W = {2 * limit:.1f}")
  print("| step | layer | log λ p1 / p10 / p50 / min | span p50 / p90 / p99 / max | "
        "steep chunks | steep chunk-channels | branch per batch |")
  print("|---|---|---|---|---|---|---|")
  for step, layers in results.items():
    for index, s in enumerate(layers):
      lq, sq = s["log_decay_quantiles"], s["span_quantiles"]
      print(f"| {step} | {index} | {lq['0.01']:.2f} / {lq['0.1']:.2f} / {lq['0.5']:.3f} / "
            f"{lq['0.0']:.1f} | {sq['0.5']:.1f} / {sq['0.9']:.1f} / {sq['0.99']:.1f} / "
            f"{sq['1.0']:.1f} | {100 * s['steep_chunk_share']:.2f}% | "
            f"{100 * s['steep_channel_chunk_share']:.3f}% | {', '.join(s['branches'])} |")
  if args.json:
    Path(args.json).write_text(json.dumps({"workdir": str(workdir), "chunk": chunk,
                                           "results": results}, indent=1))
  return 0


if __name__ == "__main__":
  sys.exit(main())
