"""Shared benchmark harness: compile once, time interleaved repeats, read XLA's memory and FLOPs.

Every benchmark in `bench/` uses it, so they all measure the same way (docs/benchmarks.md,
"How we measure"):
  * `jax.jit`, then `lower(...).compile()` timed separately (compile seconds are reported, never
    mixed into run times);
  * one warm-up call, then ≥ 7 timed rounds. Each round runs *every* case once, in turn, so slow
    drifts of a shared machine hit all cases alike and ratios stay meaningful;
  * median and minimum of `time.perf_counter` around `jax.block_until_ready`;
  * `compiled.memory_analysis()` (temp + output bytes: the memory metric) and
    `compiled.cost_analysis()["flops"]` (XLA counts a `while`/`scan` body once, so scan forms
    also get analytic FLOPs from the caller);
  * a JSON file holding the environment (jax/jaxlib versions, CPU model, thread count, git hash)
    and one record per case.

Absolute milliseconds depend on the machine and on its neighbours; only ratios measured in one
process are meant to be compared.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import lion_jax  # noqa: F401  (before any benchmark starts a backend: lion-jax's XLA:CPU flags)

REPO = pathlib.Path(__file__).resolve().parents[1]
# Where results go by default: git-ignored, so a run never overwrites the published numbers.
RESULTS = REPO / "bench" / "results"
# Where `--publish` writes: the tracked JSON/PNG that docs/ and the README cite.
DOCS = REPO / "docs" / "bench"
GB = 1024 ** 3
MB = 1024 ** 2


def _git_state() -> tuple[str, bool]:
  try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "lion_jax", "bench"],
                                cwd=REPO, capture_output=True, text=True).stdout.strip())
  except (OSError, subprocess.CalledProcessError):
    commit, dirty = "unknown", False
  return commit, dirty


# The code that runs is the code imported at start: record the commit then, not at write time.
_START_COMMIT, _START_DIRTY = _git_state()
_START_UTC = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def environment() -> dict[str, Any]:
  """What a timing depends on: versions, device, CPU, threads, git commit (at start), time."""
  import jaxlib
  cpu = platform.processor() or "unknown"
  # XLA:CPU picks different kernels with and without AVX-512, so the same VM type can differ 2x.
  vector_extensions = []
  try:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
      if line.startswith("model name") and cpu == (platform.processor() or "unknown"):
        cpu = line.split(":", 1)[1].strip()
      if line.startswith("flags") and not vector_extensions:
        vector_extensions = sorted(f for f in line.split(":", 1)[1].split()
                                   if f.startswith(("avx", "amx")))
  except OSError:
    pass
  affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  flax_version = None
  try:
    import flax
    flax_version = flax.__version__
  except ImportError:
    pass
  device = jax.devices()[0]
  try:
    device_memory = (device.memory_stats() or {}).get("bytes_limit")
  except Exception:  # pylint: disable=broad-except  # not every backend reports memory
    device_memory = None
  return {
      "jax": jax.__version__,
      "jaxlib": jaxlib.__version__,
      "flax": flax_version,
      "numpy": np.__version__,
      "python": platform.python_version(),
      "backend": jax.default_backend(),
      "devices": [str(d) for d in jax.devices()],
      "device_kind": device.device_kind,
      "device_memory_limit_bytes": device_memory,  # what the allocator may use (GPU, TPU)
      "cpu_model": cpu,
      "cpu_vector_extensions": vector_extensions,
      "cpu_count": os.cpu_count(),
      "threads_available": affinity,
      "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "git_commit": _START_COMMIT,
      "git_dirty": _START_DIRTY,  # uncommitted changes under lion_jax/ or bench/ at start
      "utc_start": _START_UTC,
      "utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "argv": sys.argv,
  }


@dataclasses.dataclass
class Case:
  """One function on fixed inputs.

  `fn` is a plain Python function, which the harness jits, or an already jitted one (anything
  with `.lower`, e.g. a training step with its shardings and donation), used as it is. With
  `threads_state`, `fn(state, *rest)` returns `(new_state, aux)` and every call passes the
  previous call's `new_state` on, as a training loop does: that is what lets a donated state
  be timed over many calls.
  """

  name: str
  fn: Callable[..., Any]
  args: Sequence[Any]
  info: dict[str, Any] = dataclasses.field(default_factory=dict)  # extra JSON fields
  analytic_flops: float | None = None
  static_argnums: tuple[int, ...] = ()
  donate_argnums: tuple[int, ...] = ()
  threads_state: bool = False
  # filled in by `compile_case` / `time_cases`
  compiled: Any = None
  result: dict[str, Any] = dataclasses.field(default_factory=dict)


def compile_case(case: Case) -> Case:
  """Lowers and compiles, recording compile time, memory and XLA's FLOP count."""
  jitted = case.fn if hasattr(case.fn, "lower") else jax.jit(
      case.fn, static_argnums=case.static_argnums, donate_argnums=case.donate_argnums)
  start = time.perf_counter()
  lowered = jitted.lower(*case.args)
  lower_s = time.perf_counter() - start
  start = time.perf_counter()
  compiled = lowered.compile()
  compile_s = time.perf_counter() - start
  case.compiled = compiled
  res = case.result
  res.update(lower_s=lower_s, compile_s=compile_s)
  res.update(memory_stats(compiled))
  res["xla_flops"] = xla_flops(compiled)
  res["xla_bytes_accessed"] = xla_cost(compiled, "bytes accessed")
  if case.analytic_flops is not None:
    res["analytic_flops"] = float(case.analytic_flops)
  return case


