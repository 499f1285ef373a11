"""Floating-point operations per token of each block, LION's and S5's, counted from the config.

    python bench/probes/arithmetic.py                 # every token-task preset: LION-S against S5

A training step costs about three forward passes (a matmul's backward is two), and the
elementwise work (feature maps, decays, GELU, norms) comes on top: the count is of multiplies
and adds in matrix products, which is what limits both models at the LRA presets. XLA's
`cost_analysis()` counts elementwise work too (docs/benchmarks.md §12 sets the two side by side).

LION block, per token, forward (M = d_model, H heads of key width K and value width V, decay
channels G = V per head for vector decays and 1 for scalar ones, chunk length C):
  dense    q, k, v and the selective gate (M → H·G), the output projection, the block's GLU
  mixing   per head 2CK (a chunk's scores) + 4CE (both directions' masked products)
           + 8KE (the states each token reads and adds, both directions): E carried channels,
           V plus, for normalize="after", one normaliser channel per decay channel.
S5 block (P' complex states, P/2 under conjugate symmetry): B̄u (4MP'), two scans (16P'),
Re(C̃x) over both directions' states (8MP'), Du (2M), the GLU.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

# bench/ (train_step, also when imported as bench.probes.arithmetic) and the repository
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from lion_jax.config import PRESETS, ModelConfig  # noqa: E402

_GLU_DENSE = {"gelu": 0, "half_glu1": 1, "half_glu2": 1, "full_glu": 2}


@dataclasses.dataclass(frozen=True)
class BlockFlops:
  """Forward multiply-adds per token of one block, counted as 2 operations each."""

  dense: int
  mixing: int

  @property
  def total(self) -> int:
    return self.dense + self.mixing


def block_flops(config: ModelConfig) -> BlockFlops:
  """Forward operations per token of one block of `config` (LION's `chunk_scan` or S5's SSM).

  Raises:
    ValueError: for a mixer this count does not cover (softmax attention's cost grows with L),
      or LION in another form or scan order (LION♮'s snakes run two scans).
  """
  m = config.d_model
  glu = _GLU_DENSE[config.activation] * 2 * m * m
  if config.mixer == "s5":
    states = config.ssm_size // 2 if config.conj_sym else config.ssm_size
    return BlockFlops(dense=glu, mixing=4 * m * states + 16 * states + 8 * m * states + 2 * m)
  if config.mixer != "lion":
    raise ValueError(f"model.mixer={config.mixer!r}: counted only for 'lion' and 's5'")
  if config.form not in ("chunk_scan", "auto") or config.scan_order != "raster":
    raise ValueError(f"model.form={config.form!r}, model.scan_order={config.scan_order!r}: "
                     "counted only for LION's chunk_scan in raster order (one scan a block)")
  h, k, v = config.num_heads, config.qk_dim, config.head_dim
  vector = config.decay_shape == "vector" and config.decay != "lit"
  groups = v if vector else 1
  gate = 2 * m * h * groups if config.decay == "selective" else 0
  out = 2 * h * v * m if config.output_proj else 0
  dense = 2 * m * h * (2 * k + v) + gate + out + glu
  carried = v + ((v if vector else 1) if config.normalize == "after" else 0)
  c = config.chunk_size
  mixing = h * (2 * c * k + 4 * c * carried + 8 * k * carried)
  return BlockFlops(dense=dense, mixing=mixing)


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--tasks", default=",".join(PRESETS), help="comma list of task presets")
  args = p.parse_args(argv)
  unknown = [task for task in args.tasks.split(",") if task not in PRESETS]
  if unknown:
    raise SystemExit(f"--tasks {','.join(unknown)}: no such preset; choose from {', '.join(PRESETS)}")
  import train_step  # pylint: disable=import-outside-toplevel
  from lra.train import check_config  # pylint: disable=import-outside-toplevel
  print("| task | LION-S dense | LION-S mixing | LION-S block | S5 block | LION-S / S5 |")
  print("|---|---|---|---|---|---|")
  for task in args.tasks.split(","):
    lion = block_flops(check_config(train_step.task_config(task, "lion_s")[0]))
    s5 = block_flops(check_config(train_step.task_config(task, "s5")[0]))
    print(f"| {task} | {lion.dense:,} | {lion.mixing:,} | {lion.total:,} | {s5.total:,} | "
          f"{lion.total / s5.total:.1f}x |")


if __name__ == "__main__":
  main()
