"""Bidirectional LION as two causal decayed linear recurrences (paper Theorem 3.3).

Every function here computes, for one direction, the causal decayed linear attention

  o_t = Σ_{j ≤ t} (q_t · k_j) · exp(Σ_{r=j+1}^{t} gate_r) ⊙ u_j            # [E] per token

where the gate is a scalar per head (G = 1) or one per carried channel (G = E); rnn and scan also
take complex gates log λ + iθ (`phase`, `lion_jax.ops.rotation`). The bidirectional
LION output is o^F + flip(o^B) − (q_t · k_t) u_t: each direction holds the diagonal term once, and
Theorem 3.3's −½ qᵀk corrections, one per direction, remove the second copy.

Three interchangeable algorithms (same maths, different cost), see `CAUSAL_KERNELS`:
  rnn:        `lax.scan` over tokens with a [K, E] state. O(L) steps; the backward pass keeps
              one state in `STATES_KEPT_EVERY` tokens and recomputes the rest.
  scan:       `lax.associative_scan` over (log-gate, k uᵀ) pairs. O(log L) depth; materialises
              L·K·E floats, so it is a GPU tool, slow on CPU (docs/benchmarks.md): there the
              `scan` form runs `causal_rnn` (`attention._causal_kernel`).
  chunk_scan: exact causal C×C blocks (one [C, C] mask per decay channel) plus the state
              entering each chunk, passed by a `lax.scan` over chunks. It serves the two
              directions apart (`bidirectional_halves`, LION with directional read-outs); the
              bidirectional form that sums them works on both directions at once and lives in
              `lion_jax.ops.chunkwise`.
Shapes follow the legend in `lion_jax.ops.masks`.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp


def causal_rnn(q, k, u, gate, phase=None):
  """Causal decayed linear attention by a per-token `lax.scan`.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values; with `phase`, E = 2P: P complex values, their real parts
      in the first P channels and their imaginary parts in the last P.
    gate: [B, L, H, G] log-gates (G = 1 or E; 1 or P with `phase`); gate[:, 0] is never used.
    phase: None, or [H, 1 or P] θ: complex gates log λ_t + iθ, each step turns the state by
      e^{iθ} (`lion_jax.ops.rotation`).

  Returns:
    [B, L, H, E] causal outputs (with `phase`: real parts, then imaginary parts).
  """
  if phase is not None:
    return _complex_rnn(q, k, u, gate, phase)
  batch, _, heads, key_dim = k.shape
  state0 = jnp.zeros((batch, heads, key_dim, u.shape[-1]), u.dtype)  # [B, H, K, E]

  def step(state, token):
    q_t, k_t, u_t, g_t = token  # [B, H, K], [B, H, K], [B, H, E], [B, H, G]
    state = jnp.exp(g_t)[..., None, :] * state + k_t[..., :, None] * u_t[..., None, :]
    return state, jnp.einsum("bhk,bhke->bhe", q_t, state)

  return _token_loop(step, state0, (q, k, u, gate))  # [B, L, H, E]


def _complex_rnn(q, k, u, gate, phase):
  """`causal_rnn` with complex gates log λ + iθ, in real arithmetic on (Re, Im) state pairs.

  Real pairs rather than complex64 arrays, and λ e^{iθ} formed inside the loop: XLA:CPU runs the
  step 1.6x faster so, and no [B, L, H, P] multipliers are stored.
  """
  batch, _, heads, key_dim = k.shape
  re, im = jnp.split(u, 2, axis=-1)  # [B, L, H, P] each
  cos, sin = jnp.cos(phase), jnp.sin(phase)  # [H, 1 or P]
  zeros = jnp.zeros((batch, heads, key_dim, re.shape[-1]), u.dtype)  # [B, H, K, P]

  def step(state, token):
    s_re, s_im = state  # [B, H, K, P] each
    q_t, k_t, u_re, u_im, g_t = token  # [B, H, K] twice, [B, H, P] twice, [B, H, G]
    decay = jnp.exp(g_t)
    c_t, s_t = (decay * cos)[..., None, :], (decay * sin)[..., None, :]  # [B, H, 1, P or 1]
    k_t = k_t[..., :, None]
    s_re, s_im = (c_t * s_re - s_t * s_im + k_t * u_re[..., None, :],
                  c_t * s_im + s_t * s_re + k_t * u_im[..., None, :])
    # A product and a sum, not an einsum: XLA:CPU would call a matmul per token (10% slower).
    read = lambda s: jnp.sum(q_t[..., :, None] * s, axis=-2)  # [B, H, P]
    return (s_re, s_im), (read(s_re), read(s_im))

  out = _token_loop(step, (zeros, zeros), (q, k, re, im, gate))  # ([B, L, H, P], [B, L, H, P])
  return jnp.concatenate(out, axis=-1)


# Tokens between the states that the token loop keeps for its backward pass. A plain `lax.scan`
# keeps every step's states (L·K·E floats a direction, before and after each token); keeping one
# state in 32 and recomputing the 32 between them when the gradient passes cut a recipe's mixer
# from 59 to 17 MiB (fwd+bwd, B = 64, L = 1,024, H = 1, K = 4, 8 complex channels, 2-core CPU)
# at no cost in time there: the recomputed steps are cheaper than storing and reloading states.
STATES_KEPT_EVERY = 32
# Tokens laid out in one iteration of the loop inside a stretch (`lax.scan(unroll=...)`). More
# is slower on XLA:CPU: 1.5× the step at 8 and 3× at 32 (bench/probes/token_loop_unroll.py).
TOKENS_UNROLLED = 1


def _token_loop(step, state0, tokens):
  """`lax.scan(step, state0, ...)` over the tokens, keeping one state in `STATES_KEPT_EVERY`.

  The length is padded up to a multiple of the stretch with zero tokens, which come after every
  real token and change nothing before them.

  Args:
    step: (state, token) -> (state, output), on tokens of [B, ...] arrays.
    state0: the state entering the first token (any pytree).
    tokens: a pytree of [B, L, ...] arrays.

  Returns:
    The pytree of step outputs, [B, L, ...] each.
  """
  length = jax.tree.leaves(tokens)[0].shape[1]
  stretch = min(STATES_KEPT_EVERY, length)
  stretches = -(-length // stretch)

  def time_first(x):  # [B, L, ...] -> [N, S, B, ...]
    x = jnp.pad(x, [(0, 0), (0, stretches * stretch - length)] + [(0, 0)] * (x.ndim - 2))
    x = jnp.moveaxis(x, 1, 0)
    return x.reshape((stretches, stretch) + x.shape[1:])

  @jax.checkpoint
  def one_stretch(state, stretch_tokens):
    return jax.lax.scan(step, state, stretch_tokens, unroll=TOKENS_UNROLLED)

  _, out = jax.lax.scan(one_stretch, state0, jax.tree.map(time_first, tokens))

  def batch_first(x):  # [N, S, B, ...] -> [B, L, ...]
    x = x.reshape((stretches * stretch,) + x.shape[2:])[:length]
    return jnp.moveaxis(x, 0, 1)

  return jax.tree.map(batch_first, out)


def causal_associative_scan(q, k, u, gate, phase=None):
  """Causal decayed linear attention by `jax.lax.associative_scan` over the states.

  Elements are (g_t, k_t u_tᵀ) and combine as (g1, S1) ∘ (g2, S2) = (g1 + g2, e^{g2} S1 + S2),
  kept in log space so composed decays underflow gracefully instead of multiplying tiny numbers.
  With `phase` the log-gates are complex, log λ_t + iθ, and so are the states.

  Args:
    q, k, u, gate, phase: as `causal_rnn`.

  Returns:
    [B, L, H, E] causal outputs (with `phase`: real parts, then imaginary parts).
  """
  if phase is not None:
    re, im = jnp.split(u, 2, axis=-1)
    u, gate = jax.lax.complex(re, im), gate + 1j * phase  # [B, L, H, P], [B, L, H, P or 1]
  increments = k[..., :, None] * u[..., None, :]  # [B, L, H, K, E]

  def combine(left, right):
    g_left, s_left = left
    g_right, s_right = right
    return g_left + g_right, jnp.exp(g_right)[..., None, :] * s_left + s_right

  _, states = jax.lax.associative_scan(combine, (gate, increments), axis=1)  # [B, L, H, K, E]
  out = jnp.einsum("blhk,blhke->blhe", q.astype(states.dtype), states)
  return out if phase is None else jnp.concatenate([out.real, out.imag], axis=-1)


# Chunk length of `causal_chunk_scan` on XLA:CPU: its exact masks cost O(C·G) a token, so short
# chunks win there. Forward and backward of both halves (B = 32, L = 160, H = 1, K = V = 33,
# vector decays, 2-core CPU): C = 32 1153 ms, 16 681 ms, 8 546-580 ms, 4 774 ms; the summed
# bidirectional chunk_scan at C = 32 takes 240 ms. Accelerators keep the caller's C.
CAUSAL_CHUNK_CPU = 8


def causal_chunk_scan(q, k, u, gate, chunk_size: int = 64):
  """Causal decayed linear attention by exact chunk blocks and chunk states.

  Inside a chunk, with chunk-local inclusive cumsums F_r = Σ_{t ≤ r} gate_t, token r reads key
  c ≤ r of its chunk through e^{F_r − F_c} and the state entering the chunk through e^{F_r};
  the state leaving chunk n is e^{F̄_n} S_n + Σ_c e^{F̄_n − F_c} k_c u_cᵀ (F̄: the chunk's
  total). Every exponent is ≤ 0, so float32 is stable at any L. The masks are exact per decay
  channel: O(L·C·G) memory besides the O(L·C·E) outputs, no factoring and no steep chunks.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys.
    u: [B, L, H, E] carried values.
    gate: [B, L, H, G] log-gates (G = 1 or E); gate[:, 0] is never used.
    chunk_size: C; L is padded up to a multiple of C with zero keys, which add nothing.

  Returns:
    [B, L, H, E] causal outputs.
  """
  batch, length, heads, _ = q.shape
  chunk = max(1, min(chunk_size, length))
  pad = -length % chunk
  num_chunks = (length + pad) // chunk

  def heads_first(x):  # [B, L, H, X] -> [B, H, N, C, X]
    x = jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
    return jnp.moveaxis(x.reshape(batch, num_chunks, chunk, heads, x.shape[-1]), 3, 1)

  q, k, u, gate = map(heads_first, (q, k, u, gate))
  cumulative = jnp.cumsum(gate, axis=3)  # [B, H, N, C, G] F
  total = cumulative[:, :, :, -1]  # [B, H, N, G] F̄
  scores = jnp.einsum("bhnrk,bhnck->bhnrc", q, k)  # [B, H, N, C, C]
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))[:, :, None]  # [C(r), C(c), 1]
  exponent = cumulative[:, :, :, :, None, :] - cumulative[:, :, :, None, :, :]  # [B, H, N, C, C, G]
  # Masked before exp: the unused upper triangle holds positive exponents that could overflow.
  block_decay = jnp.exp(jnp.where(causal, exponent, -jnp.inf))  # [B, H, N, C, C, G]
  if block_decay.shape[-1] == 1:
    same_chunk = jnp.einsum("bhnrc,bhnce->bhnre", scores * block_decay[..., 0], u)
  else:
    same_chunk = jnp.einsum("bhnrce,bhnce->bhnre", scores[..., None] * block_decay, u)
  # What each chunk adds to the state leaving it: Σ_c e^{F̄ − F_c} k_c u_cᵀ.
  leaving = jnp.einsum("bhnck,bhnce->bhnke", k, u * jnp.exp(total[:, :, :, None] - cumulative))

  def step(state, chunk_in):  # state [B, H, K, E]: entering the chunk
    chunk_total, chunk_leaving = chunk_in  # [B, H, G], [B, H, K, E]
    return jnp.exp(chunk_total)[..., None, :] * state + chunk_leaving, state

  state0 = jnp.zeros(leaving.shape[:2] + leaving.shape[3:], leaving.dtype)  # [B, H, K, E]
  _, entering = jax.lax.scan(step, state0, (jnp.moveaxis(total, 2, 0),
                                             jnp.moveaxis(leaving, 2, 0)))  # [N, B, H, K, E]
  from_state = jnp.einsum("bhnrk,nbhke->bhnre", q, entering) * jnp.exp(cumulative)
  out = same_chunk + from_state  # [B, H, N, C, E]
  out = jnp.moveaxis(out, 1, 3).reshape(batch, num_chunks * chunk, heads, -1)
  return out[:, :length]


CausalKernel = Callable[..., jnp.ndarray]

CAUSAL_KERNELS: dict[str, CausalKernel] = {
    "rnn": causal_rnn,
    "scan": causal_associative_scan,
    "chunk_scan": causal_chunk_scan,
}


def bidirectional(kernel: CausalKernel, q, k, u, forward_gate, backward_gate_flipped):
  """Bidirectional LION numerator (and normaliser channels) from one causal kernel.

  Args and returns as `bidirectional_halves`, whose two halves this sums: Σ_j (q_i·k_j) M_ij u_j
  over all keys j.
  """
  forward, backward = bidirectional_halves(kernel, q, k, u, forward_gate, backward_gate_flipped)
  return forward + backward


def bidirectional_halves(kernel: CausalKernel, q, k, u, forward_gate, backward_gate_flipped,
                         u_right=None):
  """The left and right halves of the bidirectional LION numerator, from one causal kernel.

  Both directions run in a single kernel call, stacked along the batch axis, so a scan pays its
  per-step overhead once. Each direction carries only its own values: the right half sums
  u_right where given (complex decays turn the values one way for each side).

  Args:
    kernel: one of `CAUSAL_KERNELS`.
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys (zero where a key is masked out).
    u: [B, L, H, E] carried values.
    forward_gate: [B, L, H, G] log-gates of the forward direction.
    backward_gate_flipped: [B, L, H, G] log-gates of the backward direction, in flipped time.
    u_right: None (both halves sum u), or [B, L, H, E] the values the right half sums instead.

  Returns:
    ([B, L, H, E], [B, L, H, E]): Σ_{j<i} (q_i·k_j) M_ij u_j and Σ_{j>i} (of u_right where
    given), each with half the diagonal term ½ (q_i·k_i) u_i, so that with u_right=None the two
    sum to the numerator over all keys.
  """
  u_right = u if u_right is None else u_right
  flip = lambda x: jnp.flip(x, axis=1)
  both = lambda x, y: jnp.concatenate([x, y], axis=0)  # [2B, ...]
  out = kernel(both(q, flip(q)), both(k, flip(k)), both(u, flip(u_right)),
               both(forward_gate, backward_gate_flipped))
  batch = q.shape[0]
  out_forward, out_backward = out[:batch], flip(out[batch:])  # [B, L, H, E] each
  # Theorem 3.3: each direction counts the diagonal (q_t·k_t) u_t once; remove half from each.
  half_scores = 0.5 * jnp.einsum("blhk,blhk->blh", q, k)[..., None]  # [B, L, H, 1]
  return out_forward - half_scores * u, out_backward - half_scores * u_right
