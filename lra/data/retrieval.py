"""Retrieval: ACL Anthology Network citation pairs (`tsv_data/new_aan_pairs.*.tsv`).

Rows are `label<TAB>id1<TAB>id2<TAB>text1<TAB>text2` with no header. Quotes are
literal characters (LRA parses with `use_quote_delim=False`), labels may be written
as floats (`1.0`), and fields are huge, so rows are split on raw bytes rather than
with the `csv` module. Each document is encoded like Text: UTF-8 byte + 1, pad 0,
truncated to 4000 tokens (LRA's first 10,000-byte cap does not change the first 4000).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lra.data import layout
from lra.data.errors import MalformedDataError
from lra.data.split import Split, byte_ids

VOCAB_SIZE = 257
NUM_CLASSES = 2
SEQ_LEN = 4000  # per document
SPLIT_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
               "test": "new_aan_pairs.test.tsv"}
RELEASE_URL = "https://storage.googleapis.com/long-range-arena/lra_release.gz"


def locate(data_dir: str | os.PathLike) -> dict[str, Path]:
  """Returns the three TSV paths keyed by split (the `eval` file is validation).

  Raises:
    MissingDataError: saying which release folder to copy where.
  """
  cands = layout.candidate_dirs(data_dir, ["aan"], "tsv_data")
  folder = layout.find_dir(
      data_dir, cands, list(SPLIT_FILES.values()), what="AAN retrieval TSV files",
      fix=(f"download lra_release.gz ({RELEASE_URL}), "
           f"extract it and copy lra_release/lra_release/tsv_data/ to {Path(data_dir) / 'aan'}/ "
           "(or point the data root at the extracted archive)."))
  return {split: folder / name for split, name in SPLIT_FILES.items()}


def _count_rows(path: Path) -> int:
  with open(path, "rb") as f:
    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b"")) + 1


def read_tsv(path: Path, *, seq_len: int = SEQ_LEN, max_examples: int | None = None) -> Split:
  """Reads one pairs file.

  Returns:
    Split with inputs [N, 2, seq_len] int16 and lengths [N, 2].

  Raises:
    MalformedDataError: naming the path and line of a row with the wrong number of
      columns or a label that is not 0/1.
  """
  capacity = _count_rows(path)  # upper bound; preallocating avoids a second copy of ~2 GB
  if max_examples is not None:
    capacity = min(capacity, max_examples)
  inputs = np.zeros((capacity, 2, seq_len), np.int16)
  lengths = np.zeros((capacity, 2), np.int32)
  labels = np.zeros(capacity, np.int32)
  n = 0
  with open(path, "rb") as f:
    for line_no, line in enumerate(f, start=1):
      if n == capacity:
        break
      line = line.rstrip(b"\n").removesuffix(b"\r")
      if not line:
        continue
      fields = line.split(b"\t")
      try:
        if len(fields) != 5:
          raise ValueError(f"expected 5 tab-separated columns (label, id1, id2, text1, text2), "
                           f"got {len(fields)}")
        label = int(float(fields[0]))
        if label not in (0, 1):
          raise ValueError(f"label {fields[0].decode(errors='replace')!r} is not 0 or 1")
      except (ValueError, OverflowError) as e:
        raise MalformedDataError(
            f"{path}:{line_no}: bad AAN row: {e}. A file cut short by an interrupted download "
            f"or extraction ends in such a row: extract {path.name} from {RELEASE_URL} again.") from None
      for doc, text in enumerate(fields[3:]):
        ids = byte_ids(text[:seq_len])
        inputs[n, doc, :len(ids)] = ids
        lengths[n, doc] = len(ids)
      labels[n] = label
      n += 1
  if n == 0:
    raise MalformedDataError(f"{path}: no rows")
  return Split(inputs[:n], lengths[:n], labels[:n])


def decode(files: dict[str, Path], *, seq_len: int, max_examples: int | None) -> dict[str, Split]:
  """Reads the train/eval/test pair files."""
  return {split: read_tsv(path, seq_len=seq_len, max_examples=max_examples)
          for split, path in files.items()}
