"""LION's Flax NNX modules: parameters and wiring only, over the maths of `lion_jax.ops`.

  mixer     `LionMixer`: q, k, v projections, φ, the decays' parameters, `lion_attention`, W_o
  s5        `S5Mixer`: the S5 baseline (a bidirectional diagonal state-space mixer)
  softmax   `SoftmaxMixer`: the Transformer baseline's attention
  blocks    pre-norm residual blocks around a mixer (`MIXERS`, `make_block`)
  models    `LionEncoder`, `LraClassifier`, `RetrievalHead`: the LRA models

Shapes: B batch, L length, M = d_model; each module's docstring states its own.
"""
