"""How large each mixer's mixed tokens start, beside its feed-through D ⊙ x.

  .venv/bin/python bench/probes/mixed_scale.py
  .venv/bin/python bench/probes/mixed_scale.py --task listops --preset ladder \
      --variants s5_real,lion_s_s5_form,s5_real@c_init=lecun_normal

For each variant (`configs/<task>.py:<variant>,<preset>`; any `model.*` override appended as
`variant@field=value`), one mixer is built as training builds it and run on unit-variance Gaussian
inputs [B, L, M] (the normalised stream a block hands its mixer). It prints the standard deviation
of the whole output y, of the feed-through part D ⊙ x (S5's D; LION's `feedthrough`, else 0) and of
the rest, y − D ⊙ x: the tokens mixed over the sequence. Means over `--seeds`. Writes nothing;
docs/paper_notes.md §20 quotes its default output.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from init_diagnostics import parse_variant  # noqa: E402  (bench/probes/, this script's folder)
from lion_jax.nn.mixer import LionMixer  # noqa: E402
from lion_jax.nn.s5 import S5Mixer  # noqa: E402
from lra import train  # noqa: E402

DEFAULT_VARIANTS = ("s5_real", "s5_real@c_init=lecun_normal", "lion_s5_real_narrow_state",
                    "lion_s5_real_s5_gain", "lion_s_s5_form")


def model_config(task: str, preset: str, spec: str):
  """The ModelConfig of `variant@field=value...` at `preset` for `task`, checked as training
  checks it (a field or value it does not know is its error)."""
  variant, overrides = parse_variant(spec)
  config = importlib.import_module(f"configs.{task}").get_config(f"{variant},{preset}")
  config.model.update(overrides)
  return train.check_config(config)


def scales(model, length: int, batch: int, seed: int) -> tuple[float, float, float]:
  """(std of y, of D ⊙ x, of y − D ⊙ x) for one mixer at init."""
  mixer = (S5Mixer if model.mixer == "s5" else LionMixer)(model, rngs=nnx.Rngs(seed))
  x = jax.random.normal(jax.random.key(1000 + seed), (batch, length, model.d_model))  # [B, L, M]
  y = mixer(x)  # [B, L, M]
  d = getattr(mixer, "d", None) if model.mixer == "s5" else mixer.feedthrough
  feedthrough = d[...] * x if d is not None else jnp.zeros_like(x)  # [B, L, M]
  return float(jnp.std(y)), float(jnp.std(feedthrough)), float(jnp.std(y - feedthrough))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--task", default="pathfinder")
  parser.add_argument("--preset", default="cpu_order")
  parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
  parser.add_argument("--length", type=int, default=1024, help="L (Pathfinder-32's 1,024)")
  parser.add_argument("--batch", type=int, default=4)
  parser.add_argument("--seeds", default="0,1,2")
  args = parser.parse_args()
  seeds = [int(s) for s in args.seeds.split(",")]
  print(f"{args.task} {args.preset}: std at init over seeds {args.seeds}")
  print(f"{'variant':42s} {'M':>4s} {'y':>7s} {'D ⊙ x':>7s} {'mixed':>7s}")
  for spec in args.variants.split(","):
    model = model_config(args.task, args.preset, spec)
    total, feedthrough, mixed = np.mean(
        [scales(model, args.length, args.batch, seed) for seed in seeds], axis=0)
    print(f"{spec:42s} {model.d_model:4d} {total:7.3f} {feedthrough:7.3f} {mixed:7.4f}")


if __name__ == "__main__":
  main()
