"""Packed rows: several examples end to end in one row, told apart by segment ids.

    segment_ids [B, L] integers: each example is one contiguous run of one positive id; 0 marks
    padding (between examples or at the end of the row). Adjacent examples have different ids.

    row:          a a a a b b c c c 0 0 d d 0
    segment_ids:  1 1 1 1 2 2 3 3 3 0 0 4 4 0

Nothing may flow between two examples. S5's scans restart at each run (`lion_jax.nn.s5`: a zero
multiplier at a run's first token forward, at its last token backward), softmax attention takes
the block-diagonal mask `same_segment`, and LION's mask gives it by its gates: the mask entry of
query i and key j multiplies the gates of the tokens between them (`lion_jax.ops.masks`), and every
pair from two different examples has the first token of the later example between them (in the
"code" convention's lower triangle, the gate that token's query applies to its left context).
`separate_examples` lowers that one gate by `barrier(dtype)`, so the mask across an example
boundary is below ε² (ε the dtype's rounding: 1.4e-14 in float32, 4.9e-32 in float64) times
what it was, while the mask inside each example is untouched: every form, both conventions,
every decay shape and both residual modes then give each example the outputs it gets alone. A
zero gate (−∞) would do the same in exact arithmetic, but the chunked forms take differences of
cumulative sums, where −∞ − (−∞) is NaN.

Shapes follow the legend in `lion_jax.ops.masks`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def check_segment_ids(segment_ids, batch: int, length: int, max_id: int | None = None) -> None:
  """Raises unless `segment_ids` is [B, L] integers; when its values are known (not traced),
  also unless they are ≥ 0 (and ≤ `max_id` where given) and each positive id is one contiguous
  run in its row.

  Raises:
    TypeError: not an integer array.
    ValueError: wrong shape, a negative id, or an example split into several runs; the
      message names `segment_ids`, the row and the id.
  """
  if not (hasattr(segment_ids, "shape") and hasattr(segment_ids, "dtype")):
    raise TypeError(f"segment_ids must be an integer array [B, L]; got "
                    f"{type(segment_ids).__name__}.")
  if tuple(segment_ids.shape) != (batch, length):
    raise ValueError(f"segment_ids has shape {tuple(segment_ids.shape)}; expected [B, L]="
                     f"[{batch}, {length}], the batch and length of q.")
  if not jnp.issubdtype(segment_ids.dtype, jnp.integer):  # bool too: that is a mask, not ids
    raise TypeError(f"segment_ids must be integers (0 at padding, one positive id per example);"
                    f" got dtype {segment_ids.dtype}.")
  if isinstance(segment_ids, jax.core.Tracer):
    return  # traced: the packer (`lra.data.packing`) checked its rows on the host
  ids = np.asarray(segment_ids)
  if (ids < 0).any():
    row = int(np.argwhere(ids < 0)[0, 0])
    raise ValueError(f"segment_ids has negative ids (row {row}); use 0 for padding and a "
                     "positive id per example.")
  if max_id is not None and (ids > max_id).any():
    row = int(np.argwhere(ids > max_id)[0, 0])
    raise ValueError(f"segment_ids row {row} has id {int(ids[row].max())} > {max_id}; number "
                     f"the examples of a row 1, 2, … (at most L = {max_id} of them).")
  starts = np.concatenate([np.ones((batch, 1), bool), ids[:, 1:] != ids[:, :-1]], axis=1)
  for row in range(batch):
    run_ids = ids[row][starts[row]]
    run_ids = run_ids[run_ids > 0]
    values, counts = np.unique(run_ids, return_counts=True)
    if (counts > 1).any():
      example = int(values[counts > 1][0])
      raise ValueError(f"segment_ids row {row}: example id {example} is not one contiguous run "
                       "of tokens; give each packed example its own id.")


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
  """Which tokens may see which: the block-diagonal mask of a packed row (softmax attention).

  Args:
    segment_ids: [B, L] integer ids.

  Returns:
    [B, L, L] bool, True at [b, i, j] when tokens i and j lie in the same example (one run of
    one positive id); a padding token (id 0) sees and is seen by none.
  """
  runs = run_index(segment_ids)  # [B, L]
  same_run = runs[:, :, None] == runs[:, None, :]  # [B, L, L]
  return same_run & (segment_ids > 0)[:, None, :]


def barrier(dtype) -> float:
  """How far each example's first gate is lowered: −2 log ε, so the mask across is ≤ ε²."""
  return float(-2.0 * np.log(np.finfo(dtype).eps))


def separate_examples(log_decay, forward_gate, segment_ids):
  """Both triangles' gates with each example's first gate lowered by `barrier`.

  Args:
    log_decay: [B, L, H, G] the upper triangle's log-gates a.
    forward_gate: [B, L, H, G] the lower triangle's log-gates f (`masks.forward_gate`).
    segment_ids: [B, L] integers.

  Returns:
    (a, f), each [B, L, H, G].
  """
  lowered = jnp.where(segment_starts(segment_ids), -barrier(log_decay.dtype), 0.0)  # [B, L]
  lowered = lowered.astype(log_decay.dtype)[:, :, None, None]
  return log_decay + lowered, forward_gate + lowered


def run_index(segment_ids):
  """[B, L] int32: the index of each token's run of equal ids within its row (0, 1, ...)."""
  return jnp.cumsum(segment_starts(segment_ids), axis=1, dtype=jnp.int32) - 1


def example_key_dots(q, k, segment_ids, key_mask=None):
  """Σ_j q_i·k_j over the keys j of query i's own example (normalize="before").

  Args:
    q, k: [B, L, H, K].
    segment_ids: [B, L] integers.
    key_mask: [B, L] bool or None; padding (id 0) is masked either way.

  Returns:
    [B, L, H].
  """
  batch, length = segment_ids.shape
  real = segment_ids > 0 if key_mask is None else key_mask & (segment_ids > 0)
  k = k * real[:, :, None, None].astype(k.dtype)
  # One group per (row, run): at most L runs a row.
  groups = (jnp.arange(batch)[:, None] * length + run_index(segment_ids)).reshape(-1)  # [B·L]
  sums = jax.ops.segment_sum(k.reshape(batch * length, *k.shape[2:]), groups,
                             num_segments=batch * length)  # [B·L, H, K]
  own = sums[groups].reshape(k.shape)  # [B, L, H, K]
  return jnp.einsum("blhk,blhk->blh", q, own)
