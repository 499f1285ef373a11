"""The record a generator leaves in its output folder: the arguments that decide its files.

A generator writes `generating.json` before its first file and replaces it with
`generated.json` after its last, both holding the same arguments. So:

* a folder is reused only by a request for the same data: `check` raises a `GeneratedDataMismatchError`
  naming each argument that differs, instead of loading 48,000 images where 96,000 with
  other distractors were asked for;
* a generation cut short (the process killed, the machine gone) is recognised by its
  `generating.json` and finished, instead of loading the batches it had written so far.

A folder with neither file (the LRA release, or data generated before records were written)
is used as it is: nothing says what made it.
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

from lra.data.errors import GeneratedDataMismatchError, MalformedDataError

DONE = "generated.json"
PENDING = "generating.json"
# Arguments that decide where and how fast the files are written, not what they hold.
_NOT_OUTPUT = ("out_dir", "workers", "progress")


def output_params(generate: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
  """The arguments of a `generate(out_dir, **kwargs)` call that decide its output, defaults
  filled in, as they are recorded (JSON values).

  Raises:
    TypeError: an argument `generate` does not take (names the accepted ones).
  """
  signature = inspect.signature(generate)
  try:
    bound = signature.bind_partial(**kwargs)
  except TypeError as e:
    accepted = ", ".join(p for p in signature.parameters if p != "out_dir")
    raise TypeError(f"{generate.__module__}.generate: {e}; it takes {accepted}") from None
  bound.apply_defaults()
  params = {k: v for k, v in bound.arguments.items() if k not in _NOT_OUTPUT}
  return json.loads(json.dumps(params))


def read(folder: pathlib.Path) -> tuple[str, dict[str, Any] | None]:
  """("done" | "pending", recorded arguments), or ("none", None) for a folder without a record."""
  for state, name in (("done", DONE), ("pending", PENDING)):
    path = folder / name
    if path.is_file():
      try:
        return state, json.loads(path.read_text())
      except json.JSONDecodeError as e:
        raise MalformedDataError(f"{path}: unreadable generator record ({e}); delete {folder} "
                                 "to generate it again") from None
  return "none", None


def check(folder: pathlib.Path, params: Mapping[str, Any]) -> str:
  """The state of `folder` for a request for `params`: "done", "pending" or "none" (see `read`).

  Args:
    folder: the generator's output folder.
    params: `output_params` of the request.

  Raises:
    GeneratedDataMismatchError: the folder holds (or was generating) data made with other
      arguments; names each one, the record file, and the two ways out.
  """
  state, recorded = read(folder)
  if state == "none" or recorded == dict(params):
    return state
  keys = sorted(set(recorded) | set(params))
  differ = [f"{k} is {recorded.get(k)!r} there, {params.get(k)!r} here"
            for k in keys if recorded.get(k) != params.get(k)]
  record = folder / (DONE if state == "done" else PENDING)
  raise GeneratedDataMismatchError(
      f"{folder} holds data generated with other arguments ({record}): {'; '.join(differ)}. "
      "Point the data folder elsewhere (--config.data_dir, or --out for `python -m lra.data "
      f"generate`), or delete {folder} to generate it again.")


def _write(path: pathlib.Path, params: Mapping[str, Any]) -> None:
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(dict(params), indent=1, sort_keys=True) + "\n")
  os.replace(tmp, path)  # atomic: a reader sees the whole record or none


def begin(folder: pathlib.Path, params: Mapping[str, Any]) -> bool:
  """Marks `folder` as being generated with `params`; True when a generation with the same
  arguments was cut short there (its finished pieces may be kept).

  Raises:
    GeneratedDataMismatchError: as `check`, for a folder made with other arguments.
  """
  folder.mkdir(parents=True, exist_ok=True)
  state = check(folder, params)
  if state == "done":
    (folder / DONE).unlink()
  _write(folder / PENDING, params)
  return state == "pending"


def finish(folder: pathlib.Path, params: Mapping[str, Any]) -> None:
  """Marks `folder` as completely generated with `params`."""
  _write(folder / DONE, params)
  (folder / PENDING).unlink(missing_ok=True)
