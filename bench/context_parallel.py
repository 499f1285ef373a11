"""Context parallelism: a LION-S layer with its sequence split over 1, 2, 4 and 8 devices.

  .venv/bin/python bench/context_parallel.py            # per-device L = 4K; bytes up to 256K
  .venv/bin/python bench/context_parallel.py --quick    # per-device L = 1K; bytes up to 16K

Runs on 8 forced CPU devices (`--xla_force_host_platform_device_count=8`, set here before JAX
starts) and measures, for `lion_jax.LionMixer` (LION-S, vector decays unless `--decay-shape scalar`, d_model 128, 4 heads,
chunk_scan with C = 64, batch 1), forward + backward (the gradient of a scalar loss w.r.t. the
input and every parameter):

  1. per-device memory (XLA's compiled temp + output bytes of the partitioned program) and time
     at a fixed per-device L on 1, 2, 4 and 8 devices. 1 device is the plain layer; P > 1
     devices split the sequence over a mesh axis (`ModelConfig.sequence_axis`). The forced CPU
     "devices" share this machine's cores, so time does not fall with P here: what the time
     column shows is the overhead of the split (the combine and the collectives), not a
     speed-up. The 8-device L is also run on one device: the same work on the same cores, so
     that ratio is the split's overhead;
  2. the bytes each layer's collectives move, read from the compiled HLO (every all-gather,
     all-reduce, reduce-scatter, all-to-all and collective-permute with its result shape),
     against L at 8 devices: the attention's exchange must not grow with L;
  3. per-device memory for L doubling from 8K up to `--max-length`, on 1 device and on 8
     (compiled, not run), and the longest L that fits `--mem-budget-gb` per device.

Writes bench/results/context_parallel.json (`--publish`: docs/bench/context_parallel.json).
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")

# pylint: disable=wrong-import-position
import argparse  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import harness  # noqa: E402
from lion_jax import LionMixer, ModelConfig  # noqa: E402

DEVICE_COUNTS = (1, 2, 4, 8)
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")
DTYPE_BYTES = {"f32": 4, "f64": 8, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1, "s8": 1,
               "u8": 1, "s64": 8, "u64": 8}
# `%name = f32[8,1,4,32,33]{...} all-gather(...)`, also the async `-start` forms; tuple results
# (several operands in one collective) are `(f32[..], f32[..]) all-reduce(...)`.
COLLECTIVE_LINE = re.compile(r"=\s*(\(?[^=]*?\)?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")
SHAPE = re.compile(r"(\w+)\[([\d,]*)\]")


def collective_bytes(hlo_text: str) -> dict[str, int]:
  """Bytes of every collective's result in one device's compiled HLO, summed per kind."""
  out = {}
  for line in hlo_text.splitlines():
    match = COLLECTIVE_LINE.search(line)
    if not match:
      continue
    shapes = SHAPE.findall(match.group(1))
    if match.group(3):  # an async start returns (operands, results): count the results only
      shapes = shapes[len(shapes) // 2:]
    size = sum(DTYPE_BYTES.get(dtype, 4) * int(np.prod([int(d) for d in dims.split(",") if d]))
               for dtype, dims in shapes)
    out[match.group(2)] = out.get(match.group(2), 0) + size
  return out


def layer_case(length: int, devices: int, args, *, with_values: bool = True) -> harness.Case:
  """The layer's forward + backward on [1, L, d_model], the sequence split over `devices`."""
  config = ModelConfig(d_model=args.d_model, num_heads=args.heads, decay="selective",
                       decay_shape=args.decay_shape, form="chunk_scan", chunk_size=args.chunk,
                       sequence_axis=None if devices == 1 else "seq",
                       residuals=args.residuals)
  graphdef, params = nnx.split(LionMixer(config, rngs=nnx.Rngs(0)))
  mesh = Mesh(np.asarray(jax.devices()[:devices]), ("seq",))
  split = NamedSharding(mesh, PartitionSpec(None, "seq"))
  params = jax.device_put(params, NamedSharding(mesh, PartitionSpec()))
  shape = (1, length, args.d_model)  # [B, L, M]
  if with_values:
    keys = jax.random.split(jax.random.PRNGKey(length), 2)
    x, cotangent = (jax.device_put(jax.random.normal(key, shape), split) for key in keys)
  else:  # compile-only cases: abstract inputs, nothing allocated
    x = cotangent = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=split)

  def loss(params, x, cotangent):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return jnp.sum(nnx.merge(graphdef, params)(x) * cotangent)

  return harness.Case(
      f"L={length} on {devices} device(s)", jax.jit(jax.grad(loss, argnums=(0, 1))),
      (params, x, cotangent),
      info=dict(length=length, devices=devices, per_device_length=length // devices,
                d_model=args.d_model, heads=args.heads, chunk=args.chunk, batch=1,
                variant="LION-S", decay_shape=args.decay_shape, residuals=args.residuals,
                pass_="fwd+bwd"))


