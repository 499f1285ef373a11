"""Every command in the README's code blocks runs as written, so the README cannot go stale:
its program exists; its flags are known; its config file, variant, presets and `--config.<field>`
overrides exist; its sweep tasks, variants, groups and `--set` fields exist; its make targets
are in the Makefile. Nothing is run: each command is parsed the way its program parses it.
"""

import re
import shlex
from pathlib import Path

import pytest

from configs import common
from lra import command as train_command
from lra import sweep
from lra.data import __main__ as data_command

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# Programs the README may call that are not this project's, and launchers whose options come
# before the program they start.
OTHER_PROGRAMS = {"source", "pip", "git", "bash"}
LAUNCHERS = {"srun", "mpirun"}


def code_commands(text: str) -> list[list[str]]:
  """The commands of the ```bash blocks: continuation lines joined, comments dropped."""
  commands = []
  for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, re.S):
    for line in block.replace("\\\n", " ").splitlines():
      words = shlex.split(line, comments=True)
      if words:
        commands.append(words)
  return commands


def program_and_args(words: list[str]) -> tuple[str, list[str]]:
  """("lion-train", args) from `VAR=value ... .venv/bin/lion-train args`, `python run.py args`,
  `python -m lra.sweep args` or `srun --nodes=2 lion-train args`."""
  while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # environment variables
    words = words[1:]
  if words[0] in LAUNCHERS:
    words = words[1:]
    while words[0].startswith("-"):
      words = words[1:]
  name = Path(words[0]).name
  if name in ("python", "python3"):
    if words[1] == "run.py":
      return "lion-train", words[2:]
    if words[1] == "-m":
      return {"lra.sweep": "lion-sweep", "lra.data": "lion-data"}[words[2]], words[3:]
  return name, words[1:]


def check_train(args: list[str]) -> None:
  """lion-train's flags are known, and --config names a file, variant, presets and fields that
  exist (the config is built, as the command would build it)."""
  known = {flag.name for flag in train_command.FLAGS.get_flags_for_module(train_command)}
  known |= {"help"}
  config_arg, overrides, words = None, [], list(args)
  while words:
    word = words.pop(0)
    assert word.startswith("--"), f"not a flag: {word}"
    name, _, value = word[2:].partition("=")
    if name.startswith("config."):
      overrides.append(name.removeprefix("config."))
      continue
    assert name in known or name.removeprefix("no") in known, f"unknown flag --{name}"
    if not value and name not in ("help", "traceback", "notraceback") and words:
      value = words.pop(0)
    if name == "config":
      config_arg = value
    if name == "mode":
      assert value in ("train", "eval"), value
  if config_arg is None:  # --mode eval reads the run's own config, whose fields every run has
    assert "--help" in args or "eval" in args, f"no --config: {args}"
    config_arg = "configs/listops.py"
  path = config_arg.partition(":")[0]
  assert path.startswith("configs/") and (ROOT / path).is_file(), f"no config file {path}"
  config = train_command._config_without_overrides(str(ROOT / config_arg))  # pylint: disable=protected-access
  for dotted in overrides:
    assert common.unknown_field(config, dotted) is None, common.unknown_field(config, dotted)


def check_sweep(args: list[str]) -> None:
  """lion-sweep's arguments parse, and its tasks, variants, groups and --set fields exist."""
  parsed = sweep.build_parser().parse_args(args)
  tasks = [t for t in parsed.tasks.split(",") if t]
  assert set(tasks) <= set(common.TASKS), parsed.tasks
  variants = sweep.expand_variants(parsed.variants)
  runs = sweep.plan(tasks, variants, [0], "runs/readme", sets=tuple(parsed.sets))
  assert runs, f"no task of {tasks} has any of {variants}"
  for item in parsed.sets:
    field = item.split("=", 1)[0]
    config = train_command._config_without_overrides(  # pylint: disable=protected-access
        str(ROOT / f"configs/{tasks[0]}.py:{variants[0]}"))
    assert common.unknown_field(config, field) is None, item


def check_make(args: list[str]) -> None:
  targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
  assert set(args) <= targets, f"make {args}: targets are {sorted(targets)}"


CHECKS = {
    "lion-train": check_train,
    "lion-sweep": check_sweep,
    "lion-data": lambda args: data_command.build_parser().parse_args(args),
    "make": check_make,
}


README_COMMANDS = code_commands(README.read_text())


def test_the_readme_has_commands_for_each_program():
  programs = {program_and_args(words)[0] for words in README_COMMANDS}
  assert {"make", "lion-train", "lion-sweep", "lion-data"} <= programs


@pytest.mark.parametrize("words", README_COMMANDS, ids=lambda words: " ".join(words)[:60])
def test_every_readme_command_parses(words):
  program, args = program_and_args(words)
  if program in OTHER_PROGRAMS:
    return
  assert program in CHECKS, f"{program}: not a command of this project ({' '.join(words)})"
  CHECKS[program](args)


@pytest.mark.parametrize("line, message", [
    ("lion-train --config configs/listops.py:lion_q,runlocal --workdir w", "unknown variant"),
    ("lion-train --config configs/listops.py:lion_s --workdir w --config.model.decya=1",
     "config.model.decya"),
    ("lion-train --confg configs/listops.py:lion_s", "unknown flag --confg"),
    ("lion-train --mode eval --workdir w --config.eval_frm=rnn", "config.eval_frm"),
    ("lion-sweep --tasks listops --variants lion_s,lion_s_log_additive --workdir w",
     "lion_s_log_additive"),
    ("make tests", "targets are"),
])
def test_a_stale_command_is_caught(line, message):
  program, args = program_and_args(shlex.split(line))
  with pytest.raises(Exception, match=re.escape(message)):
    CHECKS[program](args)
