"""`ModelConfig`: the frozen model configuration of a LION LRA classifier.

`lion_jax` knows nothing about ml_collections: the experiment code (`lra/`) builds a `ModelConfig`
from its ConfigDict (the field names are the keys under `config.model`), or starts from a preset:

    from lion_jax import preset, LraClassifier
    config = preset("listops", dropout=0.1)          # S5 depth and width, LION-S with HiPPO decays
    model = LraClassifier(config, num_classes=10, vocab_size=20, rngs=nnx.Rngs(0))

Every string field is validated in `__post_init__`; a wrong value raises a ValueError that names the
field and the allowed values. Paper references are to the LION paper; docs/math.md and
docs/design.md explain each choice.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from lion_jax.options import CHOICES, ConfigError, check_choice


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Everything that defines a LION LRA model (not the data, optimiser or schedule).

  Attributes are documented inline; `lion_jax.options.CHOICES` lists the allowed strings.
  """

  # Sequence mixer inside every block: "lion" (`LionMixer`), "s5" (`lion_jax.nn.s5.S5Mixer`, the
  # S5 baseline), "softmax" (`lion_jax.nn.softmax.SoftmaxMixer`, the Transformer baseline) or
  # "identity" (`lion_jax.nn.blocks.IdentityMixer`: no mixing, the floor of a step's cost). The
  # fields of one mixer (`MIXER_FIELDS`) may not be changed from their defaults under another.
  mixer: str = "lion"
  # Width H of the residual stream, number of residual blocks and of LION heads (d_head = H / heads).
  d_model: int = 128
  num_layers: int = 4
  num_heads: int = 2
  # Residual block: "s5" (pre-norm, mixer, GELU/GLU, residual; docs/design.md §3) or "transformer"
  # (norm → mixer → residual → norm → MLP → residual; paper Fig. 6, use with norm="layer").
  block: str = "s5"
  # "batch": BatchNorm over batch and time with padding excluded from the statistics (S5 LRA);
  # "layer": LayerNorm per token.
  norm: str = "batch"
  # BatchNorm running-average momentum (S5: 0.95; 0.9 for Pathfinder and Path-X).
  bn_momentum: float = 0.95
  # Pre-norm (S5 LRA default) or post-norm residual blocks (s5 block only).
  prenorm: bool = True
  # The S5 activation block after the mixer (docs/design.md §3); "gelu" is plain GELU.
  activation: str = "half_glu2"
  # Hidden width of the transformer block's MLP, as a multiple of d_model.
  mlp_ratio: int = 4
  # Dropout rate; the mask is shared by all time steps (feature dropout, S5 broadcast_dims).
  dropout: float = 0.0
  # "embed": token ids (or 8-bit pixel values as tokens) through an embedding table;
  # "dense": pixels normalised with input_mean/input_std, then a Dense layer (S5 image tasks).
  encoder: str = "embed"
  # Position information added after the encoder: "none", "sinusoidal" (fixed sin/cos of
  # Vaswani et al. 2017) or "auto": sinusoidal for the mixers that cannot tell left from right
  # on their own (softmax, and LION-LIT and LION-D, whose masks λ^|i−j| look the same either way),
  # none for LION-S in the symmetric convention (a token's own gate decays its left context,
  # not its right) and S5 (one C per direction).
  # Why: docs/math.md §5.2, `direction_blind`.
  positional: str = "auto"
  # For encoder="dense": (pixel/255 − input_mean) / input_std.
  input_mean: float = 0.5
  input_std: float = 0.5
  # φ applied to q and k per head (docs/math.md §1); "silu_norm" = (SiLU(x) + 0.5) / ‖·‖₂.
  feature_map: str = "silu_norm"
  # Per-head key/query width; None means d_model / num_heads (the value width per head).
  key_dim: int | None = None
  # "lit": no decay (λ = 1); "fixed": a learnt λ per head or channel (LION-D); "selective": per
  # token (LION-S) on top of the fixed base decay.
  decay: str = "selective"
  # "scalar": one λ per head; "vector": one λ per value channel (paper App. C.7; needed on LRA).
  decay_shape: str = "vector"
  # A rotation per token beside each decay channel's λ, a complex decay λ e^{iθ} as S5's: "none",
  # "hippo" (θ learnt, starting at Im(Λ)·Δ of HiPPO-N's eigenvalues, `decay.hippo_phase`), or "s5"
  # (θ = Im(Λ)·Δ as S5 has it: Im Λ learnt from −√3/2, Δ the base decay's step, so that the
  # turn and the modulus share the step, `decay.step_phase`). Each
  # value channel becomes a complex state read out by its real and imaginary parts, so W_o takes
  # twice the channels (`lion_jax.ops.rotation`). Needs normalize="none" and raster order.
  decay_phase: str = "none"
  # With decay_phase: W_v writes each complex state's imaginary input too (twice its columns),
  # as S5's complex B̃ does; False: the states take real inputs. Needs v_init="lecun".
  complex_input: bool = False
  # Parameter of the base decay: "neg_exp" log λ = −exp(ρ) (docs/math.md §5; always in (0,1))
  # or "sigmoid" λ = σ(a) (paper Sec. 3.3 LION-D). Both start from the same λ.
  decay_param: str = "neg_exp"
  # How tokens modulate the base log-decay B (docs/math.md §5); see
  # `lion_jax.ops.decay.selective_log_decay`.
  selective_mode: str = "log_additive"
  # Bias of the selective gate at init; None picks the mode's default (+1 for log_additive: a
  # memory of about 3 tokens per token at init, docs/math.md §5; else 0). With fixed_gate it is
  # also where LION-D's gate logit b starts.
  selective_bias_init: float | None = None
  # LION-D (decay="fixed"): log λ = B + log σ(b), the base B times a learnt σ(b) per decay channel
  # (paper Sec. 3.3's LION-D λ = σ(a) on the HiPPO base): LION-S's default gate without its input
  # weights. b starts at selective_bias_init (default +1, memories of about 3 tokens) and opens
  # towards the base's memory. False: log λ = B alone, App. D.2 read literally (docs/math.md §5.3).
  fixed_gate: bool = True
  # Standard deviation of the selective gate weights and of W_q, W_k at init (paper D.2: 0.1).
  selective_init_std: float = 0.1
  qk_init_std: float = 0.1
  # W_o starts LeCun-normal times this (truncated normal of std scale/√fan-in): how large the
  # mixed tokens start beside the residual stream (docs/paper_notes.md §20: S5's read-out C
  # starts them about 7x larger than LION's W_o at 1).
  out_proj_init_scale: float = 1.0
  # Base decay init: "hippo" (log λ = −Δ/2, Δ log-uniform in [dt_min, dt_max]), "s4d_real"
  # (log λ = −(n+1)Δ) or "random" (λ = σ(N(0, 1)), the "w/o HiPPO" rows of Table 3).
  decay_init: str = "hippo"
  dt_min: float = 1e-3
  dt_max: float = 1e-1
  # W_v init: "identity" (the mixer starts as a decay-weighted mean of its input at unit gain;
  # docs/math.md §5), "zoh_diag" diag(γ), γ = (λ − 1)/Λ (paper App. D.2 read literally: values
  # at the scale of Δ), "zoh_lecun" diag(γ)·W₀ with W₀ lecun-normal, "lecun" plain lecun-normal.
  v_init: str = "identity"
  # Passed to `lion_attention`: where the row normalisation sits, and the mask convention.
  normalize: str = "after"
  convention: str = "symmetric"
  # Output projection W_o after the heads (S5's C analogue).
  output_proj: bool = True
  # Scale on each key's value before mixing: "none", or "one_minus_decay" (v_j ← (1 − λ_j) ⊙ v_j
  # per decay channel): S5's ZOH gain (Λ̄ − 1)/Λ up to the constant Λ, which keeps an unnormalised
  # (normalize="none") decayed sum at a gain of 1 + λ whatever the memory; or "s5_zoh",
  # v_j ← 4(1 − λ_j) ⊙ v_j: that constant as S5 has it at init (HiPPO-N's Λ = −½ makes its ZOH
  # gain 2(1 − λ)) times the 2 of its read-out 2·Re(C̃x). Needs a decay.
  value_gain: str = "none"
  # A learnt per-channel feed-through D ⊙ x added to the mixer output, D ~ N(0, 1): S5's D.
  feedthrough: bool = False
  # Two output projections, y = W_F y^F + W_B y^B, over the output's left and right halves
  # (`lion_attention(split_directions=True)`: the keys before the query, and after it, each
  # with half the query's own), as S5 reads its forward and backward states through two C's;
  # W_o = W_F = W_B is LION. Needs output_proj and scan_order="raster" (docs/paper_notes.md §20).
  directional_readout: bool = False
  eps: float = 1e-6
  # Default evaluation form of every mixer and its chunk size; both can be overridden per call.
  form: str = "chunk_scan"
  chunk_size: int = 64
  # How "chunk_scan" passes states between chunks: "scan", "associative" (log depth) or "auto"
  # (the backend's default, `chunkwise.resolve_state_pass`).
  state_pass: str = "auto"
  # What "chunk_scan" keeps for its backward pass: "stored" (blocks, states, normalisers),
  # "recomputed" (its inputs only; the kernel runs again segment by segment in the backward
  # pass, `lion_jax.ops.recomputed`) or "auto" (`attention.resolve_residuals`). The same values.
  residuals: str = "auto"
  # jax.checkpoint each block (long sequences: recompute activations in the backward pass).
  remat: bool = False
  # Compute dtype of the dense layers, embeddings and residual stream ("bfloat16" is a GPU option;
  # "float64" needs jax_enable_x64 and serves gradient checks by finite differences).
  # Parameters, decays, normalisers and states (inside lion_attention), BatchNorm statistics,
  # pooling and the classification head stay float32.
  dtype: str = "float32"
  # LION♮ (paper §C.11, Figure 9; `lion_jax.ops.grid_order`): the (H, W) image the tokens were
  # flattened from row by row (H·W = L), and the order the decays run along: "raster" (the
  # grid is unused), "snake" (row and column snake, each with its own decay parameters, masks
  # averaged before the normalisation, as the official release) or "snake_outputs" (the two
  # normalised outputs averaged, as the paper's text says).
  grid: tuple[int, int] | None = None
  scan_order: str = "raster"
  # Context parallelism: the mesh axis every LION layer splits its sequence over
  # (`lion_attention(sequence_axis=...)`; needs form "chunk_scan" and scan_order "raster").
  # Training sets it from the config's `mesh`; None keeps each sequence on one device.
  sequence_axis: str | None = None

  # Softmax attention and LION: the width the mixer attends in, over all heads (A = H·V); None
  # means d_model. Softmax: the width of q, k and v (LRA's qkv_dim). LION: the width of its values,
  # so that each head's state is K × A/H (K = key_dim, by default A/H too) while the residual
  # stream stays d_model wide, as S5's state of P channels is narrower than its stream. The
  # output projection maps it back to d_model. LION's identity and ZOH-diagonal W_v need A = M.
  attention_dim: int | None = None
  # S5 (mixer="s5"; S5 paper Sec. 3 and its LRA release): state size P before conjugate
  # symmetry, J HiPPO-N blocks, conjugate symmetry (P/2 complex states), Re Λ clipped to ≤ −1e-4,
  # the init of C (`lion_jax.nn.s5.C_INITS`), one Δ per layer instead of per state (dt_global: not
  # the S5 release's --dt_global, which keeps one Δ per state and only trains log Δ at the global
  # learning rate, `configs.common.s5_param_groups`; no config here sets it), and the scan:
  # "associative" (S5's) or "linear" (`lax.scan`). dt_min/dt_max set log Δ's range.
  ssm_size: int = 256
  ssm_blocks: int = 8
  conj_sym: bool = True
  clip_eigs: bool = False
  c_init: str = "lecun_normal"
  dt_global: bool = False
  ssm_scan: str = "associative"
  # Real eigenvalues: Λ's imaginary parts dropped at init and not trained (`lambda_im` absent),
  # so every S5 state decays without turning, as LION's decays do (docs/paper_notes.md §20).
  ssm_real: bool = False
  # One read-out C for both directions' states (`c_re`, `c_im` [M, N]): the output then weighs
  # the left and the right context alike, as LION's symmetric mask does (docs/paper_notes.md §20).
  ssm_tied_readout: bool = False

  def __post_init__(self):
    for name in CHOICES:
      check_choice(name, getattr(self, name), where="ModelConfig.")
    self._check_mixer_fields()
    for name in ("d_model", "num_layers", "num_heads", "mlp_ratio", "chunk_size"):
      if int(getattr(self, name)) < 1:
        raise ConfigError(f"ModelConfig.{name}={getattr(self, name)!r} must be a positive integer.")
    if self.d_model % self.num_heads:
      raise ConfigError(f"ModelConfig.d_model={self.d_model} must be divisible by "
                       f"num_heads={self.num_heads}.")
    if self.key_dim is not None and self.key_dim < 1:
      raise ConfigError(f"ModelConfig.key_dim={self.key_dim!r} must be None or a positive integer.")
    if not 0.0 <= self.dropout < 1.0:
      raise ConfigError(f"ModelConfig.dropout={self.dropout!r} must be in [0, 1).")
    if not 0.0 < self.dt_min <= self.dt_max:
      raise ConfigError(f"ModelConfig.dt_min={self.dt_min!r} and dt_max={self.dt_max!r} must satisfy "
                       "0 < dt_min <= dt_max.")
    if not self.out_proj_init_scale > 0:
      raise ConfigError(f"ModelConfig.out_proj_init_scale={self.out_proj_init_scale!r} must be "
                        "positive (1 is LeCun-normal).")
    if self.input_std <= 0:
      raise ConfigError(f"ModelConfig.input_std={self.input_std!r} must be positive.")
    self._check_grid()
    if self.value_gain != "none" and (self.decay == "lit" or self.scan_order != "raster"):
      raise ConfigError(f"ModelConfig.value_gain={self.value_gain!r} scales each value by 1 − λ: it "
                        "needs decay='fixed' or 'selective' and scan_order='raster' (got "
                        f"decay={self.decay!r}, scan_order={self.scan_order!r}).")
    if self.decay_phase != "none" and (self.decay == "lit" or self.normalize != "none"
                                       or self.scan_order != "raster"
                                       or self.sequence_axis is not None or not self.output_proj):
      raise ConfigError(f"ModelConfig.decay_phase={self.decay_phase!r} turns each decay into λ e^{{iθ}}: "
                        "it needs decay='fixed' or 'selective', normalize='none' (a complex mask "
                        "has no real row normaliser), scan_order='raster', no sequence_axis and "
                        f"output_proj=True (got decay={self.decay!r}, normalize={self.normalize!r}, "
                        f"scan_order={self.scan_order!r}, sequence_axis={self.sequence_axis!r}, "
                        f"output_proj={self.output_proj!r}).")
    if self.complex_input and (self.decay_phase == "none" or self.v_init != "lecun"):
      raise ConfigError("ModelConfig.complex_input=True gives complex decays' states complex inputs:"
                        " it needs decay_phase='hippo' or 's5' and v_init='lecun' (got decay_phase="
                        f"{self.decay_phase!r}, v_init={self.v_init!r}).")
    if self.directional_readout and (not self.output_proj or self.scan_order != "raster"
                                     or self.sequence_axis is not None):
      raise ConfigError("ModelConfig.directional_readout=True projects the left and right halves "
                        "through two W_o: it needs output_proj=True, scan_order='raster' and no "
                        f"sequence_axis (got output_proj={self.output_proj!r}, scan_order="
                        f"{self.scan_order!r}, sequence_axis={self.sequence_axis!r}).")

  def _check_mixer_fields(self):
    """A field of another mixer changed from its default is an error, never silently unused."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    for name in sorted(foreign_fields(self.mixer)):
      if getattr(self, name) != defaults[name]:
        owners = [owner for owner, names in MIXER_FIELDS.items() if name in names]
        raise ConfigError(f"ModelConfig.{name}={getattr(self, name)!r} is an option of "
                          f"mixer={' or '.join(map(repr, owners))}; mixer={self.mixer!r} does not "
                          f"use it. Leave it at its default ({defaults[name]!r}) or set "
                          f"mixer={owners[0]!r}.")
    width = self.attention_dim
    if width is not None and (width < 1 or width % self.num_heads):
      raise ConfigError(f"ModelConfig.attention_dim={width!r} must be None or a positive multiple "
                       f"of num_heads={self.num_heads}.")
    if (self.mixer == "lion" and width not in (None, self.d_model)
        and self.v_init in ("identity", "zoh_diag")):
      raise ConfigError(f"ModelConfig.v_init={self.v_init!r} starts W_v square (d_model → "
                        f"d_model), but attention_dim={width} makes it {self.d_model} → {width}: "
                        "set v_init='lecun' (or 'zoh_lecun'), or leave attention_dim unset.")
    if self.mixer == "s5":
      blocks = self.ssm_blocks
      if blocks < 1 or self.ssm_size % blocks or (self.conj_sym and (self.ssm_size // blocks) % 2):
        raise ConfigError(f"ModelConfig.ssm_size={self.ssm_size} must be a multiple of ssm_blocks="
                         f"{blocks} (of 2·ssm_blocks with conj_sym=True).")

  def check_single_form(self, form: str | None, chunk_size: int | None) -> None:
    """Baseline mixers have one form: a LION form or chunk size asked of them is an error."""
    if self.mixer != "lion" and ((form is not None and form != self.form) or
                                 (chunk_size is not None and chunk_size != self.chunk_size)):
      raise ConfigError(f"form={form!r}, chunk_size={chunk_size!r}: evaluation forms are LION's; "
                       f"mixer={self.mixer!r} has one. Leave them unset (config.eval_form='').")

  def _check_grid(self):
    """grid: None or two positive ints (stored as a tuple, also when read back from JSON)."""
    if self.grid is not None:
      try:
        grid = tuple(int(side) for side in self.grid)
      except (TypeError, ValueError):
        grid = ()
      if len(grid) != 2 or min(grid) < 1:
        raise ConfigError(f"ModelConfig.grid={self.grid!r} must be None or (H, W), two positive "
                         "integers with H·W = the sequence length.")
      object.__setattr__(self, "grid", grid)  # frozen: a list from JSON becomes a tuple
    if self.scan_order != "raster" and self.grid is None:
      raise ConfigError(f"ModelConfig.scan_order={self.scan_order!r} needs ModelConfig.grid=(H, W); "
                       "the image, pathfinder and pathx presets set it.")

  @property
  def direction_blind(self) -> bool:
    """Whether the mixer, run on a reversed sequence, gives the reversed outputs.

    True for softmax attention and for LION whose mask depends on |i − j| only (decay "lit" or
    "fixed": M_ij = λ^|i−j|): without positions, such a classifier gives a sequence and its
    reverse the same logits, and no token can tell whether a bracket is on its left or its
    right. LION-S in the symmetric convention is not: M_ij multiplies the gates of
    (min(i, j), max(i, j)], so a token's own gate decays every key on its left and none on its
    right. In the code convention the product runs over the key's gate and those between,
    which reads the same in either direction, so that LION-S is direction-blind too.
    """
    if self.mixer != "lion":
      return self.mixer == "softmax"
    if self.directional_readout:  # the left and right halves have their own W_o
      return False
    return self.decay in ("lit", "fixed") or self.convention == "code"

  @property
  def position_encoding(self) -> str:
    """`positional` with "auto" resolved: "sinusoidal" where `direction_blind`, else "none"."""
    if self.positional != "auto":
      return self.positional
    return "sinusoidal" if self.direction_blind else "none"

  @property
  def head_dim(self) -> int:
    """Value width per head, V = A / num_heads (A = attention_dim, by default d_model)."""
    return (self.attention_dim or self.d_model) // self.num_heads

  @property
  def compute_dtype(self):
    """`dtype` as a jnp dtype."""
    return jnp.dtype(self.dtype)

  @property
  def qk_dim(self) -> int:
    """Key/query width per head."""
    return self.key_dim if self.key_dim is not None else self.head_dim

  def replace(self, **overrides) -> "ModelConfig":
    """A copy with some fields changed (validated again)."""
    return dataclasses.replace(self, **overrides)


# Fields added after runs were first stored, with the value that gives a stored config lacking
# them the model it was trained with (`configs/workdir.py`, `lra.train.check_resumed_model`):
# before them every model was LION in raster order without position encodings, and LION-D
# had no gate.
VALUES_BEFORE_FIELD: dict[str, object] = {"fixed_gate": False, "mixer": "lion",
                                          "positional": "none", "scan_order": "raster",
                                          "value_gain": "none", "feedthrough": False,
                                          "directional_readout": False, "decay_phase": "none",
                                          "out_proj_init_scale": 1.0, "complex_input": False,
                                          "ssm_real": False, "ssm_tied_readout": False,
                                          "attention_dim": None}


# The fields each mixer reads and the others must leave at their defaults (attention_dim serves
# softmax and LION; dt_min/dt_max, listed under none, serve LION's HiPPO decays and S5's Δ alike).
MIXER_FIELDS: dict[str, tuple[str, ...]] = {
    "lion": ("feature_map", "key_dim", "decay", "decay_shape", "decay_phase", "complex_input", "decay_param", "selective_mode",
             "selective_bias_init", "fixed_gate", "selective_init_std", "qk_init_std", "out_proj_init_scale",
             "decay_init", "v_init", "normalize", "convention", "output_proj", "value_gain",
             "feedthrough", "directional_readout", "eps", "form", "chunk_size", "scan_order", "sequence_axis",
             "state_pass", "residuals", "attention_dim"),
    "s5": ("ssm_size", "ssm_blocks", "conj_sym", "clip_eigs", "c_init", "dt_global", "ssm_scan",
           "ssm_real", "ssm_tied_readout"),
    "softmax": ("attention_dim",),
}


def foreign_fields(mixer: str) -> set[str]:
  """The mixer-specific fields that `mixer` does not read (each other mixer's, less its own)."""
  own = set(MIXER_FIELDS.get(mixer, ()))
  return {name for names in MIXER_FIELDS.values() for name in names} - own


# S5's depth and width per LRA task (docs/design.md §3), LION-S with HiPPO decays, d_head = 64,
# chunks of 32: the vector kernel takes the decays LION-S has at init on Image (its wide gates
# spread them) and after training on long ListOps at that length, where at 64 too many chunks
# are steep and every chunk falls back to exact masks (2.2× the step on Image; at 32 ListOps
# costs 1.14× its step at 64 with gentle decays; docs/benchmarks.md §3).
PRESETS: dict[str, ModelConfig] = {
    "listops": ModelConfig(chunk_size=32, d_model=128, num_layers=8, num_heads=2,
                           activation="half_glu2"),
    "text": ModelConfig(chunk_size=32, d_model=256, num_layers=6, num_heads=4,
                        activation="half_glu2", dropout=0.1),
    "retrieval": ModelConfig(chunk_size=32, d_model=128, num_layers=6, num_heads=2,
                             activation="half_glu1"),
    # S5 feeds grayscale CIFAR normalised with mean 122.6/255 and std 61/255 to a Dense encoder.
    "image": ModelConfig(chunk_size=32, d_model=512, num_layers=6, num_heads=8,
                         activation="half_glu1", dropout=0.1, encoder="dense",
                         input_mean=122.6 / 255, input_std=61 / 255, grid=(32, 32)),
    "pathfinder": ModelConfig(chunk_size=32, d_model=192, num_layers=6, num_heads=3,
                              activation="half_glu1", dropout=0.05, bn_momentum=0.9,
                              encoder="dense", grid=(32, 32)),
    "pathx": ModelConfig(chunk_size=32, d_model=128, num_layers=6, num_heads=2,
                         activation="half_glu1", bn_momentum=0.9, encoder="dense", dt_min=1e-4,
                         remat=True, grid=(128, 128)),
}


def preset(task: str, **overrides) -> ModelConfig:
  """The preset for an LRA task with some fields overridden.

  Args:
    task: one of "listops", "text", "retrieval", "image", "pathfinder", "pathx".
    **overrides: `ModelConfig` fields to change, e.g. `decay="fixed"` or `d_model=32`.

  Returns:
    A validated `ModelConfig`.

  Raises:
    ValueError: for an unknown task (naming the known ones) or an invalid override.
  """
  if task not in PRESETS:
    raise ConfigError(f"Unknown task {task!r}; presets exist for {', '.join(map(repr, PRESETS))}.")
  try:
    return dataclasses.replace(PRESETS[task], **overrides)
  except TypeError as error:  # an unknown field name
    fields = ", ".join(f.name for f in dataclasses.fields(ModelConfig))
    raise ConfigError(f"{error}; ModelConfig fields are: {fields}.") from None
