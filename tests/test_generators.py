"""Tests of the ListOps and Pathfinder generators (`lra.data.generators`) and their CLI."""

from __future__ import annotations

import collections
import csv
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from lra.data import __main__ as cli
from lra.data.errors import GeneratedDataMismatchError, MalformedDataError
from lra.data.generators import listops, pathfinder

# ---------------------------------------------------------------------------------------------
# ListOps: an evaluator independent of the generator. It parses the release's binary
# parenthesised form `( left right )` into nested pairs, then unwinds each left spine
# `((((op a1) a2) ...) ])` into an operator and its arguments.


def _parse_pairs(tokens: list[str], i: int = 0):
  """Parses one item at `tokens[i]`; returns (item, next index)."""
  if tokens[i] != "(":
    return tokens[i], i + 1
  left, i = _parse_pairs(tokens, i + 1)
  right, i = _parse_pairs(tokens, i)
  assert tokens[i] == ")", f"expected ')' at token {i}"
  return (left, right), i + 1


def _evaluate(item) -> int:
  if isinstance(item, str):
    assert item.isdigit() and len(item) == 1, item
    return int(item)
  spine, args = item, []
  assert spine[1] == "]", "an application must end with the closing bracket"
  spine = spine[0]
  while isinstance(spine, tuple):
    args.append(_evaluate(spine[1]))
    spine = spine[0]
  args.reverse()
  assert len(args) >= 1
  return _REFERENCE_OPS[spine](args)


# LRA's own definitions (numpy median for MED), not the generator's integer arithmetic.
_REFERENCE_OPS = {
    "[MIN": min,
    "[MAX": max,
    "[MED": lambda args: int(np.median(args)),
    "[SM": lambda args: sum(args) % 10,
}


def _check_source(source: str) -> tuple[int, int]:
  """Returns (label, length) of a Source string, checking its form on the way."""
  tokens = source.split(" ")
  tree, end = _parse_pairs(tokens)
  assert end == len(tokens), "trailing tokens"
  length = sum(tok not in "()" for tok in tokens)
  return _evaluate(tree), length


@pytest.mark.parametrize("source, label", [
    ("( ( ( ( [SM 3 ) 5 ) 1 ) ] )", 9),
    ("( ( ( ( ( [MED 1 ) 2 ) 3 ) 4 ) ] )", 2),  # even arity: mean of middles, truncated
    ("( ( ( [SM 9 ) 9 ) ] )", 8),
    ("( ( ( [MAX 2 ) ( ( ( [MIN 7 ) 4 ) ] ) ) ] )", 4),
])
def test_evaluator_on_known_rows(source, label):
  assert _check_source(source)[0] == label


@pytest.fixture(scope="module")
def listops_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("listops")
  return listops.generate(out, num_train=150, num_val=25, num_test=25, min_length=20,
                          max_length=120, seed=0)


def _read_rows(path):
  with open(path, newline="") as f:
    return list(csv.reader(f, delimiter="\t"))


def test_listops_files_format_labels_lengths(listops_dir):
  assert listops_dir.name == "listops-1000"
  seen = set()
  for split, size in (("train", 150), ("val", 25), ("test", 25)):
    path = listops_dir / f"basic_{split}.tsv"
    assert path.read_bytes().startswith(b"Source\tTarget\r\n")  # csv.writer, as the release
    header, *rows = _read_rows(path)
    assert header == ["Source", "Target"] and len(rows) == size
    for source, target in rows:
      label, length = _check_source(source)
      assert int(target) == label
      assert 20 < length < 120
      assert source not in seen, "duplicate across or within splits"
      seen.add(source)


def test_listops_label_and_length_statistics():
  rows = listops.sample(400, seed=1)  # full LRA lengths (500, 2000)
  labels = collections.Counter(label for _, label in rows)
  extremes = (labels[0] + labels[9]) / len(rows)
  assert 0.24 < extremes < 0.44, labels  # ≈ 1/3 in the release (MIN/MAX pull to 0/9)
  assert set(labels) == set(range(10))
  lengths = np.array([_check_source(s)[1] for s, _ in rows[:100]])
  assert lengths.min() > 500 and lengths.max() < 2000
  assert 700 < np.median(lengths) < 1300  # ≈ 950 in the release statistics


