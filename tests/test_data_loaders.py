"""Loaders: each LRA format is written as a tiny fixture into tmp_path, then loaded.

Covers the registry, ListOps TSV, IMDB (folder, .tar.gz), AAN TSV (literal quotes,
multi-byte UTF-8, float labels), CIFAR-10 (binary records and python pickles, folder
and archive), Pathfinder PNGs (text and real-NPY metadata, a zero-byte PNG), both data
root layouts, the cache, and the errors for missing and malformed files.
"""

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from lra import tasks
from lra.data import MalformedDataError, MissingDataError, image, listops, pathfinder
from lra.tasks import TASKS, TaskInfo, get_task, load_task
from tests.lra_fixtures import (KNOWN_GRAY, aan_row, cifar_batch, write_aan, write_cifar,
                                write_imdb_archive, write_imdb_folder, write_pathfinder)


def byte_ids(text: str) -> list[int]:
  return [b + 1 for b in text.encode("utf-8")]


# --------------------------------------------------------------------------- registry


def test_registry_matches_the_lra_table():
  expected = {  # num_classes, vocab_size, seq_len, dual_input, input_kind
      "listops": (10, 16, 2048, False, "tokens"),
      "text": (2, 257, 4096, False, "tokens"),
      "retrieval": (2, 257, 4000, True, "tokens"),
      "image": (10, 256, 1024, False, "pixels"),
      "pathfinder": (2, 256, 1024, False, "pixels"),
      "pathx": (2, 256, 16384, False, "pixels"),
  }
  assert list(TASKS) == list(expected)
  for name, row in expected.items():
    assert get_task(name).info == TaskInfo(name, *row)


def test_unknown_task_option_and_seq_len_are_clear_errors(tmp_path):
  with pytest.raises(ValueError, match="valid tasks: listops, text, retrieval, image, pathfinder, pathx"):
    get_task("cifar")
  with pytest.raises(ValueError, match=r"unknown task option\(s\) \['colour'\]; accepted: source="):
    load_task("image", tmp_path, colour=True)
  with pytest.raises(ValueError, match="seq_len must be exactly 1024"):
    load_task("pathfinder", tmp_path, seq_len=512)


# --------------------------------------------------------------------------- ListOps

# Sources in the release format (left-nested binary pairs) with their values.
LISTOPS_ROWS = [
    ("( ( ( ( [SM 3 ) 5 ) 1 ) ] )", 9),
    ("( ( ( ( ( [MED 1 ) 2 ) 3 ) 4 ) ] )", 2),
    ("( ( ( [MAX 2 ) ( ( ( [MIN 7 ) 4 ) ] ) ) ] )", 4),
]


def write_listops(folder: Path, rows=LISTOPS_ROWS) -> None:
  folder.mkdir(parents=True, exist_ok=True)
  for split in ("train", "val", "test"):
    lines = ["Source\tTarget"] + [f"{src}\t{label}" for src, label in rows]
    # The release generator writes with csv.writer, i.e. CRLF line ends.
    (folder / f"basic_{split}.tsv").write_bytes(("\r\n".join(lines) + "\r\n").encode())


def test_listops_tokens_keep_the_closing_bracket_and_pad_with_zero(tmp_path):
  write_listops(tmp_path / "listops")
  splits, info = load_task("listops", tmp_path, seq_len=12)
  assert set(splits) == {"train", "val", "test"} and info.seq_len == 12
  train = splits["train"]
  assert train.inputs.shape == (3, 12) and train.inputs.dtype == np.uint8
  ids = {tok: i for i, tok in enumerate(listops.VOCAB)}
  first = [ids[t] for t in ("[SM", "3", "5", "1", "]")]
  np.testing.assert_array_equal(train.inputs[0], first + [0] * 7)
  np.testing.assert_array_equal(train.lengths, [5, 6, 7])
  np.testing.assert_array_equal(train.labels, [9, 2, 4])
  assert train.inputs.max() < info.vocab_size


def test_listops_truncates_to_seq_len(tmp_path):
  write_listops(tmp_path / "listops")
  train = load_task("listops", tmp_path, seq_len=4, cache_dir=False)[0]["train"]
  np.testing.assert_array_equal(train.lengths, [4, 4, 4])


