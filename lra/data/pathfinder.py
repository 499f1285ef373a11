"""Pathfinder (32x32) and Path-X (128x128): PNGs plus per-batch metadata.

A difficulty folder (`pathfinder32/curv_contour_length_14/`) holds
`imgs/<batch>/sample_<i>.png` and `metadata/<batch>.npy`. Despite the extension the
release's metadata files are plain text (one space-separated line per image); our
generator or the original one may write real NPY string arrays, so both are read.
Fields used: 0 = image sub-folder, 1 = file name, 3 = label (0/1).

The release contains a zero-byte PNG (pathfinder32/curv_baseline/imgs/0/sample_172.png),
so zero-byte files are skipped and counted; any other unreadable PNG is an error.
Split (S4/S5 convention, `split="random"`): a seed-42 permutation of the readable
images into N - 2*int(0.1 N) / int(0.1 N) / int(0.1 N), i.e. 160k/20k/20k of 200k
(numpy's permutation, so not the same images as torch's `random_split`);
`split="contiguous"` takes the first 80% / next 10% / last 10% in metadata order (LRA).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
from PIL import Image

from lion_jax.options import ConfigError
from lra.data import layout
from lra.data.errors import MalformedDataError, MissingDataError
from lra.data.split import Split

NUM_CLASSES = 2
VOCAB_SIZE = 256
DIFFICULTIES = {"easy": "curv_baseline", "intermediate": "curv_contour_length_9",
                "hard": "curv_contour_length_14"}
SPLITS = ("random", "contiguous")
SPLIT_SEED = 42
GENERATE_COMMAND = ("python -m lra.data generate pathfinder --resolution {resolution} "
                    "--difficulty {difficulty} --num 200000 --out {root}")
_NPY_MAGIC = b"\x93NUMPY"


@dataclasses.dataclass
class Index:
  """The images a difficulty folder lists, in metadata order.

  Attributes:
    paths: readable (non-empty) PNG paths.
    labels: [len(paths)] int32.
    skipped: zero-byte PNGs listed in the metadata and left out.
  """

  paths: list[Path]
  labels: np.ndarray
  skipped: list[Path]


def locate(data_dir: str | os.PathLike, *, resolution: int, difficulty: str = "hard") -> Path:
  """Returns the difficulty folder (the one holding `imgs/` and `metadata/`).

  Raises:
    MissingDataError: printing the generation command.
    ValueError: for an unknown difficulty.
  """
  if difficulty not in DIFFICULTIES:
    raise ConfigError(f"pathfinder task option difficulty={difficulty!r} is not one of {sorted(DIFFICULTIES)}; "
                     "set it with --config.task_options.difficulty=<value>")
  sub = f"pathfinder{resolution}/{DIFFICULTIES[difficulty]}"
  cands = layout.candidate_dirs(data_dir, [f"pathfinder/{sub}"], sub)
  cands += [Path(data_dir) / DIFFICULTIES[difficulty], Path(data_dir)]
  command = GENERATE_COMMAND.format(resolution=resolution, difficulty=difficulty, root=data_dir)
  return layout.find_dir(
      data_dir, cands, ["imgs", "metadata"], what=f"Pathfinder-{resolution} ({difficulty}) images",
      fix=(f"generate them with `{command}`, or copy lra_release/lra_release/{sub}/ from the "
           f"LRA release to {Path(data_dir) / 'pathfinder' / sub}/."))


def _metadata_rows(path: Path) -> list[list[str]]:
  raw = path.read_bytes()
  if raw.startswith(_NPY_MAGIC):
    try:
      arr = np.load(path, allow_pickle=False)
    except ValueError as e:
      raise MalformedDataError(f"{path}: unreadable NPY metadata ({e})") from None
    arr = np.atleast_1d(arr).astype(str)
    return [list(row) for row in arr] if arr.ndim == 2 else [line.split() for line in arr]
  try:
    return [line.split() for line in raw.decode("utf-8").splitlines()]
  except UnicodeDecodeError as e:
    raise MalformedDataError(f"{path}: metadata is neither NPY nor UTF-8 text ({e})") from None


def _sort_key(path: Path):
  return (0, int(path.stem), "") if path.stem.isdigit() else (1, 0, path.stem)


def read_index(folder: Path) -> Index:
  """Reads every metadata file (sorted by integer stem) and checks the listed PNGs exist.

  Raises:
    MalformedDataError: a metadata line without 4 fields or with a label not 0/1
      (names the file and line), or no metadata files at all.
    MissingDataError: a PNG the metadata lists does not exist.
  """
  meta_files = sorted((folder / "metadata").glob("*.npy"), key=_sort_key)
  if not meta_files:
    raise MalformedDataError(f"{folder / 'metadata'}: no *.npy metadata files")
  paths, labels, skipped = [], [], []
  for meta in meta_files:
    for line_no, row in enumerate(_metadata_rows(meta), start=1):
      if not row:
        continue
      if len(row) < 4 or row[3] not in ("0", "1"):
        raise MalformedDataError(
            f"{meta}:{line_no}: expected '<subdir> <file> <index> <label 0/1> ...', got {' '.join(row)!r}")
      png = folder / row[0] / row[1]
      try:
        size = png.stat().st_size
      except FileNotFoundError:
        raise MissingDataError(f"{png} (listed in {meta}:{line_no}) does not exist; the folder "
                               "is incomplete: copy or generate it again.") from None
      if size == 0:
        skipped.append(png)
        continue
      paths.append(png)
      labels.append(int(row[3]))
  return Index(paths, np.asarray(labels, np.int32), skipped)


def _read_png(path: Path, resolution: int) -> np.ndarray:
  try:
    with Image.open(path) as img:
      pixels = np.asarray(img.convert("L"))
  except (OSError, SyntaxError, ValueError) as e:  # PIL reports corrupt files with these
    raise MalformedDataError(f"{path}: corrupt PNG ({e}); regenerate or re-copy this file.") from None
  if pixels.shape != (resolution, resolution):
    raise MalformedDataError(f"{path}: image is {pixels.shape}, expected ({resolution}, {resolution})")
  return pixels.reshape(-1)


def read_images(paths: list[Path], resolution: int) -> np.ndarray:
  """Decodes PNGs into [len(paths), resolution**2] uint8 (threads: PIL releases the GIL)."""
  out = np.empty((len(paths), resolution * resolution), np.uint8)

  def fill(i: int) -> None:
    out[i] = _read_png(paths[i], resolution)

  with concurrent.futures.ThreadPoolExecutor(min(8, os.cpu_count() or 1)) as pool:
    # list() re-raises the first decoding error in the caller.
    list(pool.map(fill, range(len(paths))))
  return out


def split_indices(n: int, split: str) -> dict[str, np.ndarray]:
  """Positions of train/val/test examples among n images (sizes n - 2*int(0.1 n), int(0.1 n), int(0.1 n))."""
  if split not in SPLITS:
    raise ConfigError(f"pathfinder task option split={split!r} is not one of {SPLITS}; "
                     "set it with --config.task_options.split=<value>")
  order = np.random.default_rng(SPLIT_SEED).permutation(n) if split == "random" else np.arange(n)
  n_eval = int(0.1 * n)
  n_train = n - 2 * n_eval
  return {"train": order[:n_train], "val": order[n_train:n_train + n_eval], "test": order[n_train + n_eval:]}


def decode(folder: Path, *, resolution: int, seq_len: int, max_examples: int | None,
           split: str = "random") -> dict[str, Split]:
  """Builds train/val/test Splits of [N, resolution**2] uint8 pixels, decoding only what is kept."""
  if seq_len != resolution * resolution:
    raise ConfigError(f"pathfinder{resolution} seq_len is fixed at {resolution ** 2}, got {seq_len}")
  index = read_index(folder)
  if index.skipped:
    logging.warning("Pathfinder: skipped %d zero-byte PNG(s) in %s, e.g. %s",
                    len(index.skipped), folder, index.skipped[0])
  splits = {}
  for name, positions in split_indices(len(index.paths), split).items():
    positions = positions[:max_examples]
    pixels = read_images([index.paths[i] for i in positions], resolution)
    splits[name] = Split(pixels, np.full(len(positions), seq_len, np.int32), index.labels[positions])
  return splits
