"""ListOps: `basic_{train,val,test}.tsv` from `listops-1000/` (or our generator).

Each file has the header `Source<TAB>Target` and one row per example: a fully
parenthesised expression such as `( ( [MAX 2 ) 9 ) ] )` and its value 0-9.
Tokenisation follows LRA after its bracket fix (LRA issue #6): parentheses carry no
information and are dropped, the closing bracket `]` is kept as a token.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from lra.data import layout
from lra.data.errors import MalformedDataError
from lra.data.split import Split, pack

# Fixed vocabulary (LRA built its ids from a Python set, so they changed between runs).
VOCAB = ("<pad>", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
         "[MIN", "[MAX", "[MED", "[SM", "]")
VOCAB_SIZE = len(VOCAB)  # 16
NUM_CLASSES = 10
SEQ_LEN = 2048  # longest generated expression has 1999 tokens

SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
GENERATE_COMMAND = "python -m lra.data generate listops --out {root}"

_TOKEN_IDS = {tok: i for i, tok in enumerate(VOCAB)}


def locate(data_dir: str | os.PathLike) -> dict[str, Path]:
  """Returns the three TSV paths, keyed by split.

  Raises:
    MissingDataError: with the generation command when no folder holds the files.
  """
  cands = layout.candidate_dirs(data_dir, ["listops"], "listops-1000")
  folder = layout.find_dir(
      data_dir, cands, list(SPLIT_FILES.values()), what="ListOps TSV files",
      fix=("generate them with `" + GENERATE_COMMAND.format(root=data_dir) + "`, or copy "
           "lra_release/lra_release/listops-1000/ from the LRA release to "
           f"{Path(data_dir) / 'listops'}/."))
  return {split: folder / name for split, name in SPLIT_FILES.items()}


def tokenize(source: str) -> np.ndarray:
  """Maps one expression to token ids.

  Args:
    source: e.g. `( ( [MAX 2 ) 9 ) ] )`; parentheses are dropped.

  Returns:
    [T] uint8 ids into `VOCAB` (no padding, no EOS).

  Raises:
    ValueError: naming the first token outside the vocabulary.
  """
  tokens = source.replace("(", " ").replace(")", " ").split()
  unknown = set(tokens).difference(VOCAB[1:])
  if unknown:
    raise ValueError(f"unknown token(s) {sorted(unknown)} (vocabulary: {' '.join(VOCAB[1:])})")
  return np.fromiter(map(_TOKEN_IDS.__getitem__, tokens), np.uint8, len(tokens))


def read_tsv(path: Path, *, seq_len: int = SEQ_LEN, max_examples: int | None = None) -> Split:
  """Reads one `basic_*.tsv` file into a Split ([N, seq_len] uint8 inputs).

  Raises:
    MalformedDataError: naming the path and line of a bad header or row.
  """
  seqs, labels = [], []
  # errors="replace": a stray non-UTF-8 byte surfaces as an unknown token with its line number.
  with open(path, encoding="utf-8", errors="replace", newline="") as f:
    header = f.readline().rstrip("\r\n").split("\t")
    if header != ["Source", "Target"]:
      raise MalformedDataError(
          f"{path}:1: expected the header 'Source<TAB>Target', got {header!r}. "
          f"Regenerate with `{GENERATE_COMMAND.format(root='<data_dir>')}`.")
    for line_no, line in enumerate(f, start=2):
      if max_examples is not None and len(labels) >= max_examples:
        break
      line = line.rstrip("\r\n")
      if not line:
        continue
      fields = line.split("\t")
      try:
        if len(fields) != 2:
          raise ValueError(f"expected 2 tab-separated columns, got {len(fields)}")
        label = int(fields[1])
        if not 0 <= label < NUM_CLASSES:
          raise ValueError(f"label {label} outside 0..{NUM_CLASSES - 1}")
        seqs.append(tokenize(fields[0]))
      except ValueError as e:
        raise MalformedDataError(
            f"{path}:{line_no}: bad ListOps row: {e}. A file cut short by an interrupted "
            f"download or generation ends in such a row: delete {path.parent} and generate it "
            f"again with `{GENERATE_COMMAND.format(root='<data_dir>')}`, or copy the release's "
            "listops-1000/ again.") from None
      labels.append(label)
  if not labels:
    raise MalformedDataError(f"{path}: no examples after the header")
  inputs, lengths = pack(seqs, seq_len, np.uint8)
  return Split(inputs, lengths, np.asarray(labels, np.int32))


def decode(files: dict[str, Path], *, seq_len: int, max_examples: int | None) -> dict[str, Split]:
  """Reads all three splits (LRA's own val file is the validation split)."""
  return {split: read_tsv(path, seq_len=seq_len, max_examples=max_examples)
          for split, path in files.items()}
