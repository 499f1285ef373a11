"""Parameter counts of the LRA presets next to S5's (`python -m bench.probes.param_counts`).

LION counts come from building each preset abstractly (`nnx.eval_shape`, no memory). S5 counts are
computed from its architecture (S5's `ssm.py`, `layers.py` and `seq_model.py`) with the
per-task sizes of the S5 scripts: per layer, with P' = P/2 conjugate-pair states (`conj_sym=True`),
Λ_re and Λ_im (2P'), B̃ (2P'H reals), C̃₁ and C̃₂ (4P'H reals, bidirectional), D (H), log Δ (P'),
BatchNorm (2H) and the GLU Dense layers (H² + H each); plus the one-hot encoder Dense(in_dim → H)
and the decoder (Dense(H → classes), or the retrieval MLP Dense(4H → H) → Dense(H → 2)).
"""

from __future__ import annotations

import dataclasses

from flax import nnx

from lion_jax.config import PRESETS, ModelConfig
from lion_jax.nn.models import LraClassifier, count_params


@dataclasses.dataclass(frozen=True)
class TaskIO:
  """What a preset needs to be built: classes, vocabulary and input layout (ours and S5's)."""

  num_classes: int
  vocab_size: int  # our token vocabulary (lra.data; ignored by the dense pixel encoder)
  dual_input: bool
  s5_in_dim: int  # S5's one-hot width (1 for its normalised-pixel tasks)
  s5_ssm_size: int  # S5's P (`ssm_size_base`)


# Our vocabularies as in lra/data at the time of writing; S5's in_dim as in its data loaders
# (AAN's is len(vocab) of its character vocabulary, ≈ 100: an approximation).
TASK_IO = {
    "listops": TaskIO(10, 16, False, 20, 16),
    "text": TaskIO(2, 257, False, 135, 192),
    "retrieval": TaskIO(2, 257, True, 100, 256),
    "image": TaskIO(10, 256, False, 1, 384),
    "pathfinder": TaskIO(2, 256, False, 1, 256),
    "pathx": TaskIO(2, 256, False, 1, 256),
}


def lion_param_count(config: ModelConfig, io: TaskIO) -> int:
  """Trainable parameters of an `LraClassifier`, counted without allocating it."""
  model = nnx.eval_shape(lambda: LraClassifier(config, num_classes=io.num_classes,
                                               vocab_size=io.vocab_size, dual_input=io.dual_input,
                                               rngs=nnx.Rngs(0)))
  return count_params(model)


def s5_param_count(config: ModelConfig, io: TaskIO) -> int:
  """Trainable parameters of the S5 model with the same H, depth and activation (docstring)."""
  h, states = config.d_model, io.s5_ssm_size // 2
  ssm = 2 * states + 2 * states * h + 4 * states * h + h + states
  dense = h * h + h
  glu = {"gelu": 0, "half_glu1": 1, "half_glu2": 1, "full_glu": 2}[config.activation]
  layer = ssm + 2 * h + glu * dense
  encoder = io.s5_in_dim * h + h
  if io.dual_input:
    decoder = (4 * h * h + h) + (h * io.num_classes + io.num_classes)
  else:
    decoder = h * io.num_classes + io.num_classes
  return encoder + config.num_layers * layer + decoder


def table() -> list[tuple[str, int, int, int, int]]:
  """(task, d_model, layers, LION params, S5 params) for every preset."""
  rows = []
  for task, config in PRESETS.items():
    io = TASK_IO[task]
    rows.append((task, config.d_model, config.num_layers, lion_param_count(config, io),
                 s5_param_count(config, io)))
  return rows


def main() -> None:
  print(f"{'task':<11} {'H':>4} {'layers':>6} {'LION':>10} {'S5':>10}")
  for task, width, depth, lion, s5 in table():
    print(f"{task:<11} {width:>4} {depth:>6} {lion:>10,} {s5:>10,}")


if __name__ == "__main__":
  main()
