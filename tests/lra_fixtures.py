"""Tiny LRA data in each task's real on-disk format, shared by the loader, training and ablation
tests, and the model size those end-to-end tests shrink every config to.

The writers produce the release layouts (IMDB folder or archive, AAN TSVs, CIFAR-10 batches,
Pathfinder PNGs with metadata) that `lra.data` reads; the tests that check each loader's decoding
live in `tests/test_data_loaders.py`.
"""

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

# The model of the end-to-end training tests: one layer of width 16 (chunks of 8).
SHRINK = {"d_model": 16, "num_layers": 1, "chunk_size": 8}


def fixture_data(task, root):
  """Writes a few examples in the task's real on-disk format; returns the data_dir."""
  if task == "text":
    write_imdb_folder(root / "imdb")
  elif task == "retrieval":
    write_aan(root / "aan", [aan_row(str(i % 2), "abc " * (i + 1), "xyz " * (8 - i)) for i in range(8)])
  elif task == "image":
    write_cifar(root / "cifar10", "python", archive=False)
  elif task == "pathx":
    write_pathfinder(root / "pathfinder/pathfinder128/curv_contour_length_14", 20, resolution=128)
  return root


REVIEWS = {  # (split, label dir, file name) -> text
    ("train", "pos", "0_9.txt"): "  Great film.<br /><br />Loved it \u00e9\u00e9!\n",
    ("train", "pos", "1_8.txt"): "Fine " * 10,
    ("train", "neg", "0_2.txt"): "Dull.",
    ("train", "neg", "1_1.txt"): "Bad \u2013 very bad.",
    ("test", "pos", "2_10.txt"): "Superb.",
    ("test", "pos", "3_7.txt"): "Good.",
    ("test", "neg", "2_3.txt"): "Meh.",
    ("test", "neg", "3_4.txt"): "No.",
}


def write_imdb_folder(root: Path) -> None:
  for (split, label, name), body in REVIEWS.items():
    path = root / "aclImdb" / split / label / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body.encode("utf-8"))
  (root / "aclImdb/train/unsup").mkdir()
  (root / "aclImdb/train/unsup/0_0.txt").write_text("unlabelled: ignored")
  (root / "aclImdb/train/urls_pos.txt").write_text("http://ignored")


def write_imdb_archive(path: Path) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  with tarfile.open(path, "w:gz") as tar:
    for (split, label, name), body in REVIEWS.items():
      data = body.encode("utf-8")
      member = tarfile.TarInfo(f"aclImdb/{split}/{label}/{name}")
      member.size = len(data)
      tar.addfile(member, io.BytesIO(data))


def aan_row(label: str, text1: str, text2: str) -> str:
  return "\t".join([label, "P01-1001", "P02-2002", text1, text2])


def write_aan(folder: Path, rows) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  for name in ("train", "eval", "test"):
    (folder / f"new_aan_pairs.{name}.tsv").write_bytes(("\n".join(rows) + "\n").encode("utf-8"))


# Known RGB pixels and their gray value under TF's rgb_to_grayscale (checked with TF 2.21).
KNOWN_GRAY = [((255, 0, 0), 76), ((0, 255, 0), 149), ((0, 0, 255), 29),
              ((255, 255, 255), 255), ((10, 200, 30), 124), ((0, 0, 0), 0)]


def cifar_batch(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
  """n images as [n, 3072] planar RGB (the known pixels at the start of image 0)."""
  rng = np.random.default_rng(seed)
  data = rng.integers(0, 256, (n, 3, 1024), dtype=np.uint8)
  for i, (rgb, _) in enumerate(KNOWN_GRAY):
    data[0, :, i] = rgb
  return data.reshape(n, 3072), rng.integers(0, 10, n).astype(np.uint8)


def cifar_files(fmt: str) -> dict[str, bytes]:
  files = {}
  names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
  for seed, name in enumerate(names):
    data, labels = cifar_batch(seed, 4)
    if fmt == "binary":
      files[name + ".bin"] = np.concatenate([labels[:, None], data], axis=1).tobytes()
    else:
      files[name] = pickle.dumps({b"batch_label": b"x", b"labels": labels.tolist(), b"data": data})
  return files


def write_cifar(root: Path, fmt: str, archive: bool) -> None:
  folder = {"binary": "cifar-10-batches-bin", "python": "cifar-10-batches-py"}[fmt]
  files = cifar_files(fmt)
  root.mkdir(parents=True, exist_ok=True)
  if not archive:
    for name, blob in files.items():
      (root / folder).mkdir(exist_ok=True)
      (root / folder / name).write_bytes(blob)
    return
  name = {"binary": "cifar-10-binary.tar.gz", "python": "cifar-10-python.tar.gz"}[fmt]
  with tarfile.open(root / name, "w:gz") as tar:
    for member_name, blob in files.items():
      member = tarfile.TarInfo(f"{folder}/{member_name}")
      member.size = len(blob)
      tar.addfile(member, io.BytesIO(blob))


def write_pathfinder(folder: Path, n: int, resolution: int = 32, *, npy_metadata: bool = False,
                     empty: tuple[int, ...] = ()) -> np.ndarray:
  """Writes n PNGs in two batches plus metadata; returns the [n, res*res] pixels."""
  rng = np.random.default_rng(0)
  pixels = rng.integers(0, 256, (n, resolution, resolution), dtype=np.uint8)
  batches = {0: range(0, n // 2), 1: range(n // 2, n)}
  (folder / "metadata").mkdir(parents=True)
  for batch, indices in batches.items():
    (folder / f"imgs/{batch}").mkdir(parents=True)
    rows = []
    for i in indices:
      path = folder / f"imgs/{batch}/sample_{i}.png"
      if i in empty:
        path.write_bytes(b"")
      else:
        Image.fromarray(pixels[i], mode="L").save(path)
      # subdir, file, index, label, then the generator's other seven fields.
      rows.append([f"imgs/{batch}", f"sample_{i}.png", str(i), str(i % 2), "1", "14", "4", "2", "1", "1", "1"])
    meta = folder / f"metadata/{batch}.npy"
    if npy_metadata:
      np.save(meta, np.asarray(rows))
    else:
      meta.write_text("".join(" ".join(r) + "\n" for r in rows))
  return pixels.reshape(n, -1)
