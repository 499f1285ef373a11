r"""Everything worth knowing from one lent accelerator, in one command that fits a 10-minute run.

    python3 bench/accelerator.py [--out DIR] [--wheels .whl] [--budget-s 520]
    python3 bench/accelerator.py --quick --out DIR      # every stage at tiny sizes (CPU smoke test)

Runs from the source tree on whatever JAX the machine has (written for JAX 0.10 and 0.11; nothing
is installed over the machine's packages): `--wheels DIR` installs the wheels of
`bench/fetch_accelerator_wheels.sh` into a scratch folder that only this run's processes see.

Stages, in order, each in its own Python process with its own time budget (so one that is slow,
runs out of memory or crashes is cut off or reported and the next still runs; each one's results
are saved case by case, so a stage cut off keeps what it finished):

  env          device, JAX/jaxlib/flax versions, backend, device memory, matmul rate (f32, bf16).
  correctness  every `lion_attention` form on the device vs the float64 definition computed on
               the host (`tests/reference.py`), forward and gradients, float32 and bfloat16
               inputs, scalar/vector/per-head/no decays, padding; see `stage_correctness`.
  forms        forward+backward time and XLA memory of every form at L = 1K, 4K, 16K, 64K
               (attention and scan until they do not fit; chunk_scan at C = 64, 128, 256, and
               at C = 64 with each state pass: the N-step scan and the log-depth associative).
  train_step   one full LRA training step per preset at the paper's batch size: examples/s,
               compile seconds, XLA memory; C = 32 (the presets') then 64 and 128, float32 and
               bfloat16 compute; S5 and the Transformer next to each preset's default.
  train        a short real run (`lra.train.train_and_evaluate`) on generated ListOps, with
               its accuracy curve.

The float64 reference is imported from `tests/reference.py`, the one definition the test suite
checks every form against: plain NumPy, written independently of `lion_jax` and importing no test
framework, so the report and the tests rest on the same definition. A copy here could drift,
and moving it into `lion_jax` would ship a test oracle inside the library it checks.

Writes DIR/accelerator.json (everything), DIR/accelerator.md (the tables), DIR/train_curves.png
and DIR/accelerator.log (every stage's output). The report is rewritten after every stage, so
even a run stopped from outside leaves one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

BENCH = pathlib.Path(__file__).resolve().parent
REPO = BENCH.parent
REPORT_JSON, REPORT_MD = "accelerator.json", "accelerator.md"
CURVES_PNG, LOG = "train_curves.png", "accelerator.log"
DEFAULT_OUT = BENCH / "results" / "accelerator"
# Time the report itself needs after the last stage, and the least a stage is started with.
REPORT_RESERVE_S, MIN_STAGE_S = 5.0, 8.0

# ---------------------------------------------------------------------------------------------
# Inside a stage process: a context that saves results as they come and knows the deadline.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class StageRun:
  """What a stage function gets: sizes (`quick`), its deadline and a place for its results."""

  name: str
  quick: bool
  deadline: float  # time.monotonic() by which the stage should have stopped starting work
  path: pathlib.Path
  scratch: pathlib.Path
  payload: dict[str, Any] = dataclasses.field(default_factory=dict)

  def left(self) -> float:
    return self.deadline - time.monotonic()

  def add(self, key: str, record: dict[str, Any]) -> None:
    """Appends `record` to the list `key` and saves at once (a stage cut off keeps it)."""
    self.payload.setdefault(key, []).append(record)
    self.save()

  def save(self) -> None:
    tmp = self.path.with_suffix(".tmp")
    tmp.write_text(json.dumps(self.payload, indent=1, default=_json_default))
    tmp.replace(self.path)


def _json_default(x):
  import numpy as np  # pylint: disable=import-outside-toplevel
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  return str(x)


def _import_bench():
  """The benchmark modules, with the repository and bench/ importable (no install needed)."""
  for path in (str(REPO), str(BENCH)):
    if path not in sys.path:
      sys.path.insert(0, path)
  import harness  # pylint: disable=import-outside-toplevel
  return harness


def _quick_compiles() -> None:
  """`--quick` is a smoke test of this script: fast compiles matter more than fast code."""
  import jax  # pylint: disable=import-outside-toplevel
  jax.config.update("jax_disable_most_optimizations", True)


# --- stage: env -------------------------------------------------------------------------------

def stage_env(run: StageRun) -> None:
  """Versions, device and the measured matmul rate at JAX's default precision (the ceiling the
  other numbers sit under)."""
  harness = _import_bench()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  env = harness.environment()
  versions = {}
  for module in ("flax", "optax", "orbax.checkpoint", "grain", "ml_collections", "tensorboardX",
                 "numpy"):
    try:
      versions[module] = getattr(__import__(module, fromlist=["_"]), "__version__", "?")
    except ImportError as error:
      versions[module] = f"missing ({error})"
  env["packages"] = versions
  missing = [m for m, v in versions.items() if v.startswith("missing")]
  env["default_matmul_precision"] = str(getattr(jax.config, "jax_default_matmul_precision", None))
  run.payload["environment"] = env
  run.save()
  n = 256 if run.quick else 8192
  for dtype in ("float32", "bfloat16"):
    a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.dtype(dtype))
    case = harness.compile_case(harness.Case(f"matmul {n} {dtype}", lambda x: x @ x, (a,),
                                             analytic_flops=2.0 * n ** 3))
    harness.time_cases([case], repeats=3 if run.quick else 10, verbose=False)
    best = case.result["analytic_flops"] / case.result["min_s"]
    run.add("matmul", dict(n=n, dtype=dtype, median_s=case.result["median_s"],
                           tflops_per_s=best / 1e12))
  # A missing package fails the later stages too; say which here (see --wheels).
  run.payload["passed"] = not missing
  if missing:
    run.payload["error"] = f"missing packages: {', '.join(missing)} (run with --wheels .whl)"


# --- stage: correctness -----------------------------------------------------------------------

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")
# chunk_scan's two ways of passing states between chunks (`lion_attention(state_pass=...)`).
STATE_PASSES = ("scan", "associative")
# ‖device − float64‖ / ‖float64‖ allowed, per input dtype. float32 matmuls may run as TF32 on
# NVIDIA GPUs (JAX's default precision there), about 1e-3; bfloat16 rounds every output to 8 bits.
TOLERANCE = {"float32": 5e-3, "bfloat16": 5e-2}


@dataclasses.dataclass(frozen=True)
class CorrectnessShape:
  """One input shape of the correctness stage."""

  name: str
  batch: int
  length: int
  heads: int
  dim: int
  decays: str  # "vector" [B, L, H, V], "scalar" [B, L, H], "head" [H], "none" (LION-LIT)
  chunk: int
  padded: bool = False  # the last quarter of the second sequence is padding (key_mask)


CORRECTNESS_SHAPES = (
    CorrectnessShape("vector decays, L=100, C=32", 2, 100, 2, 16, "vector", 32),
    CorrectnessShape("scalar decays, L=100, C=32", 2, 100, 2, 16, "scalar", 32),
    CorrectnessShape("per-head decay, padded, L=96, C=16", 2, 96, 2, 16, "head", 16, padded=True),
    CorrectnessShape("no decay (LIT), L=64, C=64", 1, 64, 2, 16, "none", 64),
)
QUICK_CORRECTNESS_SHAPES = (CorrectnessShape("vector decays, L=24, C=8", 1, 24, 2, 8, "vector", 8,
                                             padded=True),)


def _enable_x64():
  """float64 on inside a `with`: `jax.enable_x64` (JAX 0.10 to 0.12), else the older
  `jax.experimental.enable_x64`."""
  import jax  # pylint: disable=import-outside-toplevel
  if hasattr(jax, "enable_x64"):
    return jax.enable_x64(True)
  from jax.experimental import enable_x64  # pylint: disable=import-outside-toplevel
  return enable_x64()


def correctness_inputs(shape: CorrectnessShape, seed: int = 0):
  """float64 NumPy inputs: (q, k, v, log_decay or None, key_mask or None, cotangent)."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)
  full = (shape.batch, shape.length, shape.heads, shape.dim)
  q, k = (np.abs(rng.normal(size=full)) + 0.1 for _ in range(2))  # non-negative features
  v, cotangent = rng.normal(size=full), rng.normal(size=full)
  decay_shape = {"vector": full, "scalar": full[:3], "head": (shape.heads,), "none": None}
  log_decay = None
  if decay_shape[shape.decays] is not None:
    log_decay = rng.uniform(np.log(0.8), np.log(0.999), decay_shape[shape.decays])
  key_mask = None
  if shape.padded:
    key_mask = np.ones(full[:2], bool)
    key_mask[-1, (3 * shape.length) // 4:] = False
  return q, k, v, log_decay, key_mask, cotangent


def _relative_error(x, ref) -> float:
  import numpy as np  # pylint: disable=import-outside-toplevel
  x, ref = np.asarray(x, np.float64), np.asarray(ref, np.float64)
  if not np.all(np.isfinite(x)):
    return math.inf
  return float(np.linalg.norm(x - ref) / max(np.linalg.norm(ref), 1e-300))


def host_reference(inputs, check_gradients: bool = True):
  """float64 output and gradients on the host, and how well the gradients match the definition.

  The output is `tests/reference.py`'s direct sum over i and j. The gradients are JAX's float64
  gradients of the full masked form on the CPU, checked here against central differences of
  that same direct sum along a random direction (so they rest on the definition, not on the
  form being tested).

  Returns:
    (output [B, L, H, V], gradients (dq, dk, dv[, dlog_decay]), directional-derivative error,
    None unless `check_gradients`).
  """
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from lion_jax import lion_attention  # pylint: disable=import-outside-toplevel
  from tests.reference import reference_lion  # pylint: disable=import-outside-toplevel
  q, k, v, log_decay, key_mask, cotangent = inputs
  differentiable = (q, k, v) + (() if log_decay is None else (log_decay,))

  def reference_loss(*xs):
    out = reference_lion(*xs[:3], xs[3] if log_decay is not None else None, key_mask=key_mask)
    return float(np.sum(out * cotangent)), out

  _, out = reference_loss(*differentiable)
  cpu = jax.devices("cpu")[0]
  with _enable_x64():
    def loss(*xs):
      y = lion_attention(*xs[:3], xs[3] if log_decay is not None else None, form="attention",
                         key_mask=None if key_mask is None else jax.numpy.asarray(key_mask))
      return (y * cotangent).sum()
    args = jax.device_put(differentiable, cpu)
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))(*args)
    grads = tuple(np.asarray(g, np.float64) for g in grads)
  if not check_gradients:
    return out, grads, None
  rng = np.random.default_rng(1)
  direction = tuple(rng.normal(size=x.shape) for x in differentiable)
  step = 1e-6
  plus, _ = reference_loss(*(x + step * d for x, d in zip(differentiable, direction)))
  minus, _ = reference_loss(*(x - step * d for x, d in zip(differentiable, direction)))
  finite_difference = (plus - minus) / (2 * step)
  analytic = sum(float(np.sum(g * d)) for g, d in zip(grads, direction))
  return out, grads, abs(analytic - finite_difference) / max(abs(finite_difference), 1e-300)


