"""Where each task's files live under a data root.

Two layouts are accepted (see the `lra.data` package docstring for the full tree):
the S4-style one (`<root>/listops/`, `<root>/aan/`, `<root>/pathfinder/pathfinder32/…`,
`<root>/imdb/`, `<root>/cifar10/`) and the extracted release archive, with `<root>` being
the folder that holds `lra_release/`, the outer `lra_release/` itself or the inner one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from lra.data.errors import MissingDataError

# Environment variable read by `default_data_dir`.
DATA_DIR_ENV = "LRA_DATA_DIR"

# Prefixes under which the release's own folder names are looked up, most specific first.
# The nested copy comes before `lra_release/` because the archive's top level holds stale
# duplicates of `listops-1000/` and `pathfinder128/` (LRA issue #38; S4/S5 use the nested one).
_RELEASE_PREFIXES = ("lra_release/lra_release", "lra_release", ".")


def default_data_dir() -> Path:
  """Returns `$LRA_DATA_DIR`, or `./data` when the variable is unset."""
  return Path(os.environ.get(DATA_DIR_ENV, "data"))


def candidate_dirs(root: str | os.PathLike, s4_names: Sequence[str],
                   release_name: str | None) -> list[Path]:
  """Lists the folders that may hold a task's files, in lookup order.

  Args:
    root: the data root.
    s4_names: paths relative to `root` in the S4-style layout (tried first).
    release_name: the folder's path inside the release archive (`tsv_data`,
      `pathfinder32/curv_contour_length_14`, …), tried under each release prefix.
  """
  root = Path(root)
  dirs = [root / name for name in s4_names]
  if release_name is not None:
    dirs += [root / prefix / release_name for prefix in _RELEASE_PREFIXES]
  unique = []
  for d in dirs:
    d = Path(os.path.normpath(d))
    if d not in unique:
      unique.append(d)
  return unique


def find_dir(root: str | os.PathLike, candidates: Sequence[Path],
             required: Sequence[str], *, what: str, fix: str) -> Path:
  """Returns the first candidate folder that contains every `required` entry.

  Raises:
    MissingDataError: naming the root, every folder tried, any incomplete one and the fix.
  """
  for cand in candidates:
    if all((cand / r).exists() for r in required):
      return cand
  # Point at half-copied folders, the most likely mistake.
  notes = []
  for cand in candidates:
    absent = [r for r in required if not (cand / r).exists()]
    if len(absent) < len(required):
      notes.append(f"Incomplete: {cand}/ lacks {', '.join(absent)}")
  raise missing(root, candidates, what=what, fix=fix, expected=", ".join(required), notes=notes)


def missing(root: str | os.PathLike, looked_in: Sequence[Path], *, what: str, fix: str,
            expected: str | None = None, notes: Sequence[str] = ()) -> MissingDataError:
  """Builds the error for data that is not where any accepted layout puts it.

  Args:
    root: the data root.
    looked_in: folders searched for `expected`, or (expected=None) the exact paths tried.
    what: the missing data, for the first line.
    fix: what to download or run, and where to put it.
    expected: the file names every folder was searched for.
    notes: extra lines (e.g. incomplete folders).
  """
  root = Path(root)
  state = "" if root.is_dir() else " (this folder does not exist)"
  header = f"Looked for {expected} in:" if expected else "Looked for:"
  suffix = "/" if expected else ""
  lines = [f"{what} not found under data root {root}{state}.", header]
  lines += [f"  {p}{suffix}" for p in looked_in] + list(notes) + [f"To fix: {fix}"]
  return MissingDataError("\n".join(lines))
