"""Data parallelism: on 4 forced CPU devices a sharded train step equals the 1-device step.

`--xla_force_host_platform_device_count` must be set before JAX initialises, so the
check runs in a fresh interpreter.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import jax, numpy as np
    from jax.sharding import Mesh
    from configs import listops
    from lra import optim, steps, train
    from lra.data.batching import make_loader
    from lra.data.split import Split

    assert jax.device_count() == 4, jax.devices()
    jax.config.update("jax_disable_most_optimizations", True)  # as in conftest: fast compiles
    config = listops.get_config("lion_s,runlocal")
    config.model.d_model, config.model.num_layers, config.model.chunk_size = 16, 1, 8
    config.model.dropout = 0.1  # dropout masks must not depend on the device layout either
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 33, 16).astype(np.int32)
    inputs = rng.integers(1, 16, (16, 32)).astype(np.int32) * (np.arange(32) < lengths[:, None])
    split = Split(inputs, lengths, rng.integers(0, 10, 16).astype(np.int32))
    model_config = train.check_config(config)

    def run(devices):
      mesh = Mesh(np.asarray(devices), ("data",))
      setup = steps.create_train_setup(
          model_config, num_classes=10, vocab_size=16, dual_input=False,
          tx=optim.make_optimizer(config, 10, 2), seed=0, mesh=mesh)
      step = steps.jit_train_step(setup)
      state, history = setup.state, []
      for batch in make_loader(split, batch_size=8, seed=0, shuffle=True, drop_remainder=True,
                               num_epochs=2):
        state, sums = step(state, steps.shard_batch(batch, mesh))
        history.append(jax.device_get(sums))
      evaluate = steps.jit_eval_step(setup, "chunk_scan")
      ev = evaluate(steps.model_state(state), steps.shard_batch(batch, mesh))
      leaves = [np.asarray(x) for x in jax.tree.leaves(steps.model_state(state))
                if not jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]
      return history, jax.device_get(ev), leaves, state

    one, four = run(jax.devices()[:1]), run(jax.devices())
    [leaf] = {x.sharding.num_devices for x in jax.tree.leaves(four[3]) if hasattr(x, "sharding")}
    assert leaf == 4, "state is not on the 4-device mesh"
    for a, b in zip(one[0] + [one[1]], four[0] + [four[1]]):
      for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=2e-5, atol=1e-6, err_msg=key)
    for a, b in zip(one[2], four[2]):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    print("OK", len(one[0]), "steps")
""")


def test_sharded_step_on_four_devices_equals_single_device_step():
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
             XLA_FLAGS=os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4")
  proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  assert "OK 4 steps" in proc.stdout
