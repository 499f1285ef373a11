"""The tables and plots of an `lra.sweep`: results.csv, results.md (laid out like the paper's
Tables 3, 6 and 7, our mean ± std beside the paper's number, the majority class of each task
beneath, and a warning for a task on which no model beats it by `CHANCE_MARGIN` points),
results.png, and from the runs' timing speed.md and curves.png.

Accuracies are test accuracy at the best-validation checkpoint, in percent. The std is the
sample standard deviation over seeds (n − 1); a single seed shows no ±.

Each run is read from its workdir, or from its records where only they hold its outcome
(`lra.sweep_records`). A run a signal stopped is reported as preempted (it saved its step) or
killed (it could not), with the signal and step, beside the unfinished ones: never as failed. A result whose run recorded a config other than the one its command
builds today (a default changed since, say) is marked stale, †, with a note naming each
differing field, the change (`configs/ablations.DEFAULT_CHANGES`) and the commit the run ran at.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

from configs import ablations
from lra.metrics import read_timing, save_figure
from lra import sweep_records
from lra.run_records import (RESULTS_FILE, Run, diverged, outcome_dir, read_failure,
                             read_killed, read_preempted, status)

# Validation accuracies (%) whose first crossing the speed table times.
LEVELS = (20, 30, 40, 50, 60, 70, 80, 90)
# Percentage points by which some model must beat the majority class before a task's column
# compares anything (results.md warns otherwise).
CHANCE_MARGIN = 5.0

CSV_FIELDS = ("task", "variant", "seed", "status", "test_accuracy", "best_val_accuracy",
              "majority_test_accuracy", "best_step", "total_steps", "num_params",
              "train_examples_per_sec",
              "peak_host_memory_bytes", "device_peak_bytes", "paper",
              "error", "stopped", "commit", "stale", "workdir")
STALE = "†"
# Statuses of runs a signal stopped (`lra.run_records.status`); a rerun resumes them.
STOPPED = ("preempted", "killed")


def collect(runs: list[Run]) -> list[dict]:
  """One record per run: its status and, when finished, its results (accuracies in %), the
  commits it ran at and how its config differs from today's ("stale", {} when it does not)."""
  records = []
  for run in runs:
    folder = outcome_dir(run)
    record = {"task": run.task, "variant": run.variant, "seed": run.seed, "status": status(run),
              "paper": ablations.PAPER.get(run.variant, {}).get(run.task), "error": "",
              "stopped": "", "workdir": str(run.workdir), "commit": "", "stale": {}}
    if record["status"] in ("done", "failed"):
      record["commit"] = " ".join(sweep_records.commits(folder))
      record["stale"] = sweep_records.stale_fields(run)
    if record["status"] == "done":
      results = json.loads((folder / RESULTS_FILE).read_text())
      record.update({k: results.get(k) for k in CSV_FIELDS if k in results})
      for key in ("test_accuracy", "best_val_accuracy", "majority_test_accuracy"):
        if results.get(key) is not None:  # runs before the majority class was recorded lack it
          record[key] = round(100 * results[key], 4)
      record["timing"] = read_timing(folder)
    elif record["status"] == "failed":
      failure = read_failure(folder)
      record["error"] = ("diverged" if diverged(failure) else
                         f"{failure['type'] or 'exit'}: {failure['message']}".splitlines()[0])
    elif record["status"] in STOPPED:
      record["stopped"] = (read_preempted(run.workdir) or read_killed(run.workdir))["message"]
    records.append(record)
  return records


def write_csv(records: list[dict], path: Path) -> None:
  with open(path, "w", newline="", encoding="utf-8") as f:
    writer = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    writer.writerows({**r, "stale": "; ".join(r["stale"])} for r in records)