def test_listops_bad_row_names_file_and_line(tmp_path):
  write_listops(tmp_path / "listops", LISTOPS_ROWS + [("( [SM 12 ] )", 2)])
  with pytest.raises(MalformedDataError, match=r"basic_train\.tsv:5: bad ListOps row: unknown token.*'12'"):
    load_task("listops", tmp_path, cache_dir=False)


def test_a_truncated_tsv_names_the_file_line_and_fix(tmp_path):
  write_listops(tmp_path / "listops")
  path = tmp_path / "listops/basic_train.tsv"
  path.write_bytes(path.read_bytes()[:-6])  # cut inside the last row
  with pytest.raises(MalformedDataError, match=r"basic_train\.tsv:4: bad ListOps row: .*cut short.*"
                                               r"python -m lra\.data generate listops --out"):
    load_task("listops", tmp_path, cache_dir=False)


def test_listops_bad_header_or_empty_file(tmp_path):
  write_listops(tmp_path / "listops")
  (tmp_path / "listops/basic_val.tsv").write_text("Source\tTarget\n")
  with pytest.raises(MalformedDataError, match=r"basic_val\.tsv: no examples"):
    load_task("listops", tmp_path, cache_dir=False)
  (tmp_path / "listops/basic_val.tsv").write_text("( [SM 1 ] )\t1\n")
  with pytest.raises(MalformedDataError, match=r"basic_val\.tsv:1: expected the header"):
    load_task("listops", tmp_path, cache_dir=False)


def test_listops_missing_prints_the_generate_command(tmp_path):
  with pytest.raises(MissingDataError) as err:
    load_task("listops", tmp_path / "nowhere")
  msg = str(err.value)
  assert "does not exist" in msg and "basic_train.tsv" in msg
  assert f"python -m lra.data generate listops --out {tmp_path / 'nowhere'}" in msg


@pytest.mark.parametrize("root_rel, files_rel", [
    (".", "lra_release/lra_release/listops-1000"),  # root holds the extracted archive
    ("lra_release", "lra_release/lra_release/listops-1000"),  # root is the outer folder
    ("lra_release/lra_release", "lra_release/lra_release/listops-1000"),  # root is the inner one
    (".", "listops-1000"),  # what `python -m lra.data generate listops --out <root>` writes
])
def test_release_layouts_are_found(tmp_path, root_rel, files_rel):
  write_listops(tmp_path / files_rel)
  splits, _ = load_task("listops", tmp_path / root_rel, cache_dir=False)
  assert len(splits["test"]) == 3


def test_nested_release_copy_wins_over_the_stale_top_level_duplicate(tmp_path):
  write_listops(tmp_path / "lra_release/listops-1000", LISTOPS_ROWS[:1])  # stale duplicate
  write_listops(tmp_path / "lra_release/lra_release/listops-1000")
  assert len(load_task("listops", tmp_path / "lra_release", cache_dir=False)[0]["train"]) == 3


# --------------------------------------------------------------------------- Text (IMDB)

def test_text_folder_is_byte_level_with_stripped_whitespace(tmp_path):
  write_imdb_folder(tmp_path / "imdb")
  splits, info = load_task("text", tmp_path, seq_len=24)
  assert info.vocab_size == 257 and splits["val"] is splits["test"]  # LRA: val = test
  train = splits["train"]
  assert train.inputs.shape == (4, 24) and train.inputs.dtype == np.int16
  assert sorted(train.labels.tolist()) == [0, 0, 1, 1]
  by_text = {tuple(row[:n]): label for row, n, label in zip(train.inputs, train.lengths, train.labels)}
  great = "Great film.<br /><br />Loved it \u00e9\u00e9!"
  assert len(great.encode()) > 24  # truncated; each "é" is two byte tokens (0xC3+1, 0xA9+1)
  assert by_text[tuple(byte_ids(great)[:24])] == 1
  assert by_text[tuple(byte_ids("Bad \u2013 very bad."))] == 0  # 3-byte dash, no strip artefacts
  short = int(np.argmin(train.lengths))
  assert train.lengths[short] == 5 and not train.inputs[short, 5:].any()  # "Dull." then pad 0


