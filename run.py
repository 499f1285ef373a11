r"""Trains or evaluates LION on a Long Range Arena task; `lion-train` is the same command.

    python run.py --config configs/listops.py:lion_s[,runlocal] --workdir runs/listops \
        [--config.seed=1 --config.model.form=chunk_scan ...]
    python run.py --mode eval --workdir runs/listops [--config.eval_form=rnn]
    python run.py --help     # flags, tasks, variants, groups, presets

Works from the source tree without installing (e.g. on an accelerator image); the command line
lives in `lra.command`.
"""

import sys

import lion_jax  # noqa: F401  (first: sets lion-jax's XLA:CPU flags before JAX starts a backend)
from lra import command

if __name__ == "__main__":
  sys.exit(command.run_command_line(sys.argv))
