"""Context parallelism: `lion_attention(..., sequence_axis=...)` with the sequence split over 4
and 8 forced CPU devices equals the float64 definition and the unsharded call, gradients
included, at lengths that neither shard count divides.

`--xla_force_host_platform_device_count` must be set before JAX initialises, so the checks run
in a fresh interpreter (one for all of them: its start-up and compiles dominate).
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from lion_jax import grid_lion_attention, lion_attention

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import functools, os
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    from lion_jax import lion_attention
    from tests.reference import reference_lion
    from tests.ops.test_lion_attention import DECAY_KINDS, OPTIONS, make_inputs

    assert jax.device_count() == 8, jax.devices()
    jax.config.update("jax_disable_most_optimizations", True)  # as in conftest: fast compiles
    CHUNK = 4  # several chunks per shard, the last one partial

    def every_option(axis):
      def run(q, k, v, log_decay, key_mask):
        return [lion_attention(q, k, v, log_decay, form="chunk_scan", convention=convention,
                               normalize=normalize, key_mask=key_mask, chunk_size=CHUNK,
                               sequence_axis=axis) for convention, normalize in OPTIONS]
      return jax.jit(run)

    counts = [int(n) for n in os.environ["SHARD_COUNTS"].split(",")]
    for shards, length in ((4, 37), (8, 29)):  # 37 = 4·9 + 1; 29 tokens over 8 shards of 4
      if shards not in counts:
        continue
      mesh = Mesh(np.asarray(jax.devices()[:shards]), ("seq",))
      # make test: the LRA setting; every decay kind in make test-all.
      kinds = DECAY_KINDS if 8 in counts else ("selective_vector",)
      for decay_kind in kinds:
        q, k, v, log_decay, key_mask = make_inputs(length, decay_kind, seed=shards)
        key_mask[0] = True  # row 0 keeps every key, row 1 drops some
        expected = [reference_lion(q, k, v, log_decay, convention=c, normalize=n,
                                   key_mask=key_mask) for c, n in OPTIONS]
        with jax.enable_x64(True), jax.set_mesh(mesh):
          got = every_option("seq")(q, k, v, log_decay, key_mask)
        for (c, n), g, e in zip(OPTIONS, got, expected):
          assert g.dtype == jnp.float64
          np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-10,
                                     err_msg=f"{shards} shards {decay_kind} {c} {n}")
        if decay_kind != "selective_vector":
          continue
        # float32, the LRA setting (the other kinds are its special cases): the unsharded call
        # to rounding.
        f32 = [None if x is None else np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
        with jax.set_mesh(mesh):
          got = every_option("seq")(*f32, key_mask)
        for (c, n), g, e in zip(OPTIONS, got, every_option(None)(*f32, key_mask)):
          np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-6,
                                     err_msg=f"float32 {shards} shards {decay_kind} {c} {n}")
      print("outputs OK", shards)

    # Shards that keep only their inputs (residuals="recomputed"): the other shards' states
    # enter their segments' state pass; a fixed decay must not decay across the padding; each
    # shard summarises itself in pieces of 2 tokens.
    from lion_jax.ops import context_parallel, recomputed
    recomputed.SEGMENT_MIN, recomputed.SEGMENT_MAX = 1, CHUNK
    context_parallel.SUMMARY_PIECE = 2
    mesh = Mesh(np.asarray(jax.devices()[:4]), ("seq",))
    for decay_kind in ("fixed_head", "selective_vector"):
      q, k, v, log_decay, key_mask = make_inputs(37, decay_kind, seed=7)
      options = (("code", "after"), ("symmetric", "before"))
      run = jax.jit(lambda q, k, v, log_decay, key_mask: [
          lion_attention(q, k, v, log_decay, form="chunk_scan", convention=c, normalize=n,
                         key_mask=key_mask, chunk_size=CHUNK, sequence_axis="seq",
                         residuals="recomputed") for c, n in options])
      with jax.enable_x64(True), jax.set_mesh(mesh):
        got = run(q, k, v, log_decay, key_mask)
      for (c, n), g in zip(options, got):
        np.testing.assert_allclose(g, reference_lion(q, k, v, log_decay, convention=c,
                                                     normalize=n, key_mask=key_mask),
                                   rtol=1e-10, atol=1e-10,
                                   err_msg=f"recomputed {decay_kind} {c} {n}")
    print("recomputed shards OK")

    # Packed rows (make test-all): examples that cross shard edges (shards of 10 tokens) give
    # each example its definition alone, with stored and with recomputed shards.
    layout = ((0, 12, 1), (12, 1, 2), (13, 9, 3), (27, 10, 4))  # (start, length, id); 22-26 pad
    ids = np.zeros((2, 37), np.int32)
    for start, length, example in layout:
      ids[:, start:start + length] = example
    ids[1, 27:] = 0  # row 1 ends in padding
    q, k, v, log_decay, _ = make_inputs(37, "selective_vector", seed=8)
    run = jax.jit(lambda q, k, v, log_decay, ids: [
        lion_attention(q, k, v, log_decay, form="chunk_scan", chunk_size=CHUNK,
                       sequence_axis="seq", residuals=r, segment_ids=ids)
        for r in ("stored", "recomputed")])
    with jax.enable_x64(True), jax.set_mesh(mesh):
      got = run(q, k, v, log_decay, ids) if 8 in counts else []
    for row in range(2 if got else 0):
      for start, length, example in layout:
        if not (ids[row, start:start + length] == example).all():
          continue
        part = lambda x: x[row:row + 1, start:start + length]
        expected = reference_lion(*map(part, (q, k, v, log_decay)))[0]
        for residuals, g in zip(("stored", "recomputed"), got):
          np.testing.assert_allclose(np.asarray(g)[row, start:start + length], expected,
                                     rtol=1e-10, atol=1e-10,
                                     err_msg=f"packed {residuals} row {row} example {example}")
    print("packed rows OK" if got else "packed rows skipped")

    # Gradients (float64) equal those of the full form, which the unsharded tests check
    # against finite differences; "code" shifts the forward gate across shard boundaries. Each
    # shard's kernel stores its residuals, or recomputes them in segments of one chunk.
    mesh = Mesh(np.asarray(jax.devices()), ("seq",))
    for decay_kind, convention, residuals in (("selective", "code", "stored"),
                                              ("selective_vector", "symmetric", "stored"),
                                              ("selective_vector", "code", "recomputed")):
      q, k, v, log_decay, key_mask = make_inputs(29, decay_kind, seed=3)
      weights = np.random.default_rng(4).normal(size=v.shape)

      def loss(form, axis, q, k, v, log_decay):
        out = lion_attention(q, k, v, log_decay, form=form, convention=convention,
                             key_mask=key_mask, chunk_size=CHUNK, sequence_axis=axis,
                             residuals=residuals)
        return jnp.sum(out * weights)

      with jax.enable_x64(True), jax.set_mesh(mesh):
        args = tuple(jnp.asarray(x) for x in (q, k, v, log_decay))
        expected = jax.grad(functools.partial(loss, "attention", None), argnums=(0, 1, 2, 3))(*args)
        got = jax.jit(jax.grad(functools.partial(loss, "chunk_scan", "seq"),
                               argnums=(0, 1, 2, 3)))(*args)
      for name, g, e in zip("q k v log_decay".split(), got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10,
                                   err_msg=f"{decay_kind} {convention} {residuals} d/d{name}")
    print("gradients OK")

    # The sequence on "seq" and the batch on "data" of a 2 × 4 mesh: XLA partitions the batch.
    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 4), ("data", "seq"))
    q, k, v, log_decay, key_mask = make_inputs(37, "selective", seed=5)
    f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
    run = lambda axis: jax.jit(functools.partial(lion_attention, chunk_size=CHUNK,
                                                 sequence_axis=axis))
    with jax.set_mesh(mesh):
      placed = [jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
                for x in f32 + [key_mask]]
      got = run("seq")(*placed[:4], key_mask=placed[4])
    np.testing.assert_allclose(got, run(None)(*f32, key_mask=key_mask), rtol=2e-5, atol=2e-6)
    print("2 x 4 mesh OK")

    # Vector decays steep in one shard only: the shards would pick different branches of the
    # chunk kernel, whose collectives (over "data") then wait for each other forever.
    q, k, v, log_decay, key_mask = make_inputs(96, "selective_vector", seed=6)
    log_decay[:, 48:72] = -40.0  # every chunk of 8 in the third shard spans > 2W
    f32 = [np.asarray(x, np.float32) for x in (q, k, v, log_decay)]
    run = lambda axis: jax.jit(functools.partial(lion_attention, chunk_size=8,
                                                 sequence_axis=axis))
    with jax.set_mesh(mesh):
      placed = [jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
                for x in f32 + [key_mask]]
      got = run("seq")(*placed[:4], key_mask=placed[4])
    np.testing.assert_allclose(got, reference_lion(q, k, v, log_decay, key_mask=key_mask),
                               rtol=2e-5, atol=2e-5)
    print("2 x 4 mesh, shards of different steepness OK")

    # A Retrieval-style model (two documents per example, BatchNorm batch statistics, masked mean
    # pooling, padding) takes the same train step on a 2 × 4 (data × seq) mesh as on one
    # device: at L = 32 the inputs are split over `seq`, at L = 30 (not a multiple of 4) only over
    # `data`, and every layer pads its shards. (`make test-all`; `make test` trains over a
    # sequence axis in tests/test_train_sequence_parallel.py.)
    if 8 not in counts:
      raise SystemExit(0)
    from configs import listops
    from lra import optim, steps, train
    config = listops.get_config("lion_s,runlocal")
    config.model.d_model, config.model.num_layers, config.model.chunk_size = 16, 1, 4
    config.model.dropout = 0.1
    for length in (32, 30):
      rng = np.random.default_rng(length)
      lengths = rng.integers(3, length + 1, (4, 2)).astype(np.int32)
      batch = {"inputs": rng.integers(1, 16, (4, 2, length)).astype(np.int32)
                         * (np.arange(length) < lengths[..., None]),
               "lengths": lengths, "labels": rng.integers(0, 2, 4).astype(np.int32),
               "example_mask": np.ones(4, bool)}
      runs = []
      for shape, devices in (((1, 1), jax.devices()[:1]), ((2, 4), jax.devices())):
        config.mesh = shape
        model_config = train.check_config(config)
        assert model_config.sequence_axis == (None if shape[1] == 1 else "seq")
        setup = steps.create_train_setup(
            model_config, num_classes=2, vocab_size=16, dual_input=True,
            tx=optim.make_optimizer(config, 10, 2), seed=0,
            mesh=Mesh(np.asarray(devices).reshape(shape), ("data", "seq")))
        placed = steps.shard_batch(batch, setup.mesh)
        if length == 32 and shape[1] > 1:
          assert placed["inputs"].sharding.spec == PartitionSpec("data", None, "seq")
        state, sums = steps.jit_train_step(setup)(setup.state, placed)
        leaves = [np.asarray(x) for x in jax.tree.leaves(steps.model_state(state))
                  if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]
        runs.append((jax.device_get(sums), leaves))
      (sums1, leaves1), (sums8, leaves8) = runs
      for key in sums1:
        np.testing.assert_allclose(sums8[key], sums1[key], rtol=2e-5, atol=1e-6, err_msg=key)
      for a, b in zip(leaves1, leaves8):  # parameters after the step, BatchNorm statistics
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    print("retrieval model OK")
""")


