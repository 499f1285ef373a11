"""The `chunk_scan` form that keeps only its inputs for the backward pass.

`residuals="recomputed"` in `lion_attention`. The stored kernel (`chunkwise`, `factored`)
keeps chunk blocks, chunk states and the normaliser for its backward pass, and plans its whole
working set for every row at once. This one cuts the sequence into P segments of S tokens (a
multiple of the chunk length C) and runs the stored kernel on one segment at a time, in the
forward pass and again, under `jax.vjp`, in the backward pass. Between segments only two K×E
states per head pass, exactly as between the shards of context parallelism
(`lion_jax.ops.context_parallel`, docs/math.md §4.4):

  forward   S→_m = Σ_{j ∈ m} exp(Σ_{t=j+1}^{end_m} f_t) k_j u_jᵀ
  backward  S←_m = Σ_{j ∈ m} exp(Σ_{t=start_m}^{j} a_t) k_j u_jᵀ
  entering  in→_s = Σ_{m<s} exp(Σ_{m<p<s} F̄_p) S→_m,   in←_s = Σ_{m>s} exp(Σ_{s<p<m} Ā_p) S←_m

and query i of segment s adds exp(Σ_{t=start_s}^{i} f_t) q_i·in→_s + exp(Σ_{t=i+1}^{end_s} a_t)
q_i·in←_s to what the kernel gives on the segment alone: the kernel starts its own state pass
from in→_s and in←_s (`initial_states`), so each query reads them with the chunk states it reads
anyway. Every exponent is a sum of log-decays ≤ 0, taken as a chunk-local cumulative sum plus
whole-chunk totals, so no exponent is a difference of long running sums.

What the backward pass keeps: the inputs q, k, v, the log-decays and the key mask as the
caller passed them (a fixed decay stays [H] or [H, V]) and 4·P states per head; never a chunk
block, a per-chunk state or the normaliser. Its working set is one segment's. The price is one
more forward pass of the kernel, segment by segment (docs/benchmarks.md §10).

Shapes follow the legend in `lion_jax.ops.masks`; additionally P = segments, S = segment length.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lion_jax.ops import chunkwise
from lion_jax.ops import masks

# A segment holds about this many tokens over the batch, with between SEGMENT_MIN and SEGMENT_MAX
# per row. Fewer tokens plan less working set, but the states passed between segments grow as
# L·B·H·K·E / S; at the ListOps preset (B = 32, L = 2048) S = 128 plans least, and S ≤ 512
# runs fastest on a 2-core CPU, whose caches hold a segment (docs/benchmarks.md §10).
SEGMENT_TOKENS = 2048
SEGMENT_MIN, SEGMENT_MAX = 128, 512
# On a GPU or TPU each segment is one step of a sequential loop of many small kernels, and no
# cache favours short segments: segments of up to this many tokens over the batch, of any
# length per row. On an H100 the ListOps preset's step (B = 50, L = 2048) ran 1.57x faster
# with one segment a row (102,400 tokens) than with S = 128, in less memory (10.3 against
# 10.7 GB planned); S = 512 and 1024 fell between (docs/benchmarks.md §11).
ACCELERATOR_SEGMENT_TOKENS = 1 << 17


def segment_length(batch: int, length: int, chunk: int) -> int:
  """S: whole chunks, in as few segments as a target length allows, of equal length.

  The target is clip(SEGMENT_TOKENS / batch, SEGMENT_MIN, SEGMENT_MAX) tokens on the CPU and
  max(ACCELERATOR_SEGMENT_TOKENS / batch, SEGMENT_MIN) elsewhere (at least one chunk). The
  row's n chunks go into P = ⌈n / (target in whole chunks)⌉ segments of ⌈n / P⌉ chunks, so
  the row is padded with zero keys by fewer than P chunks: Retrieval's 4000 tokens (125 chunks
  of 32) make segments of 4 chunks, not 125 of one.
  """
  num_chunks = -(-length // chunk)
  if jax.default_backend() == "cpu":
    target = min(max(SEGMENT_TOKENS // max(batch, 1), SEGMENT_MIN), SEGMENT_MAX)
  else:
    target = max(ACCELERATOR_SEGMENT_TOKENS // max(batch, 1), SEGMENT_MIN)
  segments = -(-num_chunks // max(target // chunk, 1))
  return chunk * -(-num_chunks // segments)


def recomputed_chunk_scan(q, k, v, log_decay, key_mask, *, convention: str, normalize: str,
                          chunk_size: int, eps: float, state_pass: str, forward_gate=None,
                          branch_axis: str | None = None, outer_states=None, key_sum=None):
  """Normalised LION attention by `chunk_scan`, storing only its inputs for the backward pass.

  Args:
    q, k: [B, L, H, K] queries and keys (feature-mapped, in the compute dtype).
    v: [B, L, H, V] values.
    log_decay: None, [H], [H, V], [B, L, H] or [B, L, H, V] (`masks.per_token_log_decay`).
    key_mask: [B, L] bool or None.
    convention, normalize, chunk_size, eps, state_pass: as in `lion_attention` (strings).
    forward_gate: [B, L, H] or [B, L, H, V] log-gates of the lower triangle in place of those of
      `convention` (`context_parallel`, whose shards carry their own boundary gate); needs
      per-token `log_decay`.
    branch_axis: as in `chunkwise.bidirectional_chunk_scan`, inside `shard_map`.
    outer_states: ([B, H, K, E], [B, H, K, E]) states entering the whole row from the left and
      from the right (`context_parallel`: what the other shards pass), E = the carried
      channels (V, plus V or 1 normaliser channels for normalize="after"); None: zero.
    key_sum: [B, H, K] Σ_j k_j over the whole row for normalize="before", where the row is
      longer than the keys passed (`context_parallel`); None: the keys passed.

  Returns:
    [B, L, H, V] outputs, equal to the stored kernel's to float32 rounding.
  """
  batch, length = q.shape[:2]
  chunk = max(1, min(chunk_size, length))
  segment = segment_length(batch, length, chunk)
  padded_length = -(-length // segment) * segment
  per_token = log_decay is not None and log_decay.ndim >= 3
  if forward_gate is None and per_token and convention == "code":
    # The forward gate at a segment's first token is the previous segment's last decay.
    forward_gate = masks.forward_gate(log_decay, convention)
  tokens = {"q": q, "k": k, "v": v, "log_decay": log_decay if per_token else None,
            "forward_gate": forward_gate}
  whole = {"log_decay": None if per_token else log_decay, "outer": outer_states}
  if normalize == "before":  # Σ_j q_i·k_j over the whole row: one dot product with Σ_j k_j
    masked = k if key_mask is None else k * key_mask[:, :, None, None].astype(k.dtype)
    whole["key_sum"] = masked.sum(axis=1) if key_sum is None else key_sum  # [B, H, K]
  pad = padded_length - length
  if pad:
    tokens = {name: None if x is None else _pad_tokens(x, pad) for name, x in tokens.items()}
    key_mask = None if key_mask is None else _pad_tokens(key_mask, pad)
  options = _Options(convention, normalize, chunk, eps, state_pass, segment,
                     padded_length // segment, branch_axis, length)
  out = _recomputed(options, tokens, whole, key_mask)
  return out[:, :length]


def _pad_tokens(x, pad):
  """Zero tokens at the end (keys: no contribution; a key mask: False)."""
  return jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))


class _Options(NamedTuple):
  """The static options of `_recomputed` (a custom_vjp's non-differentiable, hashable argument)."""

  convention: str
  normalize: str
  chunk: int  # C
  eps: float
  state_pass: str
  segment: int  # S
  segments: int  # P
  branch_axis: str | None
  length: int  # L before padding to P·S


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _recomputed(options, tokens, whole, key_mask):
  return _forward(options, tokens, whole, key_mask)[0]


def _forward(options, tokens, whole, key_mask):
  entering = _entering_or_zeros(options, tokens, whole, key_mask)

  def output(out, s_states):
    s, states = s_states
    segment = _segment_output(options, _slice(tokens, s, options), whole,
                              _slice(key_mask, s, options), s, states)  # [B, S, H, V]
    return _write(out, segment, s, options), None

  v = tokens["v"]
  out, _ = jax.lax.scan(output, jnp.zeros(v.shape, _output_dtype(v)),
                        (jnp.arange(options.segments), entering))
  return out, (tokens, whole, key_mask)


def _alone(options, whole):
  """One segment and nothing entering the row from outside: no states pass at all (a GPU's rule
  gives one segment a row at most presets, and a CPU's where L ≤ S)."""
  return options.segments == 1 and whole["outer"] is None


def _entering_or_zeros(options, tokens, whole, key_mask):
  """`_entering` of the summaries, or, for a row that is one segment alone, zero states of the
  same shapes without computing the summary nobody reads."""
  if _alone(options, whole):
    shapes = jax.eval_shape(lambda: _entering(
        options, _summaries(options, tokens, whole, key_mask), whole["outer"]))
    return jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
  return _entering(options, _summaries(options, tokens, whole, key_mask), whole["outer"])


def _summaries(options, tokens, whole, key_mask):
  """Every segment's summary, fields [P, B, H, ...] (`_summarise`)."""
  return jax.lax.map(lambda s: _summarise(options, _slice(tokens, s, options), whole,
                                          _slice(key_mask, s, options), s),
                     jnp.arange(options.segments))


def _output_dtype(v):
  return jnp.promote_types(v.dtype, jnp.float32)


def _backward(options, saved, grad):
  """`_backward_segments` under the name scope "stage:recomputed_backward".

  A custom VJP's backward ops carry the forward call's stack frames, so a profile that maps ops
  to their source (bench/segments.py --profile-steps) tells them apart by this name. Values are
  unchanged.
  """
  with jax.named_scope("stage:recomputed_backward"):
    return _backward_segments(options, saved, grad)


def _backward_segments(options, saved, grad):
  """Segment by segment: the kernel's backward pass on each segment (recomputing its forward
  pass), the entering states' gradients back through the state pass over segments, then the
  summaries' gradients. Each segment's gradients are written into the full-length gradients
  in place (a scan carry), never stacked."""
  # Tied to the incoming gradient, so that no recomputation starts before this layer's turn in
  # the backward pass (XLA:CPU would otherwise run them all early and hold every result).
  (tokens, whole, key_mask), grad = jax.lax.optimization_barrier((saved, grad))
  segments = jnp.arange(options.segments)
  zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)
  if _alone(options, whole):
    summaries = None
    entering = _entering_or_zeros(options, tokens, whole, key_mask)
  else:
    # The segment states again (a summary is one product per segment): kept, they would cost
    # [P, B, H, K, E] per direction and layer, more than the inputs when segments are short.
    summaries = _summaries(options, tokens, whole, key_mask)
    entering = _entering(options, summaries, whole["outer"])

  def output_grads(carry, s_states):
    d_tokens, d_whole = carry
    s, states = s_states
    mask = _slice(key_mask, s, options)
    _, pull = jax.vjp(lambda t, w, st: _segment_output(options, t, w, mask, s, st),
                      _slice(tokens, s, options), whole, states)
    d_seg, d_whole_s, d_states = pull(_slice(grad, s, options))
    d_tokens = jax.tree.map(lambda full, part: _write(full, part, s, options), d_tokens, d_seg)
    return (d_tokens, jax.tree.map(jnp.add, d_whole, d_whole_s)), d_states

  (d_tokens, d_whole), d_entering = jax.lax.scan(output_grads, (zeros(tokens), zeros(whole)),
                                                 (segments, entering))
  if summaries is None:  # nothing entered the one segment: no state gradient to pass back
    return d_tokens, d_whole, None
  _, pull_entering = jax.vjp(lambda x, outer: _entering(options, x, outer), summaries,
                             whole["outer"])
  d_summaries, d_outer = pull_entering(d_entering)
  if d_outer is not None:
    d_whole = {**d_whole, "outer": jax.tree.map(jnp.add, d_whole["outer"], d_outer)}

  def summary_grads(carry, s_grad):
    d_tokens, d_whole = carry
    s, grad_s = s_grad
    mask = _slice(key_mask, s, options)
    _, pull = jax.vjp(lambda t, w: _summarise(options, t, w, mask, s),
                      _slice(tokens, s, options), whole)
    d_seg, d_whole_s = pull(grad_s)
    d_tokens = jax.tree.map(lambda full, part: _write(full, _slice(full, s, options) + part, s,
                                                      options), d_tokens, d_seg)
    return (d_tokens, jax.tree.map(jnp.add, d_whole, d_whole_s)), None

  (d_tokens, d_whole), _ = jax.lax.scan(summary_grads, (d_tokens, d_whole),
                                        (segments, d_summaries))
  return d_tokens, d_whole, None


