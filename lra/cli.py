"""How the command lines (`lion-train`, `lion-sweep`, `lion-data`; from a source tree `run.py`,
`python -m lra.sweep`, `python -m lra.data`) end on an error, and what their `--help` lists.

A mistake the user can fix prints one message, `<program>: error: <message>`, and exits with
status 2, without a traceback: a bad config field or flag, missing or malformed data, a
workdir that cannot be written, a resume with another config, a diverged run, a multi-process
job whose variables disagree. Each message names what is wrong and the fix. Any other exception
is a bug or a crash and keeps its traceback. `--traceback`, or LION_TRACEBACK=1 in the
environment, shows the traceback of the user's errors too. A run does not open with JAX's lines
about backends this machine lacks (`quiet_backend_probes`).
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
from collections.abc import Callable, Sequence

TRACEBACK_FLAG = "--traceback"
TRACEBACK_ENV = "LION_TRACEBACK"
USER_ERROR_STATUS = 2


class CommandLineError(Exception):
  """A flag or argument that does not parse; the message names it and what is accepted."""


# The exceptions whose message is the whole story for the user (see the module docstring), by
# name: matching names rather than classes keeps this module free of their imports, so that a
# command that never imports JAX (`python -m lra.data`) does not import it to report an error.
USER_ERRORS = frozenset({
    "lra.cli.CommandLineError",
    "lion_jax.options.ConfigError",  # a config field or option value (ResumeMismatchError too)
    "lra.data.errors.MissingDataError",
    "lra.data.errors.MalformedDataError",
    "lra.data.errors.GeneratedDataMismatchError",
    "lra.run_records.WorkdirError",
    "lra.train.NonFiniteError",  # the run diverged: the message says what to lower
    "lra.distributed.ClusterError",
})


def is_user_error(error: BaseException) -> bool:
  """Whether `error` is (a subclass of) one of `USER_ERRORS`."""
  return any(f"{kind.__module__}.{kind.__qualname__}" in USER_ERRORS
             for kind in type(error).__mro__)


def wants_traceback(argv: Sequence[str]) -> bool:
  """Whether `--traceback` is among the arguments or LION_TRACEBACK is set (not to 0)."""
  return (any(arg in (TRACEBACK_FLAG, f"{TRACEBACK_FLAG}=true", f"{TRACEBACK_FLAG}=1")
              for arg in argv)
          or os.environ.get(TRACEBACK_ENV, "0").lower() not in ("", "0", "false"))


def run(main: Callable[[], int | None], program: str, argv: Sequence[str],
        on_error: Callable[[BaseException], None] | None = None) -> int:
  """Calls `main()`; a user error becomes one line on stderr and status 2.

  Args:
    main: the command's work; returns its exit status (None: 0).
    program: the name the message starts with, e.g. "run.py".
    argv: the command's arguments (searched for `--traceback`).
    on_error: called with any exception `main` raises, before it is reported (it must not
      raise), e.g. to leave a failure record in the run's workdir.

  Returns:
    The exit status: `main`'s, or 2 after a user error.
  """
  try:
    return main() or 0
  except Exception as error:  # pylint: disable=broad-exception-caught  (re-raised unless the user's)
    if on_error is not None:
      on_error(error)
    if is_user_error(error) and not wants_traceback(argv):
      print(f"{program}: error: {error}", file=sys.stderr, flush=True)
      return USER_ERROR_STATUS
    raise


# JAX tries every backend it knows when it starts one and logs, at INFO, each that would not
# start (`jax._src.xla_bridge`). Two of these lines say only that a backend is not set up on
# this machine: TPU when the loader finds no libtpu.so (JAX's default name: a library the user
# names with TPU_LIBRARY_PATH is still reported), and the IFRT proxy without a server address. The
# commands log at INFO, so every run opened with them. `quiet_backend_probes` drops exactly
# those two; any other reason a backend did not start (a libtpu that fails to open a TPU, a
# CUDA plugin without a GPU) is still logged, and a backend that JAX_PLATFORMS asks for still
# raises.
JAX_BACKEND_LOGGER = "jax._src.xla_bridge"
ABSENT_BACKENDS = {
    "tpu": "Failed to open libtpu.so: libtpu.so: cannot open shared object file",
    "proxy": "backend requires the address of an IFRT Proxy server",
}


def _not_an_absent_backend(record: logging.LogRecord) -> bool:
  """False for JAX's line about a backend this machine does not have (`ABSENT_BACKENDS`)."""
  message = record.getMessage()
  return not any(message.startswith(f"Unable to initialize backend '{platform}': ")
                 and reason in message for platform, reason in ABSENT_BACKENDS.items())


