"""The LRA task registry: one `Task` per benchmark, looked up by name.

    splits, info = load_task("listops", data_dir)
    splits["train"].inputs  # [N, 2048] uint8 token ids
    info.num_classes        # 10

Every task yields "train", "val" and "test" Splits plus a `TaskInfo`. Decoded splits
are cached under `<data_dir>/cache/` (see `lra.data.cache`); accepted data layouts
are documented in `lra.data`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lion_jax.options import ConfigError
from lra.data import cache, image, listops, pathfinder, retrieval, text
from lra.data.split import Split

__all__ = ["TASKS", "Split", "Task", "TaskInfo", "get_task", "load_task"]


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  """What a model needs to know about a task's inputs and outputs.

  Attributes:
    name: "listops" | "text" | "retrieval" | "image" | "pathfinder" | "pathx".
    num_classes: 10, 2, 2, 10, 2, 2.
    vocab_size: ids lie in [0, vocab_size); id 0 is padding for token tasks.
      Pixel tasks: 256 (raw 8-bit values, no padding).
    seq_len: L; for retrieval, the length of each of the two documents.
    dual_input: True only for retrieval (inputs [N, 2, L]).
    input_kind: "tokens" or "pixels" (raw 0..255; the model embeds or normalises).
  """

  name: str
  num_classes: int
  vocab_size: int
  seq_len: int
  dual_input: bool
  input_kind: str


@dataclasses.dataclass(frozen=True)
class Task:
  """A registry entry: static facts plus how to find and decode the data.

  Attributes:
    info: the TaskInfo at the default sequence length.
    locate: (data_dir, **locate options) -> source; cheap, raises MissingDataError.
    decode: (source, *, seq_len, max_examples, **decode options) -> splits.
    options: every accepted task option with its default.
    locate_options: the option names passed to `locate` (the rest go to `decode`).
    fixed_seq_len: pixel tasks cannot change L.
    generator: the module of `lra.data.generators` that makes this task's data, or None.
    generator_arguments: task options -> the generator arguments fixed by the task rather than
      by `config.generate` (Path-X draws 128-pixel images of the difficulty it loads).
  """

  info: TaskInfo
  locate: Callable[..., Any]
  decode: Callable[..., dict[str, Split]]
  options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  locate_options: tuple[str, ...] = ()
  fixed_seq_len: bool = False
  generator: str | None = None
  generator_arguments: Callable[[Mapping[str, Any]], dict[str, Any]] = lambda options: {}

  @property
  def name(self) -> str:
    return self.info.name

  def info_for(self, seq_len: int | None = None) -> TaskInfo:
    """The TaskInfo for a given sequence length (default: the task's own)."""
    seq_len = self.info.seq_len if seq_len is None else seq_len
    if seq_len <= 0 or (self.fixed_seq_len and seq_len != self.info.seq_len):
      allowed = f"exactly {self.info.seq_len}" if self.fixed_seq_len else "positive"
      raise ConfigError(f"{self.name}: seq_len must be {allowed}, got {seq_len}")
    return dataclasses.replace(self.info, seq_len=seq_len)

  def load(self, data_dir: str | os.PathLike, *, seq_len: int | None = None,
           max_examples: int | None = None, cache_dir: str | os.PathLike | bool | None = None,
           **task_options) -> tuple[dict[str, Split], TaskInfo]:
    """See `load_task`."""
    unknown = set(task_options) - set(self.options)
    if unknown:
      accepted = ", ".join(f"{k}={v!r}" for k, v in self.options.items()) or "none"
      raise ConfigError(f"{self.name}: unknown task option(s) {sorted(unknown)}; accepted: {accepted}")
    if max_examples is not None and max_examples <= 0:
      raise ConfigError(f"max_examples must be positive or None, got {max_examples}")
    info = self.info_for(seq_len)
    opts = {**self.options, **task_options}
    source = self.locate(data_dir, **{k: opts[k] for k in self.locate_options})
    build = functools.partial(
        self.decode, source, seq_len=info.seq_len, max_examples=max_examples,
        **{k: v for k, v in opts.items() if k not in self.locate_options})
    if cache_dir is False:
      splits = build()
    else:
      cache_dir = Path(data_dir) / "cache" if cache_dir in (None, True) else Path(cache_dir)
      key = {"seq_len": info.seq_len, "max_examples": max_examples, "options": opts,
             "source": cache.fingerprint(_paths(source))}
      splits = cache.load_or_build(cache_dir, self.name, key, build)
    splits = {name: split.head(max_examples) for name, split in splits.items()}
    logging.info("%s: %s", self.name, ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
    return splits, info


def _paths(source: Any) -> list[Path]:
  """The files a located source consists of (for the cache fingerprint)."""
  if isinstance(source, Path):
    # A pathfinder folder is identified by its metadata files, not 200k PNGs.
    return [source / "metadata"] if (source / "metadata").is_dir() else [source]
  values = source.values() if isinstance(source, Mapping) else source
  return [p for v in values if isinstance(v, Path) for p in _paths(v)]


def _pathfinder_task(name: str, resolution: int) -> Task:
  return Task(
      TaskInfo(name, pathfinder.NUM_CLASSES, pathfinder.VOCAB_SIZE, resolution ** 2, False, "pixels"),
      functools.partial(pathfinder.locate, resolution=resolution),
      functools.partial(pathfinder.decode, resolution=resolution),
      options={"difficulty": "hard", "split": "random"}, locate_options=("difficulty",),
      fixed_seq_len=True, generator="pathfinder",
      generator_arguments=lambda options: dict(resolution=resolution,
                                               difficulty=options["difficulty"]))


TASKS: dict[str, Task] = {
    "listops": Task(
        TaskInfo("listops", listops.NUM_CLASSES, listops.VOCAB_SIZE, listops.SEQ_LEN, False, "tokens"),
        listops.locate, listops.decode, generator="listops"),
    "text": Task(
        TaskInfo("text", text.NUM_CLASSES, text.VOCAB_SIZE, text.SEQ_LEN, False, "tokens"),
        text.locate, text.decode, options={"source": "auto", "val_split": "test"},
        locate_options=("source",)),
    "retrieval": Task(
        TaskInfo("retrieval", retrieval.NUM_CLASSES, retrieval.VOCAB_SIZE, retrieval.SEQ_LEN, True, "tokens"),
        retrieval.locate, retrieval.decode),
    "image": Task(
        TaskInfo("image", image.NUM_CLASSES, image.VOCAB_SIZE, image.SEQ_LEN, False, "pixels"),
        image.locate, image.decode, options={"source": "auto", "val_split": "lra", "grayscale": "tf"},
        locate_options=("source",), fixed_seq_len=True),
    "pathfinder": _pathfinder_task("pathfinder", 32),
    "pathx": _pathfinder_task("pathx", 128),
}


def get_task(name: str) -> Task:
  """Returns the registry entry for `name`; unknown names list the valid ones."""
  if name not in TASKS:
    raise ConfigError(f"unknown LRA task {name!r}; valid tasks: {', '.join(TASKS)}")
  return TASKS[name]


def load_task(name: str, data_dir: str | os.PathLike, *, seq_len: int | None = None,
              max_examples: int | None = None, cache_dir: str | os.PathLike | bool | None = None,
              **task_options) -> tuple[dict[str, Split], TaskInfo]:
  """Loads a task's train/val/test splits.

  Args:
    name: a key of `TASKS`.
    data_dir: the data root (layouts in the `lra.data` docstring).
    seq_len: token tasks: truncate/pad length (default 2048 / 4096 / 4000 per
      document); pixel tasks: must be omitted or equal to the image size.
    max_examples: keep at most this many examples per split (smoke runs).
    cache_dir: where decoded splits are cached; None -> `<data_dir>/cache`,
      False -> no cache.
    **task_options: text: source ("auto"|"folder"|"archive"|"tfds"), val_split
      ("test": LRA protocol, val = test | "holdout": last 10% of train);
      image: source ("auto"|"binary"|"python"|"tfds"), val_split ("lra": last 10%
      of train | "random"), grayscale ("tf"|"pil"); pathfinder/pathx: difficulty
      ("hard"|"intermediate"|"easy"), split ("random": seed 42 | "contiguous").

  Returns:
    ({"train", "val", "test"} -> Split, TaskInfo).

  Raises:
    ValueError: unknown task or option, or bad seq_len.
    MissingDataError / MalformedDataError: see `lra.data.errors`.
  """
  return get_task(name).load(data_dir, seq_len=seq_len, max_examples=max_examples,
                             cache_dir=cache_dir, **task_options)
