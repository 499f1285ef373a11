"""The specification of the fused per-chunk kernels (`lion_jax.ops.fused_chunks`): under
`factored.fused_kernels()` the vector-decay `chunk_scan` keeps the float64 definition, values and
gradients, on the factored chunks, the steep ones beside them and from initial states; and the
kernels stay within what Pallas's Triton lowering takes, checked without a GPU."""

import contextlib
import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lion_jax import lion_attention
from lion_jax.ops import chunkwise, factored, fused_chunks
from tests.reference import reference_lion
from tests.ops.test_lion_attention import make_inputs


def _pallas_calls(fn, *args):
  return str(jax.make_jaxpr(fn)(*args)).count("pallas_call")


# make test keeps the blocked case (it also sums the blocks' d q, d k); all channels in one
# program, and initial states through the fused path, run in make test-all.
@pytest.mark.parametrize("channel_block", [pytest.param(None, marks=pytest.mark.slow), 4],
                         ids=["all_channels", "channel_blocks"])
def test_fused_kernels_keep_the_definition_with_gradients(channel_block, monkeypatch):
  """float64, selective vector decays with a steep token, padded keys, L = 45 over chunks of
  8: outputs equal the direct sum, gradients the full form's; with E = 2V = 8 carried channels
  taken whole or in blocks of 4 (d q and d k then sum the blocks' shares)."""
  monkeypatch.setattr(fused_chunks, "CHANNEL_BLOCK", channel_block)
  q, k, v, log_decay, key_mask = make_inputs(45, "selective_vector", seed=3, low=0.7)
  # Five tokens of one chunk span more than 2W in float64 (each counts −W/2 at most): that
  # chunk is recomputed exactly beside the factored ones.
  log_decay[1, 17:22, 0] = -800.0
  weights = np.random.default_rng(4).normal(size=v.shape)

  def loss(form, q, k, v, log_decay):
    out = lion_attention(q, k, v, log_decay, form=form, normalize="after", key_mask=key_mask,
                         chunk_size=8)
    return jnp.sum(out * weights), out

  with jax.enable_x64(True):
    args = [jnp.asarray(x) for x in (q, k, v, log_decay)]
    limit = chunkwise.factored_exponent_limit(jnp.float64)
    gates = jnp.pad(jnp.maximum(args[3], -0.5 * limit), [(0, 0), (0, 3), (0, 0), (0, 0)])
    assert int(chunkwise.steep_chunks(gates, gates, 8, limit).sum()) == 1
    fused = jax.value_and_grad(functools.partial(loss, "chunk_scan"), argnums=range(4),
                               has_aux=True)
    with factored.fused_kernels():
      assert _pallas_calls(fused, *args) == 4  # leaving, outputs, entering grads, chunk grads
      (_, out), grads = jax.jit(fused)(*args)
    (_, _), expected_grads = jax.value_and_grad(functools.partial(loss, "attention"),
                                                argnums=range(4), has_aux=True)(*args)
  expected = reference_lion(q, k, v, log_decay, normalize="after", key_mask=key_mask)
  np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)
  for name, got, want in zip("q k v log_decay".split(), grads, expected_grads):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max(),
                               err_msg=f"d/d{name}")