def check_form(shape: CorrectnessShape, inputs, form: str, dtype: str):
  """Output and gradients of `form` on the device for inputs rounded to `dtype`.

  Returns:
    (rounded float64 inputs, output, gradients): the reference is recomputed from the rounded
    inputs, so that what is measured is the computation, not the rounding of its inputs.
  """
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from lion_jax import lion_attention  # pylint: disable=import-outside-toplevel
  q, k, v, log_decay, key_mask, cotangent = inputs
  differentiable = (q, k, v) + (() if log_decay is None else (log_decay,))
  on_device = tuple(jnp.asarray(x, dtype) for x in differentiable)
  rounded = tuple(np.asarray(x, np.float64) for x in on_device)
  mask = None if key_mask is None else jnp.asarray(key_mask)
  cot = jnp.asarray(cotangent, jnp.float32)

  def loss(*xs):
    y = lion_attention(*xs[:3], xs[3] if log_decay is not None else None, form=form,
                       key_mask=mask, chunk_size=shape.chunk)
    return (y.astype(jnp.float32) * cot).sum(), y

  fn = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(on_device))), has_aux=True))
  (_, out), grads = fn(*on_device)
  return rounded, np.asarray(out, np.float64), tuple(np.asarray(g, np.float64) for g in grads)


def stage_correctness(run: StageRun) -> None:
  """Every form × dtype × shape on the device against the host's float64 reference.

  Passes when every output and every gradient is within `TOLERANCE` of the reference and the
  reference gradients agree with finite differences of the definition (≤ 1e-5).
  """
  _import_bench()
  if run.quick:
    _quick_compiles()
  shapes = QUICK_CORRECTNESS_SHAPES if run.quick else CORRECTNESS_SHAPES
  dtypes = tuple(TOLERANCE)
  run.payload.update(tolerance=TOLERANCE, forms=FORMS)
  all_ok = True
  inputs_of = {}
  # float32 through every shape first: a budget cut short still covers each decay family.
  for dtype in dtypes:
    for shape in shapes:
      if shape.name not in inputs_of:
        inputs_of[shape.name] = correctness_inputs(shape)
        _, _, fd_error = host_reference(inputs_of[shape.name])
        run.add("reference_checks", dict(shape=shape.name, ok=fd_error <= 1e-5,
                                         gradient_vs_finite_difference=fd_error))
        all_ok &= fd_error <= 1e-5
      inputs = inputs_of[shape.name]
      references = {}
      for form in FORMS:
        if run.quick and dtype != "float32" and form != "chunk_scan":
          continue  # --quick: bfloat16 through the default form only (fewer compiles)
        if run.left() <= 0:
          run.add("checks", dict(shape=shape.name, form=form, dtype=dtype,
                                 skipped="stage time budget"))
          run.payload["incomplete"] = True
          continue
        start = time.monotonic()
        try:
          rounded, out, grads = check_form(shape, inputs, form, dtype)
        except Exception as error:  # pylint: disable=broad-except  # reported, not fatal
          run.add("checks", dict(shape=shape.name, form=form, dtype=dtype, ok=False,
                                 error=f"{type(error).__name__}: {str(error)[:300]}"))
          all_ok = False
          continue
        if dtype not in references:  # one reference per rounding of the inputs
          rounded_inputs = rounded[:3] + ((rounded[3],) if len(rounded) > 3 else (None,))
          references[dtype] = host_reference(rounded_inputs + inputs[4:],
                                             check_gradients=False)[:2]
        ref_out, ref_grads = references[dtype]
        out_error = _relative_error(out, ref_out)
        grad_errors = [_relative_error(g, r) for g, r in zip(grads, ref_grads)]
        ok = max([out_error] + grad_errors) <= TOLERANCE[dtype]
        all_ok &= ok
        names = ("dq", "dk", "dv", "dlog_decay")
        run.add("checks", dict(shape=shape.name, form=form, dtype=dtype, ok=ok,
                               output_error=out_error,
                               gradient_errors=dict(zip(names, grad_errors)),
                               max_gradient_error=max(grad_errors),
                               seconds=time.monotonic() - start))
        print(f"  {shape.name:<38s} {form:<11s} {dtype:<9s} out {out_error:.1e}  "
              f"grad {max(grad_errors):.1e}  {'ok' if ok else 'FAILED'}", flush=True)
  # Checks cut by the budget do not fail the stage; the report calls it incomplete.
  run.payload["passed"] = bool(all_ok) and any("ok" in c for c in run.payload.get("checks", []))


