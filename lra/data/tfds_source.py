"""Optional input: a TFDS dataset already prepared in `array_record` format.

TFDS reads such data without TensorFlow through random-access data sources; data
prepared in the default `tfrecord` format needs TF and is rejected with a fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lra.data.errors import MalformedDataError


def read_records(version_dir: Path, split: str) -> Iterator[dict[str, Any]]:
  """Yields the records of one split as numpy dicts.

  Args:
    version_dir: e.g. `<root>/tfds/cifar10/3.0.2` (holds `dataset_info.json`).
    split: TFDS split name (`train`, `test`).

  Raises:
    MalformedDataError: when the folder is not array_record data TFDS can open.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top  (slow import, optional path)

  fix = (f"re-prepare it with TensorFlow installed: tfds.builder(name, data_dir=..., "
         f"file_format='array_record').download_and_prepare(), or supply the raw archive instead")
  try:
    builder = tfds.builder_from_directory(str(version_dir))
    source = builder.as_data_source(split=split)
  except NotImplementedError as e:
    raise MalformedDataError(f"{version_dir}: TFDS data is not in array_record format ({e}); {fix}.") from e
  except Exception as e:  # TFDS raises assorted errors for broken folders.
    raise MalformedDataError(f"{version_dir}: cannot open as a prepared TFDS dataset ({e}); {fix}.") from e
  for i in range(len(source)):
    yield source[i]
