"""The identity mixer (`mixer="identity"`): a block around it is the block without token mixing,
the floor `bench/recipes_vs_s5.py` measures every mixer's step against."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from lion_jax import ModelConfig, count_params
from lion_jax.nn.blocks import S5Block, TransformerBlock, takes_segments

IDENTITY = dict(mixer="identity", d_model=8, num_layers=1, num_heads=1, dropout=0.0)


def _x():
  return jax.random.normal(jax.random.key(0), (3, 5, 8))  # [B, L, M]


def test_s5_block_with_the_identity_mixer_is_the_residual_glu_of_the_batch_norm():
  block = S5Block(ModelConfig(**IDENTITY, activation="half_glu2"), rngs=nnx.Rngs(0))
  x = _x()
  mean, var = x.mean(axis=(0, 1)), x.var(axis=(0, 1))
  y = (x - mean) / jnp.sqrt(var + 1e-5)  # BatchNorm at init in training mode
  gate = y * jax.nn.sigmoid(jax.nn.gelu(y) @ block.gate.kernel[...] + block.gate.bias[...])
  np.testing.assert_allclose(block(x), x + gate, rtol=1e-5, atol=1e-5)


def test_transformer_block_with_the_identity_mixer_is_its_two_residuals_without_mixing():
  block = TransformerBlock(ModelConfig(**IDENTITY, block="transformer", norm="layer"),
                           rngs=nnx.Rngs(0))
  x = _x()
  after_mixer = x + block.norm1(x)
  hidden = jax.nn.gelu(block.mlp_in(block.norm2(after_mixer)))
  np.testing.assert_allclose(block(x), after_mixer + block.mlp_out(hidden), rtol=1e-5,
                             atol=1e-5)


def test_the_identity_mixer_has_no_parameters_and_keeps_packed_examples_apart():
  block = S5Block(ModelConfig(**IDENTITY, activation="half_glu2"), rngs=nnx.Rngs(0))
  m = IDENTITY["d_model"]
  assert count_params(block) == 2 * m + m * m + m  # the norm's scale and bias, the GLU's gate
  assert count_params(block.mixer) == 0
  assert takes_segments("identity")
