r"""What a trained LION or S5 classifier learnt, drawn: each layer's timescales and mixing matrix.

    lion-pictures --workdir runs/ladder/listops/lion_s/seed0 [--out DIR] [--example 0] [--init]

For the run's best checkpoint (`--init`: the same model untrained, from the run's seed) and one
validation example, writes into `--out` (default: the workdir):

  timescales.png   per layer, LION: the memory 1/|log λ| in tokens of every decay channel, its
                   base decay and (LION-S) the mean over the example's tokens of its selective
                   decay; S5: each state's memory 1/|Re ΛΔ| against its phase Im ΛΔ per token
                   (radians), the rotation that real decays lack; LION with complex decays
                   (`decay_phase`): the mean memory against θ the same way.
  mixing.png       per layer, the token-to-token weights of the example: LION's mask-weighted
                   scores (q_i·k_j) M_ij (normalised per row as the model does, and times the value
                   gain where it has one), averaged over value channels; S5's kernel norm
                   ‖K_ij‖_F with K_ij = 2 Re(C̃ Λ̄^{|i−j|} B̄) (the forward read-out for j ≤ i,
                   the backward one for j ≥ i, plus D on the diagonal).
  pictures.json    per layer: LION's q·k over the example's token pairs (min, mean, std, max:
                   how far content moves a weight before the mask does), the memories' quantiles
                   and, for S5, the phases'.

Given `--workdir` several times, draws instead, into `--out`, the runs side by side before and
after training (each untrained from its own seed, then at its best checkpoint):

  memories.png     per layer, every channel's memory in tokens (LION: 1/|mean log λ| over the
                   example's tokens; S5: 1/|Re ΛΔ|), untrained in grey, trained in colour, a bar
                   at each median.
  memories.json    per run and layer, the quantiles 10 / 50 / 90% of both.

    lion-pictures --workdir runs/a/listops/lion/seed0 --workdir runs/a/listops/s5/seed0 --out DIR

The numbers are computed in NumPy from the restored parameters and the block inputs the
model computes for the example (so the pictures show the model, not a re-implementation of its
training path). Shapes: L length, M width, H heads, K key width, V value width per head.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from flax import nnx

from lion_jax.nn.blocks import apply_norm, zero_padding
from lion_jax.nn.mixer import VALUE_GAIN_SCALES, LionMixer, feature_map
from lion_jax.nn.s5 import S5Mixer
from lra.metrics import save_figure


# --- the maths, per layer, in float64 ----------------------------------------------------------

def lion_mixing(q, k, log_decay, *, normalize: str, value_gain: float):
  """LION's token-to-token weights of one example, per value channel.

  Args:
    q, k: [L, H, K] features (after φ).
    log_decay: [L, H, V] per-token log-decays (symmetric convention).
    normalize: "after" (rows sum to 1 per channel) or "none".
    value_gain: c, multiply key j's weight by c(1 − λ_j) (`LionMixer`'s `value_gain`); 0: none.

  Returns:
    [H, V, L, L] weights W[h, c, i, j] of value j in output i.
  """
  scores = np.einsum("ihk,jhk->hij", q, k)  # [H, L, L]
  cumulative = np.cumsum(log_decay, axis=0)  # [L, H, V]
  # Symmetric mask: log M_ij = Σ_{t ∈ (min(i,j), max(i,j)]} a_t = −|A_i − A_j|, A the cumulative sum.
  log_mask = -np.abs(cumulative[:, None] - cumulative[None, :])  # [L, L, H, V]
  weights = scores.transpose(1, 2, 0)[..., None] * np.exp(log_mask)  # [L, L, H, V]
  if value_gain:
    weights = weights * (value_gain * -np.expm1(log_decay))[None]  # key j's gain c(1 − λ_j)
  if normalize == "after":
    weights = weights / weights.sum(axis=1, keepdims=True)
  return weights.transpose(2, 3, 0, 1)  # [H, V, L, L]


def s5_kernel_norms(lambda_bar, b_bar, c_tilde, d, length: int, conj_sym: bool = True):
  """‖K_ij‖_F of S5's [M, M] input-to-output map between tokens j and i (time-invariant).

  Args:
    lambda_bar: [N] complex discrete eigenvalues; b_bar: [N, M]; c_tilde: [M, 2N] (forward
      read-out first); d: [M] feed-through.
    length: L.
    conj_sym: outputs are 2·Re of the read-out.

  Returns:
    [L, L] norms: forward lags below the diagonal, backward above, both and D on it.
  """
  n = lambda_bar.shape[0]
  scale = 2.0 if conj_sym else 1.0
  lags = np.arange(length)
  powers = lambda_bar[None, :] ** lags[:, None]  # [L, N]
  forward = scale * np.einsum("mn,ln,np->lmp", c_tilde[:, :n], powers, b_bar).real  # [L, M, M]
  backward = scale * np.einsum("mn,ln,np->lmp", c_tilde[:, n:], powers, b_bar).real  # [L, M, M]
  diagonal = np.linalg.norm(forward[0] + backward[0] + np.diag(d))
  forward_norms = np.linalg.norm(forward, axis=(1, 2))  # [L]
  backward_norms = np.linalg.norm(backward, axis=(1, 2))  # [L]
  i, j = np.meshgrid(lags, lags, indexing="ij")
  out = np.where(i > j, forward_norms[np.abs(i - j)], backward_norms[np.abs(i - j)])
  out[lags, lags] = diagonal
  return out


def _quantiles(values) -> dict[str, float]:
  return {f"q{int(100 * q)}": float(np.quantile(values, q)) for q in (0.1, 0.5, 0.9)}


# --- the model's layers on one example ---------------------------------------------------------

def block_inputs(model, tokens, length: int) -> list[np.ndarray]:
  """The normalised input of every block's mixer for one example, as the eval model computes it.

  Args:
    model: an `LraClassifier` in eval mode (single input).
    tokens: [L] token ids or pixels; length: the real length.

  Returns:
    One [1, L, M] array per block.
  """
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  inputs = jnp.asarray(tokens)[None]  # [1, L]
  mask = jnp.arange(inputs.shape[1])[None] < length  # [1, L]
  encoder = model.encoder
  x = zero_padding(encoder.inputs(inputs), mask)
  captured = []
  for block in encoder.blocks:
    captured.append(np.asarray(apply_norm(block.norm, x, mask) if block.prenorm else x))
    x = zero_padding(block(x, mask), mask)
  return captured


def describe_lion(mixer: LionMixer, x, length: int) -> dict:
  """Timescales, mixing weights and q·k of one LION layer on one example (x: [1, L, M])."""
  config = mixer.config
  x64 = np.asarray(x, np.float64)[0, :length]  # [L, M]
  heads, key_dim = config.num_heads, config.qk_dim

  def features(proj):
    z = (x64 @ np.asarray(proj.kernel[...], np.float64)).reshape(length, heads, key_dim)
    return np.asarray(feature_map(z, config.feature_map), np.float64)

  if mixer.q_proj is None:  # feature_map="constant": q·k = 1 with one feature a head
    q = k = np.ones((length, heads, 1))  # [L, H, 1]
  else:
    q, k = features(mixer.q_proj), features(mixer.k_proj)  # [L, H, K]
  log_decay = mixer.log_decay(x[:, :length])
  value_dim = config.head_dim
  if log_decay is None:
    per_token = np.zeros((length, heads, value_dim))
  else:
    per_token = np.broadcast_to(np.asarray(log_decay, np.float64).reshape(
        (length, heads, -1) if np.ndim(log_decay) >= 3 else (1, heads, -1)),
        (length, heads, value_dim))
  weights = lion_mixing(q, k, per_token, normalize=config.normalize,
                        value_gain=VALUE_GAIN_SCALES.get(config.value_gain, 0.0))
  real = np.tril(np.ones((length, length), bool), -1)  # each pair once
  qk = np.einsum("ihk,jhk->hij", q, k)[:, real]
  base = None
  if mixer.decay_base is not None:
    from lion_jax.ops.decay import base_log_decay  # pylint: disable=import-outside-toplevel
    base = np.asarray(base_log_decay(mixer.decay_base[...], config.decay_param), np.float64)
  memory = 1.0 / np.maximum(-per_token.mean(axis=0), 1e-12)  # [H, V] tokens
  phase = (None if mixer.decay_phase is None else np.broadcast_to(
      np.asarray(mixer.phase(), np.float64), memory.shape))  # [H, V] θ, rad per token
  return {
      "kind": "lion",
      "mixing": weights.mean(axis=(0, 1)),  # [L, L]
      "memory": memory.ravel(),
      "base_memory": None if base is None else (1.0 / -base).ravel(),
      "phase": None if phase is None else phase.ravel(),
      "stats": {"qk": {"min": float(qk.min()), "mean": float(qk.mean()), "std": float(qk.std()),
                       "max": float(qk.max())},
                "memory_tokens": _quantiles(memory),
                # Each token's own λ_t: a gate that resets at a few tokens and stays open
                # elsewhere has short mean memories but long ones here.
                "token_memory_tokens": _quantiles(1.0 / np.maximum(-per_token, 1e-12)),
                **({} if base is None else {"base_memory_tokens": _quantiles(1.0 / -base)}),
                **({} if phase is None else {"phase_per_token": _quantiles(np.abs(phase))})},
  }


def describe_s5(mixer: S5Mixer, length: int) -> dict:
  """Timescales and kernel norms of one S5 layer (input-independent)."""
  lambda_ = np.asarray(mixer.eigenvalues(), np.complex128)
  step = np.exp(np.asarray(mixer.log_step[...], np.float64))
  lambda_dt = lambda_ * step  # [N]
  lambda_bar, b_bar = (np.asarray(a, np.complex128) for a in mixer.discretize())
  c_tilde = np.asarray(mixer.c_re[...], np.float64) + 1j * np.asarray(mixer.c_im[...], np.float64)
  norms = s5_kernel_norms(lambda_bar, b_bar, c_tilde, np.asarray(mixer.d[...], np.float64),
                          length, mixer.config.conj_sym)
  memory = 1.0 / np.maximum(-lambda_dt.real, 1e-12)
  return {"kind": "s5", "mixing": norms, "memory": memory, "phase": lambda_dt.imag,
          "stats": {"memory_tokens": _quantiles(memory),
                    "phase_per_token": _quantiles(np.abs(lambda_dt.imag))}}


# --- restoring a run and drawing ---------------------------------------------------------------

def load_model(workdir: Path, *, init: bool):
  """(config, eval-mode model, validation split) of a run: its best checkpoint, or untrained."""
  from configs import workdir as workdir_config  # pylint: disable=import-outside-toplevel
  from lra import checkpoint, steps, train  # pylint: disable=import-outside-toplevel
  config = workdir_config.get_config(str(workdir))
  model_config = train.check_config(config)
  splits, info = train.load_data(config)
  if info.dual_input:
    raise SystemExit(f"lion-pictures: {config.task} pairs two documents; draw a single-input task")
  setup = train._setup(config, info, model_config, 1, 1)  # pylint: disable=protected-access
  state = setup.state
  if not init:
    ckpt = checkpoint.Checkpointer(workdir, config.max_checkpoints_to_keep)
    best = ckpt.best_step()
    if best is None:
      raise SystemExit(f"lion-pictures: no best checkpoint under {workdir}; train the run first, "
                       "or pass --init to draw its untrained model")
    state, _ = ckpt.restore(best, setup.state, best=True)
    ckpt.close()
  model = nnx.merge(setup.eval_graphdef, steps.model_state(state))
  if init:
    # BatchNorm's running averages start at mean 0, variance 1, so an untrained model in eval
    # mode would see its raw embeddings; in training mode it sees the normalised inputs it is
    # trained on (statistics of the one example; the model is discarded after).
    model.train()
  return config, model, splits["val"]


def describe_run(workdir: Path, *, example: int = 0, init: bool = False) -> dict:
  """Every layer's `describe_lion`/`describe_s5` for validation example `example`."""
  from lra.data.batching import make_loader  # pylint: disable=import-outside-toplevel
  config, model, split = load_model(workdir, init=init)
  loader = make_loader(split, batch_size=1, seed=0, shuffle=False, drop_remainder=False,
                       num_epochs=1)
  for index, batch in enumerate(loader):
    if index == example:
      break
  else:
    raise SystemExit(f"lion-pictures: --example {example}: the validation split has {index + 1}")
  tokens, length = np.asarray(batch["inputs"][0]), int(batch["lengths"][0])
  layers = []
  for block, x in zip(model.encoder.blocks, block_inputs(model, tokens, length)):
    if isinstance(block.mixer, LionMixer):
      layers.append(describe_lion(block.mixer, x, length))
    elif isinstance(block.mixer, S5Mixer):
      layers.append(describe_s5(block.mixer, length))
    else:
      raise SystemExit(f"lion-pictures: mixer {config.model.mixer!r} has no picture; LION and S5 do")
  return {"run": str(workdir), "checkpoint": "init" if init else "best", "example": example,
          "length": length, "mixer": config.model.mixer, "layers": layers}


