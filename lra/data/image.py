"""Image: CIFAR-10 as 1024-long sequences of grayscale pixels.

Sources, in `source="auto"` order: the extracted `cifar-10-batches-bin/` or
`cifar-10-batches-py/` folder, the `cifar-10-binary.tar.gz` / `cifar-10-python.tar.gz`
archive, or a TFDS `cifar10/3.0.2` folder prepared as array_record. Both raw formats
store each image as three 32x32 planes R, G, B, row-major.

Grayscale uses TensorFlow's `rgb_to_grayscale` arithmetic (LRA parity; PIL's
`convert('L')`, used by S4/S5, differs by +-1 on ~25% of pixels and is available as
`grayscale="pil"`). Pixels stay raw uint8 0..255; `normalize` gives the float inputs
other codebases use.

Validation follows LRA (`val_split="lra"`): the last 10% (5,000) of the training
images in file order (for TFDS input that is TFDS's record order, exactly LRA's
`train[90%:]`; for the raw batches it is the end of data_batch_5). `val_split="random"` holds out a random 10% (seed 42, S4/S5-style).
"""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np

from lion_jax.options import ConfigError
from lra.data import layout, tfds_source
from lra.data.errors import MalformedDataError
from lra.data.split import Split

VOCAB_SIZE = 256
NUM_CLASSES = 10
SEQ_LEN = 1024
_PIXELS = 32 * 32
SOURCES = ("auto", "binary", "python", "tfds")
VAL_SPLITS = ("lra", "random")
GRAYSCALES = ("tf", "pil")
RANDOM_VAL_SEED = 42
# Per source: (folder or archive name, member names of the train and test batches).
_BATCHES = {
    "binary": ("cifar-10-batches-bin", [f"data_batch_{i}.bin" for i in range(1, 6)], ["test_batch.bin"]),
    "python": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"]),
}
_ARCHIVES = {"binary": "cifar-10-binary.tar.gz", "python": "cifar-10-python.tar.gz"}
_URL = "https://www.cs.toronto.edu/~kriz/"
TFDS_DIR = "cifar10/3.0.2"


def locate(data_dir: str | os.PathLike, source: str = "auto") -> tuple[str, Path]:
  """Finds the CIFAR-10 input; returns (format, path), format in binary|python|tfds.

  Raises:
    MissingDataError: naming every place looked in and the file to download.
    ValueError: for an unknown `source`.
  """
  if source not in SOURCES:
    raise ConfigError(f"image task option source={source!r} is not one of {SOURCES}; "
                     "set it with --config.task_options.source=<value>")
  root = Path(data_dir)
  formats = ["binary", "python"] if source == "auto" else [source]
  tried = []
  for prefer_folder in (True, False):  # extracted folders first: no decompression
    for fmt in formats:
      if fmt == "tfds":
        continue
      name = _BATCHES[fmt][0] if prefer_folder else _ARCHIVES[fmt]
      for path in (root / "cifar10" / name, root / name):
        tried.append(path)
        if path.exists():
          return fmt, path
  if source in ("auto", "tfds"):
    for path in (root / "tfds" / TFDS_DIR, root / TFDS_DIR):
      tried.append(path)
      if path.exists():
        return "tfds", path
  raise layout.missing(
      root, tried, what="CIFAR-10",
      fix=(f"download cifar-10-binary.tar.gz (or cifar-10-python.tar.gz) from {_URL} and put it "
           f"in {root / 'cifar10'}/ (extracting it there is optional)."))


class _ArrayUnpickler(pickle.Unpickler):
  """Unpickler that only rebuilds numpy arrays: CIFAR batches need nothing else."""

  _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
              ("numpy", "ndarray"), ("numpy", "dtype")}

  def find_class(self, module, name):
    if (module, name) not in self._ALLOWED:
      raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
    return super().find_class(module, name)


