"""Process-wide XLA settings that keep lion-jax from crashing XLA:CPU.

XLA:CPU in jaxlib 0.10 hands some fusions to its YNNPACK runtime ("YNN fusions"). On CPUs without
AVX-512 (AVX2 only: many laptops, AMD EPYC cloud VMs), those fusions segfault on the reductions and
transposes that the backward pass of the exact vector-decay fallback produces (a crash inside
`slinky::fuse_contiguous_dims` called by a YNN transpose). The kernel itself is written so that it
does not produce the pattern any more (see `chunkwise._exact_block`), but a segfault takes the whole
process down, so lion-jax also switches YNN fusions off: `--xla_cpu_experimental_ynn_fusion_type=`
(an empty list). Measured on the layer and training-step benchmarks, this costs nothing noticeable
(docs/benchmarks.md).

XLA reads `XLA_FLAGS` once, when JAX starts its first backend, so this must run before the first
JAX computation. `import lion_jax` runs it; our entry points (`run.py`, `python -m lra.*`, `bench/`,
the tests) import `lion_jax` before they touch a device. A library user who computes with JAX
before importing lion_jax should call `disable_crashing_cpu_fusions()` first, or set the flag
themselves.

A user's own choice wins: if `XLA_FLAGS` already names the YNN fusion flag, it is left alone. The
flag is added only on jaxlib 0.10.x, where the crash was seen; later jaxlibs keep XLA's defaults.
(XLA aborts on a flag it does not know; jaxlib 0.12 still knows this one, and still builds YNN
fusions by default, but the crash was not reproduced on it: see docs/usage.md, "Any x86-64 CPU".)
"""

from __future__ import annotations

import os

YNN_FUSION_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
# jaxlib releases that get the flag, [first, end): those on which the crash was seen.
_JAXLIB_WITH_YNN_FUSIONS = ((0, 10), (0, 11))


def _jaxlib_version() -> tuple[int, ...]:
  """The installed jaxlib's version as integers, without starting a JAX backend."""
  import jaxlib.version  # pylint: disable=import-outside-toplevel
  return tuple(int(part) for part in jaxlib.version.__version__.split(".")[:2] if part.isdigit())


def disable_crashing_cpu_fusions(environ=os.environ) -> bool:
  """Adds `--xla_cpu_experimental_ynn_fusion_type=` to `XLA_FLAGS` unless the user set it.

  Args:
    environ: the environment to edit (the process's own by default).

  Returns:
    True if the flag is in `environ["XLA_FLAGS"]` afterwards (set now or by the user).
  """
  flags = environ.get("XLA_FLAGS", "")
  if YNN_FUSION_FLAG in flags:
    return True
  first, end = _JAXLIB_WITH_YNN_FUSIONS
  if not first <= _jaxlib_version() < end:
    return False
  environ["XLA_FLAGS"] = f"{flags} {YNN_FUSION_FLAG}=".strip()
  return True