_recomputed.defvjp(_forward, _backward)


def _slice(tokens, s, options):
  """Segment s of every token operand: [B, L', ...] -> [B, S, ...]."""
  return jax.tree.map(
      lambda x: jax.lax.dynamic_slice_in_dim(x, s * options.segment, options.segment, axis=1),
      tokens)


def _write(full, part, s, options):
  """`full` [B, L', ...] with segment s replaced by `part` [B, S, ...] (in place in a loop)."""
  return jax.lax.dynamic_update_slice_in_dim(full, part.astype(full.dtype), s * options.segment,
                                             axis=1)


def _gates(options, seg, whole, key_mask, s):
  """The segment's carried values and gates.

  Returns:
    q, k (masked), u [B, S, H, E] (values and, for normalize="after", one channel of ones per
    decay channel), f and a [B, S, H, G'] the forward and backward log-gates (G' = 1 or E).
  """
  q, k, v = seg["q"], seg["k"], seg["v"]
  batch, length, heads, value_dim = v.shape
  if key_mask is not None:
    k = k * key_mask[:, :, None, None].astype(k.dtype)
  raw = seg["log_decay"] if seg["log_decay"] is not None else whole["log_decay"]
  a = masks.per_token_log_decay(raw, batch, length, heads, value_dim, q.dtype)  # [B, S, H, G]
  if seg["log_decay"] is None:  # a fixed decay: none on the padding, where states may enter
    real = s * options.segment + jnp.arange(length) < options.length  # [S]
    a = jnp.where(real[None, :, None, None], a, 0.0)
  if seg["forward_gate"] is not None:
    f = seg["forward_gate"]
    f = f if f.ndim == 4 else f[..., None]
  elif options.convention == "code":  # a decay fixed over tokens: only token 0 has no gate
    first = (jnp.arange(length) == 0)[None, :, None, None] & (s == 0)
    f = jnp.where(first, 0.0, a)
  else:
    f = a
  if options.normalize == "after":
    u, (f, a) = masks.with_unit_values(v, f, a)
  else:
    u = v
  return q, k, u, f, a


