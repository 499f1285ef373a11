"""PROPOSAL (not used by lion_jax): a bidirectional chunk_scan kernel, with its A/B benchmark.

Today `chunk_scan` runs the *causal* chunk kernel twice (forward, and on the flipped sequence),
stacked on the batch axis: every chunk gets two C×C score matrices, two triangular masked blocks
and two C×C×E products, plus flips of q, k, v and the output. LION's intra-chunk block is one
symmetric-structured C×C block, so this kernel computes, per chunk,

  intra:  (Q Kᵀ ⊙ D) U with D_rc = exp(F_r − F_c) below, exp(A_c − A_r) above, 1 on the diagonal
          (F, A chunk-local inclusive cumsums of the forward gate and of log λ; every exponent
          ≤ 0; the triangles are chosen by multiplying with constant 0/1 float masks, which XLA
          fuses, where a `jnp.where` select on a broadcast [C, C] mask made the exp 5–7x slower
          and materialised it)
  states: forward Σ_c exp(F_tot − F_c) k_c u_cᵀ, backward Σ_c exp(A_c) k_c u_cᵀ, both exclusive
          scans in ONE `lax.scan` (backward on reversed chunk order, stacked on batch)
  inter:  exp(F_r) q_r·S^fwd_entering + exp(A_tot − A_r) q_r·S^bwd_entering

Exactly the same maths (both conventions, scalar or vector decays, numerator and normaliser
channels), half the intra-chunk work and no flips of the inputs.

  .venv/bin/python bench/proposal_bichunk.py [--lengths 1k,4k] [--decays scalar,vector]

checks it against lion_attention(form="attention") and times it against form="chunk_scan" and
form="rnn", interleaved in one process.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import forms  # noqa: E402
import harness  # noqa: E402
from lion_jax import lion_attention, masks  # noqa: E402
from lion_jax.attention import per_token_log_decay  # noqa: E402


def bidirectional_chunk_scan(q, k, u, gate_f, log_decay, chunk_size=64):
  """Σ_j (q_i·k_j) M_ij u_j with M lower = exp(Σ_{j+1..i} f), upper = exp(Σ_{i+1..j} a), diag 1.

  q, k: [B, L, H, K]; u: [B, L, H, E]; gate_f, log_decay: [B, L, H, G] (G = 1 or E).
  """
  batch, length, heads, key_dim = k.shape
  channels = u.shape[-1]
  groups = gate_f.shape[-1]
  chunk = max(1, min(chunk_size, length))
  n = -(-length // chunk)
  pad = n * chunk - length

  def to_chunks(x):
    x = jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
    return x.reshape(batch, n, chunk, heads, x.shape[-1])

  q, k, u, gate_f, log_decay = map(to_chunks, (q, k, u, gate_f, log_decay))
  fl = jnp.cumsum(gate_f, axis=2)  # [B, N, C, H, G] forward local log-decay (inclusive)
  al = jnp.cumsum(log_decay, axis=2)  # [B, N, C, H, G]
  ftot, atot = fl[:, :, -1], al[:, :, -1]  # [B, N, H, G]

  # Intra: the full bidirectional block, exponents ≤ 0 everywhere.
  scores = jnp.einsum("bnrhk,bnchk->bnhrc", q, k)  # [B, N, H, C, C]
  lower = jnp.tril(jnp.ones((chunk, chunk), u.dtype), -1)
  upper = jnp.tril(jnp.ones((chunk, chunk), u.dtype), -1).T
  fh, ah = jnp.moveaxis(fl, 2, -1), jnp.moveaxis(al, 2, -1)  # [B, N, H, G, C]
  exponent = ((fh[..., :, None] - fh[..., None, :]) * lower
              + (ah[..., None, :] - ah[..., :, None]) * upper)  # [B, N, H, G, C, C]
  decay = jnp.exp(exponent)
  if groups == 1:
    intra = jnp.einsum("bnhrc,bnche->bnrhe", scores * decay[:, :, :, 0], u)
  else:
    intra = jnp.einsum("bnherc,bnche->bnrhe", scores[:, :, :, None] * decay, u)

  # Chunk states. Forward: Σ_c exp(ftot − fl_c) k_c u_cᵀ. Backward: Σ_c exp(al_c) k_c u_cᵀ.
  state_f = jnp.einsum("bnchk,bnche->bnhke", k, u * jnp.exp(ftot[:, :, None] - fl))
  state_b = jnp.einsum("bnchk,bnche->bnhke", k, u * jnp.exp(al))
  # Exclusive scans: forward over n, backward over reversed n, run as one scan on 2B.
  states = jnp.concatenate([state_f, jnp.flip(state_b, 1)], axis=0)  # [2B, N, H, K, E]
  totals = jnp.concatenate([ftot, jnp.flip(atot, 1)], axis=0)  # [2B, N, H, G]

  def carry(state, x):
    total, chunk_state = x
    return jnp.exp(total)[..., None, :] * state + chunk_state, state

  _, entering = jax.lax.scan(carry, jnp.zeros((2 * batch, heads, key_dim, channels), u.dtype),
                             (jnp.moveaxis(totals, 1, 0), jnp.moveaxis(states, 1, 0)))
  entering = jnp.moveaxis(entering, 0, 1)  # [2B, N, H, K, E]
  enter_f, enter_b = entering[:batch], jnp.flip(entering[batch:], 1)
  inter = (jnp.einsum("bnrhk,bnhke->bnrhe", q, enter_f) * jnp.exp(fl)
           + jnp.einsum("bnrhk,bnhke->bnrhe", q, enter_b) * jnp.exp(atot[:, :, None] - al))
  out = (intra + inter).reshape(batch, n * chunk, heads, channels)
  return out[:, :length]


def lion_attention_bi(q, k, v, log_decay=None, *, convention="symmetric", chunk_size=64, eps=1e-6):
  """normalize="after" LION via the bidirectional kernel (no key mask; prototype)."""
  batch, length, heads, _ = q.shape
  value_dim = v.shape[-1]
  log_decay = per_token_log_decay(log_decay, batch, length, heads, value_dim, jnp.float32)
  groups = log_decay.shape[-1]
  gate_f = masks.forward_gate(log_decay, convention)
  ones = jnp.ones(v.shape[:-1] + (groups,), v.dtype)
  carried = jnp.concatenate([v, ones], axis=-1)
  a = log_decay
  if groups > 1:
    gate_f, a = (jnp.concatenate([g, g], axis=-1) for g in (gate_f, a))
  out = bidirectional_chunk_scan(q, k, carried, gate_f, a, chunk_size)
  return out[..., :value_dim] / (out[..., value_dim:] + eps)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--lengths", default="1k,4k")
  p.add_argument("--decays", default="scalar")
  p.add_argument("--chunk", type=int, default=64)
  p.add_argument("--repeats", type=int, default=9)
  p.add_argument("--out", default=str(harness.DOCS))
  args = p.parse_args(argv)
  # correctness against the full form, strong decays, both conventions, a ragged length
  for kind in ("scalar", "vector"):
    for convention in ("symmetric", "code"):
      q, k, v, d, ct = forms.make_inputs(2, 200, 4, 32, kind)
      d = 20 * d
      ref = lion_attention(q, k, v, d, form="attention", convention=convention)
      got = lion_attention_bi(q, k, v, d, convention=convention, chunk_size=64)
      err = float(jnp.max(jnp.abs(ref - got)) / jnp.max(jnp.abs(ref)))
      g_ref = jax.grad(lambda *a, c=convention: jnp.sum(
          lion_attention(*a, form="attention", convention=c) * ct), argnums=(0, 1, 2, 3))(q, k, v, d)
      g_got = jax.grad(lambda *a, c=convention: jnp.sum(
          lion_attention_bi(*a, convention=c) * ct), argnums=(0, 1, 2, 3))(q, k, v, d)
      g_err = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a))) for a, b in zip(g_ref, g_got))
      print(f"{kind} {convention}: max rel err vs full form {err:.1e}, gradients {g_err:.1e}")
      assert err < 1e-5 and g_err < 1e-5
  records = []
  for length in harness.parse_lengths(args.lengths):
    cases = []
    for kind in args.decays.split(","):
      inputs = forms.make_inputs(2, length, 4, 32, kind)
      variants = {
          "chunk_scan (current)": lambda q, k, v, d: lion_attention(
              q, k, v, d, form="chunk_scan", chunk_size=args.chunk),
          "bidirectional chunk (proposal)": lambda q, k, v, d: lion_attention_bi(
              q, k, v, d, chunk_size=args.chunk),
          "rnn": lambda q, k, v, d: lion_attention(q, k, v, d, form="rnn"),
      }
      for name, f in variants.items():
        info = dict(length=length, decays=kind, variant=name)
        cases.append(harness.Case(f"L={length} {kind} {name} fwd",
                                  lambda q, k, v, d, ct, f=f: f(q, k, v, d), inputs,
                                  info=dict(info, pass_="fwd")))
        cases.append(harness.Case(
            f"L={length} {kind} {name} fwd+bwd",
            jax.grad(lambda q, k, v, d, ct, f=f: jnp.sum(f(q, k, v, d) * ct), argnums=(0, 1, 2, 3)),
            inputs, info=dict(info, pass_="fwd+bwd")))
    for case in cases:
      harness.compile_case(case)
    harness.time_cases(cases, repeats=args.repeats)
    records += [harness.record(c) for c in cases]
    for c in cases:
      c.compiled = None
  rows = []
  for r in records:
    if r["variant"].startswith("chunk_scan"):
      twin = next(x for x in records if x["length"] == r["length"] and x["decays"] == r["decays"]
                  and x["pass_"] == r["pass_"] and x["variant"].startswith("bidirectional"))
      rnn = next(x for x in records if x["length"] == r["length"] and x["decays"] == r["decays"]
                 and x["pass_"] == r["pass_"] and x["variant"] == "rnn")
      rows.append([r["length"], r["decays"], r["pass_"], harness.fmt_ms(r["median_s"]),
                   harness.fmt_ms(twin["median_s"]), f"{r['median_s'] / twin['median_s']:.2f}x",
                   f"{rnn['median_s'] / r['median_s']:.1f}x",
                   f"{rnn['median_s'] / twin['median_s']:.1f}x",
                   harness.fmt_bytes(r["temp_plus_output_bytes"]),
                   harness.fmt_bytes(twin["temp_plus_output_bytes"])])
  print("\n" + harness.markdown_table(
      ["L", "decays", "pass", "chunk_scan ms", "proposal ms", "speed-up", "rnn/chunk_scan",
       "rnn/proposal", "mem chunk_scan", "mem proposal"], rows))
  harness.write_json("proposal_bichunk", records, pathlib.Path(args.out))


if __name__ == "__main__":
  main()
