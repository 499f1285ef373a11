"""Run metrics: `metrics.jsonl`, TensorBoard event files (tensorboardX, no TensorFlow) and `curves.png`.

Steps return *sums* plus a denominator (`count`, the number of real examples), so
padded evaluation batches and uneven last batches average correctly; `averages` turns
a sum dict into the logged means. One JSON line is written per log step with
`train_` / `eval_` / `test_` prefixes.

Every process start opens a fresh events file under `tensorboard/` whose first record tells
TensorBoard to drop what earlier files logged after the step the run resumes from, so resumed
runs read as one clean run there too.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

METRICS_FILE = "metrics.jsonl"
TIMING_FILE = "timing.jsonl"
CURVES_FILE = "curves.png"


def save_figure(fig, path, **savefig_options) -> Path:
  """Writes a matplotlib figure as a 256-colour PNG: the plots this project publishes
  (docs/sweep/) are flat colours and lines, which a palette keeps as drawn in about a third of
  the bytes of matplotlib's RGBA file.

  Args:
    fig: the figure.
    path: where the PNG goes.
    **savefig_options: passed to `fig.savefig` (dpi, bbox_inches, ...).

  Returns:
    The path written.
  """
  import io  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", **savefig_options)
  image = Image.open(buffer).convert("RGB").quantize(
      colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
  image.save(path, format="PNG", optimize=True)
  return Path(path)


def majority_class(labels) -> tuple[int, float]:
  """The most frequent label and the accuracy of always predicting it (the chance level a
  classifier has to beat)."""
  counts = np.bincount(np.asarray(labels))
  return int(np.argmax(counts)), float(counts.max() / counts.sum())


def averages(sums: Mapping[str, float], prefix: str) -> dict[str, float]:
  """{"loss_sum", "correct_sum", "count", ...} -> {"<prefix>loss", "<prefix>accuracy", ...}.

  Keys ending in "_sum" are divided by "count"; other keys (norms, rates) are kept.
  """
  count = float(sums["count"])
  out = {f"{prefix}examples": int(count)}
  for key, value in sums.items():
    if key == "count":
      continue
    if key.endswith("_sum"):
      name = {"correct": "accuracy"}.get(key[:-4], key[:-4])
      out[prefix + name] = float(value) / max(count, 1.0)
    else:
      out[prefix + key] = float(value)
  return out


class EventWriter:
  """Scalar summaries in a fresh `events.out.tfevents.*` file in `logdir`.

  Args:
    logdir: the TensorBoard folder (created if missing).
    purge_step: TensorBoard discards the events that earlier files hold for steps >= this one
      (the steps a resumed run recomputes); None keeps them.
  """

  def __init__(self, logdir: str | os.PathLike, purge_step: int | None = None):
    Path(logdir).mkdir(parents=True, exist_ok=True)
    # tensorboardX names files by the second and host, and truncates an existing name: the pid
    # and nanoseconds keep two writers started in the same second apart.
    suffix = f".{os.getpid()}.{time.time_ns() % 10**9:09d}"
    # Imported here so that reading and plotting metrics needs nothing beyond numpy/matplotlib
    # (bench/accelerator.py plots a run from a process that lacks the project's wheels).
    import tensorboardX  # pylint: disable=import-outside-toplevel
    self._writer = tensorboardX.SummaryWriter(str(logdir), purge_step=purge_step,
                                              filename_suffix=suffix)

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    for tag, value in values.items():
      self._writer.add_scalar(tag, value, global_step=step)
    self._writer.flush()  # a killed run keeps everything logged so far

  def close(self) -> None:
    self._writer.close()


def drop_rows_after(path: Path, step: int) -> None:
  """Drops the lines of a JSON-lines file whose "step" is after `step` (a resumed run
  recomputes them), so that the file reads as one clean run."""
  if path.exists():
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


class TimingLog:
  """Elapsed training seconds at each evaluation, one JSON line each in `timing.jsonl`.

  Kept apart from `metrics.jsonl`, whose numbers are reproducible (compared exactly across
  device counts and resumes), while wall time never is. `train_seconds` counts training steps
  only, summed over every session of a resumed run: compilation, evaluation and checkpoints are
  left out, so runs of different models compare as accuracy against training time.

  Args:
    workdir: the run's folder.
    resume_step: on resume, lines after this step are dropped (as in `MetricWriter`).
    enabled: False on non-zero processes of a multi-host run.
  """

  def __init__(self, workdir: str | os.PathLike, resume_step: int = 0, enabled: bool = True):
    self.path = Path(workdir) / TIMING_FILE
    self.enabled = enabled
    if enabled:
      drop_rows_after(self.path, resume_step)

  def write(self, step: int, train_seconds: float, timed_steps: int,
            eval_accuracy: float) -> None:
    """One row: `train_seconds` spent in the `timed_steps` steps timed so far (every step but
    each session's first, which compiles), and the validation accuracy at `step`."""
    if self.enabled:
      with open(self.path, "a") as f:
        f.write(json.dumps({"step": int(step), "train_seconds": float(train_seconds),
                            "timed_steps": int(timed_steps),
                            "eval_accuracy": float(eval_accuracy)}) + "\n")


def read_timing(workdir: str | os.PathLike) -> list[dict]:
  """The rows of a run's `timing.jsonl` ([] when it has none)."""
  path = Path(workdir) / TIMING_FILE
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricWriter:
  """One JSON line per log step in `metrics.jsonl`, mirrored to TensorBoard.

  Args:
    workdir: the run's folder.
    resume_step: on resume, lines after this step (written after the checkpoint we
      resume from, then recomputed) are dropped so the file reads as one clean run.
    enabled: False on non-zero processes of a multi-host run.
  """

  def __init__(self, workdir: str | os.PathLike, resume_step: int = 0, enabled: bool = True):
    self.path = Path(workdir) / METRICS_FILE
    self.enabled = enabled
    if not enabled:
      return
    drop_rows_after(self.path, resume_step)
    self._tb = EventWriter(Path(workdir) / "tensorboard", purge_step=resume_step + 1)

  def write(self, step: int, values: Mapping[str, float]) -> None:
    if not self.enabled:
      return
    values = {k: float(v) if isinstance(v, (float, np.floating)) else v for k, v in values.items()}
    with open(self.path, "a") as f:
      f.write(json.dumps({"step": int(step), **values}) + "\n")
    self._tb.scalars(step, {k: v for k, v in values.items() if isinstance(v, (int, float))})

  def close(self) -> None:
    if self.enabled:
      self._tb.close()


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
  """All lines of `metrics.jsonl`."""
  path = Path(workdir) / METRICS_FILE
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(workdir: str | os.PathLike) -> Path:
  """Draws loss and accuracy against step (train and eval) into `curves.png`."""
  return plot_rows(read_metrics(workdir), Path(workdir) / CURVES_FILE, title=Path(workdir).name)


def plot_rows(rows: list[dict], out: str | os.PathLike, title: str) -> Path:
  """Loss and accuracy against step, train and eval, from `metrics.jsonl` rows, into `out`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for ax, metric in zip(axes, ("loss", "accuracy")):
    for prefix, style in (("train_", "-"), ("eval_", "o-")):
      points = [(r["step"], r[prefix + metric]) for r in rows if prefix + metric in r]
      if points:
        ax.plot(*zip(*points), style, label=prefix.rstrip("_"), markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend()
  fig.suptitle(title)
  fig.tight_layout()
  save_figure(fig, out, dpi=100)
  plt.close(fig)
  return Path(out)