# make test-all (a model trains over a sequence axis in make test:
# tests/test_train_sequence_parallel.py).
@pytest.mark.slow
@pytest.mark.parametrize("shard_counts", ["4", "4,8"])
def test_sharded_chunk_scan_equals_definition_on_4_and_8_devices(shard_counts):
  # A deadlock in a collective aborts after 20 s instead of XLA:CPU's default 40 s.
  env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "")
                                     + " --xla_force_host_platform_device_count=8"
                                     + " --xla_cpu_collective_call_terminate_timeout_seconds=20"),
         "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "SHARD_COUNTS": shard_counts}
  proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  expected = [f"outputs OK {n}" for n in shard_counts.split(",")]
  expected += ["recomputed shards OK", "gradients OK", "2 x 4 mesh OK",
               "2 x 4 mesh, shards of different steepness OK"]
  for line in expected + (["packed rows OK", "retrieval model OK"] if "8" in shard_counts else []):
    assert line in proc.stdout


# Errors need no second device: a one-device mesh has the axis names.
def one_device():
  return jax.set_mesh(Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("data", "seq")))


def small_inputs(length=8):
  rng = np.random.default_rng(0)
  q, k, v = (np.asarray(rng.uniform(0.1, 1.0, (1, length, 1, 2)), np.float32) for _ in range(3))
  return q, k, v


