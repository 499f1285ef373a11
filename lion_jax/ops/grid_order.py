"""LION♮ on 2-D inputs: LION attention with decays that run along snake orders of an H×W grid.

LION paper §C.11, Figure 9 (the "Lion-d♮ / Lion-s♮" rows of Table 1): a raster-flattened image
puts vertical neighbours W tokens apart, so a decaying mask separates them. LION♮ builds the
mask along two serpentine orders of the grid instead and combines the two:

  row snake     even rows left→right, odd rows right→left       (consecutive tokens are neighbours)
  column snake  the row snake of the transposed grid: even columns top→bottom, odd bottom→top

Tokens stay in raster order (token r·W + c is pixel (r, c)). Write π for an order (π[t] is the
raster index of the t-th token visited), a^π for its log-decays read in that order, and
M^π = P_πᵀ M(a^π) P_π for the LION mask built along the order and permuted back to raster
rows and columns. Each order has its own decays (its own λ for LION-D, its own selective
gate for LION-S). `scan_order` picks how the two are combined:

  raster         M(a): plain `lion_attention`, the grid is not used
  snake          M = ½(M^row + M^col), then the usual Y = Scale(QKᵀ ⊙ M) V          (official release)
  snake_outputs  Y = ½(Scale(QKᵀ ⊙ M^row) V + Scale(QKᵀ ⊙ M^col) V)               (paper §C.11 text)

Every form of `lion_attention` evaluates each order in that order, so no L×L mask is built
beyond what the form itself builds: the tokens are moved into the order, both orders run as
one batch of 2B sequences, and the results are moved back to raster positions. The moves are
reshapes, transposes and reversals of odd rows, not gathers: a gather's gradient is a
scatter-add, which cost 7-9% of the snake attention's fwd+bwd on the CPU (docs/benchmarks.md). With
normalize="after", "snake" needs each order's numerator Σ_j (q_i·k_j) M^π_ij v_j and decayed
normaliser Σ_j (q_i·k_j) M^π_ij before the division: both come from one unnormalised call on
values with one channel of ones per decay channel appended. With normalize="before" or
"none" the normaliser Σ_j q_i·k_j does not depend on the mask, so averaging the masks and
averaging the outputs are the same and both orders take the output path.

Shapes follow the legend in `lion_jax.ops.masks`; S = number of scans of an order (1 or 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from lion_jax.ops.attention import Normalize, lion_attention
from lion_jax.ops.masks import per_token_log_decay
from lion_jax.options import check_choice, str_enum


ScanOrder = str_enum("ScanOrder", "scan_order", __name__, """The token orders the decays run
along, and how two orders are combined: RASTER, one scan in raster order (`lion_attention`
itself); SNAKE, row and column snake, masks averaged before the normalisation; SNAKE_OUTPUTS,
row and column snake, normalised outputs averaged.""")


def raster_order(height: int, width: int) -> np.ndarray:
  """[H·W] the identity: rows left→right, top to bottom."""
  return np.arange(height * width)


def row_snake_order(height: int, width: int) -> np.ndarray:
  """[H·W] raster indices visited by the row snake: even rows left→right, odd rows right→left."""
  grid = np.arange(height * width).reshape(height, width)
  grid[1::2] = grid[1::2, ::-1]
  return grid.reshape(-1)


def column_snake_order(height: int, width: int) -> np.ndarray:
  """[H·W] raster indices visited by the column snake: even columns down, odd columns up."""
  grid = np.arange(height * width).reshape(height, width).T  # [W, H]: column c is row c here
  grid[1::2] = grid[1::2, ::-1]
  return grid.reshape(-1)


def _reverse_odd_rows(rows):
  """[B, R, C, ...] -> the same with rows 1, 3, 5, ... reversed along C (its own inverse)."""
  odd = (np.arange(rows.shape[1]) % 2 == 1).reshape((1, -1) + (1,) * (rows.ndim - 2))
  return jnp.where(odd, jnp.flip(rows, axis=2), rows)


def _into_row_snake(x, height: int, width: int):
  """[B, L, ...] raster -> row snake: x[:, row_snake_order(H, W)], and also its inverse."""
  rows = x.reshape((x.shape[0], height, width) + x.shape[2:])  # [B, H, W, ...]
  return _reverse_odd_rows(rows).reshape(x.shape)


def _into_column_snake(x, height: int, width: int):
  """[B, L, ...] raster -> column snake: x[:, column_snake_order(H, W)]."""
  rows = x.reshape((x.shape[0], height, width) + x.shape[2:])  # [B, H, W, ...]
  return _reverse_odd_rows(jnp.swapaxes(rows, 1, 2)).reshape(x.shape)  # columns as rows


def _out_of_column_snake(x, height: int, width: int):
  """[B, L, ...] column snake -> raster, the inverse of `_into_column_snake`."""
  columns = _reverse_odd_rows(x.reshape((x.shape[0], width, height) + x.shape[2:]))
  return jnp.swapaxes(columns, 1, 2).reshape(x.shape)  # [B, H, W, ...] -> [B, L, ...]


class Scan(NamedTuple):
  """One token order of an H×W grid.

  Attributes:
    order: (H, W) -> [L] the raster index of each visited token; the definition (tests, pictures).
    into: ([B, L, ...], H, W) -> the same tokens in this order, `x[:, order(H, W)]`.
    out_of: the inverse of `into`, back to raster positions.
  """
  order: Callable[[int, int], np.ndarray]
  into: Callable
  out_of: Callable


ROW_SNAKE = Scan(row_snake_order, _into_row_snake, _into_row_snake)  # an involution
COLUMN_SNAKE = Scan(column_snake_order, _into_column_snake, _out_of_column_snake)

# The scans of each order, in the order their log-decays are passed; raster has one scan that
# `grid_lion_attention` hands to `lion_attention` unmoved.
SCANS: dict[ScanOrder, tuple[Scan, ...]] = {
    ScanOrder.RASTER: (Scan(raster_order, None, None),),
    ScanOrder.SNAKE: (ROW_SNAKE, COLUMN_SNAKE),
    ScanOrder.SNAKE_OUTPUTS: (ROW_SNAKE, COLUMN_SNAKE),
}


def num_scans(scan_order: str | ScanOrder) -> int:
  """How many log-decays (decay parameter sets) `scan_order` takes: 1 for raster, 2 for snakes."""
  return len(SCANS[parse_scan_order(scan_order)])


def parse_scan_order(scan_order: str | ScanOrder) -> ScanOrder:
  """`scan_order` as a `ScanOrder`; a TypeError or ValueError names the valid values."""
  return ScanOrder(check_choice("scan_order", scan_order))


def check_grid(grid, length: int) -> tuple[int, int]:
  """Validates a grid against the sequence length.

  Args:
    grid: (H, W), two positive integers.
    length: L, the number of tokens.

  Returns:
    (H, W) as Python ints.

  Raises:
    ValueError: when `grid` is not two positive integers or H·W ≠ L, naming both.
  """
  try:
    height, width = (int(side) for side in grid)
  except (TypeError, ValueError):
    raise ValueError(f"grid={grid!r} must be (H, W), two positive integers with H·W = L = "
                     f"{length}.") from None
  if height < 1 or width < 1 or height * width != length:
    raise ValueError(f"grid={tuple(grid)!r} has H·W = {height * width} cells but the sequence has "
                     f"L = {length} tokens; a grid needs H·W = L.")
  return height, width


def grid_lion_attention(q, k, v, log_decays: Sequence, *, grid=None,
                        scan_order: str | ScanOrder = "snake", form: str = "auto",
                        convention: str = "symmetric", normalize: str | Normalize = "after",
                        key_mask=None, chunk_size: int = 64, eps: float = 1e-6,
                        sequence_axis: str | None = None, state_pass: str = "auto",
                        residuals: str = "auto", segment_ids=None):
  """LION attention whose decays run along scan orders of an H×W grid (module docstring).

  Args:
    q: [B, L, H, K] queries in raster order, already feature-mapped.
    k: [B, L, H, K] keys in raster order.
    v: [B, L, H, V] values in raster order.
    log_decays: one log-decay per scan of `scan_order` (raster: 1; snake, snake_outputs: 2, the
      row snake's then the column snake's), each None or any shape `lion_attention` takes.
      Per-token decays are given at raster positions and move with their tokens.
    grid: (H, W) with H·W = L, the image the tokens were flattened from row by row. "raster"
      ignores it.
    scan_order: "raster", "snake" or "snake_outputs".
    form, convention, normalize, chunk_size, eps, state_pass, residuals: as in
      `lion_attention`, applied to every scan.
    key_mask: [B, L] bool at raster positions; a key where it is False enters no sum in any scan.
    sequence_axis: as in `lion_attention`; only "raster" can split its sequence over devices.
    segment_ids: [B, L] packed rows, as in `lion_attention`; only "raster" takes them (a grid
      holds one image).

  Returns:
    [B, L, H, V] outputs at raster positions, in the dtype of `v`.

  Raises:
    ValueError: for an unknown `scan_order`, a missing grid or one with H·W ≠ L, a number of
      log-decays that does not match the scans, or a snake order with a `sequence_axis` or
      `segment_ids`;
      `lion_attention` checks the rest.
  """
  scan_order = parse_scan_order(scan_order)
  scans = SCANS[scan_order]
  batch, length, heads, _ = q.shape
  if not isinstance(log_decays, (list, tuple)) or len(log_decays) != len(scans):
    got = (f"{len(log_decays)} of them" if isinstance(log_decays, (list, tuple))
           else f"a {type(log_decays).__name__}")
    raise ValueError(f"scan_order={scan_order.value!r} takes log_decays as a list or tuple of "
                     f"{len(scans)}, one per scan ({', '.join(s.order.__name__ for s in scans)}); "
                     f"got {got}.")
  options = dict(form=form, convention=convention, chunk_size=chunk_size, state_pass=state_pass,
                 residuals=residuals)
  if scan_order is ScanOrder.RASTER:
    options["sequence_axis"] = sequence_axis  # the grid is not used (nor checked: any L runs)
    return lion_attention(q, k, v, log_decays[0], normalize=normalize, key_mask=key_mask, eps=eps,
                          segment_ids=segment_ids, **options)
  if segment_ids is not None:
    raise ValueError(f"scan_order={scan_order.value!r} cannot take packed rows (segment_ids): "
                     "a snake runs over one whole image. Use scan_order='raster', or rows "
                     "without segment_ids (the image tasks are never padded).")
  if sequence_axis is not None:
    # A snake reverses every other row (or reads columns): its sequence interleaves tokens of
    # every shard of the raster order, so it cannot be split where the tokens lie.
    raise ValueError(f"scan_order={scan_order.value!r} cannot run with the sequence split over "
                     f"sequence_axis={sequence_axis!r}: the snake orders move tokens between "
                     "shards. Use scan_order='raster' or sequence_axis=None.")
  if grid is None:
    raise ValueError(f"scan_order={scan_order.value!r} needs grid=(H, W) with H·W = L = {length}.")
  height, width = check_grid(grid, length)
  if key_mask is not None and tuple(key_mask.shape) != (batch, length):
    raise ValueError(f"key_mask has shape {tuple(key_mask.shape)}; expected [B, L]=[{batch}, "
                     f"{length}].")
  try:
    normalize = Normalize(normalize)
  except ValueError:
    choices = ", ".join(repr(member.value) for member in Normalize)
    raise ValueError(f"normalize={normalize!r} is not one of {choices}.") from None

  value_dim = v.shape[-1]
  dtype = jnp.promote_types(jnp.promote_types(q.dtype, v.dtype), jnp.float32)
  decays = [per_token_log_decay(a, batch, length, heads, value_dim, dtype)
            for a in log_decays]  # S × [B, L, H, G_s]
  groups = max(d.shape[-1] for d in decays)  # G: one scan with vector decays makes all vector
  decays = [jnp.broadcast_to(d, d.shape[:-1] + (groups,)) for d in decays]  # S × [B, L, H, G]

  def along_orders(x):  # [B, L, ...] raster -> [S·B, L, ...] each scan's copy in its own order
    return jnp.concatenate([scan.into(x, height, width) for scan in scans], axis=0)

  def back_to_raster(y):  # [S·B, L, ...] -> S × [B, L, ...] at raster positions
    return [scan.out_of(part, height, width)
            for part, scan in zip(jnp.split(y, len(scans), axis=0), scans)]

  q_s, k_s = along_orders(q), along_orders(k)  # [S·B, L, H, K]
  key_mask_s = None if key_mask is None else along_orders(jnp.asarray(key_mask))  # [S·B, L]
  # Each scan's own decays go with that scan's copy of the tokens.
  decay_s = jnp.concatenate([scan.into(d, height, width) for d, scan in zip(decays, scans)],
                            axis=0)  # [S·B, L, H, G]

  if scan_order is ScanOrder.SNAKE and normalize is Normalize.AFTER:
    # Averaged masks share one normaliser: the numerator and the decayed normaliser of every
    # scan (values with G channels of ones appended, unnormalised), averaged, then divided.
    ones = jnp.ones(v.shape[:-1] + (groups,), dtype)  # [B, L, H, G]
    carried = along_orders(jnp.concatenate([v.astype(dtype), ones], axis=-1))  # [S·B, L, H, V+G]
    carried_decay = (decay_s[..., 0] if groups == 1
                     else jnp.concatenate([decay_s, decay_s], axis=-1))  # [S·B, L, H(, 2V)]
    sums = lion_attention(q_s, k_s, carried, carried_decay, normalize="none",
                          key_mask=key_mask_s, **options)  # [S·B, L, H, V+G]
    sums = sum(back_to_raster(sums)) / len(scans)  # [B, L, H, V+G]
    out = sums[..., :value_dim] / (sums[..., value_dim:] + eps)  # [B, L, H, V]
    return out.astype(v.dtype)

  # Output averaging; for "before" and "none" it equals mask averaging (module docstring).
  outputs = lion_attention(q_s, k_s, along_orders(v.astype(dtype)),
                           decay_s[..., 0] if groups == 1 else decay_s, normalize=normalize,
                           key_mask=key_mask_s, eps=eps, **options)  # [S·B, L, H, V]
  return (sum(back_to_raster(outputs)) / len(scans)).astype(v.dtype)
