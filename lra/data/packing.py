"""Packed training batches: each step's examples end to end in a fixed number of rows.

A padded batch spends every row on one example, so on ListOps (lengths 501-1999, median 953,
rows of 2048) half of every step is padding. A packed step puts the same B examples into R
rows of L' tokens, each example one run of one segment id (`lion_jax.ops.segments`), and every
mixer keeps the examples apart, so each example gets the logits it gets padded alone
(`LraClassifier.packed`).

    index batches (grain: range → shuffle(seed + epoch) → batch(B) → repeat), as for padding
      → pool = examples waiting from earlier steps, then the next index batch
      → best fit into R rows of L' tokens, oldest first, until B are placed (one more index
        batch joins the pool when the pool cannot fill the step); the rest wait
      → gather: inputs/segment_ids/positions [R, L'], example_rows/example_ids [B] ([B, 2])

grain's packing transforms (`grain.experimental.FirstFitPackIterDataset`,
`BestFitPackIterDataset`) pack a stream of examples into as many rows as it takes, so a step's
number of examples would vary
with their lengths, and learning rates, schedules and epochs would lose their meaning. Here
every step takes exactly B examples (the configured batch size) in exactly R rows (so nothing
recompiles). An example that does not fit this step's rows waits in the pool and is tried
first at the next step. Each step places B examples and draws B on average, so epochs keep
their length and an example waits a step or two at most. The iterator's state is grain's (the
next index batch) plus the waiting examples, so a resumed run sees the same batches as an
uninterrupted one.

A row holds L' tokens, L' = L for softmax attention (whose cost grows as L'²) and any multiple
of L/4 up to 4L for LION and S5, which cost the same per token in any row and pack tighter in
longer ones. R and m give the fewest token
slots R·L' (R a multiple of the data-parallel devices) at which a simulated run over the
training split's first index batches fills every step with B examples and never keeps more
than 2B waiting (`choose_rows`). Retrieval's two documents are two segments, placed together
or kept waiting together.

Notation: B examples per step, R rows, L' tokens per row, D documents per example (1 or 2).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import grain
import numpy as np

from lra.data.batching import READ_OPTIONS
from lra.data.split import Split

# `choose_rows` simulates this many steps per candidate row count and row length.
SIMULATED_STEPS = 200
# The pool of waiting examples never holds more than this many batches (`choose_rows`' rule).
MAX_WAITING_BATCHES = 2


def check_lengths(lengths: np.ndarray, length: int) -> None:
  """Raises unless every document fits a row.

  Args:
    lengths: [N] or [N, D] real lengths.
    length: L, the row length.

  Raises:
    ValueError: naming the first example longer than a row, its length and the limit.
  """
  too_long = np.argwhere(np.asarray(lengths).reshape(len(lengths), -1) > length)
  if len(too_long):
    index = int(too_long[0, 0])
    raise ValueError(f"example {index} has length {int(np.max(lengths[index]))}, longer than a "
                     f"packed row of {length} tokens (config.seq_len); truncate it when the data "
                     "are prepared or raise seq_len.")


def place(candidates: np.ndarray, lengths: np.ndarray, rows: int, length: int, wanted: int):
  """Best fit, in candidate order, until `wanted` examples are placed.

  Args:
    candidates: [n] example indices, in the order they should be tried.
    lengths: [N, D] real lengths of every example's documents.
    rows, length: R rows of L tokens.
    wanted: how many examples to place (B).

  Returns:
    (placed [k ≤ wanted] indices, starts [k, D, 2] (row, start) of each document, left over
    [n − k] indices in their order).
  """
  room = np.full(rows, length)
  placed, starts, left = [], [], []
  for index in candidates:
    if len(placed) == wanted:
      left.append(index)
      continue
    where, taken = [], room.copy()
    for doc_length in lengths[index]:
      fits = np.flatnonzero(taken >= doc_length)
      if not len(fits):
        break
      row = fits[np.argmin(taken[fits])]  # the fullest row it fits: best fit
      where.append((row, length - taken[row]))
      taken[row] -= doc_length
    if len(where) == lengths.shape[1]:
      room = taken
      placed.append(index)
      starts.append(where)
    else:
      left.append(index)
  return (np.asarray(placed, np.int64), np.asarray(starts, np.int64).reshape(-1, lengths.shape[1], 2),
          np.asarray(left, np.int64))


def fill_step(pool: np.ndarray, draw, lengths: np.ndarray, rows: int, length: int,
              batch_size: int):
  """One packed step: B examples from the pool, drawing one more index batch if it falls short.

  Args:
    pool: [n] indices waiting, oldest first, this step's index batch already appended.
    draw: () -> [B] the next index batch.
    lengths, rows, length, batch_size: as in `place`.

  Returns:
    (placed, starts, pool) as `place` returns them, the pool being what still waits.
  """
  placed, starts, left = place(pool, lengths, rows, length, batch_size)
  if len(placed) < batch_size:
    placed, starts, left = place(np.concatenate([pool, draw()]), lengths, rows, length,
                                 batch_size)
  return placed, starts, left


def _index_batches(size: int, batch_size: int, seed: int) -> grain.MapDataset:
  """Endless index batches, each epoch a fresh permutation (as `batching.make_loader`)."""
  return (grain.MapDataset.range(size).shuffle(seed=seed)
          .batch(batch_size, drop_remainder=True, batch_fn=lambda x: np.asarray(x, np.int64))
          .repeat(None))


@functools.lru_cache(maxsize=1)
def _simulated_index_batches(size: int, batch_size: int, seed: int) -> grain.MapDataset:
  return _index_batches(size, batch_size, seed)


@functools.lru_cache(maxsize=4 * SIMULATED_STEPS)
def _index_batch(size: int, batch_size: int, seed: int, step: int) -> np.ndarray:
  """[B] the `step`-th index batch of `_index_batches`, kept: `choose_rows` simulates the same
  first batches for every layout it tries, and grain's shuffle of a small split costs about a
  millisecond per index (a 32-example split: 1.2 ms; 32,000 examples: 12 µs)."""
  batch = _simulated_index_batches(size, batch_size, seed)[step]
  batch.setflags(write=False)
  return batch


def packs(lengths: np.ndarray, *, batch_size: int, rows: int, length: int, seed: int,
          steps: int = SIMULATED_STEPS) -> bool:
  """Whether R rows of L' tokens fill `steps` simulated steps with B examples each, never
  keeping more than `MAX_WAITING_BATCHES`·B waiting.

  Args:
    lengths: [N, D] real lengths.
    batch_size, rows, length: B, R, L'.
    seed: the shuffling seed (the simulation sees the run's own first batches).
    steps: how many steps to simulate.
  """
  drawn = iter(range(2 ** 62))
  draw = lambda: _index_batch(len(lengths), batch_size, seed, next(drawn))
  pool = np.zeros(0, np.int64)
  for _ in range(steps):
    placed, _, pool = fill_step(np.concatenate([pool, draw()]), draw, lengths, rows, length,
                                batch_size)
    if len(placed) < batch_size or len(pool) > MAX_WAITING_BATCHES * batch_size:
      return False
  return True


def choose_rows(lengths: np.ndarray, *, batch_size: int, length: int, seed: int,
                multiple: int = 1, max_factor: int = 4) -> tuple[int, int]:
  """The packed layout with the fewest token slots per step (module docstring).

  Args:
    lengths: [N] or [N, D] the training split's real lengths.
    batch_size: B.
    length: L, the task's sequence length.
    seed: the shuffling seed.
    multiple: R is a multiple of this (the data-parallel device count).
    max_factor: the longest row tried is max_factor·L (1: rows of L only, for softmax
      attention); rows of k·L/4 tokens, L ≤ k·L/4 ≤ max_factor·L, are tried.

  Returns:
    (R, L').
  """
  lengths = np.asarray(lengths).reshape(len(lengths), -1)
  check_lengths(lengths, length)
  groups = lambda rows: -(-rows // multiple)  # rows are counted in groups of `multiple`
  best = (groups(batch_size * lengths.shape[1]) * multiple, length)  # one document a row fits
  for quarters in range(4, 4 * max_factor + 1):
    row_length = quarters * length // 4
    fits = lambda k, row_length=row_length: packs(
        lengths, batch_size=batch_size, rows=k * multiple, length=row_length, seed=seed)
    # Bisect on k groups: the mean fill bounds k below, the best layout so far above.
    low = groups(max(1, int(np.ceil(batch_size * lengths.sum(1).mean() / row_length))))
    high = groups(-(-best[0] * best[1] // row_length))
    if not fits(high):
      continue
    while low < high:
      middle = (low + high) // 2
      low, high = (low, middle) if fits(middle) else (middle + 1, high)
    if high * multiple * row_length < best[0] * best[1]:
      best = (high * multiple, row_length)
  return best


class PackedBatchIterator:
  """Endless packed training batches with `get_state` / `set_state` (module docstring).

  Yields dicts of numpy arrays: "inputs" int32 [R, L'], "segment_ids" int32 [R, L'] (0 at
  padding, 1, 2, … per row), "positions" int32 [R, L'], "example_rows" and "example_ids" int32
  [B] ([B, 2] for Retrieval), "labels" int32 [B], "example_mask" bool [B] (False only for the
  slots of a step that could not place B examples).
  """

  def __init__(self, split: Split, *, batch_size: int, rows: int, row_length: int, seed: int):
    self.split = split
    self.batch_size, self.rows, self.length = batch_size, rows, row_length
    self.lengths = np.asarray(split.lengths).reshape(len(split), -1)  # [N, D]
    check_lengths(self.lengths, self.length)
    self._iter = iter(_index_batches(len(split), batch_size, seed).to_iter_dataset(READ_OPTIONS))
    self._pool = np.zeros(0, np.int64)
    self._warned = False

  def __iter__(self) -> PackedBatchIterator:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    placed, starts, self._pool = fill_step(
        np.concatenate([self._pool, next(self._iter)]), lambda: next(self._iter), self.lengths,
        self.rows, self.length, self.batch_size)
    if len(placed) < self.batch_size and not self._warned:
      self._warned = True
      logging.warning("a packed step held %d of %d examples in %d rows; the rest wait for the "
                      "next step (raise config.packing_rows)", len(placed), self.batch_size,
                      self.rows)
    return self._gather(placed, starts)

  def _gather(self, placed: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    rows, length, batch = self.rows, self.length, self.batch_size
    docs = self.lengths.shape[1]
    inputs = np.zeros((rows, length), np.int32)
    segment_ids = np.zeros((rows, length), np.int32)
    positions = np.zeros((rows, length), np.int32)
    example_rows = np.zeros((batch, docs), np.int32)
    example_ids = np.zeros((batch, docs), np.int32)
    # Empty slots point at a padding token of row 0 … which pools to zeros; masked anyway.
    next_id = np.ones(rows, np.int32)
    for slot, (index, where) in enumerate(zip(placed, starts)):
      tokens = self.split.inputs[index].reshape(docs, -1)  # [D, L], L ≤ L'
      for doc, (row, start) in enumerate(where):
        n = self.lengths[index, doc]
        inputs[row, start:start + n] = tokens[doc, :n]
        segment_ids[row, start:start + n] = next_id[row]
        positions[row, start:start + n] = np.arange(n)
        example_rows[slot, doc], example_ids[slot, doc] = row, next_id[row]
        next_id[row] += 1
    labels = np.zeros(batch, np.int32)
    labels[:len(placed)] = self.split.labels[placed]
    squeeze = (lambda x: x[:, 0]) if docs == 1 else (lambda x: x)
    return {"inputs": inputs, "segment_ids": segment_ids, "positions": positions,
            "example_rows": squeeze(example_rows), "example_ids": squeeze(example_ids),
            "labels": labels, "example_mask": np.arange(batch) < len(placed)}

  def get_state(self) -> dict[str, Any]:
    """A JSON-serialisable position: grain's, and the examples waiting for the next step."""
    return {"indices": self._iter.get_state(), "waiting": [int(i) for i in self._pool]}

  def set_state(self, state: dict[str, Any]) -> None:
    """Continues from `state`, as returned by `get_state` of an identically built iterator."""
    self._iter.set_state(state["indices"])
    self._pool = np.asarray(state["waiting"], np.int64)

  def close(self) -> None:
    self._iter.close()


def saves_slots(rows: int, row_length: int, batch_size: int, example_slots: int) -> bool:
  """Whether R rows of L' hold a step in fewer token slots than B padded examples do.

  Args:
    rows, row_length: the packed layout, R rows of L' tokens (`choose_rows`).
    batch_size: B examples a step.
    example_slots: the token slots one padded example takes (D·L: 2L for Retrieval's pairs).
  """
  return rows * row_length < batch_size * example_slots


def padding_share(lengths: np.ndarray, length: int, rows: int | None = None,
                  batch_size: int = 1) -> float:
  """The share of token slots that hold padding: padded (rows=None) or packed into R rows."""
  lengths = np.asarray(lengths).reshape(len(lengths), -1)
  real = lengths.sum(1).mean() * batch_size
  slots = (batch_size * lengths.shape[1] if rows is None else rows) * length
  return 1.0 - real / slots