def test_listops_independent_of_workers(monkeypatch):
  monkeypatch.setattr(listops, "CHUNK_SIZE", 15)  # several chunks for two workers
  kwargs = dict(min_length=10, max_length=60, seed=3)
  assert listops.sample(50, workers=1, **kwargs) == listops.sample(50, workers=2, **kwargs)
  assert listops.sample(50, workers=1, **kwargs) != listops.sample(50, workers=1, min_length=10,
                                                                 max_length=60, seed=4)


# ---------------------------------------------------------------------------------------------
# Pathfinder


def test_parameter_table():
  for res, p in pathfinder.RESOLUTIONS.items():
    assert p.window == res
    assert float(p.paddle_thickness * p.antialias).is_integer()
  hard = pathfinder.params_for(128, "hard")
  assert (hard.contour_length, hard.distractor_length, hard.distractor_count) == (14, 4, 8)
  assert pathfinder.params_for(32, "easy").distractor_count == 10
  with pytest.raises(ValueError, match=r"resolution must be one of \[32, 64, 128, 256\], got 48"):
    pathfinder.params_for(48)


def _read_dataset(folder):
  """(metadata fields, image) per line of every metadata file, in batch order."""
  out = []
  for meta in sorted((folder / "metadata").glob("*.npy"), key=lambda f: int(f.stem)):
    for line in meta.read_text().splitlines():
      fields = line.split(" ")
      out.append((fields, Image.open(folder / fields[0] / fields[1])))
  return out


@pytest.fixture(scope="module")
def pf32_dir(tmp_path_factory):
  out = tmp_path_factory.mktemp("pf32")
  return pathfinder.generate(out, resolution=32, num=24, images_per_batch=10, seed=0)


def test_pathfinder_files_shapes_balance(pf32_dir):
  assert pf32_dir.parts[-2:] == ("pathfinder32", "curv_contour_length_14")
  rows = _read_dataset(pf32_dir)
  assert len(rows) == 24
  per_batch = collections.defaultdict(list)
  for fields, image in rows:
    assert len(fields) == 11
    batch, index = int(fields[0].split("/")[1]), int(fields[2])
    assert fields[0] == f"imgs/{batch}" and fields[1] == f"sample_{index}.png"
    assert fields[4:] == ["1.0", "14", "4", "2", "0.5", "1", "1"]
    assert image.mode == "L" and image.size == (32, 32)
    pixels = np.asarray(image)
    assert pixels.max() == 255 and pixels.min() == 0
    per_batch[batch].append(int(fields[3]))
  assert sorted(per_batch) == [0, 1, 2]
  for labels in per_batch.values():  # exactly balanced within each batch
    assert labels.count(0) == labels.count(1) == len(labels) // 2


def test_pathfinder_deterministic_and_independent_of_workers(tmp_path, pf32_dir):
  again = pathfinder.generate(tmp_path, resolution=32, num=24, images_per_batch=10, seed=0,
                              workers=2)
  for (meta, image), (meta2, image2) in zip(_read_dataset(pf32_dir), _read_dataset(again)):
    assert meta == meta2
    assert np.array_equal(np.asarray(image), np.asarray(image2))


def _chain_steps(chain):
  return np.linalg.norm(np.diff(chain, axis=0), axis=1)


@pytest.mark.parametrize("resolution, num", [(32, 40), (64, 3), (128, 4), (256, 1)])
def test_markers_sit_on_target_curves(resolution, num):
  p = pathfinder.params_for(resolution, num_distractors=0)
  rng = pathfinder.batch_rng(0, p, 0)
  for s in pathfinder.samples(p, num, rng):
    first, second = (tuple(m) for m in s.markers)
    ends = [(tuple(c[0]), tuple(c[-1])) for c in s.snakes]
    assert first == ends[s.marked][0]
    # Positive: the second disc ends the same curve; negative: it ends the other one.
    assert second == ends[s.marked if s.label else 1 - s.marked][1]
    assert abs(math.dist(ends[0][0], ends[1][0]) - p.seed_distance) <= 1
    for chain in s.snakes:
      assert chain.shape == (p.contour_length, 2)
      # Dash ends are about L + 2m apart (the first step also spans the seed dash); the
      # slack covers the rounding of the pivots.
      steps = _chain_steps(chain)
      reach = p.paddle_length + 2 * p.margins[-1]
      assert steps.min() >= p.paddle_length - 1
      assert steps[0] <= reach + p.paddle_length + 5 and steps[1:].max() <= reach + 3
      # Without distractors every lit pixel belongs to a target curve or a disc, and every
      # recorded dash end lies on (or next to) a lit pixel.
      for y, x in chain:
        assert s.image[max(y - 1, 0):y + 2, max(x - 1, 0):x + 2].max() > 0
    for y, x in s.markers:
      assert s.image[y, x] >= 100


