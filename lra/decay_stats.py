r"""The decays of LION-S at init under each reading of the paper: the numbers docs/paper_notes.md cites.

    python -m lra.decay_stats            # every task preset, 8 inputs each, seed 0
    python -m lra.decay_stats --tasks listops --batch 4

For each task's preset (S5 width and heads, HiPPO base decays, gate weights N(0, 0.1²) with
bias 0, paper §D.2), the first block's mixer input is computed from random inputs (token ids
uniform over the vocabulary, or pixel values uniform over 0..255) through the encoder and the
block's norm (BatchNorm with batch statistics, so every feature has unit variance, as in every
later block). The gate logits z = W x + b of that input then give the per-token log-decays
a = log λ of four forms:

  paper_literal     a = σ(z) + B, the LION paper §4.5 form read literally; λ > 1 where a > 0,
                    which the `paper_literal` mode clamps to λ = 1
  softplus_literal  a = B + softplus(z), Table 6 row [7] read literally ("a_i = SoftPlus(x)"
                    added to the HiPPO part); not a mode of this codebase
  softplus_dt       a = B · softplus(z + c), our row [7] (`lion_jax.ops.decay`)
  sigmoid_dt        a = B · 2σ(z), the default until the gate became additive
                    (docs/paper_notes.md §13)

and the table reports, per form: the fraction of λ ≥ 1 (clamped or overflowing), the largest λ,
and the fraction of (example, channel) rows whose log-decays summed over the whole sequence
exceed log(float32 max) ≈ 88.72, i.e. where a mask entry between the first and last token is
+inf (a non-finite forward pass). Shapes: B batch, L length, M width, H heads, G decay channels.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lion_jax import LraClassifier, preset
from lion_jax.ops import decay as decay_lib
from lion_jax.nn.blocks import apply_norm
from lion_jax.nn.models import token_mask

# task -> (sequence length, vocabulary size; 0 for pixel inputs), as the LRA tasks have them.
TASK_INPUTS = {"listops": (2048, 20), "text": (4096, 256), "retrieval": (4000, 256),
               "image": (1024, 0), "pathfinder": (1024, 0), "pathx": (16384, 0)}
FLOAT32_LOG_MAX = float(np.log(np.finfo(np.float32).max))  # ≈ 88.72

# form -> log λ [B, L, H, G] from B [H, G] and z [B, L, H, G]; the literal forms are unclamped.
FORMS = {
    "paper_literal": lambda base, z: jax.nn.sigmoid(z) + base,
    "softplus_literal": lambda base, z: base + jax.nn.softplus(z),
    "softplus_dt": decay_lib.SELECTIVE_MODES["softplus_dt"],
    "sigmoid_dt": decay_lib.SELECTIVE_MODES["sigmoid_dt"],
}


def first_layer_log_decays(task: str, batch: int = 8, seed: int = 0, length: int | None = None):
  """Log-decays of every form in the first LION-S block of `task`'s preset at init.

  Args:
    task: an LRA task name (a key of `TASK_INPUTS`).
    batch: number of random inputs.
    seed: seeds the model init and the inputs.
    length: sequence length (None: the task's).

  Returns:
    {form: float32 [B, L, H, G] log λ}.
  """
  task_length, vocab = TASK_INPUTS[task]
  length = length or task_length
  # Gate bias 0, as every form above assumes (the default log_additive gate starts at b = 1).
  config = preset(task, num_layers=1, selective_mode="sigmoid_dt")
  model = LraClassifier(config, num_classes=2, vocab_size=max(vocab, 1), rngs=nnx.Rngs(seed))
  model.train()  # BatchNorm normalises with the batch statistics, as in training
  key = jax.random.key(seed + 1)
  inputs = jax.random.randint(key, (batch, length), 1 if vocab else 0, vocab or 256)  # [B, L]
  mask = token_mask(jnp.full((batch,), length), length)  # [B, L], no padding
  block = model.encoder.blocks[0]
  x = apply_norm(block.norm, model.encoder.inputs(inputs), mask)  # [B, L, M]
  mixer = block.mixer
  heads, groups = config.num_heads, mixer.groups
  z = mixer.decay_gate(x).reshape(batch, length, heads, groups).astype(jnp.float32)  # [B, L, H, G]
  base = decay_lib.base_log_decay(mixer.decay_base[...], config.decay_param)  # [H, G]
  return {name: form(base, z) for name, form in FORMS.items()}


def summarise(log_decays) -> dict[str, float]:
  """Fraction of λ ≥ 1, the largest λ, and the fraction of rows whose total log-decay overflows.

  Args:
    log_decays: [B, L, H, G] log λ of one form.

  Returns:
    {"frac_ge_1", "max_lambda", "frac_overflow"}.
  """
  a = np.asarray(log_decays, np.float64)
  total = a.sum(axis=1)  # [B, H, G] log of the mask entry between the first and last token
  return {"frac_ge_1": float(np.mean(a >= 0.0)), "max_lambda": float(np.exp(a.max())),
          "min_lambda": float(np.exp(a.min())),
          "frac_overflow": float(np.mean(total > FLOAT32_LOG_MAX))}


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--tasks", default="listops,text,retrieval,image,pathfinder",
                      help="comma list of " + ",".join(TASK_INPUTS))
  parser.add_argument("--batch", type=int, default=8)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  print("| task | L | width | form | λ ≥ 1 | max λ | min λ | rows overflowing |")
  print("|---|---|---|---|---|---|---|---|")
  for task in args.tasks.split(","):
    stats = first_layer_log_decays(task, args.batch, args.seed)
    for name, log_decays in stats.items():
      s = summarise(log_decays)
      print(f"| {task} | {log_decays.shape[1]} | {preset(task).d_model} | {name} | "
            f"{100 * s['frac_ge_1']:.2f}% | {s['max_lambda']:.6f} | {s['min_lambda']:.4f} | "
            f"{100 * s['frac_overflow']:.1f}% |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
