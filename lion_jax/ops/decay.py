"""Decay parameterisations of the LION mixer as small pure functions (docs/math.md §5).

A LION decay is λ ∈ (0, 1) with log-decay a = log λ ≤ 0, one per head ("scalar", G = 1) or per
value channel ("vector", G = V). The mixer keeps a *base* decay parameter of shape [H, G]:

  decay_param="neg_exp":  log λ = −exp(ρ)          (equals S5's Λ_re·Δ, always in (0, 1))
  decay_param="sigmoid":  λ = σ(a), log λ = log σ(a) (paper Sec. 3.3 LION-D)

Selective decays (LION-S) modulate the base log-decay B = log λ_base with per-token gate logits
z = W x + b ([B, L, H, G]) in one of four `selective_mode`s (`SELECTIVE_MODES`):

  log_additive   log λ = B + log σ(z)          the paper's Sec. 3.3 selective decay σ(z) times the HiPPO
                                              base decay: the gate adds an O(1) rate per token, and
                                              the base is the longest memory it can open to (default)
  sigmoid_dt     log λ = B · 2σ(z)             a sigmoid-bounded selective step: λ ∈ (λ_base², 1), the
                                              decay rate at most twice the base rate
  softplus_dt    log λ = B · softplus(z + c)   a softplus selective step (Table 6 row [7]): λ ∈ (0, 1),
                                              the decay rate unbounded above; c = log(e − 1)
  paper_literal  log λ = min(σ(z) + B, 0)      paper Sec. 4.5 "σ(A_i) + B_i", clamped to λ ≤ 1

The two "_dt" modes scale the base step Δ by a positive per-token factor, as the selective step Δ
of Mamba does, and both equal the base decay at z = 0. They differ in the bound of the factor:
2σ(z) < 2, softplus(z + c) unbounded. Why row [7] is read as `softplus_dt` and not as a literal
"a = B + softplus(z)" (λ > 1, which overflows float32 at LRA lengths), and why `paper_literal` is
not the default (it clamps almost every λ to 1 at init), with measured numbers: docs/paper_notes.md.

Inits of the base decay (all return log λ and the ZOH input gain γ used by the W_v init):

  hippo     Λ = −½ (S5/DSS real part), Δ ~ LogUniform[dt_min, dt_max]: log λ = −Δ/2, λ ∈ [e^{−dt_max/2},
            e^{−dt_min/2}]
  s4d_real  Λ_n = −(n+1) with n the channel index inside the head (head index for scalar decays)
  random    λ = σ(N(0, 1)), the official release's LION-D init ("w/o HiPPO" rows of Table 3)

The ZOH gain is γ = (e^{ΛΔ} − 1)/Λ = (λ − 1)/Λ ≈ Δ (paper App. D.2 with Λ continuous;
docs/math.md §5); "random" uses Λ = −½.
Shapes: H heads, G decay channels per head, B batch, L length.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lion_jax.options import describe

HIPPO_REAL = -0.5  # Re Λ of the diagonalised HiPPO-LegS normal part (S5, DSS)
# "hippo_modulus" caps log λ here: a memory of 2 tokens, which a selective gate may still halve
# without leaving the factored block at C = 64 (docs/math.md §5.1).
SHORTEST_MEMORY_LOG_DECAY = -0.5
# softplus(c) = 1: the softplus step starts at the base decay (z = 0 gives log λ = B).
SOFTPLUS_SHIFT = 0.5413248546129181  # log(e − 1)


def hippo_n(n: int):
  """HiPPO-LegS normal part of size n, diagonalised.

  S = A + p pᵀ with A the HiPPO-LegS matrix and p_i = √(i + ½) is normal; its eigenvalues have
  real part mean(diag S) = −½ and imaginary parts from the Hermitian eigenproblem of −iS.

  Returns:
    (Λ [n] complex128, V [n, n] complex128 unitary) with S = V diag(Λ) V*.
  """
  q = np.sqrt(1 + 2 * np.arange(n))
  legs = -(np.tril(q[:, None] * q[None, :]) - np.diag(np.arange(n)))  # [n, n] HiPPO-LegS
  p = np.sqrt(np.arange(n) + 0.5)
  normal = legs + p[:, None] * p[None, :]  # [n, n]
  lambda_im, v = np.linalg.eigh(normal * -1j)
  return np.mean(np.diagonal(normal)) + 1j * lambda_im, v


def sample_dt(key, shape, dt_min: float, dt_max: float):
  """Δ log-uniform in [dt_min, dt_max] (S5 `log_step` init).

  Args:
    key: a PRNG key.
    shape: output shape.
    dt_min, dt_max: the range of Δ.

  Returns:
    float32 array of `shape` with log Δ ~ U[log dt_min, log dt_max].
  """
  log_dt = jax.random.uniform(key, shape, jnp.float32, jnp.log(dt_min), jnp.log(dt_max))
  return jnp.exp(log_dt)


def init_log_decay(key, heads: int, groups: int, init: str, dt_min: float, dt_max: float):
  """Base log-decays and their ZOH gains at init (the reading of the paper's D.2 ZOH formula
  and of its HiPPO init: docs/paper_notes.md).

  Args:
    key: a PRNG key.
    heads: H.
    groups: G, decay channels per head (1 for scalar decays).
    init: "hippo", "s4d_real" or "random".
    dt_min, dt_max: range of the log-uniform step Δ ("hippo", "s4d_real").

  Returns:
    (log_lambda, gain), both float32 [H, G]: log λ < 0 and the ZOH gain γ = (λ − 1)/Λ > 0.
  """
  shape = (heads, groups)
  if init == "random":
    log_lambda = jax.nn.log_sigmoid(jax.random.normal(key, shape, jnp.float32))
    real = jnp.full(shape, HIPPO_REAL)
  elif init == "hippo_modulus":
    dt = sample_dt(key, shape, dt_min, dt_max)
    count = groups if groups > 1 else heads
    modulus = jnp.asarray(hippo_moduli(count), jnp.float32)  # [G] or [H]
    modulus = modulus[None, :] if groups > 1 else modulus[:, None]
    real = -jnp.broadcast_to(modulus, shape)
    log_lambda = jnp.maximum(real * dt, SHORTEST_MEMORY_LOG_DECAY)
  else:
    dt = sample_dt(key, shape, dt_min, dt_max)
    if init == "hippo":
      real = jnp.full(shape, HIPPO_REAL)
    elif init == "s4d_real":
      index = jnp.arange(groups) if groups > 1 else jnp.arange(heads)[:, None]
      real = -(jnp.broadcast_to(index, shape) + 1.0).astype(jnp.float32)
    else:
      raise ValueError(f"decay_init={init!r} is not one of {describe('decay_init')}.")
    log_lambda = real * dt
  gain = jnp.expm1(log_lambda) / real  # (λ − 1)/Λ, computed without cancellation
  return log_lambda, gain


def hippo_moduli(count: int):
  """|Λ_n| of HiPPO-N of size 2·count (`hippo_n`), one per conjugate pair.

  Args:
    count: how many moduli (V channels of a head, or H heads for scalar decays).

  Returns:
    float64 numpy [count], ascending.
  """
  eigenvalues, _ = hippo_n(2 * count)  # [2·count] complex: −½ ± iω, no ω = 0 at even sizes
  return np.sort(np.abs(eigenvalues[eigenvalues.imag > 0]))


def hippo_phase(log_lambda):
  """The rotation per token θ = Im(Λ)·Δ of each decay channel, as S5 starts its complex states.

  S5's LRA presets (and ours, P = 16 states in J = 8 blocks) initialise Λ block by block with
  HiPPO-N of size P/J = 2, whose eigenvalues are −½ ± i√3/2, and keep one of the pair: every state
  starts at Λ = −½ − i√3/2 and differs only in its step Δ. A channel's Δ follows from its
  log-decay as the HiPPO init draws it, log λ = Λ_re·Δ, so θ = Im(Λ)·log λ / Λ_re = √3·log λ: the
  channel turns as S5's state of the same modulus does at init.

  Args:
    log_lambda: [H, G] base log-decays at init.

  Returns:
    float32 [H, G] θ (negative, as S5's kept eigenvalue; the sign only chooses the direction).
  """
  eigenvalues, _ = hippo_n(2)
  omega = float(eigenvalues.imag[0])  # −√3/2, the half of the conjugate pair S5 keeps
  return (omega / HIPPO_REAL * log_lambda).astype(jnp.float32)


def hippo_frequency(shape):
  """Im Λ of S5's HiPPO-N blocks of two (`hippo_phase`), −√3/2 for every channel.

  Args:
    shape: [H, G].

  Returns:
    float32 [H, G].
  """
  eigenvalues, _ = hippo_n(2)
  return jnp.full(shape, float(eigenvalues.imag[0]), jnp.float32)


def step_phase(frequency, base_log_decay):
  """θ = Im(Λ)·Δ with the step Δ = log λ_base / Λ_re of the base decay, as S5 turns its states.

  The frequency Im Λ is learnt near 1 and the step is shared with the decay's modulus, so an
  optimiser step moves the turn of a long memory as little, relatively, as its decay; a θ learnt
  directly (`hippo_phase`'s) moves by the learning rate whatever its size.

  Args:
    frequency: [H, G] Im Λ.
    base_log_decay: [H, G] log λ of the base decay (input-independent).

  Returns:
    [H, G] θ.
  """
  return frequency * base_log_decay / HIPPO_REAL


def to_param(log_lambda, decay_param: str):
  """The base-decay parameter that represents `log_lambda` (inverse of `base_log_decay`).

  Args:
    log_lambda: log λ < 0, any shape.
    decay_param: "neg_exp" (returns ρ = log(−log λ)) or "sigmoid" (returns a = logit λ).

  Returns:
    The parameter, same shape.
  """
  if decay_param == "neg_exp":
    return jnp.log(-log_lambda)
  if decay_param == "sigmoid":
    return log_lambda - jnp.log(-jnp.expm1(log_lambda))  # logit(λ) = log λ − log(1 − λ)
  raise ValueError(f"decay_param={decay_param!r} is not one of {describe('decay_param')}.")


def base_log_decay(param, decay_param: str):
  """log λ of the base (non-selective) decay from its parameter; always < 0.

  Args:
    param: ρ ("neg_exp") or a ("sigmoid"), any shape ([H, G] in the mixer).
    decay_param: "neg_exp" or "sigmoid".

  Returns:
    log λ, same shape.
  """
  if decay_param == "neg_exp":
    return -jnp.exp(param)
  if decay_param == "sigmoid":
    return jax.nn.log_sigmoid(param)
  raise ValueError(f"decay_param={decay_param!r} is not one of {describe('decay_param')}.")


# mode -> log λ [B, L, H, G] from the base B [H, G] (broadcast) and the gate logits z [B, L, H, G].
SELECTIVE_MODES = {
    "sigmoid_dt": lambda base, z: base * (2.0 * jax.nn.sigmoid(z)),
    "softplus_dt": lambda base, z: base * jax.nn.softplus(z + SOFTPLUS_SHIFT),
    "log_additive": lambda base, z: base + jax.nn.log_sigmoid(z),
    "paper_literal": lambda base, z: jnp.minimum(jax.nn.sigmoid(z) + base, 0.0),
}
# mode -> the gate bias b at init (`ModelConfig.selective_bias_init=None`). log_additive: b = 1,
# log σ(1) = −0.31, a memory of about 3 tokens per token at init that the gate learns to open
# towards the base's (docs/math.md §5). b = 0 (−0.69 a token) puts the chunk sums of the
# steeper tokens past the factored block's range at C = 64; b = +8 (−3e-4, the earlier default)
# leaves the gate without effect on memories at the HiPPO scale.
DEFAULT_SELECTIVE_BIAS = {"sigmoid_dt": 0.0, "softplus_dt": 0.0, "log_additive": 1.0,
                          "paper_literal": 0.0}


def selective_log_decay(base, gate_logits, mode: str):
  """Per-token log-decays of LION-S (module docstring for the four modes).

  Args:
    base: [H, G] base log-decays B < 0.
    gate_logits: [B, L, H, G] z = W x + b.
    mode: a key of `SELECTIVE_MODES`.

  Returns:
    [B, L, H, G] log λ ≤ 0 in every mode (< 0 unless a factor underflows or the clamp of
    "paper_literal" is hit), so λ ∈ (0, 1].
  """
  if mode not in SELECTIVE_MODES:
    raise ValueError(f"selective_mode={mode!r} is not one of {describe('selective_mode')}.")
  return SELECTIVE_MODES[mode](base, gate_logits)