def scaling(args) -> list[dict]:
  """Part 1: fixed per-device L on 1, 2, 4, 8 devices, timed interleaved."""
  cases = [layer_case(args.per_device * n, n, args) for n in DEVICE_COUNTS]
  # The 8-device L on one device: the same total work on the same cores, so the time ratio is
  # the split's own overhead.
  cases.append(layer_case(args.per_device * DEVICE_COUNTS[-1], 1, args))
  harness.run_group(cases, args.mem_budget_gb * 8, args.repeats, args.case_budget_s)
  return [harness.record(c) | {"part": "scaling"} for c in cases]


def traffic(args, lengths) -> list[dict]:
  """Part 2: collective bytes per layer against L at 8 devices (compiled only)."""
  records = []
  for length in lengths:
    case = harness.compile_case(layer_case(length, 8, args, with_values=False))
    sent = collective_bytes(case.compiled.as_text())
    case.compiled = None
    records.append(harness.record(case) | {"part": "traffic", "collective_bytes": sent,
                                           "collective_bytes_total": sum(sent.values())})
    print(f"  L={length:>8d}: collectives {sent} (total {sum(sent.values())} B), per-device "
          f"memory {harness.fmt_bytes(case.result['temp_plus_output_bytes'])}", flush=True)
  return records


def longest(args, devices: int) -> list[dict]:
  """Part 3: per-device temp + output at doubling L, and whether it fits (compiled only)."""
  records, length = [], 8192
  while length <= args.max_length:
    case = harness.compile_case(layer_case(length, devices, args, with_values=False))
    case.compiled = None
    fits = case.result["temp_plus_output_bytes"] <= args.mem_budget_gb * harness.GB
    records.append(harness.record(case) | {"part": "longest", "fits": fits})
    print(f"  {devices} device(s), L={length:>8d}: "
          f"{harness.fmt_bytes(case.result['temp_plus_output_bytes'])} per device"
          f"{'' if fits else ' (over budget)'}", flush=True)
    length *= 2
  return records


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  harness.add_common_args(parser, mem_budget_gb=2.0)
  parser.add_argument("--d-model", type=int, default=128)
  parser.add_argument("--heads", type=int, default=4)
  parser.add_argument("--chunk", type=int, default=64)
  parser.add_argument("--decay-shape", default="vector", choices=("vector", "scalar"),
                      help="LION-S decays: one per value channel (the LRA setting) or per head "
                      "(the paper's LION-S)")
  parser.add_argument("--per-device", type=int, default=None,
                      help="tokens per device in part 1 (default 4096; 1024 with --quick)")
  parser.add_argument("--max-length", type=int, default=None,
                      help="largest L tried in part 3 (default 2M; 64K with --quick)")
  parser.add_argument("--residuals", default="auto", choices=("auto", "stored", "recomputed"),
                      help="what each layer's chunk_scan keeps for the backward pass "
                           "(ModelConfig.residuals)")
  parser.add_argument("--parts", default="1,2,3", help="which parts to run, e.g. 3")
  args = parser.parse_args(argv)
  args.per_device = args.per_device or (1024 if args.quick else 4096)
  args.max_length = args.max_length or (65536 if args.quick else 2 ** 21)
  lengths = harness.lengths_from_args(args, [2048, 16384], [4096, 16384, 65536, 262144])
  out_dir, name = harness.output_path(args, "context_parallel")
  name += "" if args.decay_shape == "vector" else f"_{args.decay_shape}"
  name += "" if args.residuals == "auto" else f"_{args.residuals}"
  assert jax.device_count() == 8, jax.devices()
  parts = set(args.parts.split(","))

  records = []
  if "1" in parts:
    print(f"1. per-device L = {args.per_device} on {DEVICE_COUNTS} devices (fwd+bwd)", flush=True)
    records += scaling(args)
  if "2" in parts:
    print("2. collective bytes per layer at 8 devices", flush=True)
    records += traffic(args, lengths)
  if "3" in parts:
    print(f"3. longest L within {args.mem_budget_gb} GB per device", flush=True)
    records += longest(args, 1) + longest(args, 8)

  print(harness.markdown_table(
      ["devices", "L", "per-device L", "per-device temp+output", "fwd+bwd median"],
      [[r["devices"], r["length"], r["per_device_length"],
        harness.fmt_bytes(r.get("temp_plus_output_bytes")), harness.fmt_ms(r.get("median_s"))]
       for r in records if r["part"] == "scaling"]))
  print(harness.markdown_table(
      ["L", "per-device temp+output", *COLLECTIVES],
      [[r["length"], harness.fmt_bytes(r.get("temp_plus_output_bytes")),
        *(r["collective_bytes"].get(kind, 0) for kind in COLLECTIVES)]
       for r in records if r["part"] == "traffic"]))
  fitting = {n: max([r["length"] for r in records if r["part"] == "longest" and r["devices"] == n
                     and r["fits"]], default=None) for n in (1, 8)}
  print(f"longest L within {args.mem_budget_gb} GB per device: {fitting}")
  harness.write_json(name, records, out_dir, extra={"longest_fitting": fitting,
                                                    "mem_budget_gb": args.mem_budget_gb})


if __name__ == "__main__":
  main()
