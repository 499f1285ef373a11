"""Packed rows: several examples end to end in one batch row, told apart by segment ids.

`segment_ids` is an integer [B, L] array: 0 at padding, and each example one contiguous run of
tokens carrying one positive id. An example is a maximal run of one positive id, so ids need not
be consecutive or sorted, but two examples that touch must differ (the same id on both sides of
padding or of another example is two examples). Padding (id 0) may stand before, between or
after examples. A mixer given `segment_ids` lets nothing flow between two examples of a row: each
example's outputs are those of the example run alone.

Everything here is pure and jittable; shapes follow the legend in `lion_jax.masks`.
"""

from __future__ import annotations

import jax.numpy as jnp


def check_segment_ids(segment_ids, batch: int, length: int) -> None:
  """Raises unless `segment_ids` is an integer array of shape [batch, length].

  Reads only the static shape and dtype, so it runs under `jax.jit` (on tracers) at no cost.

  Args:
    segment_ids: the ids a caller passed.
    batch, length: B and L of the inputs x [B, L, M] the ids describe.

  Raises:
    TypeError: not an array of an integer dtype (bool included: that is a mask, not ids).
    ValueError: an integer array of another shape than [B, L].
  """
  dtype = getattr(segment_ids, "dtype", None)
  if dtype is None or not jnp.issubdtype(dtype, jnp.integer):
    got = f"dtype {dtype}" if dtype is not None else type(segment_ids).__name__
    raise TypeError(f"segment_ids must be an integer array of shape [B, L] = {(batch, length)} "
                    f"(0 at padding, one positive id per example); got {got}.")
  if tuple(segment_ids.shape) != (batch, length):
    raise ValueError(f"segment_ids must have shape [B, L] = {(batch, length)}, the batch and "
                     f"length of x; got shape {tuple(segment_ids.shape)}.")


def segment_starts(segment_ids):
  """Where a run of one id begins: the first token of each example and of each padding run.

  Args:
    segment_ids: [B, L] integer ids.

  Returns:
    [B, L] bool, True at t = 0 and where segment_ids[:, t] != segment_ids[:, t − 1].
  """
  changed = segment_ids[:, 1:] != segment_ids[:, :-1]  # [B, L − 1]
  return jnp.concatenate([jnp.ones_like(changed[:, :1]), changed], axis=1)


def segment_ends(segment_ids):
  """Where a run of one id ends: `segment_starts` read from the right.

  Args:
    segment_ids: [B, L] integer ids.

  Returns:
    [B, L] bool, True at t = L − 1 and where segment_ids[:, t] != segment_ids[:, t + 1].
  """
  changed = segment_ids[:, 1:] != segment_ids[:, :-1]  # [B, L − 1]
  return jnp.concatenate([changed, jnp.ones_like(changed[:, :1])], axis=1)


def same_segment(segment_ids):
  """Which tokens may see which: the block-diagonal mask of a packed row.

  Runs are numbered, not ids compared, so an id that recurs in a row after padding or another
  id is a new example.

  Args:
    segment_ids: [B, L] integer ids.

  Returns:
    [B, L, L] bool, True at [b, i, j] when tokens i and j lie in the same example (one run of one
    positive id); a padding token (id 0) sees and is seen by none.
  """
  runs = jnp.cumsum(segment_starts(segment_ids), axis=1)  # [B, L] run number
  same_run = runs[:, :, None] == runs[:, None, :]  # [B, L, L]
  return same_run & (segment_ids > 0)[:, None, :]