@pytest.mark.parametrize("form", ["attention", "chunk", "rnn", "scan"])
def test_forms_that_cannot_be_split_are_named_with_the_axis(form):
  with one_device(), pytest.raises(ValueError, match=f"form='{form}'.*'seq'"):
    lion_attention(*small_inputs(), form=form, sequence_axis="seq")


def test_an_axis_the_mesh_lacks_is_named_with_the_form():
  with one_device(), pytest.raises(
      ValueError, match=r"sequence_axis='sequence' \(form='chunk_scan'\).*\('data', 'seq'\)"):
    lion_attention(*small_inputs(), sequence_axis="sequence")
  with pytest.raises(ValueError, match="no current mesh"):
    lion_attention(*small_inputs(), sequence_axis="seq")


def test_auto_means_chunk_scan_when_split_even_at_one_chunk():
  q, k, v = small_inputs(length=3)  # shorter than a chunk: unsplit "auto" is the full form
  with one_device():
    got = lion_attention(q, k, v, np.float32([-0.1]), sequence_axis="seq")
  np.testing.assert_allclose(got, lion_attention(q, k, v, np.float32([-0.1])), rtol=1e-6)


@pytest.mark.parametrize("scan_order", ["snake", "snake_outputs"])
def test_snake_orders_are_rejected_with_a_sequence_axis(scan_order):
  q, k, v = small_inputs(length=4)
  with one_device(), pytest.raises(
      ValueError, match=f"scan_order='{scan_order}'.*sequence_axis='seq'"):
    grid_lion_attention(q, k, v, [None, None], grid=(2, 2), scan_order=scan_order,
                        sequence_axis="seq")


def test_an_explicit_axis_is_named():
  mesh = jax.make_mesh((1,), ("seq",), axis_types=(jax.sharding.AxisType.Explicit,))
  with jax.set_mesh(mesh), pytest.raises(ValueError, match="'seq'.*Explicit mesh axis"):
    lion_attention(*small_inputs(), sequence_axis="seq")