def test_text_archive_equals_folder(tmp_path):
  write_imdb_folder(tmp_path / "a" / "imdb")
  write_imdb_archive(tmp_path / "b" / "imdb" / "aclImdb_v1.tar.gz")
  folder, _ = load_task("text", tmp_path / "a", seq_len=32, source="folder", cache_dir=False)
  archive, _ = load_task("text", tmp_path / "b", seq_len=32, source="archive", cache_dir=False)
  for split in ("train", "val", "test"):
    for field in ("inputs", "lengths", "labels"):
      np.testing.assert_array_equal(getattr(folder[split], field), getattr(archive[split], field))


def test_text_holdout_validation_comes_from_train(tmp_path):
  write_imdb_folder(tmp_path / "imdb")
  holdout, _ = load_task("text", tmp_path, seq_len=8, val_split="holdout", cache_dir=False)
  lra, _ = load_task("text", tmp_path, seq_len=8, cache_dir=False)
  assert [len(holdout[s]) for s in ("train", "val", "test")] == [3, 1, 4]  # 10% of 4, at least 1
  np.testing.assert_array_equal(
      np.concatenate([holdout["train"].inputs, holdout["val"].inputs]), lra["train"].inputs)


def test_text_corrupt_archive_and_missing_data(tmp_path):
  with pytest.raises(MissingDataError, match=r"download aclImdb_v1\.tar\.gz .* put it at .*imdb"):
    load_task("text", tmp_path)
  (tmp_path / "imdb").mkdir()
  (tmp_path / "imdb/aclImdb_v1.tar.gz").write_bytes(b"not a gzip file")
  with pytest.raises(MalformedDataError, match=r"aclImdb_v1\.tar\.gz: not a readable \.tar\.gz"):
    load_task("text", tmp_path)


# --------------------------------------------------------------------------- Retrieval (AAN)


def test_aan_keeps_literal_quotes_and_encodes_utf8_bytes(tmp_path):
  rows = [aan_row("1.0", 'He said "linear" attention', "caf\u00e9 \u6f22"),
          aan_row("0", '"unbalanced quote', "x" * 50),
          aan_row("0.0", "", "short")]
  write_aan(tmp_path / "aan", rows)
  splits, info = load_task("retrieval", tmp_path, seq_len=20)
  assert info.dual_input
  train = splits["train"]
  assert train.inputs.shape == (3, 2, 20) and train.inputs.dtype == np.int16
  np.testing.assert_array_equal(train.labels, [1, 0, 0])
  np.testing.assert_array_equal(train.lengths, [[20, 9], [17, 20], [0, 5]])
  np.testing.assert_array_equal(train.inputs[0, 0], byte_ids('He said "linear" atte'[:20]))
  np.testing.assert_array_equal(train.inputs[0, 1, :9], byte_ids("caf\u00e9 \u6f22"))  # 3+2+1+3 bytes
  assert train.inputs[1, 0, 0] == ord('"') + 1 and not train.inputs[2, 0].any()


def test_aan_bad_row_names_file_and_line(tmp_path):
  write_aan(tmp_path / "aan", [aan_row("1", "a", "b"), "1\tonly\tfour\tcolumns"])
  with pytest.raises(MalformedDataError, match=r"new_aan_pairs\.train\.tsv:2: bad AAN row: expected 5"):
    load_task("retrieval", tmp_path, cache_dir=False)
  write_aan(tmp_path / "aan", [aan_row("yes", "a", "b")])
  with pytest.raises(MalformedDataError, match=r"train\.tsv:1: bad AAN row"):
    load_task("retrieval", tmp_path, cache_dir=False)


def test_aan_missing_says_which_folder_to_copy(tmp_path):
  with pytest.raises(MissingDataError, match=r"copy lra_release/lra_release/tsv_data/ to .*aan"):
    load_task("retrieval", tmp_path)


# --------------------------------------------------------------------------- Image (CIFAR-10)