# --- stage: forms -----------------------------------------------------------------------------

FORMS_LENGTHS, QUICK_FORMS_LENGTHS = (1024, 4096, 16384, 65536), (64,)
FORMS_CHUNKS, QUICK_FORMS_CHUNKS = (64, 128, 256), (16,)


def _memory_budget_gb(harness) -> float:
  """What a compiled case may use: 90% of the device's allocator limit, 4 GB where unknown."""
  limit = harness.environment().get("device_memory_limit_bytes")
  return 0.9 * limit / harness.GB if limit else 4.0


def _too_slow(run: StageRun, last_seconds: float | None) -> bool:
  """Whether to skip the next case: the last one of its kind (at a quarter of the length, or
  another chunk size or dtype) took more than half the time left."""
  return run.left() <= 2.0 * (last_seconds or 0.0)


def _run_case(harness, case, budget_gb: float, run: StageRun) -> None:
  """Compiles and times one case (at least one timed call after the warm-up, up to 5 s of
  them); an error while running it, e.g. the device running out of memory where XLA's estimate
  said it would fit, is recorded as the case's `skipped` reason instead of ending the stage."""
  try:
    harness.run_group([case], budget_gb, repeats=3 if run.quick else 5,
                      budget_s=min(5.0, max(run.left(), 0.0)), min_repeats=1)
  except Exception as error:  # pylint: disable=broad-except
    case.compiled = None
    case.result["skipped"] = f"failed while running: {type(error).__name__}: {str(error)[:200]}"


