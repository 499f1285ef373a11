"""LION-S's training step with chunk_scan's residuals stored, and recomputed at several segment
lengths, beside S5, on the same examples padded and packed, in one process.

  python3 bench/segments.py                                   # ListOps preset, batch 50
  python3 bench/segments.py --cases lion_s:recomputed:128:padded,lion_s:recomputed:max:padded
  python3 bench/segments.py --cases lion_s@64:stored:packed,lion_s:stored:packed   # C = 64, 32
  .venv/bin/python bench/segments.py --quick                  # runlocal sizes, seconds

The recomputing kernel (`lion_jax/ops/recomputed.py`) runs a row's segments of S tokens one after
another, and the number of segments a step runs grows as L / S per block. Its rule picks
128-512 tokens a row on a CPU (for a 2-core CPU's caches, docs/benchmarks.md §10) and up to
2^17 tokens over the batch on a GPU or TPU (one segment a row at the ListOps preset), which
this measured (§11). S is forced for each case while that case is traced ("auto": the rule;
"max" or any S at or above the row's length: one segment a row), next to the stored kernel,
which has no segment loop, and to S5.

Cases run in the order given by `--cases`, each compiled and then timed right away (medians
of `--repeats` steps), so that a run cut short by `--budget-s` or from outside keeps every case
it finished: the JSON is rewritten after each. Compile seconds and XLA's temp + output bytes
come with every case. `--profile-steps N` then runs N more steps of each case under
`jax.profiler.trace` and adds where the device's time went: the ops (GPU kernels, XLA:CPU
thunks) of the trace, summed by name, per step, largest first (the Perfetto trace's JSON,
read here, so nothing beyond JAX is needed on the machine), and summed by the Python function
that wrote each op (`source_times`). `--kernel-settings` sets the fused kernels' E′ and warps
per kernel (`fused_chunks.KERNEL_SETTINGS`).

Writes segments.json to bench/results/ (git-ignored; `--publish`: docs/bench/).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import gzip
import json
import pathlib
import re
import sys
import tempfile
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
import packing as packing_bench  # noqa: E402
import train_step  # noqa: E402
from lion_jax.ops import factored, fused_chunks, recomputed  # noqa: E402
from lra.data import packing  # noqa: E402

# variant:residuals[:S]:layout, most informative first (a run cut short keeps the first ones).
DEFAULT_CASES = ("s5::padded,lion_s:stored:padded,lion_s:recomputed:max:padded,"
                 "lion_s:recomputed:512:padded,lion_s:recomputed:auto:padded,"
                 "lion_s:stored:packed,s5::packed,lion_s:recomputed:max:packed")


@contextlib.contextmanager
def segment_tokens(segment: str):
  """Forces the recomputing kernel's S while a step is traced ("auto": the kernel's own rule;
  "max": one segment per row)."""
  names = ("SEGMENT_MIN", "SEGMENT_MAX", "ACCELERATOR_SEGMENT_TOKENS")
  saved = [getattr(recomputed, name) for name in names]
  if segment != "auto":
    size = 1 << 30 if segment == "max" else int(segment)
    recomputed.SEGMENT_MIN = recomputed.SEGMENT_MAX = size
    recomputed.ACCELERATOR_SEGMENT_TOKENS = 0  # the target is then SEGMENT_MIN there too
  try:
    yield
  finally:
    for name, value in zip(names, saved):
      setattr(recomputed, name, value)


# The threads where XLA:CPU runs a step's ops (thunks) in a profiler trace: its Eigen pool on
# jaxlib 0.10, the executor threads on jaxlib 0.12 (its Eigen threads there hold only the pool's
# own events). A jaxlib that has neither shows no CPU line.
XLA_CPU_THREADS = ("tf_XLAEigen", "tf_XLAExecute")


def device_op_times(case, steps: int, top: int | None = None, hlo_text: str | None = None) -> dict:
  """Where a compiled case's device time goes over `steps` calls, from a profiler trace.

  The trace's lines (threads) in the device processes ("/device:GPU:0": its streams and its
  "XLA Ops" line, which show the same work as kernels and as HLO ops); on a CPU, where XLA's
  thunks run on the host, XLA:CPU's compute threads (`XLA_CPU_THREADS`). Each line's ops are summed by name in
  self time (`self_times`), per step. Returns, per line, its milliseconds a step, its busy
  milliseconds and events a step, its milliseconds by kind of op (`op_kind`), and its `top`
  ops (name, ms a step, share of the line, calls a step; every op when `top` is None). With the
  compiled step's `hlo_text`, also its milliseconds by source function (`source_times`).
  """
  with tempfile.TemporaryDirectory() as folder:
    with jax.profiler.trace(folder, create_perfetto_trace=True):
      for _ in range(steps):
        harness._call(case)  # pylint: disable=protected-access  # the timed call, state threaded
    trace = max(pathlib.Path(folder).rglob("*.trace.json.gz"), key=lambda p: p.stat().st_mtime)
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
  processes = {e["pid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name"}
  threads = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
  devices = {pid for pid, name in processes.items() if str(name).startswith("/device:")}
  by_line = collections.defaultdict(list)
  for event in events:
    if event.get("ph") != "X" or event["name"].startswith("end: "):
      continue
    line = (event["pid"], event.get("tid"))
    thread = str(threads.get(line, line[1]))
    if event["pid"] in devices if devices else thread.startswith(XLA_CPU_THREADS):
      by_line[f"{processes.get(event['pid'], event['pid'])} {thread}"].append(event)
  lines = {}
  for line, line_events in by_line.items():
    own, calls, busy = self_times(line_events)
    total = sum(own.values()) / 1e3 / steps  # µs -> ms a step
    kinds = collections.Counter()
    for name, us in own.items():
      kinds[op_kind(name)] += us / 1e3 / steps
    by_source = {}
    if hlo_text is not None:
      by_hlo_op, _, _ = self_times([dict(e, name=(e.get("args", {}).get("hlo_op", ""), e["name"]))
                                    for e in line_events])
      by_source = source_times(hlo_text, {op: us / 1e3 / steps for op, us in by_hlo_op.items()})
    lines[line] = dict(ms_per_step=total, busy_ms_per_step=busy / 1e3 / steps,
                       ms_per_step_by_source=by_source,
                       events_per_step=sum(calls.values()) / steps,
                       ms_per_step_by_kind=dict(kinds.most_common()), ops=[
        dict(name=name, ms_per_step=us / 1e3 / steps, share=us / 1e3 / steps / total,
             calls_per_step=calls[name] / steps)
        for name, us in own.most_common(top)] if total > 0 else [])
  return dict(profile_steps=steps, device_lines=dict(
      sorted(lines.items(), key=lambda item: -item[1]["ms_per_step"])))


def source_times(hlo_text: str, ms_by_op: dict[tuple[str, str], float]) -> dict[str, float]:
  """Milliseconds by the source function that wrote each op, from the compiled HLO's metadata.

  Each HLO instruction names a stack frame (`stack_frame_id`), whose innermost location is the
  Python function (outside JAX) that emitted it; where its op name holds a "stage:<name>" scope
  (the backward passes of `lion_jax.ops.factored` and `lion_jax.ops.recomputed`, custom VJPs
  whose ops carry the forward call's frames), the stage is added in brackets. An op of the
  trace (an HLO instruction: a fusion, a library call, a copy) holds its own instruction and,
  for a fusion, every instruction of the computations it calls; its time is split among their
  functions in proportion to how many instructions each wrote. Ops with no metadata count as "?".

  Args:
    hlo_text: `compiled.as_text()` of the step.
    ms_by_op: ms a step by (the trace's `hlo_op`, the op's name). An XLA fusion runs as a
      kernel named after its instruction, so the op's name is tried first; then `hlo_op`, which
      names the instruction of a library call (a cuBLAS kernel's custom call) or an XLA:CPU
      thunk. Whichever names an instruction whose functions are known counts.

  Returns:
    {"path:function": ms a step}, largest first; paths relative to the repository or to
    site-packages.
  """
  def table(title: str, pattern: str) -> dict:
    """One of the HLO text's id tables: {id: the pattern's other groups}."""
    if f"\n{title}\n" not in hlo_text:
      return {}
    section = hlo_text.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]
    return {int(row[0]): row[1:] for row in re.findall(pattern, section)}

  files = table("FileNames", r'(?m)^(\d+) "(.*)"$')
  functions = table("FunctionNames", r'(?m)^(\d+) "(.*)"$')
  locations = table("FileLocations", r"(?m)^(\d+) \{file_name_id=(\d+) function_name_id=(\d+)")
  frames = table("StackFrames", r"(?m)^(\d+) \{file_location_id=(\d+)")
  root = str(pathlib.Path(__file__).resolve().parents[1]) + "/"

  def where(frame: int) -> str:
    (location,) = frames.get(frame, ("0",))
    file_id, function_id = locations.get(int(location), ("0", "0"))
    (path,) = files.get(int(file_id), ("?",))
    (function,) = functions.get(int(function_id), ("?",))
    return f"{path.split('site-packages/')[-1].replace(root, '')}:{function}"

  normal = lambda name: re.sub(r"[.\-]", "_", name)
  computations, instructions, body = {}, {}, None
  for text in hlo_text.splitlines():
    if (header := re.match(r"(?:ENTRY )?%([\w.\-]+) .*\{$", text)):
      body = computations.setdefault(header[1], [])
    elif (match := re.match(r"\s+(?:ROOT )?%([\w.\-]+) = ", text)) and body is not None:
      frame = re.search(r"stack_frame_id=(\d+)", text)
      stage = re.search(r'op_name="[^"]*\bstage:(\w+)', text)
      called = re.search(r"\bcalls=(\{[^}]*\}|%[\w.\-]+)", text)
      entry = (where(int(frame[1])) + (f" [{stage[1]}]" if stage else "") if frame else None,
               re.findall(r"%([\w.\-]+)", called[1]) if called else [])
      body.append(entry)
      instructions[normal(match[1])] = entry

  def authors(entry, seen) -> collections.Counter:
    count = collections.Counter([entry[0]] if entry[0] else [])
    for name in entry[1]:
      if name not in seen:
        seen.add(name)
        for inner in computations.get(name, []):
          count += authors(inner, seen)
    return count

  totals = collections.Counter()
  for (hlo_op, name), ms in ms_by_op.items():
    count = next((found for found in (authors(instructions[normal(candidate)], set())
                                      for candidate in (name, hlo_op)
                                      if normal(candidate) in instructions) if found), None)
    if not count:
      totals["?"] += ms
      continue
    for function, n in count.items():
      totals[function] += ms * n / sum(count.values())
  return dict(totals.most_common())


# GPU kernel names (XLA's fusions are named by their root op) -> the kind of work they do.
_OP_KINDS = (
    ("matmul", ("gemm", "xmma", "dot", "cutlass")),
    ("data movement", ("update_slice", "reverse", "concatenate", "transpose", "memcpy", "copy",
                       "memset", "slice", "pad", "broadcast", "gather", "scatter")),
    ("reduction", ("reduce",)),
    ("elementwise", ("loop_", "fusion")),
)


def op_kind(name: str) -> str:
  """The kind of a trace op, from its name: matmul, data movement, reduction, elementwise or
  other (XLA names a fusion after its root, so `loop_multiply_fusion` is elementwise and
  `loop_dynamic_update_slice_fusion` moves data)."""
  lowered = name.lower()
  for kind, keys in _OP_KINDS:
    if any(key in lowered for key in keys):
      return kind
  return "other"


def self_times(events: list[dict]) -> tuple[collections.Counter, collections.Counter, float]:
  """Self time and call count per event name on one trace line, and the line's busy time.

  An event inside another (its end no later than the other's) takes its time from the
  innermost one holding it. Events that only overlap, as consecutive kernels on a GPU stream can
  by a clock tick, are not nested: each keeps its own time. Busy time is the union of all events'
  intervals, so a line's busy time against the step's wall time says how long the device
  waited (for launches, the host, a loop's condition).

  Args:
    events: Chrome-trace "X" events with `name`, `ts` and `dur` in µs.

  Returns:
    (self µs by name, events by name, busy µs).
  """
  own, calls = collections.Counter(), collections.Counter()
  stack = []  # (end, name) of the enclosing events
  busy, covered_to = 0.0, float("-inf")
  for event in sorted(events, key=lambda e: (e["ts"], -e.get("dur", 0.0))):
    start, duration = event["ts"], event.get("dur", 0.0)
    end = start + duration
    while stack and (stack[-1][0] <= start or stack[-1][0] < end):
      stack.pop()  # ended before this event, or overlaps it without holding it: not its parent
    if stack:
      own[stack[-1][1]] -= duration
    own[event["name"]] += duration
    calls[event["name"]] += 1
    stack.append((end, event["name"]))
    busy += max(0.0, end - max(start, covered_to))
    covered_to = max(covered_to, end)
  return own, calls, busy


def parse_case(text: str) -> dict:
  """'lion_s:recomputed:512:packed' -> fields; 's5::padded' (a baseline has no residuals);
  'lion_s@64:stored:packed' runs LION at chunk length C = 64 instead of the preset's."""
  parts = text.split(":")
  if len(parts) == 3:
    parts.insert(2, "")
  variant, residuals, segment, layout = parts if len(parts) == 4 else ("", "", "", "")
  variant, _, kernel = variant.partition("+")
  variant, _, chunk = variant.partition("@")
  if (layout not in ("padded", "packed") or (segment and residuals != "recomputed")
      or (chunk and not (chunk.isdigit() and int(chunk) > 0 and residuals))
      or not _FUSED.fullmatch(kernel) or (kernel and not residuals)):
    raise SystemExit(f"--cases {text!r}: expected variant[@C][+fused[/E'/W]]:residuals[:S]:"
                     "padded|packed, with S (a number, auto or max) only for "
                     "residuals=recomputed, and C (a positive number) and +fused (the fused "
                     "Pallas chunk kernels, E' channels a program and W warps) only for LION (a "
                     "variant with residuals)")
  fused = _FUSED.fullmatch(kernel)
  return dict(variant=variant, residuals=residuals, segment=segment or "auto", layout=layout,
              chunk_size=int(chunk) if chunk else None, fused=bool(kernel),
              channel_block=int(fused[1]) if fused[1] else None,
              num_warps=int(fused[2]) if fused[2] else None)


# The profile keeps each line's largest ops (its sums by kind and by source count every op): all
# of a step's 5,000-25,000 XLA:CPU ops made a 3.6 MB record.
PROFILE_TOP_OPS = 60

_FUSED = re.compile(r"(?:fused(?:/(\d+)/(\d+))?)?")


def parse_kernel_settings(text: str) -> dict[str, tuple[int | None, int | None]]:
  """'{"chunk_grads": [16, 4]}' -> {"chunk_grads": (16, 4)} (`fused_chunks.KERNEL_SETTINGS`:
  E′ channels a program and W warps, null for the default); '' -> {}."""
  expected = ("expected JSON {kernel: [E', W]}, E' and W positive integers or null, e.g. "
              "'{\"chunk_grads\": [64, 4]}'")
  try:
    settings = json.loads(text or "{}")
  except ValueError as error:
    raise SystemExit(f"--kernel-settings {text!r}: {expected} ({error})") from None
  if not isinstance(settings, dict):
    raise SystemExit(f"--kernel-settings {text!r}: {expected}")
  if unknown := sorted(set(settings) - set(fused_chunks.KERNELS)):
    raise SystemExit(f"--kernel-settings: unknown kernels {unknown}; the kernels are "
                     f"{', '.join(fused_chunks.KERNELS)}")
  fits = lambda x: x is None or (isinstance(x, int) and not isinstance(x, bool) and x > 0)
  for kernel, setting in settings.items():
    if not (isinstance(setting, list) and len(setting) == 2 and all(map(fits, setting))):
      raise SystemExit(f"--kernel-settings {kernel}: {setting!r}; {expected}")
  return {kernel: tuple(setting) for kernel, setting in settings.items()}


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--task", default="listops")
  p.add_argument("--data-dir", default=None,
                 help="take the example lengths from the task's real files in DIR (needed for "
                      "every token task but listops, text and retrieval, whose lengths "
                      "bench/packing.py's docstring states)")
  p.add_argument("--batch", type=int, default=50)
  p.add_argument("--preset", default="")
  p.add_argument("--cases", default=DEFAULT_CASES,
                 help="comma list of variant[@C]:residuals[:S]:layout, run in this order")
  p.add_argument("--budget-s", type=float, default=1e9,
                 help="start no case after this many seconds")
  p.add_argument("--kernel-settings", default="",
                 help="JSON {kernel: [E', W]} for the fused cases' kernels "
                      "(fused_chunks.KERNEL_SETTINGS; bench/fused_chunks.py --per-kernel finds them)")
  p.add_argument("--profile-steps", type=int, default=0,
                 help="after timing, profile this many steps of each case (module docstring)")
  harness.add_common_args(p, repeats=5, case_budget_s=30.0, mem_budget_gb=60.0)
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.batch, args.repeats = "runlocal", 8, 3
  cases = [parse_case(c) for c in args.cases.split(",") if c]
  kernel_settings = parse_kernel_settings(args.kernel_settings)
  out_dir, name = harness.output_path(args, "segments")
  start = time.monotonic()
  base, info, seq_len = train_step.task_config(
      args.task, "lion_s" + (f",{args.preset}" if args.preset else ""))
  split = packing_bench.split_of(
      packing_bench.sample_lengths(args.task, base, seq_len, data_dir=args.data_dir), info, seq_len)
  print(f"{harness.device_label()}: {args.task}, batch {args.batch}, L = {seq_len}", flush=True)
  records = []
  for spec in cases:
    label = (f"{spec['variant']}{'@' + str(spec['chunk_size']) if spec['chunk_size'] else ''}"
             f"{'+fused' if spec['fused'] else ''}"
             f"{'/%s/%s' % (spec['channel_block'], spec['num_warps']) if spec['channel_block'] else ''} "
             f"{spec['residuals'] or '-'} "
             f"S={spec['segment'] if spec['residuals'] == 'recomputed' else '-'} {spec['layout']}")
    if time.monotonic() - start > args.budget_s:
      records.append(dict(name=label, **spec, skipped="--budget-s"))
      continue
    padded, packed = packing_bench.cases_for(args.task, spec["variant"], args.batch, args.preset,
                                             split, spec["residuals"], spec["chunk_size"])
    case = padded if spec["layout"] == "padded" else packed
    del padded, packed
    case.name = label
    case.info.update({key: value for key, value in spec.items() if value is not None})
    fused_chunks.CHANNEL_BLOCK, fused_chunks.NUM_WARPS = spec["channel_block"], spec["num_warps"]
    fused_chunks.KERNEL_SETTINGS = kernel_settings if spec["fused"] else {}
    if spec["fused"] and kernel_settings:
      case.info["kernel_settings"] = {kernel: list(value) for kernel, value
                                      in kernel_settings.items()}
    with segment_tokens(spec["segment"]), factored.fused_kernels(spec["fused"]):
      if spec["residuals"] == "recomputed":
        # Padded Retrieval runs both documents of an example through the tower: 2B rows.
        rows = (case.info["rows"] if spec["layout"] == "packed"
                else args.batch * (2 if info.dual_input else 1))
        length = case.info["row_length"] if spec["layout"] == "packed" else seq_len
        case.info["segment_tokens"] = recomputed.segment_length(
            rows, length, spec["chunk_size"] or base.model.chunk_size)
      runnable = harness.compile_within_budget([case], args.mem_budget_gb)
      on_gpu = jax.default_backend() == "gpu"
      hlo_text = (runnable[0].compiled.as_text()
                  if runnable and (args.profile_steps or on_gpu) else None)
      if hlo_text is not None and on_gpu:
        # What reached the compiled step: its Pallas kernel calls (XLA:GPU's own Triton
        # fusions carry other names).
        case.result["pallas_calls"] = hlo_text.count("__gpu$xla.gpu.triton")
      harness.time_cases(runnable, repeats=args.repeats, budget_s=args.case_budget_s,
                         min_repeats=2)
    if runnable and args.profile_steps:
      case.result.update(device_op_times(case, args.profile_steps, top=PROFILE_TOP_OPS,
                                          hlo_text=hlo_text))
    case.compiled = None
    record = harness.record(case)
    if "median_s" in record:
      record["examples_per_s"] = args.batch / record["median_s"]
    records.append(record)
    print(f"  {label}: {harness.fmt_ms(record.get('median_s'))} ms, "
          f"{record.get('examples_per_s', float('nan')):.1f} examples/s, compile "
          f"{record.get('compile_s', float('nan')):.1f} s, "
          f"{harness.fmt_bytes(record.get('temp_plus_output_bytes'))}"
          + (f" ({record['skipped']})" if "skipped" in record else ""), flush=True)
    for line, profile in list(record.get("device_lines", {}).items())[:4]:
      print(f"    {line}: {profile['ms_per_step']:.2f} ms a step in "
            f"{profile['events_per_step']:.0f} events, busy {profile['busy_ms_per_step']:.2f} ms",
            flush=True)
      print("      " + ", ".join(f"{kind} {ms:.1f} ms"
                                for kind, ms in profile["ms_per_step_by_kind"].items()), flush=True)
      for op in profile["ops"][:8]:
        print(f"      {op['ms_per_step']:9.3f} ms {100 * op['share']:5.1f}% "
              f"{op['calls_per_step']:6.0f}x  {op['name'][:90]}", flush=True)
      for function, ms in list(profile["ms_per_step_by_source"].items())[:16]:
        print(f"      {ms:9.3f} ms  from {function}", flush=True)
    harness.write_json(name, records, out_dir, extra=dict(
        task=args.task, batch=args.batch, preset=args.preset or "paper", seq_len=seq_len,
        padding_share_padded=float(packing.padding_share(split.lengths, seq_len))))
    del case
    gc.collect()
  rows = [[r["name"], r.get("segment_tokens", "–"), harness.fmt_ms(r.get("median_s")),
           f"{r['examples_per_s']:.1f}" if "examples_per_s" in r else r.get("skipped", "–"),
           f"{r['compile_s']:.1f}" if "compile_s" in r else "–",
           harness.fmt_bytes(r.get("temp_plus_output_bytes"))] for r in records]
  print("\n" + harness.markdown_table(["case", "S", "step ms", "examples/s", "compile s",
                                       "temp+output"], rows))
  print(f"wrote {out_dir / (name + '.json')}  ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
  main()
