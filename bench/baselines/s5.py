"""S5-style bidirectional diagonal SSM layer (a benchmark peer of `LionMixer`, not part of lion_jax).

Written from the S5 paper (Smith, Warrington & Linderman, ICLR 2023):

  * HiPPO-N (normal part of HiPPO-LegS) of size P/J, diagonalised, replicated in J blocks; with
    conjugate symmetry only half the eigenvalues are kept: P/2 complex states;
  * parameters Λ (re, im), B̃ = V⁻¹B (B lecun-normal), C̃ = C V for each direction, D, log Δ
    (one per state, log-uniform in [Δ_min, Δ_max]);
  * ZOH discretisation Λ̄ = exp(ΛΔ), B̄ = Λ⁻¹(Λ̄ − 1) B̃;
  * x_t = Λ̄ ⊙ x_{t−1} + B̄ u_t run forward and backward (both include the current token), by
    `lax.associative_scan` (S5's choice) or a linear `lax.scan` (what recurrentgemma picks off
    TPU);
  * y_t = 2·Re(C̃₁ x^fwd_t + C̃₂ x^bwd_t) + D ⊙ u_t.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def make_dplr_hippo(n: int):
  """HiPPO-LegS normal part, diagonalised: (Λ [n] complex, V [n, n] complex, B [n] complex).

  Λ has real part mean(diag S) = −½ and imaginary part from eigh(−iS), S = A + P Pᵀ.
  """
  p = np.sqrt(1 + 2 * np.arange(n))
  a = p[:, None] * p[None, :]
  a = -(np.tril(a) - np.diag(np.arange(n)))  # HiPPO-LegS
  p_lr = np.sqrt(np.arange(n) + 0.5)
  b = np.sqrt(2 * np.arange(n) + 1.0)
  s = a + p_lr[:, None] * p_lr[None, :]
  lambda_re = np.mean(np.diagonal(s)) * np.ones(n)
  lambda_im, v = np.linalg.eigh(s * -1j)
  return lambda_re + 1j * lambda_im, v, v.conj().T @ b


def _binary_op(left, right):
  a_left, b_left = left
  a_right, b_right = right
  return a_right * a_left, a_right * b_left + b_right


def s5_scan(lambda_bar, bu, *, reverse: bool = False, method: str = "associative"):
  """x_t = Λ̄ ⊙ x_{t−1} + bu_t over axis 1 (x_{−1} = 0), or from the end when `reverse`.

  Args:
    lambda_bar: [P] complex discrete eigenvalues.
    bu: [B, L, P] complex inputs B̄u_t.
    reverse: run right to left (x_t = Λ̄ ⊙ x_{t+1} + bu_t).
    method: "associative" (`lax.associative_scan`) or "linear" (`lax.scan`).

  Returns:
    [B, L, P] complex states.
  """
  if method == "associative":
    elements = (jnp.broadcast_to(lambda_bar, bu.shape), bu)
    _, states = jax.lax.associative_scan(_binary_op, elements, reverse=reverse, axis=1)
    return states
  if method == "linear":
    def step(x, b_t):
      x = lambda_bar * x + b_t
      return x, x
    _, states = jax.lax.scan(step, jnp.zeros((bu.shape[0], bu.shape[2]), bu.dtype),
                             jnp.moveaxis(bu, 1, 0), reverse=reverse)
    return jnp.moveaxis(states, 0, 1)
  raise ValueError(f"method={method!r} is not 'associative' or 'linear'.")


class S5Layer(nnx.Module):
  """Bidirectional S5 SSM: [B, L, H] -> [B, L, H] (H = d_model).

  Args:
    d_model: H.
    ssm_size: P (S5 LRA configs: 16 ListOps, 192 Text, 256 AAN/Pathfinder/Path-X, 384 CIFAR).
    blocks: J, HiPPO blocks (S5 configs: 8–16).
    conj_sym: keep P/2 complex states and read out 2·Re (S5 default).
    dt_min, dt_max: range of the initial Δ.
    method: "associative" or "linear" scan.
    rngs: initialisation randomness.
  """

  def __init__(self, d_model: int, ssm_size: int = 256, blocks: int = 8, *, conj_sym: bool = True,
               dt_min: float = 1e-3, dt_max: float = 1e-1, method: str = "associative",
               rngs: nnx.Rngs):
    if ssm_size % blocks:
      raise ValueError(f"ssm_size={ssm_size} must be divisible by blocks={blocks}.")
    block = ssm_size // blocks
    lam, v, _ = make_dplr_hippo(block)
    keep = block // 2 if conj_sym else block
    lam, v = lam[:keep], v[:, :keep]  # [keep], [block, keep]
    lam = np.tile(lam, blocks)  # [P']
    v_full = np.kron(np.eye(blocks), v)  # [P, P'] block diagonal
    v_inv = v_full.conj().T  # [P', P]
    states = lam.shape[0]
    self.method = method
    self.conj_sym = conj_sym
    self.lambda_re = nnx.Param(jnp.asarray(lam.real, jnp.float32))
    self.lambda_im = nnx.Param(jnp.asarray(lam.imag, jnp.float32))
    lecun = nnx.initializers.lecun_normal()
    b = np.asarray(lecun(rngs.params(), (ssm_size, d_model)))  # [P, H]
    b_tilde = v_inv @ b  # [P', H]
    self.b_re = nnx.Param(jnp.asarray(b_tilde.real, jnp.float32))
    self.b_im = nnx.Param(jnp.asarray(b_tilde.imag, jnp.float32))
    c_tilde = []
    for _ in range(2):  # forward and backward read-outs
      c = np.asarray(lecun(rngs.params(), (d_model, ssm_size)))  # [H, P]
      c_tilde.append(c @ v_full)  # [H, P']
    c_tilde = np.concatenate(c_tilde, axis=-1)  # [H, 2P']
    self.c_re = nnx.Param(jnp.asarray(c_tilde.real, jnp.float32))
    self.c_im = nnx.Param(jnp.asarray(c_tilde.imag, jnp.float32))
    self.d = nnx.Param(jax.random.normal(rngs.params(), (d_model,)))
    self.log_step = nnx.Param(jax.random.uniform(rngs.params(), (states,), minval=np.log(dt_min),
                                                 maxval=np.log(dt_max)))

  def discretize(self):
    """ZOH: (Λ̄ [P'], B̄ [P', H]) complex."""
    lam = self.lambda_re[...] + 1j * self.lambda_im[...]
    step = jnp.exp(self.log_step[...])
    lambda_bar = jnp.exp(lam * step)
    b_tilde = self.b_re[...] + 1j * self.b_im[...]
    b_bar = ((lambda_bar - 1.0) / lam)[:, None] * b_tilde
    return lambda_bar, b_bar

  def __call__(self, x, mask=None):
    """[B, L, H] -> [B, L, H]; padded positions (mask False) feed zeros into the scans."""
    if mask is not None:
      x = x * mask[..., None].astype(x.dtype)
    lambda_bar, b_bar = self.discretize()
    bu = jnp.einsum("blh,ph->blp", x.astype(jnp.complex64), b_bar.astype(jnp.complex64))
    forward = s5_scan(lambda_bar, bu, method=self.method)
    backward = s5_scan(lambda_bar, bu, reverse=True, method=self.method)
    states = jnp.concatenate([forward, backward], axis=-1)  # [B, L, 2P']
    c_tilde = self.c_re[...] + 1j * self.c_im[...]
    y = jnp.einsum("blp,hp->blh", states, c_tilde.astype(jnp.complex64)).real
    if self.conj_sym:
      y = 2.0 * y
    return y + self.d[...] * x
