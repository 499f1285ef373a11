"""The `Split` container and fixed-length packing of variable-length sequences.

Notation: N examples, L sequence length (per document for retrieval).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass
class Split:
  """One split of a task, as numpy arrays (possibly memory-mapped from the cache).

  Attributes:
    inputs: [N, L] uint8 or int16 token ids / pixels; retrieval: [N, 2, L].
      Token tasks pad with id 0 after the real tokens.
    lengths: [N] int32 unpadded lengths (retrieval: [N, 2]); pixel tasks: always L.
    labels: [N] int32 class ids.
  """

  inputs: np.ndarray
  lengths: np.ndarray
  labels: np.ndarray

  def __post_init__(self):
    n = len(self.labels)
    if len(self.inputs) != n or len(self.lengths) != n:
      raise ValueError(
          f"Split arrays disagree on N: inputs {self.inputs.shape}, "
          f"lengths {self.lengths.shape}, labels {self.labels.shape}")

  def __len__(self) -> int:
    return len(self.labels)

  def take(self, index: np.ndarray | slice) -> Split:
    """Returns the examples selected by `index` (a slice keeps memory maps lazy)."""
    return Split(self.inputs[index], self.lengths[index], self.labels[index])

  def head(self, max_examples: int | None) -> Split:
    """Returns the first `max_examples` examples (all of them when None)."""
    return self if max_examples is None else self.take(slice(0, max_examples))


def pack(seqs: Sequence[np.ndarray], seq_len: int,
         dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
  """Truncates each sequence to `seq_len` and right-pads it with 0.

  Args:
    seqs: N 1-D integer arrays of token ids (already shifted so that 0 is free).
    seq_len: L, the fixed output length.
    dtype: storage dtype of the result (uint8 or int16; ids must fit).

  Returns:
    inputs: [N, L] `dtype`; lengths: [N] int32 real lengths after truncation.
  """
  inputs = np.zeros((len(seqs), seq_len), dtype)
  lengths = np.zeros(len(seqs), np.int32)
  for i, seq in enumerate(seqs):
    n = min(len(seq), seq_len)
    inputs[i, :n] = seq[:n]
    lengths[i] = n
  return inputs, lengths


def byte_ids(text: bytes) -> np.ndarray:
  """LRA byte-level ids: UTF-8 byte + 1 (0 stays free for padding). Returns [len(text)] int16."""
  return np.frombuffer(text, np.uint8).astype(np.int16) + 1