def stage_forms(run: StageRun) -> None:
  """`bench/forms.py`'s forward+backward cases, one at a time, vector decays then scalar."""
  harness = _import_bench()
  if run.quick:
    _quick_compiles()
  import forms  # pylint: disable=import-outside-toplevel
  lengths = QUICK_FORMS_LENGTHS if run.quick else FORMS_LENGTHS
  chunks = QUICK_FORMS_CHUNKS if run.quick else FORMS_CHUNKS
  batch, heads, dim = (1, 2, 8) if run.quick else (2, 4, 32)
  budget_gb = _memory_budget_gb(harness)
  run.payload.update(batch=batch, heads=heads, dim=dim, mem_budget_gb=budget_gb)
  # chunk_scan first: at 64K the slow forms may use up what is left of the budget. At the first
  # chunk size both state passes (N-step lax.scan and log-depth associative_scan) side by side.
  variants = [("chunk_scan", chunks[0], state_pass) for state_pass in STATE_PASSES]
  variants += [("chunk_scan", c, "auto") for c in chunks[1:]]
  variants += [(form, chunks[0], "auto") for form in ("rnn", "scan", "attention")]
  ran = 0
  for decays in ("vector",) if run.quick else ("vector", "scalar"):
    did_not_fit: set[str] = set()
    last: dict[tuple[str, int], float] = {}
    for length in lengths:
      inputs = forms.make_inputs(batch, length, heads, dim, decays)
      groups = 1 if decays == "scalar" else dim
      for form, chunk, state_pass in variants:
        info = dict(length=length, decays=decays, form=form, chunk_size=chunk, pass_="fwd+bwd",
                    state_pass=state_pass)
        label = form + (f" C={chunk}" if form == "chunk_scan" else "")
        label += f" {state_pass}" if state_pass != "auto" else ""
        if form in did_not_fit:
          run.add("results", dict(name=label, **info, skipped="did not fit at a shorter L"))
          continue
        if _too_slow(run, last.get((form, chunk, state_pass))):
          run.add("results", dict(name=label, **info, skipped="stage time budget"))
          continue
        case = harness.Case(
            f"L={length} {decays} {label}", forms.grad_fn(form, chunk, state_pass), inputs,
            info=info,
            analytic_flops=forms.analytic_flops(form, batch, length, heads, dim, groups, chunk,
                                                backward=True))
        start = time.monotonic()
        _run_case(harness, case, budget_gb, run)
        last[(form, chunk, state_pass)] = time.monotonic() - start
        record = dict(harness.record(case), name=label)
        if "skipped" in record and form != "chunk_scan":
          did_not_fit.add(form)
        ran += "median_s" in record
        run.add("results", record)
  run.payload["passed"] = ran > 0


# --- stage: train_step ------------------------------------------------------------------------

# Cheapest compiles first: on an H200 one preset's step takes 35-45 s to compile.
TRAIN_STEP_TASKS = ("listops", "image", "pathfinder", "text", "retrieval", "pathx")
# (chunk size, compute dtype) in the order they are run: every preset's default first, so a
# short budget still covers every task.
# S5 and the Transformer (the paper's Table 7 baselines), timed once per task next to LION-S.
TRAIN_STEP_BASELINES = ("s5", "transformer")
# Presets whose default ("auto") residuals are recomputed, timed again with them stored. On an
# H100 the ListOps step took 102 ms stored against 147 ms recomputed in one segment a row and
# 231 ms in segments of 128 tokens (bench/segments.py, docs/benchmarks.md §11); these two plan
# 26 and 41 GB stored on an H200, so both fit.
TRAIN_STEP_STORED_TASKS = ("listops", "image")
TRAIN_STEP_VARIANTS = ((32, "float32"), (32, "bfloat16"), (64, "float32"), (128, "float32"),
                       (64, "bfloat16"), (128, "bfloat16"))