def _log_sums(gate, chunk):
  """Σ_{t=start}^{i} gate_t and Σ_{t=i+1}^{end} gate_t over a segment, chunk by chunk.

  Args:
    gate: [B, S, H, G] log-gates, S a multiple of `chunk`.

  Returns:
    ([B, S, H, G] inclusive prefix sums, [B, S, H, G] exclusive suffix sums): chunk-local sums
    of at most C terms plus sums of whole-chunk totals, never a difference of long sums.
  """
  batch, length, heads, groups = gate.shape
  num_chunks = length // chunk
  in_chunks = gate.reshape(batch, num_chunks, chunk, heads * groups)  # [B, n, C, H·G]
  inclusive = jnp.matmul(jnp.tril(jnp.ones((chunk, chunk), gate.dtype)), in_chunks)
  totals = inclusive[:, :, -1]  # [B, n, H·G]
  earlier = jnp.matmul(jnp.tril(jnp.ones((num_chunks, num_chunks), gate.dtype), -1), totals)
  later = jnp.matmul(jnp.triu(jnp.ones((num_chunks, num_chunks), gate.dtype), 1), totals)
  prefix = inclusive + earlier[:, :, None]
  suffix = (totals[:, :, None] - inclusive) + later[:, :, None]
  shape = (batch, length, heads, groups)
  return prefix.reshape(shape), suffix.reshape(shape)


