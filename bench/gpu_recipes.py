r"""On a lent GPU in one command: the LIONs against S5 at every preset, long ListOps at 10,000 steps.

    python3 bench/gpu_recipes.py --wheels .whl --out DIR            # on the accelerator
    python3 bench/gpu_recipes.py --stages long --wheels .whl --out DIR   # again: resumes the runs
    python3 bench/gpu_recipes.py --quick --out DIR          # every stage at tiny sizes (CPU)

Two stages, each a child process with its own time limit (`--table-s`, `--long-s`), in order:

  table  `bench/recipes_vs_s5.py` (every task preset and the sweeps' CPU presets: examples/s over
         S5's side by side, each step over its identity-mixer floor, XLA's memory plan at batch
         32) for `lion`, `lion_complex`, the two recipes of docs/paper_notes.md §20, S5 and the
         Transformer, written to DIR/recipes_vs_s5.{json,md}.
  long   `lion-sweep --tasks listops --variants lion,lion_complex,lion_s_s5_form,s5 --seeds 0,1,2
         --ladder-long --parallel 12`: the twelve 10,000-step runs of long ListOps sharing the card
         (each without preallocation), their records in DIR/records/ (copy them to
         docs/sweep/<name>/ to commit them; `lion-sweep ... --records docs/sweep/<name>` counts
         them).

A stage that reaches its limit gets SIGTERM: the sweep passes it to its runs, which save the step
they reached and exit (status 75), so the same command on the same machine (`runs/gpu_recipes/`,
git-ignored, is the sweep's workdir) resumes them. The device's image lacks ml-collections and
grain: `--wheels` installs the wheels of `bench/fetch_accelerator_wheels.sh` into a scratch folder
that only these processes see (as `bench/accelerator.py` does). `--quick` trains `runlocal` runs of
`lion` and S5 (seed 0) and the table's `--quick`: tests/test_gpu_recipes.py runs it.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

BENCH = pathlib.Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import accelerator  # noqa: E402  (bench/ is no package: its scripts import each other by name)

LONG_VARIANTS = "lion,lion_complex,lion_s_s5_form,s5"
TABLE_VARIANTS = "lion,lion_complex,lion_s_s5_form,lion_s_s5_form_complex_input,s5,transformer"
WORKDIR = REPO / "runs" / "gpu_recipes"
STAGES = ("table", "long")


def stage_commands(stage: str, out: pathlib.Path, quick: bool) -> list[str]:
  """The child command of `stage` (`STAGES`), writing under `out`."""
  python = sys.executable
  if stage == "table":
    return [python, str(BENCH / "recipes_vs_s5.py"), "--out", str(out), "--name", "recipes_vs_s5",
            *(["--quick"] if quick else ["--variants", TABLE_VARIANTS])]
  if stage == "long":
    sweep = [python, "-m", "lra.sweep", "--tasks", "listops", "--workdir",
             str(WORKDIR / ("quick" if quick else "long")), "--records", str(out / "records")]
    if quick:
      return sweep + ["--variants", "lion,s5", "--seeds", "0", "--runlocal",
                      "--parallel", "2"]
    return sweep + ["--variants", LONG_VARIANTS, "--seeds", "0,1,2", "--ladder-long",
                    "--parallel", "12"]
  raise SystemExit(f"--stages: unknown stage {stage!r}; stages: {', '.join(STAGES)}")


def run_stage(command: list[str], limit_s: float, env: dict[str, str], log) -> int:
  """Runs `command` in its own process group; SIGTERM at `limit_s`, SIGKILL a minute later.

  Returns:
    The child's exit status (75: stopped at the limit, resumable).
  """
  log.write(f"$ {' '.join(command)}\n")
  log.flush()
  child = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
  try:
    return child.wait(timeout=limit_s)
  except subprocess.TimeoutExpired:
    os.killpg(child.pid, signal.SIGTERM)
    try:
      return child.wait(timeout=60)
    except subprocess.TimeoutExpired:
      os.killpg(child.pid, signal.SIGKILL)
      return child.wait()


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", required=True, help="folder of the table, the records and the log")
  p.add_argument("--stages", default=",".join(STAGES), help=f"comma list of {', '.join(STAGES)}")
  p.add_argument("--wheels", default=None,
                 help="folder of wheels to install into a scratch folder first (e.g. .whl)")
  p.add_argument("--table-s", type=float, default=240.0, help="time limit of the table stage")
  p.add_argument("--long-s", type=float, default=330.0, help="time limit of the long stage")
  p.add_argument("--quick", action="store_true", help="every stage at tiny sizes (CPU smoke test)")
  args = p.parse_args(argv)
  out = pathlib.Path(args.out).resolve()
  out.mkdir(parents=True, exist_ok=True)
  limits = {"table": args.table_s, "long": args.long_s}
  stages = [s for s in args.stages.split(",") if s]
  commands = {stage: stage_commands(stage, out, args.quick) for stage in stages}
  with tempfile.TemporaryDirectory() as scratch:
    site = (accelerator.install_wheels(pathlib.Path(args.wheels), pathlib.Path(scratch))
            if args.wheels else None)
    env = accelerator.child_environment(site)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # twelve runs share one card
    status = {}
    with open(out / "gpu_recipes.log", "a", encoding="utf-8") as log:
      for stage, command in commands.items():
        start = time.monotonic()
        status[stage] = run_stage(command, limits[stage], env, log)
        print(f"gpu_recipes: {stage} exited {status[stage]} after "
              f"{time.monotonic() - start:.0f} s (log: {out / 'gpu_recipes.log'})", flush=True)
  return 0 if all(code == 0 for code in status.values()) else 1


if __name__ == "__main__":
  sys.exit(main())
