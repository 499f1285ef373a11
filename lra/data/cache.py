"""On-disk cache of decoded splits: one folder of `.npy` files per (task, options, source).

Inputs are stored in their compact dtype (uint8 / int16, never float) and reopened
memory-mapped, so reloading is instant and Path-X (~3.3 GB as uint8) is paged in on
demand. The key covers the task, sequence length, `max_examples`, every task option,
a format version and each source file's path, size and mtime; delete the folder to
force a rebuild. An entry whose files cannot be read back (cut short by a full disk, say) is
deleted and rebuilt, with a warning that names the file. Folders are written under a temporary name and renamed into place,
so an interrupted or concurrent build never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from lra.data.split import Split

# Bump when decoding changes, so old entries are not reused.
FORMAT_VERSION = 1
_ARRAYS = ("inputs", "lengths", "labels")


def fingerprint(paths: Iterable[Path]) -> list[list[Any]]:
  """Returns [path, size, mtime_ns] for each path and, for folders, each file directly in it."""
  out = []
  for path in paths:
    entries = [path] + (sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [])
    for p in entries:
      st = p.stat()
      out.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
  return out


def entry_dir(cache_dir: Path, task: str, key: dict[str, Any]) -> Path:
  """The cache folder for `key`: `<cache_dir>/<task>-<hash of key>`."""
  blob = json.dumps({"format": FORMAT_VERSION, **key}, sort_keys=True, default=str)
  return Path(cache_dir) / f"{task}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


class CorruptCacheError(ValueError):
  """A cache entry's file cannot be read back (cut short, or not an array); names the file."""


def load(path: Path) -> dict[str, Split] | None:
  """Reopens a cache entry (inputs memory-mapped); None when there is none.

  Raises:
    CorruptCacheError: naming the entry's file that cannot be read (e.g. cut short by a full
      disk or a copy that was interrupted).
  """
  manifest = path / "manifest.json"
  if not manifest.is_file():
    return None
  current = manifest
  try:
    stored = json.loads(manifest.read_text())["splits"]  # split name -> stored name
    arrays = {}
    for name in set(stored.values()):
      files = [path / f"{name}.{field}.npy" for field in _ARRAYS]
      loaded = []
      for current, mmap_mode in zip(files, ("r", None, None)):
        loaded.append(np.load(current, mmap_mode=mmap_mode))
      arrays[name] = Split(*loaded)
    return {split: arrays[name] for split, name in stored.items()}
  except (OSError, ValueError, KeyError, EOFError) as error:
    raise CorruptCacheError(f"cannot read the cached split file {current} ({error}); it is a "
                            f"cache: delete {path} and it is rebuilt from the data") from None


def save(path: Path, splits: dict[str, Split], key: dict[str, Any]) -> None:
  """Writes `splits` atomically; a split that *is* another one (text val = test) is stored once."""
  tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
  tmp.mkdir(parents=True)
  try:
    stored, written = {}, {}
    for split, data in splits.items():
      if id(data) in written:
        stored[split] = written[id(data)]
        continue
      if not (np.issubdtype(data.inputs.dtype, np.integer) and data.inputs.itemsize <= 2):
        raise TypeError(f"refusing to cache {split} inputs of dtype {data.inputs.dtype}")
      for field in _ARRAYS:
        np.save(tmp / f"{split}.{field}.npy", getattr(data, field))
      stored[split] = written[id(data)] = split
    (tmp / "manifest.json").write_text(json.dumps({"splits": stored, "key": key}, indent=1, default=str))
    os.rename(tmp, path)
  except OSError:
    if path.is_dir():  # another process finished the same entry first
      return
    raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)


def _discard(path: Path) -> None:
  """Moves a corrupt entry out of the way (atomically, so a concurrent reader never sees half
  of it) and deletes it; `save` can then write the entry again."""
  trash = path.parent / f".{path.name}.{uuid.uuid4().hex}.corrupt"
  try:
    os.rename(path, trash)
  except OSError:  # another process discarded it first
    return
  shutil.rmtree(trash, ignore_errors=True)


def load_or_build(cache_dir: Path, task: str, key: dict[str, Any],
                  build: Callable[[], dict[str, Split]]) -> dict[str, Split]:
  """Returns the cached splits for `key`, building and caching them on a miss.

  A cache folder that cannot be written (read-only data root) only costs a warning, and so
  does an entry that cannot be read back: it is deleted and built again.
  """
  path = entry_dir(cache_dir, task, key)
  try:
    cached = load(path)
  except CorruptCacheError as error:
    logging.warning("%s: %s. Rebuilding it.", task, error)
    _discard(path)
    cached = None
  if cached is not None:
    logging.info("%s: loaded cached splits from %s", task, path)
    return cached
  splits = build()
  try:
    save(path, splits, key)
    logging.info("%s: cached decoded splits in %s", task, path)
  except OSError as e:
    logging.warning("%s: could not write cache %s (%s); continuing without it", task, path, e)
  return splits