def stage_train_step(run: StageRun) -> None:
  """One real training step per LRA preset at its configured (the paper's) batch size.

  A preset whose step does not fit in device memory is measured again with `model.remat`
  (each block's activations recomputed in the backward pass), and keeps it for its later
  chunk sizes and dtypes.
  """
  harness = _import_bench()
  if run.quick:
    _quick_compiles()
  import train_step  # pylint: disable=import-outside-toplevel
  from configs import common  # pylint: disable=import-outside-toplevel
  budget_gb = _memory_budget_gb(harness)
  if run.quick:
    tasks, variants, arg = ("listops",), ((16, "bfloat16"),), "lion_s,runlocal"
  else:
    tasks, variants, arg = TRAIN_STEP_TASKS, TRAIN_STEP_VARIANTS, "lion_s"
  run.payload.update(variant=arg, mem_budget_gb=budget_gb)
  last: dict[tuple[str, str], float] = {}  # seconds of the last case per (task, variant)
  remat_tasks: set[str] = set()

  def measure(task, chunk, dtype, remat, baseline=None, residuals=None):
    variant = arg if baseline is None else arg.replace("lion_s", baseline)
    config, info, seq_len = train_step.task_config(task, variant)
    config.model.remat = remat
    if run.quick:
      config.model.num_layers, config.model.d_model = 1, 16
    # Skipped only when this very model and task took longer before than is left: a model's
    # first step on a task is tried (the stage's hard limit stops it), so S5 and the
    # Transformer are not skipped on LION-S's compile time, which is 3x theirs on a GPU.
    if run.left() <= last.get((task, variant), 0.0):
      return dict(name=f"{task} C={chunk} {dtype}", task=task, chunk_size=chunk, dtype=dtype,
                  remat=remat, variant=variant.split(",")[0], residuals=residuals,
                  skipped="stage time budget")
    start = time.monotonic()
    case, _ = train_step.step_case(task, config, info, seq_len, "chunk_scan", chunk,
                                   config.batch_size, dtype=dtype, residuals=residuals)
    case.info.update(remat=remat, variant=variant.split(",")[0])
    _run_case(harness, case, budget_gb, run)
    last[task, variant] = time.monotonic() - start
    return train_step.examples_per_second(harness.record(case))

  def measure_or_remat(task, chunk, dtype, remat, baseline=None, residuals=None):
    """Adds the step's record; one that did not fit or compile runs once more with remat."""
    record = measure(task, chunk, dtype, remat=remat, baseline=baseline, residuals=residuals)
    run.add("results", record)
    if record.get("skipped", "stage time budget") != "stage time budget" and not record["remat"]:
      run.add("results", measure(task, chunk, dtype, remat=True, baseline=baseline,
                                 residuals=residuals))
      return True
    return False

  for index, (chunk, dtype) in enumerate(variants):
    for task in tasks:
      if measure_or_remat(task, chunk, dtype, remat=task in remat_tasks):
        remat_tasks.add(task)  # LION keeps remat for this task's later chunk sizes and dtypes
      if index == 0:  # the Table 7 baselines at their own presets, right after LION's default
        for baseline in TRAIN_STEP_BASELINES:
          if baseline in common.task_variants(task):
            measure_or_remat(task, chunk, dtype, remat=False, baseline=baseline)
        if task in TRAIN_STEP_STORED_TASKS:
          measure_or_remat(task, chunk, dtype, remat=False, residuals="stored")
  run.payload["passed"] = any("median_s" in r for r in run.payload.get("results", []))


# --- stage: memory ----------------------------------------------------------------------------

# Path-X first: its paper batch is the one that does not fit an 80 GB device with stored residuals.
MEMORY_TASKS = ("pathx", "listops", "image", "text", "retrieval", "pathfinder")
# (variant, chunk_scan's residuals, model.remat) per task, compiled, not run.
MEMORY_CASES = (("lion_s", "stored", False), ("lion_s", "recomputed", False),
                ("lion_s", "stored", True), ("lion_s", "recomputed", True), ("s5", None, False))


def stage_memory(run: StageRun) -> None:
  """XLA's plan (temp + output bytes) of one training step per LRA preset at its (the paper's)
  batch size, compiled and not run: LION-S with chunk_scan's residuals stored and recomputed,
  each without and with `model.remat`, and S5. On the CPU, remat lowers no plan
  (docs/benchmarks.md §10); this records what a GPU's scheduler makes of both."""
  harness = _import_bench()
  if run.quick:
    _quick_compiles()
  import train_step  # pylint: disable=import-outside-toplevel
  tasks = ("listops",) if run.quick else MEMORY_TASKS
  # Every task without remat first, then with: a short budget still covers each preset's plans.
  cases = [(task, case) for first in (True, False) for task in tasks for case in MEMORY_CASES
           if (not case[2]) == first]
  for task, (variant, residuals, remat) in cases:
    name = f"{task} {variant} {residuals or ''} remat={remat}"
    if run.left() < 5:
      run.add("results", dict(name=name, task=task, variant=variant, residuals=residuals,
                              remat=remat, skipped="stage time budget"))
      continue
    config, info, seq_len = train_step.task_config(
        task, variant + (",runlocal" if run.quick else ""))
    config.model.remat = remat
    case, _ = train_step.step_case(task, config, info, seq_len, "chunk_scan", 32,
                                   config.batch_size, residuals=residuals)
    try:
      harness.compile_case(case)
    except Exception as error:  # pylint: disable=broad-except
      case.result["skipped"] = f"compile failed: {type(error).__name__}: {str(error)[:200]}"
    case.compiled = None
    record = harness.record(case) | dict(variant=variant, remat=remat)
    run.add("results", record)
    print(f"  {name}: {harness.fmt_bytes(record.get('temp_plus_output_bytes'))}", flush=True)
  run.payload["passed"] = any("temp_plus_output_bytes" in r
                              for r in run.payload.get("results", []))


# --- stage: train -----------------------------------------------------------------------------

def train_config(quick: bool, data_dir: str):
  """ListOps (LION-S preset) on generated expressions short enough to learn in a few minutes.

  As in `make demo` (configs/listops.py), the HiPPO timescales are scaled to the shorter inputs
  (Δ in [0.01, 1]) and the peak learning rate is raised for a run of hundreds of steps.
  """
  from configs import common, listops  # pylint: disable=import-outside-toplevel
  config = listops.get_config("lion_s")
  config.data_dir = data_dir
  if quick:
    config.seq_len = 64
    config.generate = dict(num_train=64, num_val=16, num_test=16, min_length=10, max_length=60,
                           seed=0, workers=1)
    common.set_fields(config, {
        "model.d_model": 16, "model.num_layers": 1, "model.num_heads": 2, "batch_size": 8,
        "num_train_steps": 6, "eval_every_steps": 3, "log_every_steps": 3,
        "warmup_epochs": 0.0}, "accelerator --quick")
  else:
    # 20k expressions of 100-500 tokens, the ListOps preset model (8 layers, d_model 128,
    # vector decays) at the paper's batch 50: ~600 steps, 1.5 epochs.
    config.seq_len = 512
    config.generate = dict(num_train=20000, num_val=1000, num_test=1000, min_length=100,
                           max_length=500, seed=0, workers=max(1, min(8, os.cpu_count() or 1)))
    common.set_fields(config, {
        "num_train_steps": 600, "eval_every_steps": 100, "log_every_steps": 25,
        "warmup_epochs": 0.1, "learning_rate": 2e-3, "model.dt_min": 0.01,
        "model.dt_max": 1.0}, "accelerator train stage")
  return config