def draw(description: dict, out: Path) -> list[Path]:
  """timescales.png, mixing.png and pictures.json under `out`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from matplotlib.colors import LogNorm  # pylint: disable=import-outside-toplevel
  layers = description["layers"]
  title = f"{description['run']} ({description['checkpoint']})"
  out.mkdir(parents=True, exist_ok=True)
  fig, axes = plt.subplots(1, len(layers), figsize=(3 * len(layers), 3), squeeze=False)
  for depth, (ax, layer) in enumerate(zip(axes[0], layers)):
    if layer.get("phase") is not None:  # S5, and LION with complex decays (mean memory)
      ax.scatter(layer["phase"], layer["memory"], s=10)
      ax.set_xlabel("phase Im ΛΔ (rad/token)" if layer["kind"] == "s5" else "phase θ (rad/token)")
    else:
      ax.plot(np.sort(layer["memory"]), ".", label="mean over tokens")
      if layer["base_memory"] is not None:
        ax.plot(np.sort(layer["base_memory"]), ".", label="base")
      ax.set_xlabel("channel (sorted)")
      if depth == 0:
        ax.legend(fontsize=7)
    ax.set_yscale("log")
    ax.set_title(f"layer {depth}", fontsize=8)
  axes[0][0].set_ylabel("memory (tokens)")
  fig.suptitle(f"timescales: {title}", fontsize=8)
  fig.tight_layout()
  paths = [out / "timescales.png"]
  save_figure(fig, paths[0], dpi=110)
  plt.close(fig)

  fig, axes = plt.subplots(1, len(layers), figsize=(3 * len(layers), 3), squeeze=False)
  for depth, (ax, layer) in enumerate(zip(axes[0], layers)):
    mixing = np.abs(layer["mixing"])
    positive = mixing[mixing > 0]
    floor = max(positive.min(), positive.max() * 1e-3) if positive.size else 1e-12  # 3 decades
    ax.imshow(np.maximum(mixing, floor), norm=LogNorm(vmin=floor, vmax=mixing.max()),
              cmap="viridis", interpolation="nearest")
    ax.set_title(f"layer {depth}", fontsize=8)
    ax.set_xticks([])
    ax.set_yticks([])
  kind = "‖K_ij‖ (S5)" if layers[0]["kind"] == "s5" else "channel-mean weights (LION)"
  fig.suptitle(f"mixing, {kind}, output i down, input j across: {title}", fontsize=8)
  fig.tight_layout()
  paths.append(out / "mixing.png")
  save_figure(fig, paths[1], dpi=110)
  plt.close(fig)

  summary = {k: v for k, v in description.items() if k != "layers"}
  summary["layers"] = [layer["stats"] for layer in layers]
  paths.append(out / "pictures.json")
  paths[2].write_text(json.dumps(summary, indent=2) + "\n")
  return paths


def run_labels(workdirs: list[Path]) -> list[str]:
  """"lion seed0" for each lion-sweep `<root>/<task>/<variant>/seed<k>` (else the folder's
  name); the whole paths where two runs would share a label (one variant and seed from two
  sweeps), so that memories.json keeps both."""
  labels = [f"{Path(w).parent.name} {Path(w).name}" if Path(w).name.startswith("seed")
            else Path(w).name for w in workdirs]
  return labels if len(set(labels)) == len(labels) else [str(w) for w in workdirs]


def draw_memories(runs: list[tuple[str, dict, dict]], out: Path) -> list[Path]:
  """memories.png and memories.json under `out`: the memories of each run's layers untrained
  and trained, side by side.

  Args:
    runs: (label, untrained description, trained description) per run, each description as
      `describe_run` returns it; every run has the same number of layers.
    out: the folder.
  """
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  depth = {len(trained["layers"]) for _, _, trained in runs}
  if len(depth) != 1:
    counts = ", ".join(f"{label}: {len(trained['layers'])}" for label, _, trained in runs)
    raise SystemExit(f"lion-pictures: the runs have different numbers of layers ({counts}); "
                     "compare runs of one task preset")
  (layers,) = depth
  out.mkdir(parents=True, exist_ok=True)
  columns = min(layers, 3)
  rows = -(-layers // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.6 * rows), squeeze=False,
                           sharey=True)
  colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  rng = np.random.default_rng(0)  # jitter only
  for index in range(rows * columns):
    ax = axes[index // columns][index % columns]
    if index >= layers:
      ax.axis("off")
      continue
    for position, (label, untrained, trained) in enumerate(runs):
      for offset, description, colour in ((-0.18, untrained, "0.65"),
                                          (0.18, trained, colours[position % len(colours)])):
        memory = np.asarray(description["layers"][index]["memory"], np.float64)
        x = position + offset + rng.uniform(-0.08, 0.08, memory.size)
        ax.scatter(x, memory, s=9, color=colour, linewidths=0)
        ax.hlines(np.median(memory), position + offset - 0.13, position + offset + 0.13,
                  color="k", linewidth=1)
    ax.set_yscale("log")
    ax.set_xticks(range(len(runs)), [label for label, _, _ in runs], fontsize=7)
    ax.set_title(f"layer {index}", fontsize=8)
    if index % columns == 0:
      ax.set_ylabel("memory (tokens)")
  fig.suptitle("memory of every channel: untrained (grey, left) and trained (colour, right); "
               f"bars: medians. Validation example {runs[0][2]['example']}, "
               f"{runs[0][2]['length']} tokens", fontsize=8)
  fig.tight_layout()
  paths = [out / "memories.png", out / "memories.json"]
  save_figure(fig, paths[0], dpi=100)
  plt.close(fig)
  summary = {label: {"run": trained["run"], "mixer": trained["mixer"],
                     "example": trained["example"], "length": trained["length"],
                     "layers": [{"untrained": _quantiles(before["memory"]),
                                 "trained": _quantiles(after["memory"])}
                                for before, after in zip(untrained["layers"], trained["layers"])]}
             for label, untrained, trained in runs}
  paths[1].write_text(json.dumps(summary, indent=1) + "\n")
  return paths


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="lion-pictures", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, type=Path, action="append",
                      help="a run folder (run.py --workdir); several: memories.png side by side")
  parser.add_argument("--out", type=Path, default=None,
                      help="folder of the pictures (default: --workdir; required with several)")
  parser.add_argument("--example", type=int, default=0, help="index in the validation split")
  parser.add_argument("--init", action="store_true", help="draw the untrained model (the run's seed)")
  args = parser.parse_args(argv)
  for workdir in args.workdir:
    if not (workdir / "config.json").exists():
      parser.error(f"--workdir {workdir}: no config.json there; pass a run folder that "
                   "run.py trained (or lion-sweep's <workdir>/<task>/<variant>/seed<N>)")
  if len(args.workdir) > 1:
    if args.out is None or args.init:
      parser.error("several --workdir draw memories.png side by side, untrained and trained: "
                   "pass --out DIR, and no --init")
    runs = [(label, describe_run(w, example=args.example, init=True),
             describe_run(w, example=args.example))
            for label, w in zip(run_labels(args.workdir), args.workdir)]
    for path in draw_memories(runs, args.out):
      print(path)
    return 0
  (workdir,) = args.workdir
  description = describe_run(workdir, example=args.example, init=args.init)
  for path in draw(description, args.out or workdir):
    print(path)
  for depth, stats in enumerate(description["layers"]):
    print(f"layer {depth}: " + json.dumps(stats["stats"]))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
