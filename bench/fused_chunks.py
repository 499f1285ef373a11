"""The vector-decay `chunk_scan` layer with its per-chunk products as fused Pallas kernels
(`lion_jax.ops.fused_chunks`) against the array-op kernel, forward + backward, in one process.

  python3 bench/fused_chunks.py                      # GPU: ListOps preset shapes, packed and padded
  python3 bench/fused_chunks.py --shapes 2,256,2,16,16,16 --quick   # CPU: Pallas's interpreter

Each shape B,L,H,K,E,C runs `bidirectional_chunk_scan` (selective-like vector gates, no steep
chunks) through `jax.value_and_grad` both ways, interleaved; the fused case also for each
`--fused` block and warp count. First it checks the fused values against the array-op ones on the same device
(outputs and all five gradients, largest difference relative to the largest value) and, at
`--check-shape`, both against the float64 array-op kernel on the host CPU, which the test suite
checks against the definition. `--per-kernel E'/W,...` first times each of the four kernels
alone at the first shape with each setting (`fused_chunks.KERNEL_SETTINGS`), then the layer
with each kernel's fastest. Writes fused_chunks.json (bench/results/, `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from lion_jax.ops import chunkwise, factored, fused_chunks  # noqa: E402

# ListOps preset, LION-S: H = 2 heads of K = 64, E = 2V = 128 carried channels (normalize
# "after" with vector decays), C = 32; 13 packed rows of 4608 tokens and 50 padded of 2048.
DEFAULT_SHAPES = "13,4608,2,64,128,32;50,2048,2,64,128,32"


def inputs(batch, length, heads, key_width, channels, seed=0, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(batch, length, heads, key_width)) / np.sqrt(key_width)
  k = rng.normal(size=(batch, length, heads, key_width))
  u = rng.normal(size=(batch, length, heads, channels))
  log_decay = -rng.uniform(1e-3, 0.5, size=(batch, length, heads, channels))
  forward_gate = np.concatenate([np.zeros_like(log_decay[:, :1]), log_decay[:, :-1]], axis=1)
  cotangent = rng.normal(size=u.shape)
  return [jnp.asarray(x, dtype) for x in (q, k, u, forward_gate, log_decay, cotangent)]


def layer(chunk, fused):
  def fn(q, k, u, forward_gate, log_decay, cotangent):
    def loss(*operands):
      out, _ = chunkwise.bidirectional_chunk_scan(*operands, chunk_size=chunk)
      return jnp.sum(out * cotangent), out
    with factored.fused_kernels(fused):  # read while `fn` is traced
      (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2, 3, 4), has_aux=True)(
          q, k, u, forward_gate, log_decay)
    return out, grads
  return fn


def kernel_operands(batch, length, heads, key_width, channels, chunk, seed=1):
  """Chunked operands of the four kernels' public functions: {name: [B, H, N, ·] arrays}."""
  rng = np.random.default_rng(seed)
  lead = (batch, heads, length // chunk)
  array = lambda *shape: jnp.asarray(rng.normal(size=lead + shape), jnp.float32)
  cumsum = lambda: jnp.asarray(np.cumsum(-rng.uniform(1e-3, 0.5, size=lead + (chunk, channels)),
                                         axis=-2), jnp.float32)
  q, k, u, grad = array(chunk, key_width), array(chunk, key_width), array(chunk, channels), \
      array(chunk, channels)
  fwd, bwd = cumsum(), cumsum()
  states = [array(key_width, channels) for _ in range(4)]
  totals = [array(channels) for _ in range(2)]
  return dict(leaving=(k, u, fwd, bwd), outputs=(q, k, u, fwd, bwd, *states[:2]),
              entering_grads=(q, fwd, bwd, grad),
              chunk_grads=(q, k, u, fwd, bwd, *states[:2], grad, *states[2:], *totals))


KERNEL_FUNCTIONS = dict(leaving="leaving_states", outputs="chunk_outputs",
                        entering_grads="entering_grads", chunk_grads="chunk_grads")


def sweep_kernels(shape, settings, repeats, budget_s):
  """Each kernel alone at `shape` for every (E′, W) in `settings`, interleaved.

  Returns:
    (records, {kernel: its fastest (E′, W)}).
  """
  operands = kernel_operands(*shape)
  limit = chunkwise.factored_exponent_limit(jnp.float32)
  records, best = [], {}
  for kernel in fused_chunks.KERNELS:
    cases = []
    for block, count in settings:
      fused_chunks.KERNEL_SETTINGS = {kernel: (block, count)}
      # A fresh function per setting: jit's trace cache, keyed by the function, does not see
      # the setting, and would hand every setting the first one's kernel.
      function = functools.partial(getattr(fused_chunks, KERNEL_FUNCTIONS[kernel]), limit=limit)
      case = harness.Case(f"{kernel} E'={block} w={count}", function, operands[kernel],
                          info=dict(kernel=kernel, channel_block=block, num_warps=count,
                                    shape=list(shape)))
      try:
        harness.compile_case(case)
        cases.append(case)
      except Exception as error:  # pylint: disable=broad-except  # a setting Triton refuses
        case.result["skipped"] = f"compile failed: {type(error).__name__}: {str(error)[:500]}"
        records.append(harness.record(case))
    fused_chunks.KERNEL_SETTINGS = {}
    harness.time_cases(cases, repeats=repeats, budget_s=budget_s, verbose=False)
    for case in cases:
      case.compiled = None
      records.append(harness.record(case))
    timed = [r for r in records if r.get("kernel") == kernel and "median_s" in r]
    if timed:
      fastest = min(timed, key=lambda r: r["median_s"])
      best[kernel] = (fastest["channel_block"], fastest["num_warps"])
      print(f"  {kernel}: " + ", ".join(
          f"{r['channel_block']}/{r['num_warps']} {harness.fmt_ms(r['median_s'])}"
          for r in timed) + f" ms; fastest {best[kernel]}", flush=True)
  return records, best


def relative_errors(reference, values):
  flat = lambda tree: jax.tree_util.tree_leaves(tree)
  wide = lambda x: np.asarray(x, np.float64)
  return [float(np.max(np.abs(wide(a) - wide(b))) / (np.max(np.abs(wide(a))) + 1e-30))
          for a, b in zip(flat(reference), flat(values))]


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--shapes", default=DEFAULT_SHAPES, help="';'-separated B,L,H,K,E,C")
  p.add_argument("--fused", default="32/4,32/8,64/4,64/8,128/8",
                 help="comma list of E'/W: channels a program takes and Triton warps per "
                      "program (GPU), each timed; 'all/default' for Pallas's own choice")
  p.add_argument("--per-kernel", default="",
                 help="comma list of E'/W: first time each of the four kernels alone at the "
                      "first --shapes entry with each, then time the layer with each kernel's "
                      "fastest as one more fused case (GPU)")
  p.add_argument("--check-shape", default="2,512,2,64,128,32",
                 help="B,L,H,K,E,C of the float64 check on the host")
  harness.add_common_args(p, repeats=7, case_budget_s=30.0, mem_budget_gb=60.0)
  args = p.parse_args(argv)
  out_dir, name = harness.output_path(args, "fused_chunks")
  parse = lambda x: None if not x.isdigit() else int(x)
  variants = [tuple(map(parse, v.split("/"))) for v in args.fused.split(",") if v]
  settings = [tuple(map(parse, v.split("/"))) for v in args.per_kernel.split(",") if v]
  for flag, listed in (("--fused", variants), ("--per-kernel", settings)):
    if any(len(v) != 2 for v in listed):
      raise SystemExit(f"{flag} {getattr(args, flag[2:].replace('-', '_'))!r}: expected a comma "
                       "list of E'/W, e.g. 32/4,64/8 ('all' or 'default' for Pallas's own "
                       "choice)")
  for text in [args.check_shape] + args.shapes.split(";"):
    if len(text.split(",")) != 6 or not all(x.isdigit() for x in text.split(",")):
      raise SystemExit(f"--shapes/--check-shape {text!r}: expected six numbers B,L,H,K,E,C")
  if jax.default_backend() != "gpu":
    variants, settings = [(None, None)], settings[:1]
  records, start = [], time.monotonic()
  best = {}
  if settings:
    first = [int(x) for x in args.shapes.split(";")[0].split(",")]
    sweep, best = sweep_kernels(first, settings, args.repeats, args.case_budget_s)
    records += sweep
    harness.write_json(name, records, out_dir)

  # Against float64 on the host: both kernels' values, at one shape.
  shape = [int(x) for x in args.check_shape.split(",")]
  operands = inputs(*shape[:5])
  cpu = jax.devices("cpu")[0]
  with jax.enable_x64(True), jax.default_device(cpu):
    exact = jax.jit(layer(shape[5], False))(
        *[jax.device_put(np.asarray(x, np.float64), cpu) for x in operands])
    exact = jax.tree_util.tree_map(np.asarray, exact)
  for fused in (False, True):
    values = jax.jit(layer(shape[5], fused))(*operands)
    errors = relative_errors(exact, values)
    records.append(dict(name=f"check {'fused' if fused else 'array ops'} vs float64",
                        shape=shape, relative_errors=dict(zip(
                            ("out", "dq", "dk", "du", "dF", "dA"), errors))))
    print(f"  float64 check, {'fused' if fused else 'array ops'}: "
          + ", ".join(f"{e:.1e}" for e in errors), flush=True)

  for text in args.shapes.split(";"):
    shape = [int(x) for x in text.split(",")]
    batch, length, heads, key_width, channels, chunk = shape
    if jax.default_backend() == "gpu":
      fused_chunks.check_shapes(chunk, key_width, channels)
    operands = inputs(batch, length, heads, key_width, channels)
    cases = [harness.Case(f"array ops {text}", layer(chunk, False), operands,
                          info=dict(shape=shape, fused=False))]
    for block, count in variants:
      cases.append(harness.Case(f"fused E'={block} w={count} {text}", layer(chunk, True),
                                operands, info=dict(shape=shape, fused=True, num_warps=count,
                                                    channel_block=block)))
    if best:
      cases.append(harness.Case(f"fused, each kernel's fastest {text}", layer(chunk, True),
                                operands, info=dict(shape=shape, fused=True, kernel_settings={
                                    kernel: list(setting) for kernel, setting in best.items()})))
    runnable = []
    for case in cases:
      fused_chunks.NUM_WARPS = case.info.get("num_warps")
      fused_chunks.CHANNEL_BLOCK = case.info.get("channel_block")
      fused_chunks.KERNEL_SETTINGS = {kernel: tuple(setting) for kernel, setting
                                      in case.info.get("kernel_settings", {}).items()}
      try:
        harness.compile_case(case)
      except Exception as error:  # pylint: disable=broad-except  # a kernel Triton refuses
        traceback.print_exc()
        case.result["skipped"] = f"compile failed: {type(error).__name__}: {str(error)[:2000]}"
        continue
      runnable.append(case)
    reference = runnable[0].compiled(*operands) if runnable and not runnable[0].info["fused"] \
        else None
    for case in runnable[1:]:
      if reference is not None:
        case.result["relative_errors_vs_array_ops"] = relative_errors(
            reference, case.compiled(*operands))
    del reference
    harness.time_cases(runnable, repeats=args.repeats, budget_s=args.case_budget_s)
    for case in cases:
      case.compiled = None
      records.append(harness.record(case))
      r = records[-1]
      print(f"  {case.name}: {harness.fmt_ms(r.get('median_s'))} ms, compile "
            f"{r.get('compile_s', float('nan')):.1f} s, "
            f"{harness.fmt_bytes(r.get('temp_plus_output_bytes'))}"
            + (f", vs array ops {['%.1e' % e for e in r['relative_errors_vs_array_ops']]}"
               if "relative_errors_vs_array_ops" in r else "")
            + (f" ({r['skipped']})" if "skipped" in r else ""), flush=True)
    harness.write_json(name, records, out_dir)
  print(f"wrote {out_dir / (name + '.json')}  ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
  main()
