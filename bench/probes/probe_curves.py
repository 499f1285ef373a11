r"""Learning curves of several sweeps side by side: where each model goes as a preset changes.

Each argument is `LABEL=DIR`, a sweep's records folder (`lion-sweep ... --records DIR`) or its
`--workdir`, e.g. one folder per depth of a probe. Plots validation accuracy against training
steps (left) and training seconds (right), one line per (label, variant, seed), and prints a table per run:
parameters, steps, training seconds, best validation accuracy and its step, test accuracy at
that step (the run's results.json), and the accuracy at each evaluation.

    python bench/probes/probe_curves.py --out docs/sweep/probes/listops_depth.png \
        d2=docs/sweep/probes/listops_d2 d6=docs/sweep/probes/listops_d6

Runs still training are read too (their timing so far; no test accuracy yet).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from lra.metrics import TIMING_FILE


def read_runs(label: str, folder: Path) -> list[dict]:
  """[{label, task, variant, seed, evals: [(step, seconds, acc)], results | None}] of a folder."""
  runs = []
  # A records folder keeps runs under runs/; a sweep's workdir holds them directly.
  found = sorted(folder.glob(f"runs/*/*/seed*/{TIMING_FILE}")) or sorted(
      folder.glob(f"*/*/seed*/{TIMING_FILE}"))
  for timing in found:
    run_dir = timing.parent
    evals = [(r["step"], r["train_seconds"], r["eval_accuracy"])
             for r in map(json.loads, timing.read_text().splitlines()) if "eval_accuracy" in r]
    results = run_dir / "results.json"
    runs.append({"label": label, "task": run_dir.parent.parent.name,
                 "variant": run_dir.parent.name, "seed": run_dir.name,
                 "evals": evals,
                 "results": json.loads(results.read_text()) if results.exists() else None})
  return runs


def table(runs: list[dict]) -> str:
  """One markdown row per run."""
  lines = ["| probe | task | model | seed | params | steps | train s | best val (step) | test |"
           " val acc. at each evaluation |", "|---|---|---|---|---|---|---|---|---|---|"]
  for run in runs:
    res = run["results"] or {}
    last = run["evals"][-1] if run["evals"] else (0, 0.0, None)
    best = (f"{100 * res['best_val_accuracy']:.1f} ({res['best_step']})" if res else "running")
    test = f"{100 * res['test_accuracy']:.2f}" if res else "–"
    curve = " ".join(f"{100 * acc:.1f}" for _, _, acc in run["evals"])
    lines.append(f"| {run['label']} | {run['task']} | {run['variant']} | {run['seed']} | "
                 f"{res.get('num_params', '–')} | {last[0]} | {last[1]:.0f} | {best} | {test} | "
                 f"{curve} |")
  return "\n".join(lines)


def plot(runs: list[dict], path: Path) -> None:
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, (ax_step, ax_time) = plt.subplots(1, 2, figsize=(12, 4.2))
  # One colour per model, one line style per probe: the same model reads across probes.
  variants = sorted({run["variant"] for run in runs})
  labels = list(dict.fromkeys(run["label"] for run in runs))
  colours = plt.get_cmap("tab10")
  for run in runs:
    if not run["evals"]:
      continue
    steps, seconds, acc = zip(*run["evals"])
    style = dict(marker=".", color=colours(variants.index(run["variant"]) % 10),
                 linestyle=("-", "--", ":", "-.")[labels.index(run["label"]) % 4])
    name = f"{run['label']} {run['variant']} {run['seed']}"
    ax_step.plot(steps, [100 * a for a in acc], label=name, **style)
    ax_time.plot(seconds, [100 * a for a in acc], **style)
  ax_step.set_xlabel("training steps")
  ax_time.set_xlabel("training seconds")
  for ax in (ax_step, ax_time):
    ax.set_ylabel("validation accuracy (%)")
    ax.grid(alpha=0.3)
  ax_time.legend(*ax_step.get_legend_handles_labels(), fontsize=7, loc="center left",
                 bbox_to_anchor=(1.01, 0.5))
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("folders", nargs="+", metavar="LABEL=DIR")
  parser.add_argument("--out", type=Path, help="the figure (PNG); none without it")
  args = parser.parse_args()
  runs = []
  for item in args.folders:
    label, sep, folder = item.partition("=")
    if not sep or not Path(folder).is_dir():
      parser.error(f"{item!r}: expected LABEL=DIR with DIR a sweep's --records folder or --workdir")
    runs += read_runs(label, Path(folder))
  if not runs:
    parser.error("no run records (runs/<task>/<variant>/seed<k>/timing.jsonl) in those folders")
  print(table(runs))
  if args.out:
    plot(runs, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
