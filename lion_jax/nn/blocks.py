"""Residual blocks around a sequence mixer (`MIXERS`: LION, S5, softmax attention, or the
identity, which mixes nothing: a block's cost apart from its mixer): the S5 sequence layer and a
Transformer block.

  S5Block (docs/design.md §3, S5 `SequenceLayer`, pre-norm by default):
      skip = x;  x = norm(x);  x = mixer(x);  x = activation block(x);  x = skip + x
  with the activation blocks (h = dropout(GELU(x)), dropout shared over time):
      gelu      h
      half_glu1 dropout(h ⊙ σ(W h + b))
      half_glu2 dropout(x ⊙ σ(W h + b))        (the pre-GELU x is gated)
      full_glu  dropout((W₁h + b₁) ⊙ σ(W₂h + b₂))

  TransformerBlock (paper Fig. 6): x = x + drop(mixer(norm(x)));  x = x + drop(MLP(norm(x))).

Norms are BatchNorm (statistics over batch and time, padding excluded through the token mask) or
LayerNorm. Train/eval mode is the usual NNX switch: `model.train()` / `model.eval()` toggle
dropout and BatchNorm batch statistics vs running averages.
Shapes: B batch, L length, M = d_model.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
from flax import nnx

from lion_jax.config import ModelConfig
from lion_jax.nn.mixer import LionMixer
from lion_jax.nn.s5 import S5Mixer
from lion_jax.nn.softmax import SoftmaxMixer


class IdentityMixer(nnx.Module):
  """No sequence mixing: each token passes through unchanged.

  The block around it keeps its norms, activation block (GLU or MLP) and residual, and the
  model its encoder and head, so a training step with this mixer is the floor of any mixer's
  step at the same shapes (`bench/recipes_vs_s5.py`). It has no parameters and no fields.

  Args:
    config: model configuration (unused: nothing to size).
    rngs: unused.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    del config, rngs

  def __call__(self, x, mask=None, *, form=None, chunk_size=None, segment_ids=None):
    """[B, L, M] -> the same [B, L, M]; mask, form, chunk size and segment ids change nothing
    (no token reaches another, so packed examples stay apart)."""
    del mask, form, chunk_size, segment_ids
    return x


# `ModelConfig.mixer` -> the sequence mixer module; each maps ([B, L, M], mask) -> [B, L, M].
MIXERS = {"lion": LionMixer, "s5": S5Mixer, "softmax": SoftmaxMixer, "identity": IdentityMixer}


def make_mixer(config: ModelConfig, *, rngs: nnx.Rngs):
  """The sequence mixer named by `config.mixer`."""
  return MIXERS[config.mixer](config, rngs=rngs)


def takes_segments(mixer: str) -> bool:
  """Whether the mixer named `mixer` keeps the examples of a packed row apart: its `__call__`
  takes `segment_ids` (LION, S5 and softmax attention do; a new mixer may not yet)."""
  return "segment_ids" in inspect.signature(MIXERS[mixer].__call__).parameters


def apply_mixer(mixer, x, mask, *, form, chunk_size, segment_ids):
  """Calls a block's mixer, passing `segment_ids` only when a row is packed.

  Leaving the keyword out when it is None keeps a mixer that does not take packed rows (a new
  one, say) running on padded rows.

  Args:
    mixer: from `make_mixer`.
    x: [B, L, M] mixer input.
    mask: [B, L] bool token mask, or None.
    form, chunk_size: the mixer's evaluation form (None: the config's).
    segment_ids: [B, L] integer ids of packed rows (`lion_jax.ops.segments`), or None.

  Returns:
    [B, L, M] mixer output.
  """
  if segment_ids is None:
    return mixer(x, mask, form=form, chunk_size=chunk_size)
  return mixer(x, mask, form=form, chunk_size=chunk_size, segment_ids=segment_ids)


def make_norm(config: ModelConfig, *, rngs: nnx.Rngs):
  """The block norm: `nnx.BatchNorm` or `nnx.LayerNorm` over the last (feature) axis."""
  if config.norm == "batch":
    # Two-pass variance: the one-pass E[x²] − E[x]² loses digits when |mean| ≫ std.
    return nnx.BatchNorm(config.d_model, momentum=config.bn_momentum, use_fast_variance=False,
                         dtype=config.compute_dtype, rngs=rngs)
  return nnx.LayerNorm(config.d_model, dtype=config.compute_dtype, rngs=rngs)


def apply_norm(norm, x, mask):
  """Normalises x; BatchNorm statistics see only the tokens where `mask` is True.

  Args:
    norm: from `make_norm`.
    x: [B, L, M] activations.
    mask: [B, L] bool token mask, or None (every token is real).

  Returns:
    [B, L, M] normalised activations.
  """
  if isinstance(norm, nnx.BatchNorm):
    return norm(x, mask=None if mask is None else mask[..., None])  # [B, L, 1] broadcasts over M
  return norm(x)


