"""What a LION model does at initialisation: block output scales, memory lengths, gradients.

  .venv/bin/python bench/probes/init_diagnostics.py               # long ListOps (`cpu_long`)
  .venv/bin/python bench/probes/init_diagnostics.py \
      --variants lion_s,lion_s_zoh,lion_s@v_init=zoh_diag
  .venv/bin/python bench/probes/init_diagnostics.py --preset cpu --seeds 0,1,2

For each variant of `configs/listops.py` (any `model.*` override can be appended as
`variant@field=value@field=value`), the model is built as training builds it and run on one
training batch of the preset's generated data (written when missing, as `run.py` does). Per block
it prints:

  mixer/in     std of the mixer output over std of its (normalised) input: how much of the
               residual update the mixer contributes at init (≈ 1 for a layer that passes its
               input through; the paper's literal ZOH values give ≈ Δ^{3/2}, see docs/math.md §5)
  memory       quantiles (10/50/90%) over channels of 1/|log λ|, in tokens, with log λ averaged
               over the batch's real tokens for selective decays: how far each channel reaches
  local        mean over query tokens and channels of the mask weight within ±8 tokens after
               the row normalisation (with the uniform scores of an untrained φ(q)·φ(k) this is
               what each output mixes: 1 = purely local, 16/L ≈ uniform)
  |∇ W_v|, |∇ decay|  gradient norms of the value projection and of the decay parameters for the
               cross-entropy of that batch

and the model's loss and the gradient norm of the whole model. Numbers are means over `--seeds`.
Writes nothing; docs/bench/init_diagnostics.txt holds the published output.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from lion_jax.ops import decay as decay_lib  # noqa: E402
from lion_jax.nn.blocks import apply_norm, zero_padding  # noqa: E402
from lion_jax.nn.mixer import LionMixer  # noqa: E402
from lion_jax.nn.models import LraClassifier, token_mask  # noqa: E402
from lra.train import check_config, load_or_generate  # noqa: E402

LOCAL_RADIUS = 8


def parse_variant(spec):
  """"lion_s@model.dt_max=0.1@v_init=lecun" -> ("lion_s", {"dt_max": 0.1, "v_init": "lecun"});
  "true" and "false" (any case) are booleans."""
  name, *fields = spec.split("@")
  overrides = {}
  for field in fields:
    if "=" not in field:
      raise SystemExit(f"--variants entry {spec!r}: {field!r} is not FIELD=VALUE "
                       "(e.g. lion_s@v_init=zoh_diag@dt_max=0.1)")
    key, value = field.split("=", 1)
    value = {"true": True, "false": False}.get(value.lower(), value)
    for number in (int, float):
      try:
        value = value if isinstance(value, bool) else number(value)
        break
      except ValueError:
        pass
    overrides[key.removeprefix("model.")] = value
  return name, overrides


def local_weight(log_decay, length):
  """Mean mask weight within ±LOCAL_RADIUS tokens of the query, per channel, after the row
  normalisation, for uniform scores. log_decay: [G] per-channel log λ (base decays)."""
  position = np.arange(length)
  distance = np.abs(position[:, None] - position[None, :])  # [L, L]
  weights = np.exp(np.asarray(log_decay, np.float64)[:, None, None] * distance)  # [G, L, L]
  weights /= weights.sum(-1, keepdims=True)
  near = (distance <= LOCAL_RADIUS)
  return float((weights * near).sum(-1).mean())


def diagnose(experiment, model_config, batch, length):
  """One variant at one seed: a dict of per-block lists and model-wide numbers."""
  model = LraClassifier(model_config, num_classes=10, vocab_size=experiment["vocab"],
                        rngs=nnx.Rngs(experiment["seed"]))
  inputs, lengths, labels = (jnp.asarray(batch[k]) for k in ("inputs", "lengths", "labels"))
  mask = token_mask(lengths, inputs.shape[-1])
  blocks = model.encoder.blocks
  model.train()
  ratios, block_inputs = [], []
  x = zero_padding(model.encoder.inputs(inputs), mask)  # [B, L, M]
  real = mask[..., None]  # [B, L, 1]
  for block in blocks:
    normed = apply_norm(block.norm, x, mask) if block.prenorm else x  # [B, L, M]
    mixed = block.mixer(normed, mask)  # [B, L, M]
    block_inputs.append(normed)
    ratios.append(float(jnp.std(jnp.where(real, mixed, 0)) / jnp.std(jnp.where(real, normed, 0))))
    x = zero_padding(block(x, mask), mask)
  def loss_fn(model):
    logits = model(inputs, lengths)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

  loss, grads = nnx.value_and_grad(loss_fn)(model)
  loss = float(loss)
  flat = dict(nnx.to_flat_state(grads))
  norm = lambda keys: float(np.sqrt(sum(float(jnp.sum(flat[k][...] ** 2)) for k in keys)))
  grad_v, grad_decay, memory, local = [], [], [], []
  for index, (block, normed) in enumerate(zip(blocks, block_inputs)):
    prefix = ("encoder", "blocks", index, "mixer")
    keys = [k for k in flat if tuple(k[:4]) == prefix]
    grad_v.append(norm([k for k in keys if "v_proj" in k]))
    grad_decay.append(norm([k for k in keys if any("decay" in str(p) for p in k)]))
    mixer = block.mixer
    log_decay = mixer.log_decay(normed) if isinstance(mixer, LionMixer) else None
    if log_decay is None:  # LIT or another mixer: no decay
      memory.append(np.full(3, np.inf))
      local.append(LOCAL_RADIUS * 2.0 / length)
      continue
    log_decay = np.asarray(log_decay, np.float64)
    if log_decay.ndim > 2:  # selective: [B, L, H(, G)] -> the mean over real tokens per channel
      real = np.asarray(mask, np.float64).reshape(mask.shape + (1,) * (log_decay.ndim - 2))
      log_decay = (log_decay * real).sum((0, 1)) / real.sum((0, 1))
    log_decay = log_decay.ravel()  # [H·G]
    memory.append(np.quantile(1.0 / -log_decay, [0.1, 0.5, 0.9]))
    local.append(local_weight(log_decay, length))
  return {"ratio": ratios, "memory": memory, "local": local, "grad_v": grad_v,
          "grad_decay": grad_decay, "loss": loss,
          "grad": float(optax.global_norm(grads))}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--variants", default="lion_s_zoh,lion_s_zoh@v_init=identity,"
                      "lion_s_sigmoid_dt,lion_s,lion_s@decay_init=hippo_modulus,lion_s_random,"
                      "lion_d,lion_d_random")
  parser.add_argument("--preset", default="cpu_long", choices=("cpu_long", "cpu"))
  parser.add_argument("--seeds", default="0,1")
  parser.add_argument("--batch", type=int, default=32)
  args = parser.parse_args(argv)
  listops = importlib.import_module("configs.listops")
  seeds = [int(s) for s in args.seeds.split(",")]
  print(f"# {args.preset} ListOps, batch {args.batch}, seeds {seeds}; per block: "
        "mixer/in, memory quantiles 10/50/90% (tokens), local weight (±8), |∇W_v|, |∇decay|")
  for spec in args.variants.split(","):
    name, overrides = parse_variant(spec)
    config = listops.get_config(f"{name},{args.preset}")
    splits, info = load_or_generate(config)
    try:
      model_config = check_config(config).replace(**overrides)
    except (TypeError, ValueError) as error:  # an unknown field, or a bad value of a known one
      raise SystemExit(f"--variants entry {spec!r}: {error} (fields: lion_jax.ModelConfig)")
    train = splits["train"]
    batch = {"inputs": train.inputs[:args.batch].astype(np.int32),
             "lengths": train.lengths[:args.batch], "labels": train.labels[:args.batch]}
    length = train.inputs.shape[-1]
    runs = [diagnose({"seed": seed, "vocab": info.vocab_size}, model_config, batch, length)
            for seed in seeds]
    mean = lambda key: np.mean([r[key] for r in runs], axis=0)
    print(f"\n{spec}: loss {mean('loss'):.3f}, |∇| {mean('grad'):.3g}")
    for index, (ratio, memory, local, gv, gd) in enumerate(zip(
        mean("ratio"), mean("memory"), mean("local"), mean("grad_v"), mean("grad_decay"))):
      memory_text = "/".join(f"{m:.3g}" for m in memory)
      print(f"  block {index}: mixer/in {ratio:.3g}  memory {memory_text}  local {local:.2f}  "
            f"|∇W_v| {gv:.3g}  |∇decay| {gd:.3g}")


if __name__ == "__main__":
  main()
