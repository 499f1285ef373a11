"""Exceptions raised by the LRA loaders.

Both subclass the built-in exception a caller would expect (``FileNotFoundError``,
``ValueError``), so generic handlers keep working; the message always names the
offending path (and row or file where there is one) and says how to fix it.
"""


class MissingDataError(FileNotFoundError):
  """A task's files are not under the data root (message: where we looked, what to supply)."""


class MalformedDataError(ValueError):
  """A file exists but cannot be parsed (message: path, line/row/member, what is wrong)."""


class GeneratedDataMismatchError(ValueError):
  """A generated data folder was made with other generator arguments than those asked for
  (message: the folder, its record file, each argument that differs, and the two ways out)."""
