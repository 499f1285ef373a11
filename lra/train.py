"""Training and evaluation of LION on an LRA task; the workdir is the unit of a run.

    results = train_and_evaluate(config, workdir)   # resumes if workdir has a checkpoint
    report = evaluate(config, workdir, form="rnn")   # best checkpoint, any form

A run writes into `workdir`: `config.json`, `metrics.jsonl`, `tensorboard/`, `curves.png`,
`checkpoints/` (latest), `best/` (best validation) and `results.json`. Resume order: an
existing checkpoint in the workdir, else from scratch; a workdir with checkpoints resumes only
with the config they were trained with (`lra.resume`). Test accuracy is always measured
at the best-validation checkpoint, never the last one (LRA issue #15).

The loop reads top to bottom in `_train`; `Schedule` says what is due at a step, `TrainSums`
collects the step metrics, `Throughput` times the steps alone, `_Session` validates, saves and
stops. Every process of a multi-process job makes the same calls (docs/multi_device.md).

A signal (SIGTERM, SIGINT, SIGUSR1; `lra.preemption`) stops a run after the step it is in, or
between two evaluation batches: the step is saved, `preempted.json` says which signal stopped it
at which step and when, and `Preempted` is raised; a rerun resumes from that step and ends with
the results of an uninterrupted run. A stop inside a validation saves the step with the
validation still to do, and the rerun does it first.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import logging
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

import jax
import tqdm
from jax.experimental import multihost_utils
from ml_collections import config_dict

from lion_jax.ops.attention import resolve_residuals
from lion_jax.nn.blocks import takes_segments
from lion_jax.config import ModelConfig
from lion_jax.options import ConfigError
from lra import checkpoint, metrics, optim, preemption, resume, run_records, steps
from lra.data import packing
from lra.data.batching import make_loader
from lra.data.errors import MissingDataError
from lra.data.generators import record
from lra.tasks import TASKS, TaskInfo, get_task, load_task

# Every top-level field a config must have (documented in configs/common.py).
CONFIG_FIELDS = (
    "task", "seed", "data_dir", "seq_len", "max_examples", "task_options", "generate",
    "batch_size", "eval_batch_size", "num_epochs", "num_train_steps", "learning_rate",
    "warmup_epochs", "weight_decay", "decay_learning_rate", "b1", "b2", "grad_clip_norm",
    "param_groups", "log_every_steps", "eval_every_steps", "checkpoint_every_steps",
    "max_checkpoints_to_keep", "eval_form", "mesh", "packing", "model")
RESULTS_FILE = "results.json"


class NonFiniteError(FloatingPointError):
  """Training produced a NaN or infinite loss or gradient (message names the step)."""


# --- config ----------------------------------------------------------------------------

def check_config(config: config_dict.ConfigDict) -> ModelConfig:
  """Validates the experiment config and returns the model config built from it.

  Raises:
    ValueError: naming any unknown or missing field, and listing the valid ones.
  """
  _check_fields(set(config), CONFIG_FIELDS, "config")
  model_fields = tuple(f.name for f in dataclasses.fields(ModelConfig))
  _check_fields(set(config.model), model_fields, "config.model")
  for field in ("batch_size", "log_every_steps"):
    if config[field] <= 0:
      raise ConfigError(f"config.{field}={config[field]!r} must be a positive integer.")
  optim.check_param_groups([tuple(e) for e in config.param_groups])
  _, seq = steps.check_mesh_shape(config.mesh)
  model = config.model.to_dict()
  if seq > 1:  # every LION layer splits its sequence over the mesh's `seq` axis
    model["sequence_axis"] = steps.SEQUENCE_AXIS
    _check_splittable(config)
  model = ModelConfig(**model)
  if config.eval_form and model.mixer != "lion":
    raise ConfigError(f"config.eval_form={config.eval_form!r} picks one of LION's evaluation forms; "
                     f"model.mixer={model.mixer!r} has one form. Leave config.eval_form empty.")
  return model


def _check_splittable(config: config_dict.ConfigDict) -> None:
  """Raises a ValueError naming the field when config.mesh splits sequences the model cannot."""
  if config.model.mixer != "lion":
    raise ConfigError(f"config.mesh={tuple(config.mesh)} splits every sequence over 'seq', which "
                     f"only LION's chunk_scan can do; config.model.mixer={config.model.mixer!r}. "
                     "Use --config.mesh='(-1, 1)' for the baselines.")
  forms = {"config.model.form": config.model.form, "config.eval_form": eval_form(config)}
  for field, form in forms.items():
    if form not in ("chunk_scan", "auto"):
      raise ConfigError(f"config.mesh={tuple(config.mesh)} splits every sequence over 'seq', "
                       f"which only form 'chunk_scan' can do; {field}={form!r}. Set it to "
                       "'chunk_scan', or use --config.mesh='(-1, 1)'.")
  if config.model.scan_order != "raster":
    raise ConfigError(f"config.mesh={tuple(config.mesh)} splits every sequence over 'seq', but "
                     f"config.model.scan_order={config.model.scan_order!r} moves tokens between "
                     "the pieces; use scan_order 'raster' or --config.mesh='(-1, 1)'.")
  if config.packing and config.model.convention == "code":
    raise ConfigError(f"config.mesh={tuple(config.mesh)} splits every sequence over 'seq', and "
                     "config.packing=True puts several examples in a row, which the 'code' "
                     "convention cannot split (each shard would need every example's first "
                     "gate); set config.model.convention='symmetric' or config.packing=False.")


def _check_fields(present: set[str], valid: tuple[str, ...], where: str) -> None:
  unknown, missing = sorted(present - set(valid)), sorted(set(valid) - present)
  if unknown:
    raise ConfigError(f"unknown field(s) {', '.join(f'{where}.{k}' for k in unknown)}; "
                     f"valid fields of {where}: {', '.join(sorted(valid))}")
  if missing:
    raise ConfigError(f"{where} lacks field(s) {', '.join(missing)}; start from configs/<task>.py")


def eval_form(config: config_dict.ConfigDict) -> str:
  """The evaluation form: `config.eval_form`, or the training form when empty."""
  return config.eval_form or config.model.form


# The one form of each baseline mixer (a LION form asked of it is an error, `ModelConfig`).
_BASELINE_FORMS = {"s5": lambda model: f"s5 {model.ssm_scan} scan",
                   "softmax": lambda model: "softmax attention"}


def form_name(config: config_dict.ConfigDict) -> str:
  """The form the model is evaluated in, as results.json names it: LION's `eval_form`, or the
  baseline mixer's own form (S5's scan, softmax attention; a mixer without an entry: its name)."""
  model = config.model
  if model.mixer == "lion":
    return eval_form(config)
  return _BASELINE_FORMS.get(model.mixer, lambda _: model.mixer)(model)


# --- data ------------------------------------------------------------------------------

def _generator(config: config_dict.ConfigDict) -> tuple[Any, dict[str, Any], Path, dict[str, Any]]:
  """The generator of `config.task` and its call: (module, keyword arguments, the folder it
  writes, the arguments its record holds). Pathfinder and Path-X draw the difficulty the task
  will load (`task_options.difficulty`)."""
  task = get_task(config.task)
  if task.generator is None:
    with_one = ", ".join(name for name, other in TASKS.items() if other.generator)
    raise ConfigError(f"config.generate is set but task {config.task!r} has no generator (tasks "
                      f"with one: {with_one}); drop config.generate")
  module = importlib.import_module(f"lra.data.generators.{task.generator}")
  kwargs = {**config.generate.to_dict(), **task.generator_arguments(config.task_options.to_dict())}
  try:
    params = record.output_params(module.generate, kwargs)
  except TypeError as e:
    raise ConfigError(f"config.generate: {e}") from None
  return module, kwargs, module.output_folder(config.data_dir, **kwargs), params


def load_data(config: config_dict.ConfigDict):
  """Loads the task's splits, generating the data first when it is missing and
  `config.generate` says how (runlocal and the demo).

  In a multi-process run process 0 loads (and generates) first while the others wait,
  so processes sharing a file system never write the same files at once; a process
  whose file system lacks the data afterwards generates its own (generation is seeded).

  A generated folder is used only if its record (`lra.data.generators.record`) holds the
  arguments `config.generate` asks for; one whose generation was cut short is finished first.

  Raises:
    MissingDataError: naming the file to supply and where.
    GeneratedDataMismatchError: the generated folder was made with other arguments (names each).
  """
  if jax.process_count() == 1:
    return load_or_generate(config)
  try:
    if jax.process_index() == 0:
      return load_or_generate(config)
  finally:  # also when process 0 fails: the others then raise the same error, not hang
    multihost_utils.sync_global_devices("lra.train.load_data: process 0 has the data")
  return load_or_generate(config)


def load_or_generate(config: config_dict.ConfigDict):
  """`load_data` in this process alone, without starting a JAX backend: what a parent process
  that only prepares data for its children (`lra.sweep`) calls, so that it forks no
  multithreaded runtime."""
  kwargs = dict(seq_len=config.seq_len or None, max_examples=config.max_examples or None,
                **config.task_options.to_dict())
  if config.generate:
    generator, generate_kwargs, folder, params = _generator(config)
    if record.check(folder, params) == "pending":
      logging.warning("%s: its generation was cut short; finishing it", folder)
      generator.generate(config.data_dir, **generate_kwargs)
  try:
    return load_task(config.task, config.data_dir, **kwargs)
  except MissingDataError:
    if not config.generate:
      raise
  logging.info("%s data missing under %s: generating %s", config.task, config.data_dir,
               config.generate.to_dict())
  generator.generate(config.data_dir, **generate_kwargs)
  return load_task(config.task, config.data_dir, **kwargs)


def _setup(config, info: TaskInfo, model_config: ModelConfig, total_steps: int,
           steps_per_epoch: int) -> steps.TrainSetup:
  tx = optim.make_optimizer(config, total_steps, steps_per_epoch)
  return steps.create_train_setup(
      model_config, num_classes=info.num_classes, vocab_size=info.vocab_size,
      dual_input=info.dual_input, tx=tx, seed=config.seed, mesh=steps.make_mesh(config.mesh))


def run_eval(eval_fn, model_state, split, batch_size: int, mesh, *, progress: bool = False,
             desc: str = "eval", interrupt=None) -> dict[str, float] | None:
  """Sums of `eval_fn` over one pass of `split` (last batch padded and masked).

  Args:
    interrupt: asked before each batch, once the batch before is computed (so that a stop is
      answered within one batch); when it returns True the pass stops and None is returned.
  """
  loader = make_loader(split, batch_size=batch_size, seed=0, shuffle=False,
                       drop_remainder=False, num_epochs=1)
  total = None
  for batch in tqdm.tqdm(loader, desc=desc, total=len(loader), leave=False, disable=not progress):
    if interrupt is not None:
      jax.block_until_ready(total)
      if interrupt():
        return None
    sums = eval_fn(model_state, steps.shard_batch(batch, mesh))
    total = sums if total is None else jax.tree.map(lambda a, b: a + b, total, sums)
  return {k: float(v) for k, v in jax.device_get(total).items()}


def _progress_default() -> bool:
  return sys.stderr.isatty() and jax.process_index() == 0


# --- training --------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Schedule:
  """How long a run is and what happens at which step (all counts in optimizer steps)."""

  total_steps: int
  steps_per_epoch: int
  log_every: int
  eval_every: int
  checkpoint_every: int

  @classmethod
  def from_config(cls, config: config_dict.ConfigDict, num_train: int) -> Schedule:
    """Resolves the config's zeros (one epoch, every evaluation) against `num_train` examples.

    Raises:
      ValueError: the train split is smaller than one batch.
    """
    steps_per_epoch = num_train // config.batch_size
    if steps_per_epoch == 0:
      raise ConfigError(f"the train split has {num_train} examples, fewer than "
                       f"config.batch_size={config.batch_size}")
    eval_every = config.eval_every_steps or steps_per_epoch
    return cls(total_steps=config.num_train_steps or config.num_epochs * steps_per_epoch,
               steps_per_epoch=steps_per_epoch, log_every=config.log_every_steps,
               eval_every=eval_every, checkpoint_every=config.checkpoint_every_steps or eval_every)

  def is_last(self, step: int) -> bool:
    return step == self.total_steps

  def is_log(self, step: int) -> bool:
    return step % self.log_every == 0 or self.is_last(step)

  def is_eval(self, step: int) -> bool:
    return step % self.eval_every == 0 or self.is_last(step)

  def is_checkpoint(self, step: int) -> bool:
    return step % self.checkpoint_every == 0 or self.is_last(step)

  def needs_host(self, step: int) -> bool:
    """Whether the loop must stop dispatching steps and read metrics back at `step`."""
    return self.is_log(step) or self.is_eval(step) or self.is_checkpoint(step)


class Throughput:
  """Wall time of the training steps alone: the first step (compilation) and everything
  between `pause` and `resume` (evaluation, checkpoints) are left out."""

  def __init__(self):
    self.steps, self.seconds, self._since = 0, 0.0, None

  def step_done(self, outputs) -> None:
    """Waits for the step that computes `outputs` (the loop asks whether to stop only then, with
    no step queued behind it)."""
    jax.block_until_ready(outputs)
    if self._since is None:  # the first step compiles: start the clock after it
      self._since = time.perf_counter()
    else:
      self.steps += 1

  def pause(self) -> None:
    if self._since is not None:
      self.seconds += time.perf_counter() - self._since

  def resume(self) -> None:
    if self._since is not None:
      self._since = time.perf_counter()

  def examples_per_sec(self, batch_size: int) -> float | None:
    return self.steps * batch_size / self.seconds if self.steps and self.seconds else None

  def seconds_per_step(self) -> float | None:
    return self.seconds / self.steps if self.steps and self.seconds else None


class TrainSums:
  """Per-step device metrics, fetched lazily and summed over the current log interval.

  Steps are dispatched without waiting for their metrics; `flush` fetches the pending
  ones (the loop's only host synchronisation) and stops the run on a non-finite value.
  """

  def __init__(self, sums: dict[str, float], workdir: Path, ckpt: checkpoint.Checkpointer):
    self.sums = dict(sums)
    self._pending: list[tuple[int, dict]] = []
    self._workdir, self._ckpt = workdir, ckpt

  def add(self, step: int, step_metrics: dict[str, jax.Array]) -> None:
    self._pending.append((step, step_metrics))

  def flush(self) -> None:
    """Adds the pending steps' metrics to the sums.

    Raises:
      NonFiniteError: naming the first bad step and the checkpoint that is kept.
    """
    for step, values in jax.device_get(self._pending):
      if not (math.isfinite(values["loss_sum"]) and math.isfinite(values["grad_norm"])):
        raise NonFiniteError(
            f"non-finite training loss or gradient at step {step} (loss_sum={values['loss_sum']}, "
            f"grad_norm={values['grad_norm']}); stopped. The last good checkpoint (step "
            f"{self._ckpt.latest_step()}) is kept in {self._workdir / checkpoint.LATEST_DIR}. "
            "Try a lower --config.learning_rate or --config.grad_clip_norm=1.0.")
      for key, value in values.items():
        self.sums[key] = self.sums.get(key, 0.0) + float(value)
      self.sums["steps"] = self.sums.get("steps", 0.0) + 1.0
    self._pending.clear()

  def take(self) -> dict[str, float]:
    """The interval's sums; starts the next interval."""
    sums, self.sums = self.sums, {}
    return sums


def train_and_evaluate(config: config_dict.ConfigDict, workdir: str,
                       progress: bool | None = None) -> dict[str, Any]:
  """Trains (or resumes) the run in `workdir`, then tests the best checkpoint.

  Every process of a multi-process run calls this with the same arguments; process 0
  alone writes `config.json`, `metrics.jsonl`, `tensorboard/`, `curves.png`,
  `results.json` and `preempted.json`, and every number in them is over the global batch.

  Args:
    config: an experiment config (`configs/<task>.py`).
    workdir: the run's folder; created if missing.
    progress: show progress bars (default: when stderr is a terminal).

  Returns:
    The results dict also written to `workdir/results.json`.

  Raises:
    ConfigError: bad config fields; ResumeMismatchError (a ConfigError): the workdir's
    checkpoints were trained with another config (`lra.resume`); WorkdirError: the workdir
    cannot be written; MissingDataError: data not found; NonFiniteError: NaN/inf loss or
    gradients (the last good checkpoint is kept); preemption.Preempted: a signal stopped the run
    after it saved the step it reached (`preempted.json`; a rerun resumes it).
  """
  progress = _progress_default() if progress is None else progress
  model_config = check_config(config)
  workdir = Path(workdir)
  changes = resume.check_resumable(config, workdir)
  run_records.prepare_workdir(workdir)  # every process: the same folder, or an error for each
  with preemption.Watch() as watch:
    return _train(config, workdir, model_config, changes, watch, progress)


def _train(config, workdir: Path, model_config: ModelConfig, changes: dict[str, tuple],
           watch: preemption.Watch, progress: bool) -> dict[str, Any]:
  """`train_and_evaluate` once its checks have passed: the session that changes the workdir."""
  is_main = jax.process_index() == 0
  run_records.begin_session(workdir, remove=is_main)
  if is_main and not resume.has_checkpoints(workdir):
    resume.write_config(config, workdir)
  traces_before = dict(steps.trace_counts)

  splits, info = load_data(config)
  if config.packing and model_config.mixer == "lion" and model_config.residuals == "auto":
    # A packed step holds fewer tokens than the padded one, in longer rows: keep the residuals
    # the padded run would (its memory only falls), not those of the longer rows.
    model_config = model_config.replace(residuals=resolve_residuals(
        "auto", splits["train"].inputs.shape[-1]))
  schedule = Schedule.from_config(config, len(splits["train"]))
  setup = _setup(config, info, model_config, schedule.total_steps, schedule.steps_per_epoch)
  train_fn, eval_fn = steps.jit_train_step(setup), steps.jit_eval_step(setup, eval_form(config))
  ckpt = checkpoint.Checkpointer(workdir, config.max_checkpoints_to_keep)
  train_iter = _train_batches(config, splits["train"], info, model_config, setup.mesh)
  state, meta = _resume(ckpt, setup.state, train_iter, workdir, schedule)
  if is_main and changes:
    resume.record_changes(workdir, meta["step"], changes)
  if is_main and meta.get("pending_eval"):
    _forget_validation(workdir, meta["step"])
  logging.info("%s: %d params, %d train examples, %d steps (%d per epoch), devices %s, mesh %s",
               config.task, setup.num_params, len(splits["train"]), schedule.total_steps,
               schedule.steps_per_epoch, jax.devices(), dict(setup.mesh.shape))

  writer = metrics.MetricWriter(workdir, resume_step=meta["step"], enabled=is_main)
  bar = tqdm.tqdm(total=schedule.total_steps, initial=meta["step"], unit="step",
                  disable=not progress, dynamic_ncols=True)
  session = _Session(config, workdir, schedule, ckpt, meta, train_iter, watch, writer,
                     eval_fn, splits["val"], setup.mesh, progress)
  sums, clock = session.sums, session.clock
  try:
    if watch.should_stop():  # a signal came while the session was set up: nothing new to save
      raise session.stop(meta["step"], state)
    if meta.get("pending_eval"):  # stopped inside the validation of the step it resumes from
      session.evaluate_and_save(meta["step"], state, validate=True)
    batch = None
    for step in range(meta["step"] + 1, schedule.total_steps + 1):
      if batch is None:  # this session's first step
        batch = steps.shard_batch(next(train_iter), setup.mesh)
      state, step_metrics = train_fn(state, batch)
      # What a checkpoint of this step resumes from (a copy: the iterator moves on).
      session.position = copy.deepcopy(train_iter.get_state())
      # The next batch is drawn while this step computes; the loop then waits for the step, so
      # that a stop costs at most the step in progress.
      batch = (steps.shard_batch(next(train_iter), setup.mesh)
               if step < schedule.total_steps else None)
      sums.add(step, step_metrics)
      bar.update(1)
      clock.step_done(step_metrics)
      stopping = watch.should_stop()
      if not (stopping or schedule.needs_host(step)):
        continue
      sums.flush()
      clock.pause()
      if schedule.is_log(step):
        _log_train(writer, bar, step, sums.take(), schedule)
      if stopping:  # validation, if due, waits for the rerun: the stop costs one step at most
        raise session.stop(step, state, pending_eval=schedule.is_eval(step))
      session.evaluate_and_save(step, state, validate=schedule.is_eval(step))
      clock.resume()
    results = _test_best(config, ckpt, setup, splits, eval_fn, progress, watch.should_stop)
    if results is None:  # stopped between test batches; the last step is saved
      raise session.stop(schedule.total_steps, state)
  except preemption.Preempted:
    ckpt.close()
    raise
  finally:
    bar.close()
    writer.close()

  ckpt.close()
  traces = {name: steps.trace_counts[name] - traces_before.get(name, 0)
            for name in ("train_step", "eval_step")}
  results.update(num_params=setup.num_params, total_steps=schedule.total_steps, task=config.task,
                 eval_form=form_name(config),
                 train_examples_per_sec=_examples_per_sec(clock, config.batch_size, workdir),
                 # This process's peak resident memory (Linux reports KiB): on a CPU the
                 # whole run's footprint, on an accelerator the host side only.
                 peak_host_memory_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                 device_peak_bytes=(jax.local_devices()[0].memory_stats() or {}).get(
                     "peak_bytes_in_use"),
                 compiles=traces)
  if is_main:
    run_records.write_json(workdir / RESULTS_FILE, results)
    metrics.plot_curves(workdir)
  return results


class _Session:
  """What one training session does between its steps: validate, save, and stop on a signal.

  `meta` is what the next checkpoint saves (`lra.checkpoint`); training seconds and timed steps
  add this session's (`clock`) to those of the sessions before it.
  """

  def __init__(self, config, workdir: Path, schedule: Schedule, ckpt: checkpoint.Checkpointer,
               meta: dict[str, Any], train_iter, watch: preemption.Watch,
               writer: metrics.MetricWriter, eval_fn, val_split, mesh, progress: bool):
    self.config, self.workdir, self.schedule, self.ckpt = config, workdir, schedule, ckpt
    self.meta, self.watch, self.writer = meta, watch, writer
    self.eval_fn, self.val_split, self.mesh, self.progress = eval_fn, val_split, mesh, progress
    self.is_main = jax.process_index() == 0
    # The data iterator's position after the last batch trained on (the loop draws the next
    # one before it knows whether it stops).
    self.position = copy.deepcopy(train_iter.get_state())
    self.timing = metrics.TimingLog(workdir, resume_step=meta["step"], enabled=self.is_main)
    self.sums, self.clock = TrainSums(meta["train_sums"], workdir, ckpt), Throughput()
    # Training time and timed steps of earlier sessions (each session's first step compiles and
    # is not timed).
    self.seconds_before = meta.get("train_seconds", 0.0)
    self.steps_before = meta.get("timed_steps", 0)

  def evaluate_and_save(self, step: int, state, *, validate: bool) -> None:
    """After `step`: validates it when `validate` (a signal between two batches raises
    `Preempted`), and saves it when the schedule asks or it is the best so far."""
    is_best = False
    if validate:
      val = _validate(self.eval_fn, state, self.val_split, self.config, self.mesh,
                      self.progress, interrupt=self.watch.should_stop)
      if val is None:
        raise self.stop(step, state, pending_eval=True)
      self.writer.write(step, val)
      self.timing.write(step, self.seconds_before + self.clock.seconds,
                        self.steps_before + self.clock.steps, val["eval_accuracy"])
      logging.info("step %d: %s", step, _fmt(val))
      if is_best := val["eval_accuracy"] > self.meta["best_val_accuracy"]:
        self.meta.update(best_val_accuracy=val["eval_accuracy"], best_step=step)
    if self.schedule.is_checkpoint(step) or is_best:
      self.save(step, state)  # before best/: a restart resumes from here (checkpoint.py)
      if is_best:
        self.save(step, state, best=True)

  def save(self, step: int, state, *, best: bool = False, pending_eval: bool = False) -> None:
    """Saves `state` at `step`, with `pending_eval`: the validation due at `step` is still to
    be done. A step already saved is kept: it differs from this one only in what its pending
    validation, now done, added to `meta`."""
    self.meta.update(step=step, data_iterator=self.position,
                     train_sums=dict(self.sums.sums),
                     train_seconds=self.seconds_before + self.clock.seconds,
                     timed_steps=self.steps_before + self.clock.steps, pending_eval=pending_eval)
    if (self.ckpt.best_step() if best else self.ckpt.latest_step()) != step:
      self.ckpt.save(step, state, self.meta, best=best)

  def stop(self, step: int, state, *, pending_eval: bool = False) -> preemption.Preempted:
    """Saves `step` unless checkpoints/ holds it, writes `preempted.json` and returns the
    exception that ends the session. Every process calls it at the same point."""
    signal_name, received = self.watch.cause()
    tic = time.time()
    if step > 0 and not self.ckpt.holds(step):
      self.save(step, state, pending_eval=pending_eval)
      where = f"saved {self.workdir / checkpoint.LATEST_DIR / str(step)}"
    elif step > 0:
      where = f"{self.workdir / checkpoint.LATEST_DIR / str(step)} holds it"
    else:
      where = "nothing trained yet"
    done = time.time()
    later = " (its validation runs first)" if pending_eval else ""
    record = {
        "signal": signal_name, "step": step, "total_steps": self.schedule.total_steps,
        "signal_time": None if received is None else preemption.timestamp(received),
        "time": preemption.timestamp(done),
        "seconds": None if received is None else round(done - received, 3),
        "save_seconds": round(done - tic, 3), "step_seconds": self.clock.seconds_per_step(),
        "pending_eval": pending_eval, "processes": jax.process_count(),
        "message": f"{signal_name} stopped the run after step {step} of "
                   f"{self.schedule.total_steps} ({where}); rerun the same command to resume "
                   f"it{later}"}
    if self.is_main:
      run_records.write_preempted(self.workdir, record)
    after = "" if received is None else f"{done - received:.2f} s after the signal; "
    step_time = record["step_seconds"]
    logging.warning("%s (%sthe save took %.2f s%s)", record["message"], after, done - tic,
                    "" if step_time is None else f"; a training step takes {step_time:.2f} s")
    return preemption.Preempted(record)


def _forget_validation(workdir: Path, step: int) -> None:
  """Drops what an earlier session's validation at `step` wrote (its metrics.jsonl row, its
  timing.jsonl row): the step's checkpoint still has that validation to do, and doing it again
  must not log it twice."""
  for name, is_validation in ((metrics.METRICS_FILE, lambda row: any(
      key.startswith("eval_") for key in row)), (metrics.TIMING_FILE, lambda row: True)):
    path = workdir / name
    if path.exists():
      rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
      path.write_text("".join(json.dumps(row) + "\n" for row in rows
                              if not (row["step"] == step and is_validation(row))))


def _train_batches(config, split, info: TaskInfo, model_config: ModelConfig, mesh):
  """The training batch iterator: padded rows, or packed ones with `config.packing`."""
  padded = lambda: make_loader(split, batch_size=config.batch_size, seed=config.seed,
                               shuffle=True, drop_remainder=True)
  if not config.packing:
    return padded()
  if info.input_kind != "tokens":
    raise ConfigError(f"config.packing=True packs variable-length token sequences; "
                      f"{config.task!r} has images of one size, never padded. Leave "
                      "config.packing False.")
  if model_config.scan_order != "raster":
    raise ConfigError(f"config.packing=True cannot pack rows for "
                      f"config.model.scan_order={model_config.scan_order!r}; use 'raster'.")
  if not takes_segments(model_config.mixer):
    logging.info("training on padded rows: mixer %r takes no segment_ids, so it cannot keep "
                 "packed examples apart (docs/design.md, \"A sequence mixer\")",
                 model_config.mixer)
    return padded()
  rows, row_length = packing.choose_rows(
      split.lengths, batch_size=config.batch_size, length=split.inputs.shape[-1],
      seed=config.seed, multiple=mesh.shape[steps.DATA_AXIS],
      max_factor=1 if model_config.mixer == "softmax" else 4)
  if not packing.saves_slots(rows, row_length, config.batch_size, split.inputs[0].size):
    logging.info("packing saves no token slots here (%d rows of %d tokens); training on padded "
                 "rows", rows, row_length)
    return padded()
  logging.info("packing %d examples a step into %d rows of %d tokens: padding %.1f%% of the "
               "token slots (padded: %.1f%%)", config.batch_size, rows, row_length,
               100 * packing.padding_share(split.lengths, row_length, rows, config.batch_size),
               100 * packing.padding_share(split.lengths, split.inputs.shape[-1], None,
                                           config.batch_size))
  return packing.PackedBatchIterator(split, batch_size=config.batch_size, rows=rows,
                                     row_length=row_length, seed=config.seed)


def _resume(ckpt: checkpoint.Checkpointer, state, train_iter, workdir: Path,
            schedule: Schedule) -> tuple[Any, dict[str, Any]]:
  """The state and meta to start from: the latest checkpoint's, else the initial ones."""
  step = ckpt.latest_step()
  if step is None:
    return state, {"step": 0, "best_val_accuracy": -1.0, "best_step": 0, "train_sums": {}}
  state, meta = ckpt.restore(step, state)
  train_iter.set_state(meta["data_iterator"])
  ckpt.repair_best(state, meta)
  logging.info("resumed from step %d of %d in %s", step, schedule.total_steps, workdir)
  return state, meta


def _validate(eval_fn, state, split, config, mesh, progress: bool,
              interrupt=None) -> dict[str, float] | None:
  """The validation metrics; None when `interrupt` stopped it (`run_eval`)."""
  sums = run_eval(eval_fn, steps.model_state(state), split, config.eval_batch_size or
                  config.batch_size, mesh, progress=progress, desc="val", interrupt=interrupt)
  return None if sums is None else metrics.averages(sums, "eval_")


def _examples_per_sec(clock: Throughput, batch_size: int, workdir: Path) -> float | None:
  """This session's training speed; a rerun of a finished run keeps the recorded one."""
  rate = clock.examples_per_sec(batch_size)
  if rate is None and (workdir / RESULTS_FILE).exists():
    rate = json.loads((workdir / RESULTS_FILE).read_text()).get("train_examples_per_sec")
  return rate


def _log_train(writer, bar, step: int, train_sums: dict[str, float], schedule: Schedule) -> None:
  n = max(train_sums.pop("steps", 1.0), 1.0)
  # Norms are averaged over the steps of the interval; loss/accuracy over the examples.
  values = metrics.averages({k: (v / n if k.endswith("norm") else v)
                             for k, v in train_sums.items()}, "train_")
  values["epoch"] = step / schedule.steps_per_epoch
  writer.write(step, values)
  bar.set_postfix(loss=f"{values['train_loss']:.4f}", acc=f"{values['train_accuracy']:.3f}")
  if bar.disable:
    logging.info("step %d/%d: %s", step, schedule.total_steps, _fmt(values))


def _fmt(values: dict) -> str:
  return ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in values.items())