def _summarise(options, seg, whole, key_mask, s):
  """What segment s passes to the others: S→, S← [B, H, K, E] and totals F̄, Ā [B, H, G']."""
  _, k, u, f, a = _gates(options, seg, whole, key_mask, s)
  f_prefix, f_after = _log_sums(f, options.chunk)
  a_prefix, _ = _log_sums(a, options.chunk)
  # Σ_{t=j+1}^{end} f: the first token's gate is outside (it decays what enters from before).
  forward = jnp.einsum("bshk,bshe->bhke", k, u * jnp.exp(f_after))
  backward = jnp.einsum("bshk,bshe->bhke", k, u * jnp.exp(a_prefix))
  return forward, backward, f_prefix[:, -1], a_prefix[:, -1]


def _entering(options, summaries, outer=None):
  """[P, B, H, K, E] in→ and in← of every segment: exclusive scans over the segments.

  `outer` ([B, H, K, E] from the left, from the right) enters as the summary of one more
  segment before the first and one after the last; their own totals are never used.
  """
  forward, backward, f_total, a_total = summaries  # [P, B, H, K, E], [P, B, H, G']
  segments = forward.shape[0]
  if outer is not None:
    nothing = jnp.zeros_like(f_total[:1])
    forward = jnp.concatenate([outer[0][None].astype(forward.dtype), forward])
    backward = jnp.concatenate([backward, outer[1][None].astype(backward.dtype)])
    f_total, a_total = jnp.concatenate([nothing, f_total]), jnp.concatenate([a_total, nothing])
  batch = forward.shape[1]
  to_chunk_axis = lambda x: jnp.moveaxis(x, 0, 2)  # [P, B, H, ...] -> [B, H, P, ...]
  totals = jnp.concatenate([to_chunk_axis(f_total), jnp.flip(to_chunk_axis(a_total), 2)])
  leaving = jnp.concatenate([to_chunk_axis(forward), jnp.flip(to_chunk_axis(backward), 2)])
  (states,) = chunkwise.STATE_PASSES["scan"](totals, (leaving,))  # [2B, H, P(+1), K, E]
  from_left, from_right = states[:batch], jnp.flip(states[batch:], 2)
  if outer is not None:
    from_left, from_right = from_left[:, :, 1:], from_right[:, :, :segments]
  return jnp.moveaxis(from_left, 2, 0), jnp.moveaxis(from_right, 2, 0)


