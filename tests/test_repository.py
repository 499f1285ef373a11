"""The repository stands on its own: no tracked file cites a document a clone does not have.

Background notes used while writing the code are not part of the repository; what a reader
needs from them lives in docs/ (math.md, data.md, design.md, benchmarks.md), and the code cites
those pages or the paper. README.md and docs/ are written for users, so they carry no
issue-tracker numbers. The patterns are assembled from pieces so that this file, which is
tracked too, does not match them itself.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

_SPEC, _MD = "spec", r"\.md"
# References to documents outside the repository: "<spec> §1.3", "<spec>/lion.md", the shared
# notes folder, and the notes' file names.
OUTSIDE_REFERENCE = re.compile("|".join([
    rf"\b{_SPEC} §",
    rf"\b{_SPEC}/",
    r"shared/" + _SPEC,
    r"\.\./" + "shared",
    r"\bstyle" + _MD,
    r"\bperformance" + _MD,
    r"\blra_data" + _MD,
]))
# An issue number, or the tracker's issue spoken of as the reader's ("the issue's target").
ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+|\b[Tt]he issue(?:'s| that)\b")


def _tracked_files() -> list[pathlib.Path]:
  if shutil.which("git") is None:
    pytest.skip("git is not installed")
  result = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
  if result.returncode != 0:
    pytest.skip("not a git checkout")
  return [ROOT / name for name in result.stdout.decode().split("\0") if name]


def _text(path: pathlib.Path) -> str | None:
  """The file's text, or None for binary or unreadable files."""
  try:
    data = path.read_bytes()
  except OSError:  # listed by git but deleted in the working tree
    return None
  if b"\0" in data:
    return None
  return data.decode("utf-8", errors="replace")


def _matches(pattern: re.Pattern, paths) -> list[str]:
  hits = []
  for path in paths:
    text = _text(path)
    if text is None:
      continue
    for number, line in enumerate(text.splitlines(), start=1):
      if pattern.search(line):
        hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
  return hits


@pytest.mark.parametrize("line", [
    f"Conventions ({_SPEC} §1.3).",
    f"written from the S5 paper and {_SPEC}/lion.md §7.",
    "Spec references are to `shared/" + _SPEC + "/lion.md`.",
    "see ../" + "shared/seeds",
    "follows performance" + ".md §7",
    "(v0 API, style" + ".md §0)",
    "the release has one empty PNG (lra_data" + ".md §5)",
])
def test_outside_reference_pattern_catches_known_forms(line):
  assert OUTSIDE_REFERENCE.search(line)


@pytest.mark.parametrize("line", [
    "def parse_arg(arg: str | None, **spec: Any) -> config_dict.ConfigDict:",
    "raise ValueError(f\"bad {what} {spec!r}; choose from {', '.join(allowed)}\")",
    "Conventions (docs/math.md §1.1).",
    "tests/reference.py is the float64 definition; the tests are the specification.",
    "from jax.sharding import Mesh, NamedSharding, PartitionSpec",
])
def test_outside_reference_pattern_spares_ordinary_text(line):
  assert not OUTSIDE_REFERENCE.search(line)


def test_no_tracked_file_cites_a_document_outside_the_repository():
  hits = _matches(OUTSIDE_REFERENCE, _tracked_files())
  assert not hits, ("these lines cite documents a clone does not have; cite the paper or a "
                    "docs/ page instead:\n" + "\n".join(hits))


def test_readme_and_docs_carry_no_issue_numbers():
  assert ISSUE_NUMBER.search("Issue 2's targets") and ISSUE_NUMBER.search("(issue #7)")
  assert ISSUE_NUMBER.search("the issue's guess") and ISSUE_NUMBER.search("The issue that asked")
  user_docs = [path for path in _tracked_files()
               if path == ROOT / "README.md" or (path.suffix == ".md" and "docs" in
                                                 path.relative_to(ROOT).parts[:1])]
  assert ROOT / "README.md" in user_docs
  hits = _matches(ISSUE_NUMBER, user_docs)
  assert not hits, "README.md and docs/ are for users; drop the issue numbers:\n" + "\n".join(hits)