def _parse_batch(fmt: str, raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
  """Returns planes [n, 3, 1024] uint8 and labels [n] int32 of one batch file."""
  try:
    if fmt == "binary":
      if len(raw) % (1 + 3 * _PIXELS):
        raise ValueError(f"{len(raw)} bytes is not a whole number of 3073-byte records")
      records = np.frombuffer(raw, np.uint8).reshape(-1, 1 + 3 * _PIXELS)
      labels, pixels = records[:, 0], records[:, 1:]
    else:
      batch = _ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
      pixels, labels = np.asarray(batch[b"data"], np.uint8), np.asarray(batch[b"labels"])
      if pixels.ndim != 2 or pixels.shape[1] != 3 * _PIXELS or len(labels) != len(pixels):
        raise ValueError(f"data {pixels.shape} / labels {labels.shape} are not [n, 3072] / [n]")
    if labels.size and labels.max() >= NUM_CLASSES:
      raise ValueError(f"label {labels.max()} outside 0..9")
  except (ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as e:
    raise MalformedDataError(f"{where}: bad CIFAR-10 {fmt} batch: {e}") from None
  return pixels.reshape(-1, 3, _PIXELS), labels.astype(np.int32)


def _read_raw(fmt: str, path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  folder, train_names, test_names = _BATCHES[fmt]
  wanted = {"train": train_names, "test": test_names}
  blobs = {}
  if path.is_dir():
    for name in train_names + test_names:
      if not (path / name).is_file():
        raise layout.missing(path, [path / name], what=f"CIFAR-10 batch {name}",
                             fix=f"re-extract {_ARCHIVES[fmt]} (from {_URL}) into {path.parent}/.")
      blobs[name] = ((path / name).read_bytes(), str(path / name))
  else:
    try:
      with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
          base = member.name.rsplit("/", 1)[-1]
          if member.isfile() and base in train_names + test_names:
            blobs[base] = (tar.extractfile(member).read(), f"{path}!{member.name}")
    except (tarfile.TarError, OSError, EOFError) as e:
      raise MalformedDataError(f"{path}: not a readable .tar.gz ({e}); download it again from {_URL}.") from e
    absent = [n for n in train_names + test_names if n not in blobs]
    if absent:
      raise MalformedDataError(f"{path}: archive lacks {folder}/{absent[0]}; is it the complete "
                               f"{_ARCHIVES[fmt]} from {_URL}?")
  out = {}
  for split, names in wanted.items():
    parts = [_parse_batch(fmt, *blobs[n]) for n in names]
    out[split] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
  return out


def _read_tfds(version_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  out = {}
  for split in ("train", "test"):
    records = list(tfds_source.read_records(version_dir, split))
    hwc = np.stack([np.asarray(r["image"], np.uint8) for r in records])  # [n, 32, 32, 3]
    planes = hwc.reshape(len(records), _PIXELS, 3).transpose(0, 2, 1)
    out[split] = (planes, np.asarray([r["label"] for r in records], np.int32))
  return out


def rgb_to_gray(planes: np.ndarray, method: str = "tf") -> np.ndarray:
  """Converts planar RGB to 8-bit gray.

  Args:
    planes: [..., 3, P] uint8 R, G, B planes.
    method: "tf" = `tf.image.rgb_to_grayscale` then the cast back to uint8, i.e.
      trunc(float32(0.2989 R/255 + 0.5870 G/255 + 0.1140 B/255) * 255.5);
      "pil" = PIL `convert('L')`, (19595 R + 38470 G + 7471 B + 2^15) >> 16.

  Returns:
    [..., P] uint8.
  """
  r, g, b = planes[..., 0, :], planes[..., 1, :], planes[..., 2, :]
  if method == "pil":
    r, g, b = (c.astype(np.uint32) for c in (r, g, b))
    gray = (19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16
    return gray.astype(np.uint8)
  if method != "tf":
    raise ValueError(f"grayscale must be one of {GRAYSCALES}, got {method!r}")
  # Same float32 operations in the same order as TF's convert_image_dtype + tensordot.
  scale = np.float32(1.0 / 255.0)
  w = np.asarray([0.2989, 0.5870, 0.1140], np.float32)
  gray = (r.astype(np.float32) * scale) * w[0] + (g.astype(np.float32) * scale) * w[1]
  gray = gray + (b.astype(np.float32) * scale) * w[2]
  return np.clip(gray * np.float32(255.5), 0, 255).astype(np.uint8)


def normalize(pixels, scheme: str = "unit"):
  """Maps raw 0..255 pixels to floats (works on numpy and jax arrays).

  Args:
    pixels: any-shaped array of 0..255 values.
    scheme: "unit" -> [0, 1]; "symmetric" -> [-1, 1] (S5 Pathfinder);
      "cifar" -> (x/255 - 122.6/255) / (61/255) (S4/S5 grayscale CIFAR).
  """
  x = pixels / 255.0
  if scheme == "unit":
    return x
  if scheme == "symmetric":
    return 2.0 * x - 1.0
  if scheme == "cifar":
    return (x - 122.6 / 255.0) / (61.0 / 255.0)
  raise ValueError(f"unknown pixel normalisation {scheme!r}: use unit, symmetric or cifar")


def decode(found: tuple[str, Path], *, seq_len: int, max_examples: int | None,
           val_split: str = "lra", grayscale: str = "tf") -> dict[str, Split]:
  """Reads CIFAR-10 and builds train/val/test Splits of [N, 1024] uint8 gray pixels."""
  if val_split not in VAL_SPLITS:
    raise ConfigError(f"image task option val_split={val_split!r} is not one of {VAL_SPLITS}; "
                     "set it with --config.task_options.val_split=<value>")
  if grayscale not in GRAYSCALES:
    raise ConfigError(f"image task option grayscale={grayscale!r} is not one of {GRAYSCALES}; "
                     "set it with --config.task_options.grayscale=<value>")
  if seq_len != SEQ_LEN:
    raise ConfigError(f"image seq_len is fixed at {SEQ_LEN} (32x32 pixels), got {seq_len}")
  fmt, path = found
  raw = _read_tfds(path) if fmt == "tfds" else _read_raw(fmt, path)
  gray = {s: (rgb_to_gray(planes, grayscale), labels) for s, (planes, labels) in raw.items()}
  train_x, train_y = gray["train"]
  n_val = len(train_y) // 10
  order = (np.arange(len(train_y)) if val_split == "lra"
           else np.random.default_rng(RANDOM_VAL_SEED).permutation(len(train_y)))
  index = {"train": order[:len(order) - n_val], "val": order[len(order) - n_val:]}
  splits = {s: (train_x[i], train_y[i]) for s, i in index.items()}
  splits["test"] = gray["test"]
  out = {}
  for name, (x, y) in splits.items():
    x, y = x[:max_examples], y[:max_examples]
    out[name] = Split(x, np.full(len(x), SEQ_LEN, np.int32), y)
  return out