def test_grayscale_matches_tf_and_pil_formulas():
  planes = np.asarray([rgb for rgb, _ in KNOWN_GRAY], np.uint8).T[None]  # [1, 3, 6]
  np.testing.assert_array_equal(image.rgb_to_gray(planes)[0], [g for _, g in KNOWN_GRAY])
  assert image.rgb_to_gray(planes, "pil")[0, 1] == 150  # PIL rounds pure green up


def test_pixel_normalisations():
  x = np.asarray([0, 255])
  np.testing.assert_allclose(image.normalize(x, "unit"), [0, 1])
  np.testing.assert_allclose(image.normalize(x, "symmetric"), [-1, 1])
  np.testing.assert_allclose(image.normalize(np.asarray([122.6]), "cifar"), [0], atol=1e-12)
  with pytest.raises(ValueError, match="unknown pixel normalisation"):
    image.normalize(x, "imagenet")


@pytest.mark.parametrize("fmt", ["binary", "python"])
@pytest.mark.parametrize("archive", [False, True])
def test_cifar_lra_split_and_gray_pixels(tmp_path, fmt, archive):
  write_cifar(tmp_path / "cifar10", fmt, archive)
  splits, info = load_task("image", tmp_path, cache_dir=False)
  assert info.input_kind == "pixels" and info.seq_len == 1024
  # 5 batches x 4 = 20 train images: LRA keeps the first 90% and validates on the last 10%.
  assert [len(splits[s]) for s in ("train", "val", "test")] == [18, 2, 4]
  train = splits["train"]
  assert train.inputs.dtype == np.uint8 and (train.lengths == 1024).all()
  np.testing.assert_array_equal(train.inputs[0, :len(KNOWN_GRAY)], [g for _, g in KNOWN_GRAY])
  last_data, last_labels = cifar_batch(4, 4)  # data_batch_5
  np.testing.assert_array_equal(splits["val"].labels, last_labels[2:])
  np.testing.assert_array_equal(splits["val"].inputs, image.rgb_to_gray(last_data[2:].reshape(2, 3, 1024)))
  _, test_labels = cifar_batch(5, 4)
  np.testing.assert_array_equal(splits["test"].labels, test_labels)


def test_cifar_random_validation_is_a_seeded_10_percent(tmp_path):
  write_cifar(tmp_path / "cifar10", "binary", archive=False)
  a, _ = load_task("image", tmp_path, val_split="random", cache_dir=False)
  b, _ = load_task("image", tmp_path, val_split="random", cache_dir=False)
  lra, _ = load_task("image", tmp_path, cache_dir=False)
  np.testing.assert_array_equal(a["val"].inputs, b["val"].inputs)
  assert len(a["val"]) == 2 and not np.array_equal(a["val"].inputs, lra["val"].inputs)


def test_cifar_truncated_record_is_reported_with_its_file(tmp_path):
  write_cifar(tmp_path / "cifar10", "binary", archive=False)
  path = tmp_path / "cifar10/cifar-10-batches-bin/data_batch_3.bin"
  path.write_bytes(path.read_bytes()[:-10])
  with pytest.raises(MalformedDataError, match=r"data_batch_3\.bin: bad CIFAR-10 binary batch: .*3073-byte"):
    load_task("image", tmp_path, cache_dir=False)


def test_cifar_pickle_with_foreign_objects_is_refused(tmp_path):
  write_cifar(tmp_path / "cifar10", "python", archive=False)
  (tmp_path / "cifar10/cifar-10-batches-py/test_batch").write_bytes(pickle.dumps(Path("x")))
  with pytest.raises(MalformedDataError, match=r"test_batch: bad CIFAR-10 python batch: refusing"):
    load_task("image", tmp_path, cache_dir=False)


def test_cifar_missing_names_the_archive(tmp_path):
  with pytest.raises(MissingDataError, match=r"download cifar-10-binary\.tar\.gz"):
    load_task("image", tmp_path)


# --------------------------------------------------------------------------- Pathfinder / Path-X