def test_path_x_files(tmp_path):
  folder = pathfinder.generate(tmp_path, resolution=128, num=4, seed=1)
  rows = _read_dataset(folder)
  assert [int(f[3]) for f, _ in rows].count(1) == 2
  for fields, image in rows:
    assert image.size == (128, 128) and image.mode == "L"
    assert fields[4:9] == ["1.8", "14", "4", "5", "1.5"] and fields[9] in ("2", "3")


# ---------------------------------------------------------------------------------------------
# Loader round trip and CLI


def test_loaders_read_generated_data(listops_dir, pf32_dir):
  from lra.data import listops as listops_loader
  from lra.data import pathfinder as pathfinder_loader

  split = listops_loader.read_tsv(listops_dir / "basic_val.tsv")
  expected = [int(t) for _, t in _read_rows(listops_dir / "basic_val.tsv")[1:]]
  assert list(split.labels) == expected
  folder = pathfinder_loader.locate(pf32_dir.parents[1], resolution=32)
  index = pathfinder_loader.read_index(folder)
  assert len(index.paths) == 24 and sorted(set(index.labels.tolist())) == [0, 1]


def test_cli_generate_and_grid(tmp_path):
  cli.main(["generate", "listops", "--out", str(tmp_path), "--num-train", "8", "--num-val",
            "2", "--num-test", "2", "--min-length", "5", "--max-length", "40", "--workers", "1"])
  assert len(_read_rows(tmp_path / "listops-1000" / "basic_test.tsv")) == 3
  grid = tmp_path / "grid.png"
  cli.main(["grid", "--out", str(grid), "--resolutions", "32", "--rows", "1", "--per-row", "4",
            "--cell", "64"])
  assert Image.open(grid).size == (4 * 70, 70)


def test_a_folder_is_regenerated_only_with_the_arguments_it_records(tmp_path, listops_dir):
  args = dict(num_train=150, num_val=25, num_test=25, min_length=20, max_length=120, seed=0)
  assert json.loads((listops_dir / "generated.json").read_text()) == {**args, "max_depth": 10}
  assert not (listops_dir / "generating.json").exists()
  with pytest.raises(GeneratedDataMismatchError, match=r"listops-1000 holds data generated with "
                     r"other arguments .*: num_train is 150 there, 160 here\. Point"):
    listops.generate(listops_dir.parent, **{**args, "num_train": 160})
  listops.generate(listops_dir.parent, **args, workers=2)  # the same data: written again


def test_an_unreadable_record_is_named_with_the_way_out(tmp_path):
  folder = pathfinder.generate(tmp_path, resolution=32, num=10, images_per_batch=10, seed=0)
  (folder / "generated.json").write_text('{"resolution": 32, "num"')  # cut off mid-write
  with pytest.raises(MalformedDataError, match=r"generated\.json: unreadable generator record "
                     r"\(.*\); delete .* to generate it again"):
    pathfinder.generate(tmp_path, resolution=32, num=10, images_per_batch=10, seed=0)


def test_pathfinder_refuses_a_folder_of_images_without_a_record(tmp_path):
  """Batches beyond the new `num` would stay and be loaded with the new ones."""
  folder = pathfinder.generate(tmp_path, resolution=32, num=20, images_per_batch=10, seed=0)
  (folder / "generated.json").unlink()
  with pytest.raises(GeneratedDataMismatchError, match=r"already holds images without a "
                     r"generator record \(generated\.json\); delete it"):
    pathfinder.generate(tmp_path, resolution=32, num=10, images_per_batch=10, seed=0)


def test_cli_does_not_import_jax():
  code = "import sys, lra.data.__main__; sys.exit('jax' in sys.modules)"
  assert subprocess.run([sys.executable, "-c", code]).returncode == 0