def quiet_backend_probes() -> None:
  """Drops JAX's log lines about backends this machine does not have (see `ABSENT_BACKENDS`);
  call before JAX starts a backend. Idempotent."""
  logger = logging.getLogger(JAX_BACKEND_LOGGER)
  if _not_an_absent_backend not in logger.filters:
    logger.addFilter(_not_an_absent_backend)


def catalogue() -> str:
  """The tasks, variants, variant groups and presets, as `--help` lists them: the recommended
  LION first, then the paper's variants, the baselines, and the ladder's rungs one a line."""
  from configs import ablations, common  # pylint: disable=import-outside-toplevel  (imports jax)
  tasks = common.TASKS
  paper_rows = ablations.GROUPS["table3"] + ablations.GROUPS["table6"]
  rungs = [name for name in ablations.GROUPS["ladder"] if name not in paper_rows
           and (name in common.VARIANTS or name in common.DERIVED_BASELINES)]
  paper = [name for name in common.VARIANTS
           if name not in rungs and name not in (common.RECOMMENDED_VARIANT, "lion_complex")]
  lines = [f"Tasks: {', '.join(tasks)}.", "",
           "Variants (--config configs/<task>.py:<variant>; default lion_s):"]
  lines += [f"  {name}: the LION to use on every task: {ablations.LABELS[name]}, its mixed path "
            "started as large as S5's on the task (docs/paper_notes.md §22)"
            for name in (common.RECOMMENDED_VARIANT,)]
  lines += ["  lion_complex: the same with q·k learnt, the LION to use before it (docs/paper_notes.md "
            "§21)"]
  lines += [f"  every task, the paper's rows and readings: {', '.join(paper)}",
            f"  image, pathfinder, pathx only (LION♮ snake orders): {', '.join(common.GRID_VARIANTS)}"]
  for baseline in common.BASELINE_VARIANTS:
    having = [t for t in tasks if baseline in common.task_variants(t)]
    lines.append(f"  {baseline} (baseline): {', '.join(having)}")
  lines += ["", "Ladder rungs between LION-S and S5, one change each (docs/paper_notes.md §20; "
            "every task, s5_* where S5 is):"]
  width = max(map(len, rungs))
  lines += [f"  {name:<{width}}  {ablations.LABELS[name]}" for name in rungs]
  lines += ["", "Variant groups (lion-sweep --variants <group>):"]
  everything = {**common.VARIANTS, **common.GRID_VARIANTS, **common.BASELINE_VARIANTS}
  for name, group in ablations.GROUPS.items():
    lines.append(f"  {name} ({len(group)}): {', '.join(group)}")
  lines.append(f"  all ({len(everything)}): every variant above but the ladder's s5_* rungs")
  lines += ["", "Presets (after the variant: configs/<task>.py:<variant>,<preset>):"]
  presets = {**common.PRESET_FLAGS, "demo": "ListOps only: what `make demo` trains"}
  width = max(map(len, presets))
  lines += [f"  {name:<{width}}  {what}" for name, what in presets.items()]
  wrap = lambda line: textwrap.fill(line, width=100, subsequent_indent=" " * 6,
                                    break_on_hyphens=False)
  return "\n".join(map(wrap, lines)) + "\n"