@pytest.mark.parametrize("npy_metadata", [False, True])
def test_pathfinder_reads_text_or_npy_metadata_and_splits_80_10_10(tmp_path, npy_metadata):
  folder = tmp_path / "pathfinder/pathfinder32/curv_contour_length_14"
  pixels = write_pathfinder(folder, 20, npy_metadata=npy_metadata)
  splits, info = load_task("pathfinder", tmp_path, cache_dir=False)
  assert [len(splits[s]) for s in ("train", "val", "test")] == [16, 2, 2]
  order = pathfinder.split_indices(20, "random")
  for name, split in splits.items():
    np.testing.assert_array_equal(split.inputs, pixels[order[name]])
    np.testing.assert_array_equal(split.labels, order[name] % 2)
    assert split.inputs.dtype == np.uint8 and (split.lengths == info.seq_len).all()
  all_positions = np.concatenate(list(order.values()))
  assert sorted(all_positions) == list(range(20))


def test_pathfinder_contiguous_split_follows_metadata_order(tmp_path):
  pixels = write_pathfinder(tmp_path / "pathfinder32/curv_contour_length_14", 10)
  splits, _ = load_task("pathfinder", tmp_path, split="contiguous", cache_dir=False)
  np.testing.assert_array_equal(splits["test"].inputs, pixels[9:])


def test_zero_byte_png_is_skipped_and_counted(tmp_path, caplog):
  folder = tmp_path / "pathfinder/pathfinder32/curv_contour_length_14"
  write_pathfinder(folder, 11, empty=(3,))
  index = pathfinder.read_index(folder)
  assert len(index.paths) == 10 and index.skipped == [folder / "imgs/0/sample_3.png"]
  splits, _ = load_task("pathfinder", tmp_path, cache_dir=False)
  assert sum(len(s) for s in splits.values()) == 10
  assert "skipped 1 zero-byte PNG" in caplog.text


def test_corrupt_png_and_bad_metadata_are_reported_with_their_location(tmp_path):
  folder = tmp_path / "pathfinder/pathfinder32/curv_contour_length_14"
  write_pathfinder(folder, 10)
  (folder / "imgs/1/sample_7.png").write_bytes(b"\x89PNG garbage")
  with pytest.raises(MalformedDataError, match=r"imgs/1/sample_7\.png: corrupt PNG"):
    load_task("pathfinder", tmp_path, split="contiguous", cache_dir=False)
  (folder / "metadata/1.npy").write_text("imgs/1 sample_5.png 5 1\nimgs/1 sample_6.png 6\n")
  with pytest.raises(MalformedDataError, match=r"metadata/1\.npy:2: expected"):
    load_task("pathfinder", tmp_path, cache_dir=False)


def test_pathx_reads_128px_images(tmp_path):
  pixels = write_pathfinder(tmp_path / "pathfinder128/curv_contour_length_14", 10, resolution=128)
  splits, info = load_task("pathx", tmp_path, split="contiguous", cache_dir=False)
  assert info.seq_len == 16384 and splits["train"].inputs.shape == (8, 16384)
  np.testing.assert_array_equal(splits["train"].inputs, pixels[:8])


def test_pathfinder_missing_prints_the_generate_command(tmp_path):
  with pytest.raises(MissingDataError) as err:
    load_task("pathx", tmp_path, difficulty="intermediate")
  assert (f"python -m lra.data generate pathfinder --resolution 128 --difficulty intermediate "
          f"--num 200000 --out {tmp_path}") in str(err.value)
  assert "pathfinder128/curv_contour_length_9" in str(err.value)
  (tmp_path / "pathfinder128/curv_contour_length_14/imgs").mkdir(parents=True)  # half copied
  with pytest.raises(MissingDataError, match=r"Incomplete: .*pathfinder128/curv_contour_length_14/ lacks metadata"):
    load_task("pathx", tmp_path)


# --------------------------------------------------------------------------- TFDS array_record input