def stage_train(run: StageRun) -> None:
  """A short `lra.train.train_and_evaluate` run; the curve is read from its metrics.jsonl."""
  _import_bench()
  if run.quick:
    _quick_compiles()
  from lra import train  # pylint: disable=import-outside-toplevel
  workdir = run.scratch / "train_run"
  config = train_config(run.quick, str(run.scratch / "listops_data"))
  run.payload.update(workdir=str(workdir), config=json.loads(config.to_json_best_effort()))
  run.save()
  start = time.monotonic()
  results = train.train_and_evaluate(config, str(workdir), progress=False)
  run.payload.update(results=results, seconds=time.monotonic() - start)
  run.payload["passed"] = math.isfinite(results.get("test_accuracy", math.nan))


@dataclasses.dataclass(frozen=True)
class Stage:
  """A stage: its function (run in a child process) and its time budgets in seconds."""

  run: Callable[[StageRun], None]
  budget_s: float
  quick_budget_s: float
  about: str


# The default budgets sum to 520 s: with the report, under 9 minutes. The --quick ones are
# caps for a loaded CPU (a quiet 2-core machine needs about a minute in all), not targets.
STAGES: dict[str, Stage] = {
    "env": Stage(stage_env, 20, 40, "device, versions, matmul rate"),
    "correctness": Stage(stage_correctness, 90, 120, "every form vs float64, fwd and grad"),
    "forms": Stage(stage_forms, 85, 90, "forms fwd+bwd at L = 1K..64K, XLA memory"),
    "train_step": Stage(stage_train_step, 170, 90, "one LRA train step per preset"),
    "memory": Stage(stage_memory, 75, 90, "each preset's step plan: residuals stored/recomputed"),
    "train": Stage(stage_train, 80, 120, "short ListOps run, accuracy curve"),
}


def run_stage_in_process(args: argparse.Namespace) -> int:
  """The child side: runs one stage and saves its payload (also when it raises)."""
  run = StageRun(args.run_stage, args.quick, time.monotonic() + args.stage_budget_s,
                 pathlib.Path(args.stage_out), pathlib.Path(args.scratch))
  run.payload.update(stage=args.run_stage, quick=args.quick, soft_budget_s=args.stage_budget_s)
  try:
    STAGES[args.run_stage].run(run)
  except BaseException as error:  # saved for the report, then re-raised for the exit code
    import traceback  # pylint: disable=import-outside-toplevel
    run.payload.update(passed=False, error=f"{type(error).__name__}: {str(error)[:500]}",
                       traceback=traceback.format_exc()[-3000:])
    run.save()
    raise
  run.save()
  return 0


# ---------------------------------------------------------------------------------------------
# The parent: runs the stages, each in a child with a hard time limit, and writes the report.
# ---------------------------------------------------------------------------------------------

def install_wheels(wheels: pathlib.Path, scratch: pathlib.Path) -> pathlib.Path:
  """Installs the `.whl` files of `wheels` (no dependencies, no index) into a scratch folder."""
  files = sorted(wheels.glob("*.whl"))
  if not files:
    raise SystemExit(f"--wheels {wheels}: no .whl files there; run "
                     "bench/fetch_accelerator_wheels.sh on a machine with network first")
  site = scratch / "site"
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                  "--no-compile", "--no-cache-dir", "--target", str(site), *map(str, files)],
                 check=True)
  return site


def child_environment(site: pathlib.Path | None) -> dict[str, str]:
  """The stages import this checkout (and the scratch wheels), never an installed copy."""
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  paths = [str(REPO)] + ([str(site)] if site else [])
  if env.get("PYTHONPATH"):
    paths.append(env["PYTHONPATH"])
  env["PYTHONPATH"] = os.pathsep.join(paths)
  return env


def run_stage(name: str, budget_s: float, args, scratch: pathlib.Path, env, log) -> dict[str, Any]:
  """Runs one stage in a child process; kills its process group at the hard limit."""
  stage_out = scratch / f"{name}.json"
  # The stage stops starting work at 85% of its budget; the rest is for the case in flight.
  command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--run-stage", name,
             "--stage-budget-s", f"{0.85 * budget_s:.1f}", "--stage-out", str(stage_out),
             "--scratch", str(scratch)] + (["--quick"] if args.quick else [])
  log.write(f"\n===== stage {name} (budget {budget_s:.0f} s) =====\n")
  log.flush()
  start, cpu_before = time.monotonic(), _children_cpu_seconds()
  child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                           start_new_session=True)
  try:
    returncode = child.wait(timeout=budget_s)
  except subprocess.TimeoutExpired:
    os.killpg(child.pid, signal.SIGKILL)  # the stage and any worker it started
    child.wait()
    returncode = None
  seconds, cpu_seconds = time.monotonic() - start, _children_cpu_seconds() - cpu_before
  payload = json.loads(stage_out.read_text()) if stage_out.exists() else {}
  status = stage_status(returncode, payload)
  print(f"stage {name:<12s} {status:<24s} {seconds:6.1f} s (budget {budget_s:.0f} s)", flush=True)
  return {**{k: v for k, v in payload.items() if k not in ("stage", "passed")},
          "status": status, "passed": status.startswith("passed"), "seconds": seconds,
          "cpu_seconds": cpu_seconds, "budget_s": budget_s}