def _summary(records: list[dict]) -> dict[tuple[str, str], dict]:
  """(variant, task) -> {"values": [...], "failed": n, "diverged": n, "preempted": n,
  "killed": n, "pending": n, "stale": n}."""
  cells: dict[tuple[str, str], dict] = {}
  for r in records:
    cell = cells.setdefault((r["variant"], r["task"]),
                            {"values": [], "failed": 0, "diverged": 0, "preempted": 0,
                             "killed": 0, "pending": 0, "stale": 0})
    cell["stale"] += bool(r.get("stale"))
    if r["status"] == "done":
      cell["values"].append(r["test_accuracy"])
    elif r["status"] == "failed":
      cell["failed"] += 1
      cell["diverged"] += r["error"] == "diverged"
    elif r["status"] in STOPPED:
      cell[r["status"]] += 1
    else:
      cell["pending"] += 1
  return cells


def _mean_std(values: list[float]) -> tuple[float, float | None]:
  return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def _paper(value: float | None) -> str:
  return "✗" if value is None else f"{value:.2f}"


_NOT_A_PAPER_ROW = object()  # a variant the paper has no row for: no number in parentheses


def _cell(cell: dict | None, paper) -> str:
  if cell is None:  # the variant does not exist for the task (a snake variant on ListOps)
    return "n/a"
  if cell["values"]:
    mean, std = _mean_std(cell["values"])
    ours = f"{mean:.2f}" + (f" ± {std:.2f}" if std is not None else "")
  elif cell["failed"]:
    ours = "✗ diverged" if cell["diverged"] == cell["failed"] else "✗ error"
  else:
    ours = "–"
  ours += STALE if cell["stale"] else ""
  notes = [f"{cell['failed']} ✗"] if cell["failed"] and cell["values"] else []
  notes += [f"{cell[state]} {state}" for state in STOPPED if cell[state]]
  notes += [f"{cell['pending']} unfinished"] if cell["pending"] else []
  theirs = "" if paper is _NOT_A_PAPER_ROW else f" ({_paper(paper)})"
  return f"{ours}{theirs}" + (f" [{', '.join(notes)}]" if notes else "")


