"""Optimizer: every parameter in exactly one group, decay/norm/bias groups skip weight decay,
the decay group's own learning rate, and the warmup-then-cosine schedule."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import listops
from lion_jax.config import ModelConfig
from lion_jax.nn.models import LraClassifier
from lra import optim


def small_model(decay="selective"):
  config = ModelConfig(d_model=8, num_layers=2, num_heads=2, decay=decay)
  return LraClassifier(config, num_classes=3, vocab_size=5, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("decay", ["selective", "fixed"])
def test_every_parameter_gets_exactly_one_group(decay):
  config = listops.get_config("runlocal")
  params = nnx.state(small_model(decay), nnx.Param)
  table = optim.group_table(params, config.param_groups)
  names = [n for group in table.values() for n in group]
  assert len(names) == len(set(names)) == len(jax.tree.leaves(params))
  assert table["decay"] and all("decay" in n for n in table["decay"])
  assert any(n.endswith("decay_base") for n in table["decay"])
  # LION-D's gate logits are decay parameters too: no weight decay, the decay learning rate.
  assert any("mixer/decay_gate" in n for n in table["decay"])
  assert table["no_weight_decay"] and all(
      "norm" in n or n.endswith(("bias", "scale")) for n in table["no_weight_decay"])
  assert any(n.endswith("kernel") for n in table["default"])
  assert not any(n.endswith("bias") or "decay" in n for n in table["default"])


def test_weight_decay_and_learning_rate_per_group():
  config = listops.get_config("runlocal")
  config.update(learning_rate=0.1, decay_learning_rate=0.01, weight_decay=0.5, warmup_epochs=0.0)
  params = {"decay_base": jnp.ones(3), "norm": {"scale": jnp.ones(3)}, "dense": {"kernel": jnp.ones(3)}}
  tx = optim.make_optimizer(config, total_steps=1000, steps_per_epoch=10)
  zero = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero, tx.init(params), params)
  # Zero gradients: only decoupled weight decay moves a parameter, and only in "default".
  np.testing.assert_allclose(updates["dense"]["kernel"], -0.1 * 0.5, rtol=1e-6)
  assert not updates["decay_base"].any() and not updates["norm"]["scale"].any()
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates["decay_base"], -0.01, rtol=1e-4)  # Adam's first step: lr·sign
  np.testing.assert_allclose(updates["norm"]["scale"], -0.1, rtol=1e-4)


def test_schedule_warms_up_linearly_then_decays_to_zero():
  schedule = optim.learning_rate_schedule(1.0, total_steps=100, warmup_steps=10)
  assert schedule(0) == 0.0 and schedule(5) == pytest.approx(0.5) and schedule(10) == pytest.approx(1.0)
  assert schedule(55) == pytest.approx(0.5, abs=1e-6) and schedule(100) == pytest.approx(0.0, abs=1e-7)
  assert optim.learning_rate_schedule(1.0, 100, 0)(0) == 1.0


def test_gradient_clipping_and_bad_tables():
  config = listops.get_config("runlocal")
  config.update(grad_clip_norm=1.0, warmup_epochs=0.0, learning_rate=1.0)
  tx = optim.make_optimizer(config, 10, 1)
  params = {"w": jnp.zeros(4)}

  def two_steps(first):  # Adam hides one step's scale, so compare a second step
    state = tx.init(params)
    for grad in (first, 0.5):
      updates, state = tx.update({"w": jnp.full(4, grad)}, state, params)
    return updates["w"]

  # A gradient of norm 200 is clipped to norm 1, i.e. to 0.5 per entry.
  np.testing.assert_allclose(two_steps(100.0), two_steps(0.5), rtol=1e-6)
  assert not np.allclose(two_steps(100.0), two_steps(0.1))
  with pytest.raises(ValueError, match="group 'nodecay' is not one of"):
    optim.check_param_groups([("bias", "nodecay")])
  with pytest.raises(ValueError, match="bad regex"):
    optim.check_param_groups([("(", "default")])