@pytest.mark.slow
def test_fused_kernels_equal_the_array_op_kernel_from_initial_states():
  """The same values as the array-op kernel, with initial states (their gradient included), a
  steep chunk on the side, and float32 operands."""
  rng = np.random.default_rng(5)
  batch, length, heads, key, channels = 2, 40, 2, 4, 6
  q, k = (rng.uniform(0.1, 1.0, (batch, length, heads, key)) for _ in range(2))
  u, weights = (rng.normal(size=(batch, length, heads, channels)) for _ in range(2))
  f, a = (-rng.exponential(0.05, (batch, length, heads, channels)) for _ in range(2))
  a[0, 8:14, 0] = -60.0  # spans more than 2W = 240 once clipped at −W/2 each: steep
  initial = tuple(rng.normal(size=(batch, heads, key, channels)) for _ in range(2))
  args = [jnp.asarray(x, jnp.float32) for x in (q, k, u, f, a)] + [
      tuple(jnp.asarray(s, jnp.float32) for s in initial)]

  def loss(q, k, u, f, a, initial):
    out, _ = chunkwise.bidirectional_chunk_scan(q, k, u, f, a, 8, initial_states=initial)
    return jnp.sum(out * weights)

  grad = jax.value_and_grad(loss, argnums=range(6))
  expected = jax.jit(grad)(*args)
  with factored.fused_kernels():
    got = jax.jit(jax.value_and_grad(loss, argnums=range(6)))(*args)
  for g, e in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
    np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * np.max(np.abs(e)))


def _abstract_gpu():
  """A context in which Pallas's Triton lowering targets an H100 without one on the machine:
  JAX 0.12 reads the GPU's compute capability from the abstract mesh's device (it raises "No
  supported GPU devices found" without one); JAX 0.10 needs nothing."""
  sharding = jax.sharding
  if not hasattr(sharding, "AbstractDevice"):
    return contextlib.nullcontext()
  h100 = sharding.AbstractDevice(device_kind="NVIDIA H100 80GB HBM3", num_cores=None,
                                 platform="gpu")
  mesh = sharding.AbstractMesh((1,), ("data",), (sharding.AxisType.Explicit,),
                               abstract_device=h100)
  return sharding.use_abstract_mesh(mesh)


# JAX 0.12 deprecates Pallas's Triton backend for Mosaic GPU; the kernels still lower through it.
@pytest.mark.filterwarnings("ignore:The Pallas Triton backend is deprecated:DeprecationWarning")
def test_fused_kernels_lower_through_triton_without_a_gpu(monkeypatch):
  """Lowered for CUDA (an H100) from this machine: every kernel passes Pallas's Triton lowering
  rules (2-D dots with transposes, 1-D iotas, row reductions), the forward and backward's four
  kernels appear as Triton calls (the value is taken too: JAX 0.12 drops the forward's output
  kernel from a gradient alone). What Triton's compiler then does needs the GPU:
  bench/fused_chunks.py."""
  try:
    from jax.experimental.pallas import triton  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
  except ImportError as error:
    pytest.skip(f"not available here: this JAX has no Pallas Triton backend ({error})")
  monkeypatch.setattr(fused_chunks, "_interpret", lambda: False)
  monkeypatch.setattr(fused_chunks, "CHANNEL_BLOCK", 32)
  shapes = [(1, 64, 1, 16), (1, 64, 1, 16), (1, 64, 1, 64), (1, 64, 1, 64), (1, 64, 1, 64)]
  args = [jnp.full(shape, -0.1) for shape in shapes]
  def loss(*operands):
    return jnp.sum(chunkwise.bidirectional_chunk_scan(*operands, 32)[0])
  with factored.fused_kernels(), _abstract_gpu():
    lowered = jax.jit(jax.value_and_grad(loss, argnums=range(5))).trace(*args).lower(
        lowering_platforms=("cuda",))
  assert lowered.as_text().count("__gpu$xla.gpu.triton") == 4


