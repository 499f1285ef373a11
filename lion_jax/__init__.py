"""lion_jax: LION bidirectional linear attention in JAX (pure functions) and Flax NNX (modules).

Shape legend: see `lion_jax.masks`.
"""

from lion_jax.attention import LionForm, Normalize, lion_attention, per_token_log_decay, resolve_form
from lion_jax.masks import Convention, lion_mask, segsum, toeplitz_mask

__all__ = [
    "Convention",
    "LionForm",
    "Normalize",
    "lion_attention",
    "lion_mask",
    "per_token_log_decay",
    "resolve_form",
    "segsum",
    "toeplitz_mask",
]