def _segment_output(options, seg, whole, key_mask, s, states):
  """[B, S, H, V] segment s's normalised outputs from the kernel and the entering states."""
  q, k, u, f, a = _gates(options, seg, whole, key_mask, s)
  # The entering states start the kernel's own state pass, so each token reads them with the
  # chunk states it reads anyway (q_i·S in one product), decayed by exp(Σ_{t=start_s}^{i} f_t)
  # and exp(Σ_{t=i+1}^{end_s} a_t): two [B, S, H, K]×[B, H, K, E] products fewer a segment.
  out, _ = chunkwise.bidirectional_chunk_scan(q, k, u, f, a, options.chunk,
                                              state_pass=options.state_pass,
                                              branch_axis=options.branch_axis,
                                              initial_states=None if _alone(options, whole)
                                              else states)  # [B, S, H, E]
  return _normalised(options, whole, q, out, seg["v"].shape[-1])


def _normalised(options, whole, q, out, value_dim: int):
  """[B, S, H, V] outputs from the kernel's [B, S, H, E] sums: divided by the carried
  normaliser channels ("after"), by q_i·Σ_j k_j ("before"), or as they are ("none")."""
  if options.normalize == "after":
    return out[..., :value_dim] / (out[..., value_dim:] + options.eps)
  if options.normalize == "before":
    denominator = jnp.einsum("bshk,bhk->bsh", q, whole["key_sum"])[..., None]
    return out / (denominator + options.eps)
  return out