def stage_status(returncode: int | None, payload: dict[str, Any]) -> str:
  """A stage's status from its exit code (None: killed at its hard limit) and saved payload.

  "passed (incomplete)": every check it ran passed, but its budget ended before the rest (the
  report's tables list what was skipped), which is not a failure of the code under test.
  """
  if returncode is None:
    return "timed out"
  if returncode != 0:
    return f"failed (exit code {returncode})"
  if not payload.get("passed"):
    return "failed"
  return "passed (incomplete)" if payload.get("incomplete") else "passed"


def _children_cpu_seconds() -> float:
  """User + system CPU seconds of every finished child (on a shared CPU, the steadier number)."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--out", default=str(DEFAULT_OUT),
                 help=f"folder for the report, created (default: {DEFAULT_OUT.relative_to(REPO)}/, "
                 "git-ignored)")
  p.add_argument("--quick", action="store_true", help="every stage at tiny sizes (CPU smoke test)")
  p.add_argument("--stages", default=",".join(STAGES), help=f"subset of {','.join(STAGES)}")
  p.add_argument("--budget-s", type=float, default=None,
                 help="wall-clock limit for all stages (default: the sum of their budgets)")
  p.add_argument("--wheels", default=None,
                 help="folder of wheels to install into a scratch folder first (e.g. .whl)")
  # The child side (one stage); not for users.
  p.add_argument("--run-stage", choices=list(STAGES), help=argparse.SUPPRESS)
  p.add_argument("--stage-budget-s", type=float, help=argparse.SUPPRESS)
  p.add_argument("--stage-out", help=argparse.SUPPRESS)
  p.add_argument("--scratch", help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  if args.run_stage:
    return run_stage_in_process(args)
  names = [s for s in args.stages.split(",") if s]
  unknown = [s for s in names if s not in STAGES]
  if unknown:
    p.error(f"--stages: unknown stage(s) {', '.join(unknown)}; stages: {', '.join(STAGES)}")

  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  scratch = pathlib.Path(tempfile.mkdtemp(prefix="lion_accelerator_"))
  start = time.monotonic()
  budgets = {n: STAGES[n].quick_budget_s if args.quick else STAGES[n].budget_s for n in names}
  total = args.budget_s if args.budget_s else sum(budgets.values()) + REPORT_RESERVE_S
  site = install_wheels(pathlib.Path(args.wheels), scratch) if args.wheels else None
  env = child_environment(site)
  report = dict(started_utc=datetime.datetime.now(datetime.timezone.utc).isoformat(
      timespec="seconds"), quick=args.quick, budget_s=total, stages={})
  try:
    with open(out / LOG, "w") as log:
      for name in names:
        left = total - (time.monotonic() - start) - REPORT_RESERVE_S
        budget = min(budgets[name], left) if len(names) > 1 else left
        if budget < MIN_STAGE_S:
          report["stages"][name] = dict(status="not run: no time left", passed=False,
                                        seconds=0.0, budget_s=budgets[name])
        else:
          report["stages"][name] = run_stage(name, budget, args, scratch, env, log)
        report["seconds"] = time.monotonic() - start
        write_report(report, out)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  passed = all(s["passed"] for s in report["stages"].values())
  print(f"{'all stages passed' if passed else 'NOT all stages passed'} in "
        f"{report['seconds']:.0f} s; report: {out / REPORT_MD}")
  return 0 if passed else 1


# --- the report -------------------------------------------------------------------------------

def write_report(report: dict[str, Any], out: pathlib.Path) -> None:
  """accelerator.json, accelerator.md and (when the train stage ran) train_curves.png."""
  train = report["stages"].get("train", {})
  curve = training_curve(train.get("workdir"))
  if curve:
    train["curve"] = curve
    plot_curve(curve, out / CURVES_PNG)
  (out / REPORT_JSON).write_text(json.dumps(report, indent=1, default=str) + "\n")
  (out / REPORT_MD).write_text(markdown(report))


def training_curve(workdir: str | None) -> list[dict[str, Any]]:
  """The metrics.jsonl rows of the train stage's run (also of a run cut off midway)."""
  if not workdir:
    return []
  path = pathlib.Path(workdir) / "metrics.jsonl"
  if not path.exists():
    return []
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curve(curve: list[dict[str, Any]], path: pathlib.Path) -> None:
  if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
  from lra import metrics  # pylint: disable=import-outside-toplevel  (numpy and matplotlib only)
  metrics.plot_rows(curve, path, title="generated ListOps, LION-S")


def _table(header, rows) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def _ms(seconds) -> str:
  if seconds is None:
    return "–"
  ms = 1e3 * seconds
  return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def _bytes(n) -> str:
  if n is None:
    return "–"
  return f"{n / 2 ** 30:.2f} GB" if n >= 2 ** 30 else f"{n / 2 ** 20:.0f} MB"


def _why(record) -> str:
  return f"skipped ({record['skipped'][:60]})" if "skipped" in record else "–"