def compile_within_budget(cases: Sequence[Case], mem_budget_gb: float) -> list[Case]:
  """Compiles every case; returns those whose compiled temp+output fits the budget.

  A case that fails to compile or would not fit keeps a `skipped` reason in its result (so it
  still shows in the tables and JSON) and is not run.
  """
  runnable = []
  for case in cases:
    try:
      compile_case(case)
    except Exception as error:  # pylint: disable=broad-except  # e.g. allocation at compile
      case.result["skipped"] = f"compile failed: {type(error).__name__}: {str(error)[:200]}"
    else:
      mem = case.result.get("temp_plus_output_bytes", 0)
      if mem <= mem_budget_gb * GB:
        runnable.append(case)
        continue
      case.result["skipped"] = (f"would not fit: {fmt_bytes(mem)} compiled temp+output "
                                f"> {mem_budget_gb} GB budget")
    case.compiled = None
    print(f"  {case.name:<44s} skipped ({case.result['skipped']})", flush=True)
  return runnable


def run_group(cases: Sequence[Case], mem_budget_gb: float, repeats: int = 7,
              budget_s: float | None = None, min_repeats: int = 3) -> Sequence[Case]:
  """Compiles every case, skips those over the memory budget, times the rest interleaved, and
  frees the compiled executables (results stay in each case's `result`)."""
  runnable = compile_within_budget(cases, mem_budget_gb)
  time_cases(runnable, repeats=repeats, budget_s=budget_s, min_repeats=min_repeats)
  for case in cases:
    case.compiled = None
  gc.collect()
  return cases


def device_label() -> str:
  """'CPU', or the accelerator's kind (e.g. 'GPU NVIDIA H100 80GB HBM3'), for plot titles."""
  backend = jax.default_backend()
  return "CPU" if backend == "cpu" else f"{backend.upper()} {jax.devices()[0].device_kind}"


def style_log_axes(axes, ylabels: Sequence[str], legend_size: int = 7) -> None:
  """Log-log axes over sequence length, as every benchmark plot draws them."""
  for ax, ylabel in zip(axes, ylabels):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length L")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=legend_size)


def memory_stats(compiled) -> dict[str, Any]:
  """temp, output and argument bytes from `memory_analysis()`; temp+output is the metric."""
  try:
    stats = compiled.memory_analysis()
  except Exception:  # pylint: disable=broad-except  # not every backend implements it
    return {}
  if stats is None:
    return {}
  temp = int(stats.temp_size_in_bytes)
  out = int(stats.output_size_in_bytes)
  record = {"temp_bytes": temp, "output_bytes": out,
            "argument_bytes": int(stats.argument_size_in_bytes),
            "alias_bytes": int(stats.alias_size_in_bytes),
            "temp_plus_output_bytes": temp + out}
  peak = getattr(stats, "peak_memory_in_bytes", None)
  if peak:
    record["peak_bytes"] = int(peak)
  return record


