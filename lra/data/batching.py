"""Deterministic, checkpointable batches of fixed shape, built with grain.

The pipeline works on example *indices* and gathers whole batches from the
in-memory (or memory-mapped) arrays with one fancy-index per array:

  MapDataset.range(N) -> shuffle(seed) -> batch(B) -> repeat(num_epochs) -> gather

grain's `repeat` reseeds the upstream shuffle with seed + epoch, and its `batch`
batches each epoch separately, so every epoch is a fresh permutation of all N
examples and a dropped remainder never mixes two epochs. Because the dataset is
random access, the iterator's state is just the index of the next batch; restoring
it reproduces exactly the batches an uninterrupted run would have seen.

Notation: B batch size, L sequence length.
"""

from __future__ import annotations

from typing import Any

import grain
from absl import flags
import numpy as np

from lra.data.split import Split

# Background threads that gather the next few batches while the model runs a step.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)


def _stack_indices(indices: list[int]) -> np.ndarray:
  return np.asarray(indices, np.int64)


class _Gather:
  """Turns a [n <= B] index batch into a fixed-shape batch dict."""

  def __init__(self, split: Split, batch_size: int):
    self.split = split
    self.batch_size = batch_size

  def __call__(self, idx: np.ndarray) -> dict[str, np.ndarray]:
    n, b = len(idx), self.batch_size
    # Filler rows repeat the batch's first example, so the model never sees an empty
    # (zero-length) sequence; example_mask marks them for the metrics.
    rows = np.concatenate([idx, np.full(b - n, idx[0], idx.dtype)]) if n < b else idx
    return {
        "inputs": np.asarray(self.split.inputs[rows], np.int32),  # [B, L] or [B, 2, L]
        "lengths": np.asarray(self.split.lengths[rows], np.int32),  # [B] or [B, 2]
        "labels": np.asarray(self.split.labels[rows], np.int32),  # [B]
        "example_mask": np.arange(b) < n,  # [B]
    }


class BatchIterator:
  """Iterator over fixed-shape batch dicts with `get_state` / `set_state`.

  Yields dicts of numpy arrays: "inputs" int32 [B, L] ([B, 2, L] for retrieval),
  "lengths" int32 [B] ([B, 2]), "labels" int32 [B], "example_mask" bool [B].
  """

  def __init__(self, dataset: grain.MapDataset, num_batches: int | None, worker_count: int):
    iter_ds = dataset.to_iter_dataset(READ_OPTIONS)
    if worker_count > 0:
      # grain 0.2.18 reads an absl flag when starting workers and fails in scripts that
      # never parsed flags (google/grain#1355, fixed upstream); absl.app parses them anyway.
      if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
      iter_ds = iter_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=worker_count))
    self._iter = iter(iter_ds)
    self.num_batches = num_batches  # None when endless

  def __iter__(self) -> BatchIterator:
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    return next(self._iter)

  def __len__(self) -> int:
    if self.num_batches is None:
      raise TypeError("an endless (num_epochs=None) loader has no length")
    return self.num_batches

  def close(self) -> None:
    """Stops prefetch threads / worker processes (also done when garbage-collected)."""
    self._iter.close()

  def __enter__(self) -> BatchIterator:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def get_state(self) -> dict[str, Any]:
    """Returns a JSON-serialisable position (store it with the model checkpoint)."""
    return self._iter.get_state()

  def set_state(self, state: dict[str, Any]) -> None:
    """Continues from `state`, as returned by `get_state` of an identically built loader."""
    self._iter.set_state(state)


def make_loader(split: Split, *, batch_size: int, seed: int, shuffle: bool, drop_remainder: bool,
                num_epochs: int | None = None, worker_count: int = 0) -> BatchIterator:
  """Builds the batch iterator for one split.

  Training: `shuffle=True, drop_remainder=True, num_epochs=None` (endless; epoch e is
  shuffled with seed + e). Evaluation: `shuffle=False, drop_remainder=False,
  num_epochs=1`; the last batch is padded to `batch_size` with filler rows whose
  example_mask is False.

  Args:
    split: the examples.
    batch_size: B; every batch has exactly B rows.
    seed: shuffling seed, 0 <= seed < 2**32.
    shuffle: reshuffle every epoch.
    drop_remainder: drop each epoch's last partial batch (training only).
    num_epochs: passes over the data; None repeats forever.
    worker_count: grain worker processes (0 = gather in this process's threads).

  Raises:
    ValueError: bad sizes, or drop_remainder with fewer than B examples (no batch at all).
  """
  n = len(split)
  if batch_size <= 0 or n == 0:
    raise ValueError(f"need batch_size > 0 and a non-empty split, got {batch_size=} and {n} examples")
  if drop_remainder and n < batch_size:
    raise ValueError(f"drop_remainder=True with {n} examples < batch_size {batch_size} yields no batches")
  if num_epochs is not None and num_epochs <= 0:
    raise ValueError(f"num_epochs must be positive or None, got {num_epochs}")
  ds = grain.MapDataset.range(n)
  if shuffle:
    ds = ds.shuffle(seed=seed)
  ds = ds.batch(batch_size, drop_remainder=drop_remainder, batch_fn=_stack_indices)
  per_epoch = len(ds)
  ds = ds.repeat(num_epochs).map(_Gather(split, batch_size))
  return BatchIterator(ds, None if num_epochs is None else per_epoch * num_epochs, worker_count)