class S5Block(nnx.Module):
  """S5 sequence layer around `config.mixer` (LION in place of the SSM, or S5's own SSM).

  Args:
    config: model configuration (norm, prenorm, activation, dropout, mixer options).
    rngs: parameter and dropout randomness.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    m, dtype = config.d_model, config.compute_dtype
    self.prenorm = config.prenorm
    self.activation = config.activation
    self.norm = make_norm(config, rngs=rngs)
    self.mixer = make_mixer(config, rngs=rngs)
    # broadcast_dims=(1,): one dropout mask per example and feature, shared by all time steps.
    self.dropout = nnx.Dropout(config.dropout, broadcast_dims=(1,), rngs=rngs)
    glu = config.activation in ("half_glu1", "half_glu2", "full_glu")
    self.gate = nnx.Linear(m, m, dtype=dtype, rngs=rngs) if glu else None  # S5 out2
    full = config.activation == "full_glu"
    self.value = nnx.Linear(m, m, dtype=dtype, rngs=rngs) if full else None  # S5 out1

  def __call__(self, x, mask=None, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None):
    """Applies the block.

    Args:
      x: [B, L, M] residual stream.
      mask: [B, L] bool token mask (False at padding), or None; with packed rows pass
        `segment_ids > 0`, which also keeps padding out of BatchNorm statistics.
      form, chunk_size: passed to the mixer (None: the config's).
      segment_ids: [B, L] integer ids of packed rows (`lion_jax.ops.segments`), or None; passed to
        the
        mixer. Nothing else in the block reaches along the sequence; BatchNorm's training
        statistics mix the examples of a batch packed or not, and a dropout mask is shared by
        all the examples of a row (it is shared over time).

    Returns:
      [B, L, M] the updated residual stream.
    """
    skip = x
    if self.prenorm:
      x = apply_norm(self.norm, x, mask)
    x = apply_mixer(self.mixer, x, mask, form=form, chunk_size=chunk_size,
                    segment_ids=segment_ids)  # [B, L, M]
    h = self.dropout(jax.nn.gelu(x))  # tanh-approximate GELU, as flax linen in S5
    if self.activation == "half_glu1":
      x = self.dropout(h * jax.nn.sigmoid(self.gate(h)))
    elif self.activation == "half_glu2":
      x = self.dropout(x * jax.nn.sigmoid(self.gate(h)))
    elif self.activation == "full_glu":
      x = self.dropout(self.value(h) * jax.nn.sigmoid(self.gate(h)))
    else:  # gelu
      x = h
    x = skip + x
    if not self.prenorm:
      x = apply_norm(self.norm, x, mask)
    return x


class TransformerBlock(nnx.Module):
  """Pre-norm Transformer block around `config.mixer` (paper Fig. 6; softmax: the Transformer).

  Args:
    config: model configuration (norm, mlp_ratio, dropout, mixer options). The paper's block uses
      LayerNorm: set `norm="layer"`; BatchNorm (with padding masked) also works.
    rngs: parameter and dropout randomness.
  """

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    m, hidden = config.d_model, config.mlp_ratio * config.d_model
    self.norm1 = make_norm(config, rngs=rngs)
    self.mixer = make_mixer(config, rngs=rngs)
    self.norm2 = make_norm(config, rngs=rngs)
    self.mlp_in = nnx.Linear(m, hidden, dtype=config.compute_dtype, rngs=rngs)
    self.mlp_out = nnx.Linear(hidden, m, dtype=config.compute_dtype, rngs=rngs)
    self.dropout = nnx.Dropout(config.dropout, broadcast_dims=(1,), rngs=rngs)

  def __call__(self, x, mask=None, *, form: str | None = None, chunk_size: int | None = None,
               segment_ids=None):
    """Applies the block; arguments and result as in `S5Block.__call__`."""
    y = apply_mixer(self.mixer, apply_norm(self.norm1, x, mask), mask, form=form,
                    chunk_size=chunk_size, segment_ids=segment_ids)
    x = x + self.dropout(y)
    h = jax.nn.gelu(self.mlp_in(apply_norm(self.norm2, x, mask)))  # [B, L, r·M]
    return x + self.dropout(self.mlp_out(self.dropout(h)))


BLOCKS = {"s5": S5Block, "transformer": TransformerBlock}


def make_block(config: ModelConfig, *, rngs: nnx.Rngs):
  """The residual block named by `config.block`."""
  return BLOCKS[config.block](config, rngs=rngs)


def zero_padding(x, mask):
  """Zeroes padded positions of a [B, L, M] stream (keeps them finite and input-independent)."""
  return x if mask is None else x * mask[..., None].astype(x.dtype)


__all__ = ["IdentityMixer", "MIXERS", "S5Block", "TransformerBlock", "apply_mixer", "apply_norm", "make_block",
           "make_mixer", "make_norm", "takes_segments", "zero_padding"]