def test_gpu_shapes_are_checked_naming_the_fields(monkeypatch):
  fused_chunks.check_shapes(32, 64, 128)
  monkeypatch.setattr(fused_chunks, "CHANNEL_BLOCK", 8)
  with pytest.raises(ValueError, match="E′ .CHANNEL_BLOCK. = 8"):
    fused_chunks.check_shapes(32, 64, 128)
  monkeypatch.setattr(fused_chunks, "CHANNEL_BLOCK", None)
  monkeypatch.setattr(fused_chunks, "KERNEL_SETTINGS", {"chunk_grads": (8, 4)})
  with pytest.raises(ValueError, match=r"E′ \(KERNEL_SETTINGS\['chunk_grads'\]\) = 8"):
    fused_chunks.check_shapes(32, 64, 128)
  monkeypatch.setattr(fused_chunks, "KERNEL_SETTINGS", {"chunk_grad": (32, 4)})  # a typo
  with pytest.raises(ValueError, match=r"KERNEL_SETTINGS names \['chunk_grad'\].*chunk_grads"):
    fused_chunks.leaving_states(*[jnp.zeros((1, 1, 1, 16, 16))] * 4, limit=30.0)
  monkeypatch.setattr(fused_chunks, "KERNEL_SETTINGS", {})
  with pytest.raises(ValueError, match="chunk length C = 24.*model.chunk_size"):
    fused_chunks.check_shapes(24, 64, 128)
  with pytest.raises(ValueError, match="carried channels E = 8"):
    fused_chunks.check_shapes(32, 64, 8)


def test_scalar_decays_are_refused_rather_than_left_unfused():
  """The kernels cover vector decays only; a scalar-decay call inside the context says so
  instead of silently running the array ops."""
  q, k, v, log_decay, key_mask = make_inputs(20, "selective", seed=6)
  run = jax.jit(functools.partial(lion_attention, form="chunk_scan", key_mask=key_mask,
                                  chunk_size=8))
  with factored.fused_kernels(), pytest.raises(ValueError, match="decay_shape='vector'"):
    run(q, k, v, log_decay)
  run(q, k, v, log_decay)


@pytest.mark.slow
def test_the_fused_bench_checks_and_times_both_kernels(tmp_path):
  """bench/fused_chunks.py at tiny sizes (Pallas's interpreter on a CPU): both kernels checked
  against float64 and against each other, and timed; malformed flags are named."""
  import json, sys  # pylint: disable=import-outside-toplevel,multiple-imports
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
  import fused_chunks as bench  # pylint: disable=import-outside-toplevel
  bench.main(["--shapes", "1,64,2,16,32,16", "--check-shape", "1,32,2,16,32,16", "--repeats",
              "1", "--per-kernel", "16/4", "--out", str(tmp_path), "--name", "tiny"])
  results = json.loads((tmp_path / "tiny.json").read_text())["results"]
  checks = [r for r in results if r["name"].startswith("check")]
  assert len(checks) == 2 and all(max(r["relative_errors"].values()) < 1e-5 for r in checks)
  fused = [r for r in results if r.get("fused")]
  assert fused and max(fused[0]["relative_errors_vs_array_ops"]) < 1e-5
  assert all("median_s" in r for r in results if "shape" in r and "relative_errors" not in r)
  # --per-kernel: each kernel alone, then the layer with each kernel's fastest setting.
  assert {r["kernel"] for r in results if "kernel" in r} == set(fused_chunks.KERNELS)
  (tuned,) = [r for r in results if "kernel_settings" in r]
  assert tuned["kernel_settings"] == {kernel: [16, 4] for kernel in fused_chunks.KERNELS}
  assert max(tuned["relative_errors_vs_array_ops"]) < 1e-5
  # Each kernel alone, once per setting: the setting must reach the kernel that is timed (a
  # first version jitted one function for all settings, and jit's cache gave each the first
  # setting's kernel). Whole channels against blocks of 16: the blocks' d q, d k shares differ.
  sweep, best = bench.sweep_kernels([1, 64, 2, 16, 32, 16], [(32, None), (16, None)], 1, 30.0)
  grads = {r["channel_block"]: r for r in sweep if r["kernel"] == "chunk_grads"}
  assert grads[16]["temp_plus_output_bytes"] > grads[32]["temp_plus_output_bytes"]
  assert set(best) == set(fused_chunks.KERNELS) and fused_chunks.KERNEL_SETTINGS == {}
  for flags, message in ((["--fused", "32"], "E'/W"), (["--shapes", "1,2"], "six numbers"),
                         (["--per-kernel", "16"], "--per-kernel '16'")):
    with pytest.raises(SystemExit, match=message):
      bench.main(flags)
