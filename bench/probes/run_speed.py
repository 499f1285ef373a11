r"""Does a real LION-S run keep its speed as its gates learn? Late against early step time.

    python bench/probes/run_speed.py                       # cpu_long LION-S, 1,200 steps (~10 min)
    python bench/probes/run_speed.py --steps 2000 --workdir runs/speed --extra --config.seed=1
    python bench/probes/run_speed.py --workdir runs/speed  # a finished run: only read its timing

Trains `configs/listops.py:lion_s,cpu_long` (or `--config`) with an evaluation every
`--window` steps, so that the run's own `timing.jsonl` (training seconds over timed steps,
without compilation, evaluation or checkpoints) has one record per window, then prints the
milliseconds per step of each window and the ratio of the late windows (the second half of the
run) to the first one. Selective gates turn steep within a few hundred steps on this preset
(bench/trained_decays.py), so a kernel that slows down on steep decays shows here; before the
factored kernel recomputed steep chunks on the side the ratio was 2.2 (docs/benchmarks.md §1).
Target: at most 1.15.

A benchmark, not a test: it trains for minutes and its number depends on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = 1.15


def windows(workdir: Path) -> list[tuple[int, int, float]]:
  """(first step, last step, ms per step) of each stretch between two timing records."""
  records = [json.loads(line) for line in (workdir / "timing.jsonl").read_text().splitlines()
             if line.strip()]
  out, previous = [], {"step": 0, "train_seconds": 0.0, "timed_steps": 0}
  for record in records:
    steps = record["timed_steps"] - previous["timed_steps"]
    if steps > 0:
      seconds = record["train_seconds"] - previous["train_seconds"]
      out.append((previous["step"] + 1, record["step"], 1e3 * seconds / steps))
    previous = record
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="configs/listops.py:lion_s,cpu_long")
  parser.add_argument("--workdir", default="bench/results/run_speed")
  parser.add_argument("--steps", type=int, default=1200)
  parser.add_argument("--window", type=int, default=100)
  parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                      help="further run.py flags, e.g. --config.seed=1")
  args = parser.parse_args(argv)
  workdir = Path(args.workdir)
  if not (workdir / "results.json").is_file():
    command = [sys.executable, str(REPO / "run.py"), f"--config={args.config}",
               f"--workdir={workdir}", f"--config.num_train_steps={args.steps}",
               f"--config.eval_every_steps={args.window}", *args.extra]
    print(" ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)
  stretches = windows(workdir)
  last = stretches[-1][1]
  early = stretches[0][2]
  late = [ms for first, _, ms in stretches if first > last // 2]
  late_ms = sum(late) / len(late)
  for first, final, ms in stretches:
    print(f"steps {first:5d}-{final:5d}: {ms:7.1f} ms/step")
  ratio = late_ms / early
  print(f"late (steps {last // 2 + 1}-{last}) / early (steps {stretches[0][0]}-"
        f"{stretches[0][1]}): {late_ms:.1f} / {early:.1f} ms = {ratio:.2f} "
        f"(target <= {TARGET}: {'met' if ratio <= TARGET else 'MISSED'})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