def markdown(records: list[dict], tasks: list[str], variants: list[str], settings: str = "") -> str:
  """Rows = variants, columns = tasks (+ Avg when several), "ours (paper)" in each cell."""
  cells = _summary(records)
  seeds = sorted({r["seed"] for r in records})
  head = [ablations.TASK_LABELS[t] for t in tasks] + (["Avg"] if len(tasks) > 1 else [])
  lines = ["| Model | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
  for variant in variants:
    paper = ablations.PAPER.get(variant)
    row = [_cell(cells.get((variant, t)), _NOT_A_PAPER_ROW if paper is None else paper.get(t))
           for t in tasks]
    if len(tasks) > 1:
      values = [cells.get((variant, t), {}).get("values") for t in tasks]
      means = [_mean_std(v)[0] if v else None for v in values]
      ours = f"{statistics.fmean(means):.2f}" if None not in means else "–"
      if paper is None:
        row.append(ours)
      else:
        papers = [paper.get(t) for t in tasks]
        row.append(f"{ours} ({statistics.fmean(papers):.2f})" if None not in papers
                   else f"{ours} (✗)")
    lines.append(f"| {ablations.LABELS.get(variant, variant)} | " + " | ".join(row) + " |")
  chance = _majority(records)
  if chance:
    row = [f"{chance[t]:.2f}" if t in chance else "–" for t in tasks]
    lines.append("| Majority class (chance) | " + " | ".join(row + [""] * (len(head) - len(tasks)))
                 + " |")
  warnings = _too_short(cells, chance, tasks, variants)
  lines += _parameter_table(records, tasks, variants)
  done = sum(r["status"] == "done" for r in records)
  notes = [
      "",
      f"Test accuracy (%) at the best-validation step: our mean ± sample std over seeds "
      f"{', '.join(map(str, seeds))} ({done} of {len(records)} runs finished), and in "
      "parentheses the paper's number (LION Tables 3, 6 and 7; ✗ = the paper reports a failure "
      "or no entry; none for variants that are not rows of those tables). `✗ diverged`: our "
      "run stopped on a non-finite loss. n/a: the variant does not exist for the task. Avg: "
      "over the columns shown, only when every column has a number.",
  ]
  notes += _stopped_notes(records)
  if chance:
    notes.append("Majority class: the test accuracy of always answering the test split's most "
                 "frequent label, the level a model has to beat.")
  notes += warnings + _stale_notes(records)
  if settings:
    notes.append(f"Sweep settings: `{settings}`.")
  return "\n".join(lines + notes) + "\n"


def _stopped_notes(records: list[dict]) -> list[str]:
  """Markdown lines naming each run a signal stopped, and how; none when there is none."""
  stopped = [r for r in records if r["status"] in STOPPED]
  if not stopped:
    return []
  return ["", "Stopped by a signal, resumed by the next sweep (preempted: it saved the step it "
          "reached; killed: it could not, and resumes from its last checkpoint):", ""] + [
              f"* {r['task']}/{r['variant']}/seed{r['seed']}: {r['status']}: {r['stopped']}"
              for r in stopped]


def _stale_notes(records: list[dict]) -> list[str]:
  """One markdown note per (variant, task) with a stale run: what differs, and where it ran."""
  notes: dict[tuple[str, str], list[dict]] = {}
  for r in records:
    if r.get("stale"):
      notes.setdefault((r["variant"], r["task"]), []).append(r)
  lines = []
  for (variant, task), runs in notes.items():
    commits = sorted({c for r in runs for c in r["commit"].split()})
    fields = {f: v for r in runs for f, v in r["stale"].items()}
    lines.append(f"{STALE} **Stale: {ablations.LABELS.get(variant, variant)} on "
                 f"{ablations.TASK_LABELS[task]}** ({len(runs)} of its runs"
                 + (f", run at {', '.join(commits)}" if commits else "") + "): trained with "
                 f"another config than today's command builds: {sweep_records.describe(fields)}.")
  return lines


def _majority(records: list[dict]) -> dict[str, float]:
  """task -> the majority-class test accuracy (%) its finished runs recorded."""
  return {r["task"]: r["majority_test_accuracy"] for r in records
          if r["status"] == "done" and r.get("majority_test_accuracy") is not None}


def _too_short(cells: dict, chance: dict[str, float], tasks: list[str],
               variants: list[str]) -> list[str]:
  """Markdown notes for the tasks where no model beats chance by `CHANCE_MARGIN` points: there
  the runs were too short (or the data too small) to tell the models apart."""
  notes = []
  for task in tasks:
    means = {v: _mean_std(cells[v, task]["values"])[0] for v in variants
             if cells.get((v, task), {}).get("values")}
    if task not in chance or not means:
      continue
    best = max(means, key=means.get)
    if means[best] < chance[task] + CHANCE_MARGIN:
      notes.append(
          f"**{ablations.TASK_LABELS[task]}: too short to compare.** No model beats the "
          f"majority class ({chance[task]:.2f}%) by {CHANCE_MARGIN:g} points (best: "
          f"{ablations.LABELS.get(best, best)}, {means[best]:.2f}%): these runs learnt (next to) "
          "nothing, so their differences are noise; train longer before comparing models.")
  return notes


def _parameter_table(records: list[dict], tasks: list[str], variants: list[str]) -> list[str]:
  """Markdown lines: each variant's parameter count per task, from its finished runs
  (models of different mixers are compared at these sizes); none before any run finished."""
  counts = {(r["variant"], r["task"]): r["num_params"] for r in records
            if r["status"] == "done" and r.get("num_params")}
  if not counts:
    return []
  lines = ["", "| Parameters | " + " | ".join(ablations.TASK_LABELS[t] for t in tasks) + " |",
           "|---|" + "---|" * len(tasks)]
  for variant in variants:
    cells = [f"{counts[variant, t]:,}" if (variant, t) in counts else "–" for t in tasks]
    lines.append(f"| {ablations.LABELS.get(variant, variant)} | " + " | ".join(cells) + " |")
  return lines


def plot(records: list[dict], tasks: list[str], variants: list[str], path: Path) -> None:
  """One panel per task: our mean (bar, seeds as dots, std as error bar) and the paper (tick)."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  cells = _summary(records)
  fig, axes = plt.subplots(1, len(tasks), figsize=(1.0 + 0.55 * len(variants) * len(tasks), 4.2),
                           squeeze=False, sharey=True)
  for ax, task in zip(axes[0], tasks):
    for x, variant in enumerate(variants):
      cell, paper = cells.get((variant, task)), ablations.PAPER.get(variant, {}).get(task)
      if cell is None:  # the variant does not exist for the task
        continue
      if cell["values"]:
        mean, std = _mean_std(cell["values"])
        ax.bar(x, mean, color="C0", alpha=0.8, yerr=std, capsize=3,
               label="ours (mean over seeds)" if x == 0 else None)
        ax.plot([x] * len(cell["values"]), cell["values"], "k.", ms=4)
      elif cell["failed"]:
        ax.plot(x, 2, "rx", ms=8, label="ours: diverged/error")
      if paper is not None:
        ax.plot([x - 0.4, x + 0.4], [paper, paper], color="C3", lw=2,
                label="paper" if x == 0 else None)
    ax.set_title(ablations.TASK_LABELS[task])
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels([ablations.LABELS.get(v, v) for v in variants], rotation=60, ha="right",
                       fontsize=8)
    ax.set_ylim(0, 100)
    ax.grid(axis="y", alpha=0.3)
  axes[0][0].set_ylabel("test accuracy (%)")
  handles = {}
  for ax in axes[0]:
    for handle, label in zip(*ax.get_legend_handles_labels()):
      handles.setdefault(label, handle)
  fig.legend(handles.values(), handles.keys(), loc="upper center", ncol=3, fontsize=8)
  fig.tight_layout(rect=(0, 0, 1, 0.93))  # room for the legend above the panel titles
  save_figure(fig, path, dpi=120)
  plt.close(fig)


def _speed(records: list[dict]) -> dict[tuple[str, str], dict]:
  """(variant, task) -> per-seed values of the finished seeds: speed, memory, accuracy and the
  training seconds to first reach each of `LEVELS` (None where a seed never did)."""
  groups: dict[tuple[str, str], list[dict]] = {}
  for r in records:
    if r["status"] == "done" and r.get("timing"):
      groups.setdefault((r["variant"], r["task"]), []).append(r)
  out = {}
  for key, runs in groups.items():
    last = [run["timing"][-1] for run in runs]
    out[key] = {
        "steps_per_sec": [row["timed_steps"] / row["train_seconds"] if row["train_seconds"]
                          else None for row in last],
        "examples_per_sec": [run.get("train_examples_per_sec") for run in runs],
        "peak_bytes": [run.get("device_peak_bytes") or run.get("peak_host_memory_bytes")
                       for run in runs],
        "seconds": [row["train_seconds"] for row in last],
        "test_accuracy": [run["test_accuracy"] for run in runs],
        "stale": any(run.get("stale") for run in runs),
        "reach": {level: [next((row["train_seconds"] for row in run["timing"]
                                if 100 * row["eval_accuracy"] >= level), None) for run in runs]
                  for level in LEVELS}}
  return out


def _spread(values: list, spec: str, scale: float = 1.0, unit: str = "") -> str:
  """'mean ± sample std' of the known values ('mean' for one, '–' for none)."""
  values = [v / scale for v in values if v is not None]
  if not values:
    return "–"
  mean, std = _mean_std(values)
  return format(mean, spec) + ("" if std is None else f" ± {format(std, spec)}") + unit


def speed_markdown(records: list[dict], tasks: list[str], variants: list[str]) -> str:
  """Accuracy against training time: one row per (task, variant), mean ± std over seeds."""
  speed = _speed(records)
  if not speed:
    return ""
  reached = lambda level: any(None not in cell["reach"][level] for cell in speed.values())
  levels = [lv for lv in LEVELS if reached(lv)]
  head = ["Task", "Model", "seeds", "steps/s", "examples/s", "peak memory", "train s", "test acc."]
  head += [f"s to {lv}%" for lv in levels]
  lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
  for task in tasks:
    for variant in variants:
      cell = speed.get((variant, task))
      if cell is None:
        continue
      row = [ablations.TASK_LABELS[task],
             ablations.LABELS.get(variant, variant) + (STALE if cell["stale"] else ""),
             str(len(cell["seconds"])), _spread(cell["steps_per_sec"], ".2f"),
             _spread(cell["examples_per_sec"], ".1f"),
             _spread(cell["peak_bytes"], ",.0f", 2**20, " MiB"), _spread(cell["seconds"], ".1f"),
             _spread(cell["test_accuracy"], ".2f")]
      row += ["–" if None in cell["reach"][lv] else _spread(cell["reach"][lv], ".0f")
              for lv in levels]
      lines.append("| " + " | ".join(row) + " |")
  note = ("Mean ± sample std over the finished seeds (no ± for one seed). steps/s and train s: "
          "training steps only (no compilation, evaluation or checkpoints), from each run's "
          "timing.jsonl; peak memory: the device's peak where the backend reports one, else "
          "the process's peak resident memory; s to N%: training seconds until validation "
          "accuracy first reached N%, – where a seed never did.")
  missing = [lv for lv in LEVELS if lv not in levels]
  if missing and not levels:
    note += (f" There is no \"s to N%\" column: no model reached {LEVELS[0]}% validation "
             "accuracy in every seed.")
  elif missing:
    note += (f" No \"s to N%\" column for {', '.join(f'{lv}%' for lv in missing)}: no model "
             "reached it in every seed.")
  if any(cell["stale"] for cell in speed.values()):
    note += (f" {STALE}: trained with another config than today's command builds "
             "(results.md says how).")
  return "\n".join(lines + ["", note]) + "\n"


def plot_curves(records: list[dict], tasks: list[str], variants: list[str], path: Path) -> None:
  """Validation accuracy against training seconds (left) and steps (right), one row per task,
  one line per variant: the mean over seeds at each evaluation step."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  chance = _majority(records)
  fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.6 * len(tasks)), squeeze=False)
  for (ax_time, ax_step), task in zip(axes, tasks):
    for i, variant in enumerate(variants):
      runs = [r["timing"] for r in records if r["task"] == task and r["variant"] == variant
              and r["status"] == "done" and r.get("timing")]
      if not runs:
        continue
      steps = sorted(set.intersection(*({row["step"] for row in run} for run in runs)))
      at = lambda run, step, key: next(row[key] for row in run if row["step"] == step)
      seconds = [statistics.fmean(at(run, s, "train_seconds") for run in runs) for s in steps]
      accuracy = [100 * statistics.fmean(at(run, s, "eval_accuracy") for run in runs)
                  for s in steps]
      label = ablations.LABELS.get(variant, variant)
      ax_time.plot(seconds, accuracy, "o-", color=f"C{i}", ms=3, label=label)
      ax_step.plot(steps, accuracy, "o-", color=f"C{i}", ms=3, label=label)
    for ax, xlabel in ((ax_time, "training seconds"), (ax_step, "step")):
      if task in chance:
        ax.axhline(chance[task], color="gray", ls="--", lw=1, label="majority class (test)")
      ax.set_title(ablations.TASK_LABELS[task])
      ax.set_xlabel(xlabel)
      ax.set_ylabel("validation accuracy (%)")
      ax.grid(alpha=0.3)
    # Outside the axes, right of the row: a legend inside would cover the curves' ends.
    ax_step.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
  fig.tight_layout()
  save_figure(fig, path, dpi=120, bbox_inches="tight")
  plt.close(fig)


def write_reports(runs: list[Run], out: Path, tasks: list[str], variants: list[str],
                  settings: str = "") -> list[Path]:
  """Writes results.csv, results.md and results.png into `out`, and speed.md and curves.png
  (accuracy against training time) once some run has recorded its timing; returns the paths."""
  out.mkdir(parents=True, exist_ok=True)
  records = collect(runs)
  paths = [out / "results.csv", out / "results.md", out / "results.png"]
  write_csv(records, paths[0])
  paths[1].write_text(markdown(records, tasks, variants, settings), encoding="utf-8")
  plot(records, tasks, variants, paths[2])
  speed = speed_markdown(records, tasks, variants)
  if speed:
    paths += [out / "speed.md", out / "curves.png"]
    paths[3].write_text(speed, encoding="utf-8")
    plot_curves(records, tasks, variants, paths[4])
  return paths