def write_tfds(root: Path, name: str, version: str, config: str | None, features: dict,
               splits: dict[str, list[dict]]) -> None:
  """Prepares a tiny TFDS dataset in array_record format (works without TensorFlow)."""
  import tensorflow_datasets as tfds  # a required dependency (imported late: it is slow to load)

  class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version(version)
    code_path = None  # no checksums file to look up (and TFDS's lookup needs importlib_resources)
    BUILDER_CONFIGS = [tfds.core.BuilderConfig(name=config)] if config else []

    def _info(self):
      return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features))

    def _split_generators(self, dl_manager):
      return {split: self._generate_examples(split) for split in splits}

    def _generate_examples(self, split):
      for i, example in enumerate(splits[split]):
        yield f"{split}_{i}", example

  Builder.name = name
  Builder(data_dir=str(root), config=config, file_format="array_record").download_and_prepare()


def test_text_from_a_prepared_tfds_folder(tmp_path):
  import tensorflow_datasets as tfds
  reviews = {s: [{"text": f"{s} review {i} caf\u00e9", "label": i % 2} for i in range(3)]
             for s in ("train", "test")}
  features = {"text": tfds.features.Text(), "label": tfds.features.ClassLabel(names=["neg", "pos"])}
  write_tfds(tmp_path / "tfds", "imdb_reviews", "1.0.0", "plain_text", features, reviews)
  splits, _ = load_task("text", tmp_path, seq_len=32, cache_dir=False)  # "auto" falls back to TFDS
  decoded = {bytes(row[:n] - 1).decode(): label
             for row, n, label in zip(splits["test"].inputs.astype(np.uint8), splits["test"].lengths,
                                      splits["test"].labels)}
  assert decoded == {r["text"]: r["label"] for r in reviews["test"]}


def test_image_from_a_prepared_tfds_folder(tmp_path):
  import tensorflow_datasets as tfds
  # The real cifar10 stores PNG-encoded `Image` features, which need TF to *prepare*;
  # a raw uint8 tensor reads back identically through the data source.
  hwc = np.zeros((20, 32, 32, 3), np.uint8)
  hwc[:, 0, :len(KNOWN_GRAY)] = [rgb for rgb, _ in KNOWN_GRAY]
  examples = [{"image": x, "label": i % 10} for i, x in enumerate(hwc)]
  features = {"image": tfds.features.Tensor(shape=(32, 32, 3), dtype=np.uint8),
              "label": tfds.features.ClassLabel(num_classes=10)}
  write_tfds(tmp_path / "tfds", "cifar10", "3.0.2", None, features,
             {"train": examples, "test": examples[:4]})
  splits, _ = load_task("image", tmp_path, source="tfds", cache_dir=False)
  assert [len(splits[s]) for s in ("train", "val", "test")] == [18, 2, 4]
  np.testing.assert_array_equal(splits["test"].inputs[:, :len(KNOWN_GRAY)],
                                np.tile([g for _, g in KNOWN_GRAY], (4, 1)))


# --------------------------------------------------------------------------- generator round trips


def evaluate(ids: np.ndarray) -> int:
  """Evaluates a ListOps token-id sequence (prefix operators closed by `]`)."""
  ops = {"[MIN": min, "[MAX": max, "[MED": lambda a: int(np.median(a)), "[SM": lambda a: sum(a) % 10}
  stack = [[]]
  for token in (listops.VOCAB[i] for i in ids):
    if token in ops:
      stack.append([token])
    elif token == "]":
      op, *args = stack.pop()
      stack[-1].append(ops[op](args))
    else:
      stack[-1].append(int(token))
  return stack[0][0]


def test_generated_listops_loads_and_labels_match_the_tokens(tmp_path):
  from lra.data.generators import listops as generator  # pylint: disable=g-import-not-at-top

  generator.generate(tmp_path, num_train=16, num_val=4, num_test=4, min_length=5, max_length=60, seed=0)
  splits, _ = load_task("listops", tmp_path, seq_len=64)
  assert [len(splits[s]) for s in ("train", "val", "test")] == [16, 4, 4]
  for split in splits.values():
    for ids, n, label in zip(split.inputs, split.lengths, split.labels):
      assert evaluate(ids[:n]) == label and not ids[n:].any()