def xla_flops(compiled) -> float | None:
  """`cost_analysis()["flops"]` (counts a loop body once)."""
  return xla_cost(compiled, "flops")


def xla_cost(compiled, key: str) -> float | None:
  """One entry of `cost_analysis()` ("flops", "bytes accessed"; a loop body counts once)."""
  try:
    cost = compiled.cost_analysis()
  except Exception:  # pylint: disable=broad-except
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  if not cost:
    return None
  value = cost.get(key)
  return None if value is None else float(value)


def _call(case: Case) -> float:
  start = time.perf_counter()
  out = case.compiled(*case.args)
  jax.block_until_ready(out)
  seconds = time.perf_counter() - start
  if case.threads_state:
    case.args = (out[0], *case.args[1:])
  return seconds


SETTLE_BELOW_S = 2.0


def time_cases(cases: Sequence[Case], repeats: int = 7, warmup: int = 1,
               budget_s: float | None = None, min_repeats: int = 3,
               verbose: bool = True) -> Sequence[Case]:
  """Times compiled cases in interleaved rounds; fills `median_s`, `min_s`, `times_s`.

  Args:
    cases: compiled cases (see `compile_case`).
    repeats: timed rounds (≥ 7 for any ratio that is reported).
    warmup: untimed calls per case first.
    budget_s: optional seconds per case; a case whose warm-up call shows it would exceed this
      over `repeats` runs gets fewer rounds (never fewer than `min_repeats`), recorded in
      `repeats`.
    min_repeats: floor for the above.
    verbose: print one line per case.

  A case that runs right after one with a large working set pays for that case's freed memory
  (measured: +35 ms on an 85 ms chunk_scan step following a 618 MB rnn step), which a training
  loop calling one function repeatedly never sees. So a case whose warm-up took under
  `SETTLE_BELOW_S` gets one untimed call just before each timed one; slower cases are not
  affected measurably and keep single calls.
  """
  wanted = {}
  for case in cases:
    first = None
    for _ in range(warmup):
      t = _call(case)
      first = t if first is None else min(first, t)
    case.result["warmup_s"] = first
    n = repeats
    if budget_s is not None and first:
      n = int(max(min_repeats, min(repeats, budget_s // max(first, 1e-9))))
    wanted[case.name] = n
    case.result["times_s"] = []
  for round_index in range(max(wanted.values(), default=0)):
    for case in cases:
      if round_index < wanted[case.name]:
        if (case.result["warmup_s"] or 0.0) < SETTLE_BELOW_S:
          _call(case)
        case.result["times_s"].append(_call(case))
  for case in cases:
    times = case.result["times_s"]
    case.result.update(repeats=len(times), median_s=statistics.median(times), min_s=min(times))
    flops = case.result.get("analytic_flops") or case.result.get("xla_flops")
    if flops:
      case.result["gflops_per_s_median"] = flops / case.result["median_s"] / 1e9
      case.result["gflops_per_s_best"] = flops / case.result["min_s"] / 1e9
    if verbose:
      print(f"  {case.name:<44s} median {1e3 * case.result['median_s']:9.2f} ms  "
            f"min {1e3 * case.result['min_s']:9.2f} ms  (n={len(times)}, "
            f"compile {case.result.get('compile_s', 0):.2f} s, "
            f"mem {fmt_bytes(case.result.get('temp_plus_output_bytes'))})", flush=True)
  return cases


def record(case: Case) -> dict[str, Any]:
  """A JSON-ready record of one case (inputs described by shapes, not values)."""
  out = {"name": case.name, **case.info}
  out.update({k: v for k, v in case.result.items()})
  return out


def write_json(name: str, records: Sequence[dict[str, Any]], out_dir: pathlib.Path | str = DOCS,
               extra: dict[str, Any] | None = None) -> pathlib.Path:
  """Writes {"environment", "results", ...extra} to `<out_dir>/<name>.json`."""
  out_dir = pathlib.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  path = out_dir / f"{name}.json"
  payload = {"benchmark": name, "environment": environment(), **(extra or {}),
             "results": list(records)}
  path.write_text(json.dumps(payload, indent=1, default=_json_default) + "\n")
  print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
  return path


def _json_default(x):
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  return str(x)


def fmt_bytes(n: float | None) -> str:
  if n is None:
    return "–"
  if n >= GB:
    return f"{n / GB:.2f} GB"
  if n >= MB:
    return f"{n / MB:.0f} MB"
  return f"{n / 1024:.0f} KB"


def fmt_ms(seconds: float | None) -> str:
  if seconds is None:
    return "–"
  ms = 1e3 * seconds
  return f"{ms:.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines)


def matmul_peak(sizes: Sequence[int] = (1024, 2048), repeats: int = 7) -> dict[str, Any]:
  """The machine's measured f32 matmul rate through XLA (square n×n @ n×n), best size."""
  best = {}
  key = jax.random.PRNGKey(0)
  for n in sizes:
    a = jax.random.normal(key, (n, n), jnp.float32)
    case = compile_case(Case(f"matmul {n}", lambda x: x @ x, (a,), analytic_flops=2.0 * n ** 3))
    time_cases([case], repeats=repeats, verbose=False)
    rate = case.result["analytic_flops"] / case.result["min_s"] / 1e9
    median_rate = case.result["analytic_flops"] / case.result["median_s"] / 1e9
    if not best or rate > best["gflops_per_s_best"]:
      best = {"n": n, "gflops_per_s_best": rate, "gflops_per_s_median": median_rate}
  return best


def parse_lengths(text: str) -> list[int]:
  """'1k,4096,16K' -> [1024, 4096, 16384]."""
  out = []
  for part in text.split(","):
    part = part.strip().lower()
    if part:
      out.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
  return out


def find(records: Sequence[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
  """The first record whose fields equal every `match` item, else None."""
  for r in records:
    if all(r.get(k) == v for k, v in match.items()):
      return r
  return None


def add_common_args(parser: argparse.ArgumentParser, *, repeats: int = 7,
                    case_budget_s: float = 60.0, mem_budget_gb: float = 4.0) -> None:
  """The flags every benchmark takes: sizes, timing budgets and where results go."""
  parser.add_argument("--quick", action="store_true", help="small sizes, for `make bench`")
  parser.add_argument("--lengths", default=None, help="comma list, e.g. 256,1k,4k,16k")
  parser.add_argument("--repeats", type=int, default=repeats, help="timed rounds per case")
  parser.add_argument("--case-budget-s", type=float, default=case_budget_s,
                      help="seconds of timed rounds per case (fewer rounds, never < 3, beyond)")
  parser.add_argument("--mem-budget-gb", type=float, default=mem_budget_gb,
                      help="cases whose compiled temp+output exceeds this are not run")
  parser.add_argument("--out", default=None,
                      help=f"output folder (default: {RESULTS.relative_to(REPO)}/, git-ignored)")
  parser.add_argument("--publish", action="store_true",
                      help=f"write to {DOCS.relative_to(REPO)}/, the tracked results the docs cite")
  parser.add_argument("--name", default=None, help="file name stem (default: the benchmark's, "
                      "with _quick appended under --quick)")


def output_path(args: argparse.Namespace, default_name: str) -> tuple[pathlib.Path, str]:
  """(folder, file stem) from `--out`/`--publish`/`--name`/`--quick` (`add_common_args`)."""
  if args.out and args.publish:
    raise SystemExit("--out and --publish both say where to write: give one of them")
  folder = pathlib.Path(args.out) if args.out else DOCS if args.publish else RESULTS
  name = args.name or (f"{default_name}_quick" if args.quick else default_name)
  return folder, name


def lengths_from_args(args: argparse.Namespace, quick: Sequence[int],
                      full: Sequence[int]) -> list[int]:
  """`--lengths` if given, else the quick or the full list."""
  if args.lengths:
    return parse_lengths(args.lengths)
  return list(quick if args.quick else full)