def markdown(report: dict[str, Any]) -> str:
  """The report's tables, one section per stage that ran."""
  stages = report["stages"]
  env = stages.get("env", {}).get("environment", {})
  lines = ["# Accelerator report", ""]
  if env:
    lines += [f"Device: **{env.get('device_kind')}** ({env.get('backend')}, "
              f"{_bytes(env.get('device_memory_limit_bytes'))} for the allocator); "
              f"JAX {env.get('jax')}, jaxlib {env.get('jaxlib')}, flax "
              f"{env.get('packages', {}).get('flax')}, Python {env.get('python')}; "
              f"commit {env.get('git_commit')}{' (dirty)' if env.get('git_dirty') else ''}; "
              f"started {report['started_utc']}{', --quick' if report['quick'] else ''}.", ""]
  lines += [_table(["stage", "status", "seconds", "CPU seconds", "budget s"],
                   [[n, s["status"], f"{s['seconds']:.0f}", f"{s.get('cpu_seconds', 0):.0f}",
                     f"{s['budget_s']:.0f}"] for n, s in stages.items()]), ""]
  if stages.get("env", {}).get("matmul"):
    lines += ["## Matmul rate", "", _table(
        ["n", "dtype", "median ms", "TFLOP/s (best)"],
        [[m["n"], m["dtype"], _ms(m["median_s"]), f"{m['tflops_per_s']:.3g}"]
         for m in stages["env"]["matmul"]]), ""]
  correctness = stages.get("correctness", {})
  if correctness.get("checks"):
    lines += ["## Correctness: device vs float64 on the host", "",
              f"‖device − reference‖ / ‖reference‖, forward output and the largest over the "
              f"gradients; tolerance {correctness.get('tolerance')}.", ""]
    for check in correctness.get("reference_checks", []):
      lines.append(f"- {check['shape']}: float64 gradient vs finite differences of the "
                   f"definition {check['gradient_vs_finite_difference']:.1e}")
    lines += ["", _table(
        ["shape", "form", "dtype", "output", "gradients", ""],
        [[c["shape"], c["form"], c["dtype"],
          f"{c['output_error']:.1e}" if "output_error" in c else "–",
          f"{c['max_gradient_error']:.1e}" if "max_gradient_error" in c else "–",
          "ok" if c.get("ok") else c.get("error") or c.get("skipped") or "FAILED"]
         for c in correctness["checks"]]), ""]
  forms = stages.get("forms", {})
  if forms.get("results"):
    lines += ["## lion_attention forms, forward+backward", "",
              f"B={forms['batch']}, H={forms['heads']}, K=V={forms['dim']}, float32, selective "
              "decays; median ms and XLA's compiled temp+output bytes.", ""]
    lengths = sorted({r["length"] for r in forms["results"]})
    for decays in ("vector", "scalar"):
      names = list(dict.fromkeys(r["name"] for r in forms["results"] if r["decays"] == decays))
      rows = []
      for name in names:
        cells, mems = [], []
        for length in lengths:
          r = next((r for r in forms["results"] if r["decays"] == decays and r["name"] == name
                    and r["length"] == length), None)
          cells.append("–" if r is None else _ms(r["median_s"]) if "median_s" in r else _why(r))
          mems.append("–" if r is None else _bytes(r.get("temp_plus_output_bytes")))
        rows.append([name] + cells + mems)
      if rows:
        lines += [f"### {decays} decays", "", _table(
            ["form"] + [f"L={l} ms" for l in lengths] + [f"mem L={l}" for l in lengths], rows), ""]
  steps = stages.get("train_step", {})
  if steps.get("results"):
    lines += ["## One LRA training step per preset", "",
              f"Config `{steps.get('variant')}`, the preset's batch size, chunk_scan; "
              "compile = lower + compile seconds.", "", _table(
                  ["task", "model", "L", "batch", "C", "residuals", "dtype", "remat",
                   "examples/s", "step ms", "compile s", "temp+output"],
                  [[r["task"], r.get("variant", "lion_s"), r.get("seq_len", "–"),
                    r.get("batch", "–"), r["chunk_size"] or "–", r.get("residuals") or "–",
                    r["dtype"], "yes" if r.get("remat") else "no",
                    f"{r['examples_per_s']:.1f}" if "examples_per_s" in r else _why(r),
                    _ms(r.get("median_s")),
                    f"{r['lower_s'] + r['compile_s']:.1f}" if "compile_s" in r else "–",
                    _bytes(r.get("temp_plus_output_bytes"))] for r in steps["results"]]), ""]
  memory = stages.get("memory", {})
  if memory.get("results"):
    lines += ["## Memory plan of one training step per preset", "",
              "XLA's temp + output bytes, compiled and not run, at each preset's batch size; "
              "LION-S at C = 32 with chunk_scan's residuals stored or recomputed.", "", _table(
                  ["task", "model", "L", "batch", "residuals", "remat", "temp+output"],
                  [[r["task"], r.get("variant"), r.get("seq_len", "–"), r.get("batch", "–"),
                    r.get("residuals") or "–", "yes" if r.get("remat") else "no",
                    _bytes(r.get("temp_plus_output_bytes")) if "temp_plus_output_bytes" in r
                    else _why(r)] for r in memory["results"]]), ""]
  train = stages.get("train", {})
  if train.get("curve") or train.get("results"):
    results = train.get("results", {})
    lines += ["## Short ListOps training run", ""]
    if results:
      lines += [f"Test accuracy at the best validation step ({results.get('best_step')}): "
                f"{100 * results.get('test_accuracy', math.nan):.1f}% "
                f"(best validation {100 * results.get('best_val_accuracy', math.nan):.1f}%), "
                f"{results.get('train_examples_per_sec') or 0:.0f} examples/s, "
                f"{train.get('seconds', 0):.0f} s with data generation and compiles.", ""]
    evals = [r for r in train.get("curve", []) if "eval_accuracy" in r]
    if evals:
      lines += [_table(["step", "validation accuracy", "validation loss"],
                       [[r["step"], f"{100 * r['eval_accuracy']:.1f}%", f"{r['eval_loss']:.3f}"]
                        for r in evals]), "", f"![training curve]({CURVES_PNG})", ""]
  failed = [(n, s) for n, s in stages.items() if s.get("error")]
  for name, stage in failed:
    lines += [f"## Error in stage {name}", "", "```", stage["error"], "```", ""]
  return "\n".join(lines)


if __name__ == "__main__":
  sys.exit(main())