def test_generated_pathfinder_loads(tmp_path):
  from lra.data.generators import pathfinder as generator  # pylint: disable=g-import-not-at-top

  generator.generate(tmp_path, resolution=32, difficulty="hard", num=10, seed=0)
  splits, _ = load_task("pathfinder", tmp_path)
  assert [len(splits[s]) for s in ("train", "val", "test")] == [8, 1, 1]
  assert splits["train"].inputs.max() == 255 and set(splits["train"].labels) <= {0, 1}


# --------------------------------------------------------------------------- cache and max_examples


def test_cache_is_compact_memory_mapped_and_reused(tmp_path, monkeypatch):
  write_listops(tmp_path / "listops")
  first, _ = load_task("listops", tmp_path, seq_len=12)
  entries = list((tmp_path / "cache").iterdir())
  assert len(entries) == 1 and entries[0].name.startswith("listops-")
  manifest = json.loads((entries[0] / "manifest.json").read_text())
  assert manifest["key"]["seq_len"] == 12

  def no_decode(*args, **kwargs):
    raise AssertionError("should have been served from the cache")

  monkeypatch.setitem(TASKS, "listops", tasks.dataclasses.replace(TASKS["listops"], decode=no_decode))
  again, _ = load_task("listops", tmp_path, seq_len=12)
  assert isinstance(again["train"].inputs, np.memmap) and again["train"].inputs.dtype == np.uint8
  np.testing.assert_array_equal(again["train"].inputs, first["train"].inputs)
  # A different seq_len or an edited source file is a different entry.
  with pytest.raises(AssertionError, match="served from the cache"):
    load_task("listops", tmp_path, seq_len=13)
  os.utime(tmp_path / "listops/basic_val.tsv", ns=(1, 1))
  with pytest.raises(AssertionError, match="served from the cache"):
    load_task("listops", tmp_path, seq_len=12)


def test_an_unwritable_cache_only_costs_a_warning(tmp_path, caplog):
  write_listops(tmp_path / "listops")
  (tmp_path / "not_a_dir").write_text("")
  splits, _ = load_task("listops", tmp_path, cache_dir=tmp_path / "not_a_dir" / "cache")
  assert len(splits["train"]) == 3 and "could not write cache" in caplog.text


def test_a_cut_short_cache_file_is_named_and_rebuilt(tmp_path, caplog):
  write_listops(tmp_path / "listops")
  first, _ = load_task("listops", tmp_path, seq_len=12)
  (entry,) = (tmp_path / "cache").iterdir()
  broken = entry / "train.inputs.npy"
  broken.write_bytes(broken.read_bytes()[:-10])  # e.g. a full disk or an interrupted copy
  again, _ = load_task("listops", tmp_path, seq_len=12)
  assert f"cannot read the cached split file {broken}" in caplog.text and "Rebuilding" in caplog.text
  np.testing.assert_array_equal(again["train"].inputs, first["train"].inputs)
  assert [p.name for p in (tmp_path / "cache").iterdir()] == [entry.name]  # rebuilt in place
  load_task("listops", tmp_path, seq_len=12)  # the rebuilt entry reads back
  assert caplog.text.count("Rebuilding") == 1


def test_text_cache_stores_the_shared_val_test_split_once(tmp_path):
  write_imdb_folder(tmp_path / "imdb")
  load_task("text", tmp_path, seq_len=8, cache_dir=tmp_path / "c")
  (entry,) = (tmp_path / "c").iterdir()
  stored = json.loads((entry / "manifest.json").read_text())["splits"]
  assert stored["val"] == stored["test"] and len(list(entry.glob("*.inputs.npy"))) == 2
  splits, _ = load_task("text", tmp_path, seq_len=8, cache_dir=tmp_path / "c")
  np.testing.assert_array_equal(splits["val"].inputs, splits["test"].inputs)


def test_max_examples_caps_every_split(tmp_path):
  write_pathfinder(tmp_path / "pathfinder32/curv_contour_length_14", 20)
  splits, _ = load_task("pathfinder", tmp_path, max_examples=3)
  assert [len(splits[s]) for s in ("train", "val", "test")] == [3, 2, 2]
  write_listops(tmp_path / "listops")
  assert all(len(s) == 1 for s in load_task("listops", tmp_path, max_examples=1)[0].values())
