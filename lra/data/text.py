"""Text: byte-level IMDB sentiment (Maas et al., `aclImdb_v1.tar.gz`).

Sources, in `source="auto"` order: the extracted `aclImdb/` folder, the archive
itself, or a TFDS `imdb_reviews/plain_text/1.0.0` folder prepared as array_record.
Each review's bytes are stripped of surrounding whitespace (as TFDS does; `<br />`
tags stay) and encoded LRA-style: id = UTF-8 byte + 1, pad 0, vocab 257.

IMDB has no validation split. Default (`val_split="test"`) is the LRA/S5 protocol:
validation *is* the 25k test split. `val_split="holdout"` instead holds out the
last 10% of the (fixed-order) training reviews.
"""

from __future__ import annotations

import os
import re
import tarfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from lion_jax.options import ConfigError
from lra.data import layout, tfds_source
from lra.data.errors import MalformedDataError
from lra.data.split import Split, byte_ids, pack

VOCAB_SIZE = 257
NUM_CLASSES = 2
SEQ_LEN = 4096  # the paper's "4K"; LRA's public config used 1000
ARCHIVE = "aclImdb_v1.tar.gz"
URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
TFDS_DIR = "imdb_reviews/plain_text/1.0.0"
SOURCES = ("auto", "folder", "archive", "tfds")
VAL_SPLITS = ("test", "holdout")
HOLDOUT_FRACTION = 0.1
# Reviews are stored in a fixed pseudo-random order (not grouped by label) so that
# a `max_examples` prefix contains both classes.
ORDER_SEED = 0

_LABELS = {"neg": 0, "pos": 1}


class _Review(NamedTuple):
  split: str  # "train" | "test"
  label: int  # neg 0, pos 1
  key: int  # review id from the file name (TFDS: record index), for a stable order
  text: bytes  # stripped UTF-8 bytes
_MEMBER = re.compile(r"^(?:\./)?aclImdb/(train|test)/(neg|pos)/(\d+)_\d+\.txt$")


def locate(data_dir: str | os.PathLike, source: str = "auto") -> tuple[str, Path]:
  """Finds the IMDB input; returns (kind, path) with kind in folder|archive|tfds.

  Raises:
    MissingDataError: naming every place looked in and the file to download.
    ValueError: for an unknown `source`.
  """
  if source not in SOURCES:
    raise ConfigError(f"text task option source={source!r} is not one of {SOURCES}; "
                     "set it with --config.task_options.source=<value>")
  root = Path(data_dir)
  places = {
      "folder": [root / "imdb" / "aclImdb", root / "aclImdb"],
      "archive": [root / "imdb" / ARCHIVE, root / ARCHIVE, root / "downloads/manual" / ARCHIVE,
                  root / "tfds/downloads/manual" / ARCHIVE],
      "tfds": [root / "tfds" / TFDS_DIR, root / TFDS_DIR],
  }
  kinds = list(places) if source == "auto" else [source]
  for kind in kinds:
    for path in places[kind]:
      if path.exists():
        return kind, path
  tried = [p for k in kinds for p in places[k]]
  raise layout.missing(
      root, tried, what="IMDB reviews",
      fix=(f"download {ARCHIVE} ({URL}) and put it at {root / 'imdb' / ARCHIVE} "
           f"(or extract it there, giving {root / 'imdb' / 'aclImdb'}/)."))


def _read_folder(folder: Path) -> list[_Review]:
  rows = []
  for path in folder.glob("*/*/*.txt"):
    m = _MEMBER.match("aclImdb/" + path.relative_to(folder).as_posix())
    if m:
      rows.append(_Review(m[1], _LABELS[m[2]], int(m[3]), path.read_bytes().strip()))
  return rows


def _read_archive(path: Path) -> list[_Review]:
  rows = []
  try:
    # Streaming mode ("r|gz") reads the 84 MB archive once, front to back.
    with tarfile.open(path, "r|gz") as tar:
      for member in tar:
        m = _MEMBER.match(member.name)
        if m and member.isfile():
          rows.append(_Review(m[1], _LABELS[m[2]], int(m[3]), tar.extractfile(member).read().strip()))
  except (tarfile.TarError, OSError, EOFError) as e:
    raise MalformedDataError(
        f"{path}: not a readable .tar.gz ({e}); download {ARCHIVE} again from {URL}.") from e
  return rows


def _read_tfds(version_dir: Path) -> list[_Review]:
  rows = []
  for split in ("train", "test"):
    for i, record in enumerate(tfds_source.read_records(version_dir, split)):
      text = record["text"]
      text = text.encode("utf-8") if isinstance(text, str) else bytes(text)
      rows.append(_Review(split, int(record["label"]), i, text))
  return rows


def _to_split(rows: list[_Review], seq_len: int) -> Split:
  rows = sorted(rows, key=lambda r: (r.label, r.key))
  rows = [rows[i] for i in np.random.default_rng(ORDER_SEED).permutation(len(rows))]
  inputs, lengths = pack([byte_ids(r.text) for r in rows], seq_len, np.int16)
  return Split(inputs, lengths, np.asarray([r.label for r in rows], np.int32))


def decode(found: tuple[str, Path], *, seq_len: int, max_examples: int | None,
           val_split: str = "test") -> dict[str, Split]:
  """Reads and encodes the reviews.

  Returns:
    {"train", "val", "test"} Splits with [N, seq_len] int16 inputs. With
    `val_split="test"` the val entry is the test Split object itself.

  Raises:
    MalformedDataError: unreadable archive, or no reviews for a split.
  """
  if val_split not in VAL_SPLITS:
    raise ConfigError(f"text task option val_split={val_split!r} is not one of {VAL_SPLITS}; "
                     "set it with --config.task_options.val_split=<value>")
  kind, path = found
  rows = {"folder": _read_folder, "archive": _read_archive, "tfds": _read_tfds}[kind](path)
  splits = {}
  for name in ("train", "test"):
    chosen = [r for r in rows if r.split == name]
    if not chosen:
      raise MalformedDataError(
          f"{path}: no reviews for split {name!r} (expected aclImdb/{name}/{{pos,neg}}/<id>_<rating>.txt); "
          f"is this the complete {ARCHIVE} from {URL}?")
    splits[name] = _to_split(chosen, seq_len)
  if val_split == "holdout":
    train = splits["train"]
    n_val = max(1, round(len(train) * HOLDOUT_FRACTION))
    splits["train"], splits["val"] = train.take(slice(0, -n_val)), train.take(slice(-n_val, None))
  splits = {name: split.head(max_examples) for name, split in splits.items()}
  if val_split == "test":
    splits["val"] = splits["test"]
  return {name: splits[name] for name in ("train", "val", "test")}
