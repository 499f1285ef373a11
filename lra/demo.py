"""`make demo`: generate a short ListOps, train a small `lion` on the CPU, evaluate, report.

    python -m lra.demo [--workdir runs/demo] [--fresh]

It is exactly `python run.py --config configs/listops.py:lion,demo --workdir runs/demo`
followed by `python run.py --mode eval --workdir runs/demo --config.eval_form=attention`,
plus a table comparing test accuracy with the majority-class baseline. Rerunning resumes
(or, when finished, only re-evaluates); `--fresh` starts over. Exits with status 1 when
the model does not beat the baseline by 10 points.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path

from configs import listops as listops_config
from lra import cli, metrics, resume, train

MARGIN = 0.10  # the demo must beat the majority class by this much


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", default="runs/demo")
  parser.add_argument("--fresh", action="store_true", help="delete the workdir first")
  args = parser.parse_args(argv)
  # force: an imported library has already configured the root logger at WARNING.
  logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                      force=True)
  cli.quiet_backend_probes()
  workdir = Path(args.workdir)
  if args.fresh and workdir.exists():
    shutil.rmtree(workdir)

  config = listops_config.get_config("lion,demo")
  tic = time.perf_counter()
  try:
    results = train.train_and_evaluate(config, str(workdir))
  except resume.ResumeMismatchError as error:
    # A run of an earlier demo (LION-S until 2026-12) cannot resume as this one.
    print(f"{workdir} holds a run of another demo config ({error.differences or error}). Start "
          f"the demo over with `.venv/bin/lion-demo --fresh --workdir {workdir}` (deletes that "
          f"run), or keep it and run `.venv/bin/lion-demo --workdir runs/demo_new`.",
          file=sys.stderr)
    return 2
  # The eval mode on another form of the same weights: the numbers must agree.
  config.eval_form = "attention"
  report = train.evaluate(config, str(workdir), progress=False)
  wall = time.perf_counter() - tic
  splits, _ = train.load_data(config)
  majority_class, baseline = metrics.majority_class(splits["test"].labels)

  rows = [
      ("test accuracy (best-val checkpoint)", f"{100 * results['test_accuracy']:.2f}%"),
      (f"majority class ({majority_class}) baseline", f"{100 * baseline:.2f}%"),
      ("margin over baseline", f"{100 * (results['test_accuracy'] - baseline):+.2f} points"),
      ("test accuracy, eval mode in attention form", f"{100 * report['accuracy']:.2f}%"),
      ("best validation accuracy", f"{100 * results['best_val_accuracy']:.2f}% at step "
                                   f"{results['best_step']}/{results['total_steps']}"),
      ("parameters", f"{results['num_params']:,}"),
      ("training throughput", f"{results['train_examples_per_sec']:.1f} examples/s"),
      ("wall time (generate, train, test, eval)", f"{wall / 60:.1f} min"),
      ("curves", str(workdir / "curves.png")),
  ]
  width = max(len(name) for name, _ in rows)
  print("\n`lion` on short ListOps (50-150 tokens), CPU")
  for name, value in rows:
    print(f"  {name:<{width}}  {value}")
  ok = results["test_accuracy"] >= baseline + MARGIN
  print(f"\n{'PASS' if ok else 'FAIL'}: test accuracy {'beats' if ok else 'does not beat'} "
        f"the majority baseline by {100 * MARGIN:.0f} points")
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