def _test_best(config, ckpt, setup, splits, eval_fn, progress, interrupt=None) -> dict | None:
  """Restores the best-validation checkpoint and evaluates the test split there; with the
  accuracy of always answering the test split's majority class, the level to beat. None when
  `interrupt` stopped the evaluation (`run_eval`)."""
  best = ckpt.best_step()
  state, meta = ckpt.restore(best, setup.state, best=True)
  sums = run_eval(eval_fn, steps.model_state(state), splits["test"],
                  config.eval_batch_size or config.batch_size, setup.mesh, progress=progress,
                  desc="test", interrupt=interrupt)
  if sums is None:
    return None
  test = metrics.averages(sums, "test_")
  return {"best_val_accuracy": meta["best_val_accuracy"], "best_step": best,
          "test_accuracy": test["test_accuracy"], "test_loss": test["test_loss"],
          "test_examples": test["test_examples"],
          "majority_test_accuracy": metrics.majority_class(splits["test"].labels)[1]}


# --- evaluation of a finished (or running) workdir -------------------------------------

def evaluate(config: config_dict.ConfigDict, workdir: str, *, split: str = "test",
             progress: bool | None = None) -> dict[str, Any]:
  """Evaluates the best checkpoint of `workdir` on `split` in `eval_form(config)`.

  Args:
    config: the run's config (`workdir/config.json`, possibly with `eval_form` changed).
    workdir: a run folder with a `best/` checkpoint.
    split: "test" or "val".
    progress: show a progress bar (default: when stderr is a terminal).

  Returns:
    {"accuracy", "loss", "examples", "form", "step", "seconds", "examples_per_sec",
     "peak_memory_bytes" (XLA's temp + argument + output bytes of the eval step),
     "device_peak_bytes" (the allocator's peak, where the backend reports one)}.
  """
  progress = _progress_default() if progress is None else progress
  model_config = check_config(config)
  ckpt = checkpoint.Checkpointer(workdir, config.max_checkpoints_to_keep)
  best = ckpt.best_step()
  if best is None:
    raise run_records.WorkdirError(f"no best checkpoint in {Path(workdir) / checkpoint.BEST_DIR}; "
                            f"train first with run.py --config ... --workdir {workdir}")
  splits, info = load_data(config)
  setup = _setup(config, info, model_config, 1, 1)
  state, _ = ckpt.restore(best, setup.state, best=True)
  ckpt.close()
  form = eval_form(config)
  eval_fn = steps.jit_eval_step(setup, form)
  batch_size = config.eval_batch_size or config.batch_size
  first = next(iter(make_loader(splits[split], batch_size=batch_size, seed=0, shuffle=False,
                                drop_remainder=False, num_epochs=1)))
  compiled = eval_fn.lower(steps.model_state(state), steps.shard_batch(first, setup.mesh)).compile()
  memory = compiled.memory_analysis()
  peak = None if memory is None else int(memory.temp_size_in_bytes + memory.argument_size_in_bytes
                                         + memory.output_size_in_bytes)
  tic = time.perf_counter()
  sums = run_eval(compiled, steps.model_state(state), splits[split], batch_size, setup.mesh,
                  progress=progress, desc=split)
  seconds = time.perf_counter() - tic
  stats = jax.local_devices()[0].memory_stats() or {}
  values = metrics.averages(sums, "")
  return {"accuracy": values["accuracy"], "loss": values["loss"], "examples": values["examples"],
          "split": split, "form": form_name(config), "step": best, "seconds": seconds,
          "examples_per_sec": values["examples"] / seconds, "peak_memory_bytes": peak,
          "device_peak_bytes": stats.get("peak_bytes_in_use")}
