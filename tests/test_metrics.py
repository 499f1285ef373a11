"""`lra.metrics`: averages of step sums, and TensorBoard files as TensorBoard itself reads them."""

import json

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lra import metrics


def read_scalars(logdir):
  """{tag: [(step, value), ...]} through TensorBoard's own reader."""
  events = EventAccumulator(str(logdir))
  events.Reload()
  return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_averages_divide_sums_by_the_example_count_and_keep_the_rest():
  sums = {"loss_sum": 6.0, "correct_sum": 3.0, "count": 4, "grad_norm": 0.5}
  assert metrics.averages(sums, "eval_") == {"eval_examples": 4, "eval_loss": 1.5,
                                             "eval_accuracy": 0.75, "eval_grad_norm": 0.5}


def test_scalars_read_back_with_their_steps_in_float32(tmp_path):
  writer = metrics.EventWriter(tmp_path)
  writer.scalars(2, {"train_loss": 0.1, "lr": 3})
  writer.scalars(4, {"train_loss": 1 / 3})
  writer.close()
  assert read_scalars(tmp_path) == {"train_loss": [(2, pytest.approx(0.1, rel=1e-7)),
                                                   (4, float(np.float32(1 / 3)))],
                                    "lr": [(2, 3.0)]}


@pytest.mark.parametrize("purge_step, steps", [(5, [2, 4, 6]), (None, [2, 4, 6, 4, 6])],
                         ids=["resumed", "no_purge"])
def test_a_resumed_writer_makes_tensorboard_drop_the_steps_it_recomputes(tmp_path, purge_step,
                                                                          steps):
  """A run checkpointed at step 4 logged 2, 4, 6 and died; resumed, it logs 6 again. With the
  purge step (the control: without it), TensorBoard shows each step once, the newest value."""
  first = metrics.EventWriter(tmp_path)
  first.scalars(2, {"train_loss": 2.0})
  first.scalars(4, {"train_loss": 4.0})
  first.scalars(6, {"train_loss": 6.0})
  first.close()
  second = metrics.EventWriter(tmp_path, purge_step=purge_step)  # same second, same process
  if purge_step is None:
    second.scalars(4, {"train_loss": 4.0})
  second.scalars(6, {"train_loss": -6.0})
  second.close()
  assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
  assert [step for step, _ in read_scalars(tmp_path)["train_loss"]] == steps
  assert read_scalars(tmp_path)["train_loss"][-1] == (6, -6.0)


def test_metric_writer_on_resume_drops_later_lines_and_tensorboard_steps(tmp_path):
  first = metrics.MetricWriter(tmp_path)
  for step in (2, 4, 6):
    first.write(step, {"train_loss": float(step), "note": "text is not a scalar"})
  first.close()
  resumed = metrics.MetricWriter(tmp_path, resume_step=4)
  resumed.write(6, {"train_loss": -6.0})
  resumed.close()
  assert [(r["step"], r["train_loss"]) for r in metrics.read_metrics(tmp_path)] == [
      (2, 2.0), (4, 4.0), (6, -6.0)]
  assert read_scalars(tmp_path / "tensorboard") == {"train_loss": [(2, 2.0), (4, 4.0), (6, -6.0)]}
  assert json.loads((tmp_path / metrics.METRICS_FILE).read_text().splitlines()[0])["note"] == (
      "text is not a scalar")


def test_published_figures_are_palette_pngs_that_keep_the_drawing(tmp_path):
  """`save_figure` writes a 256-colour PNG, smaller than matplotlib's own file and drawn the
  same: every pixel within a few levels of it."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  from PIL import Image  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(6, 3))
  for shift in range(6):
    ax.plot(np.arange(50), np.sin(np.arange(50) / 5 + shift), "o-", label=f"line {shift}")
  ax.legend()
  fig.savefig(tmp_path / "plain.png", dpi=100)
  metrics.save_figure(fig, tmp_path / "small.png", dpi=100)
  plt.close(fig)
  plain, small = Image.open(tmp_path / "plain.png"), Image.open(tmp_path / "small.png")
  assert small.mode == "P" and small.size == plain.size
  assert (tmp_path / "small.png").stat().st_size < (tmp_path / "plain.png").stat().st_size
  difference = np.abs(np.asarray(small.convert("RGB"), int) - np.asarray(plain.convert("RGB"), int))
  assert np.percentile(difference, 99) <= 16
