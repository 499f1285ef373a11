"""Peer layers for benchmarks only: NOT part of `lion_jax`.

  softmax.SoftmaxAttention  multi-head softmax attention (flax `nnx.dot_product_attention`)
  s5.S5Layer                S5-style bidirectional diagonal complex SSM (HiPPO-N init, ZOH,
                            `lax.associative_scan` or a linear `lax.scan`), written from the S5
                            paper (Smith et al., ICLR 2023); see docs/design.md §3.

Both map [B, L, d_model] -> [B, L, d_model] like `lion_jax.LionMixer`, so `bench/layers.py`
compares sequence-mixing layers at equal d_model.
"""

from bench.baselines.s5 import S5Layer, make_dplr_hippo, s5_scan
from bench.baselines.softmax import SoftmaxAttention

__all__ = ["S5Layer", "SoftmaxAttention", "make_dplr_hippo", "s5_scan"]
