"""lion_jax: LION bidirectional linear attention in JAX (pure functions) and Flax NNX (modules).

Shape legend: see `lion_jax.ops.masks`.
"""

from lion_jax.xla_flags import disable_crashing_cpu_fusions

# Before anything can start a JAX backend: XLA reads its flags once, at that moment.
disable_crashing_cpu_fusions()

from lion_jax.ops.attention import LionForm, Normalize, lion_attention, resolve_form
from lion_jax.ops.masks import Convention, lion_mask, per_token_log_decay, segsum, toeplitz_mask
from lion_jax.config import PRESETS, ModelConfig, preset
from lion_jax.ops.grid_order import ScanOrder, grid_lion_attention
from lion_jax.nn.mixer import LionMixer, feature_map
from lion_jax.nn.s5 import S5Mixer
from lion_jax.nn.softmax import SoftmaxMixer
from lion_jax.nn.blocks import MIXERS, S5Block, TransformerBlock
from lion_jax.nn.models import LionEncoder, LraClassifier, RetrievalHead, count_params, masked_mean

__all__ = [
    "Convention",
    "LionEncoder",
    "LionMixer",
    "LraClassifier",
    "MIXERS",
    "ModelConfig",
    "PRESETS",
    "RetrievalHead",
    "S5Block",
    "S5Mixer",
    "SoftmaxMixer",
    "TransformerBlock",
    "count_params",
    "disable_crashing_cpu_fusions",
    "feature_map",
    "grid_lion_attention",
    "masked_mean",
    "preset",
    "LionForm",
    "Normalize",
    "ScanOrder",
    "lion_attention",
    "lion_mask",
    "per_token_log_decay",
    "resolve_form",
    "segsum",
    "toeplitz_mask",
]
