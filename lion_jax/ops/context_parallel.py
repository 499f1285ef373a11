"""Context parallelism: the `chunk_scan` form with the sequence axis split over a mesh axis.

The sequence is cut into P contiguous shards, one per device along the mesh axis. What other
shards add to a query is linear in their keys and values and reaches it only through the shard
edges, so each shard first summarises itself in two K×E states per head (one per direction)
and its total log-decays:

  forward   S→_m = Σ_{c ∈ m} exp(Σ_{t=c+1}^{end_m} f_t) k_c u_cᵀ      (to its right edge)
  backward  S←_m = Σ_{c ∈ m} exp(Σ_{t=start_m}^{c} a_t) k_c u_cᵀ      (to its left edge)

One all-gather of these summaries (a few K×E matrices per head, independent of L) is the only
communication. Shard s then combines what enters it from the left and from the right,

  in→_s = Σ_{m<s} exp(Σ_{m<p<s} w_p) S→_m,   w_p = f_{start_p} + Σ_{t=start_p+1}^{end_p} f_t
  in←_s = Σ_{m>s} exp(Σ_{s<p<m} Ā_p) S←_m,    Ā_p = Σ_{t ∈ p} a_t

and runs the ordinary chunk kernel (`chunkwise.bidirectional_chunk_scan`) once on its own tokens
with K virtual tokens on either side that carry these states: keys the unit vectors e_1 … e_K,
values the rows of in→_s (left) and in←_s (right), log-decays 0 and zero queries. Then
q_r·k_j u_jᵀ summed over the K virtual keys is q_r·in→_s, decayed by the gates between, which
are f_{start_s} and the shard's own: exactly what the keys of the earlier shards add; likewise
on the right. The derivation and the two conventions' boundary gate f_{start_s} (a_{start_s} for
"symmetric", a_{start_s − 1}, the previous shard's last decay, for "code") are in docs/math.md
§4.4. Every exponent is a sum of log-decays ≤ 0 accumulated outwards from the edge it is
measured to, so the result is the unsharded one to float32 rounding.

Shapes follow the legend in `lion_jax.ops.masks`; additionally P = number of shards along the
mesh axis, S = tokens per shard.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec

from lion_jax.ops import chunkwise
from lion_jax.ops import masks
from lion_jax.ops import recomputed


def check_sequence_axis(sequence_axis: str, form: str) -> int:
  """The size of `sequence_axis` in the current mesh (`jax.set_mesh`).

  Raises:
    ValueError: `form` cannot be sharded over the sequence, there is no current mesh, or the
      mesh has no axis of that name; the message names the form and the axis.
  """
  if form != "chunk_scan":
    raise ValueError(f"form={form!r} cannot run with its sequence split over mesh axis "
                     f"sequence_axis={sequence_axis!r}; only form='chunk_scan' (or 'auto') can. "
                     "Pass form='chunk_scan' or sequence_axis=None.")
  mesh = jax.sharding.get_abstract_mesh()
  names = tuple(mesh.axis_names) if not mesh.empty else ()
  if sequence_axis not in names:
    where = (f"the current mesh has axes {names}" if names else
             "there is no current mesh (enter one with `with jax.set_mesh(mesh):`)")
    raise ValueError(f"sequence_axis={sequence_axis!r} (form={form!r}) is not an axis of the "
                     f"current mesh: {where}.")
  if dict(zip(names, mesh.axis_types))[sequence_axis] == jax.sharding.AxisType.Explicit:
    raise ValueError(f"sequence_axis={sequence_axis!r} (form={form!r}) is an Explicit mesh axis; "
                     "build the mesh with Auto axes (`jax.sharding.Mesh(devices, names)`, or "
                     "`jax.make_mesh(..., axis_types=(jax.sharding.AxisType.Auto,) * n)`).")
  return mesh.shape[sequence_axis]


def context_parallel_chunk_scan(q, k, u, log_decay, *, convention: str, chunk_size: int,
                                sequence_axis: str, state_pass: str = "auto"):
  """Σ_j (q_i·k_j) M_ij u_j over all keys, with the sequence split over `sequence_axis`.

  Called on global arrays under a mesh (`jax.set_mesh`) that has `sequence_axis`; the other
  mesh axes stay automatic (XLA partitions the batch over them as the inputs are sharded).
  L is padded with zero keys up to a multiple of the shard count.

  Args:
    q: [B, L, H, K] queries.
    k: [B, L, H, K] keys (zero where a key is masked out).
    u: [B, L, H, E] carried values.
    log_decay: [B, L, H, G] log λ, G = 1 or E.
    convention: "symmetric" or "code" (`lion_jax.ops.masks`).
    chunk_size: C of each shard's chunk kernel.
    sequence_axis: the mesh axis the sequence is split over.
    state_pass: how each shard's chunk kernel passes states between its chunks
      (`chunkwise.bidirectional_chunk_scan`).

  Returns:
    [B, L, H, E], equal to `chunkwise.bidirectional_chunk_scan` with the gate of `convention`.
  """
  shards = check_sequence_axis(sequence_axis, "chunk_scan")
  length = q.shape[1]
  pad = -length % shards
  padded = [jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)]) for x in (q, k, u, log_decay)]
  split = PartitionSpec(None, sequence_axis)

  def local(q, k, u, log_decay):
    return shard_chunk_scan(q, k, u, log_decay, convention=convention, chunk_size=chunk_size,
                            axis_name=sequence_axis, state_pass=state_pass)

  # check_vma=False: the chunk kernel's scans start from fresh zero states, which the
  # varying-manual-axes check would ask to be cast to "varying" first. Under `jit` also when
  # called eagerly: eager partially-manual shard_map rejects its own out_specs (jax 0.10.2).
  out = jax.jit(jax.shard_map(local, in_specs=(split,) * 4, out_specs=split,
                              axis_names={sequence_axis}, check_vma=False))(*padded)
  return out[:, :length]


def shard_chunk_scan(q, k, u, log_decay, *, convention: str, chunk_size: int, axis_name: str,
                     state_pass: str = "auto"):
  """One shard's outputs over all keys of all shards; call inside `shard_map` over `axis_name`.

  Args:
    q, k: [B, S, H, K] this shard's queries and keys.
    u: [B, S, H, E] this shard's carried values.
    log_decay: [B, S, H, G] this shard's log λ.
    convention, chunk_size, state_pass: as in `context_parallel_chunk_scan`.
    axis_name: the bound mesh axis the sequence is split over (shard s holds tokens
      s·S … s·S + S − 1).

  Returns:
    [B, S, H, E].
  """
  symmetric = masks.Convention(convention) is masks.Convention.SYMMETRIC
  # Gates strictly inside the shard (t > start); the gate at its first token, f_start, is
  # a_start ("symmetric") or the previous shard's last decay ("code"), which only it holds.
  inner_gate = masks.forward_gate(log_decay, convention).at[:, 0].set(0.0)  # [B, S, H, G]
  summary = _summarise(k, u, log_decay, inner_gate, log_decay[:, 0 if symmetric else -1])
  (enter_forward, enter_backward), first_gate = _exchange(summary, axis_name, symmetric)

  # K virtual tokens on each side carry the entering states into the local kernel.
  batch, length, heads, key_dim = q.shape
  unit_keys = jnp.broadcast_to(jnp.eye(key_dim, dtype=k.dtype)[None, :, None, :],
                               (batch, key_dim, heads, key_dim))  # [B, K (tokens), H, K]
  rows = lambda state: jnp.moveaxis(state, 2, 1)  # [B, H, K, E] -> [B, K (tokens), H, E]
  no_queries = jnp.zeros_like(unit_keys)
  no_decay = jnp.zeros((batch, key_dim) + log_decay.shape[2:], log_decay.dtype)  # [B, K, H, G]
  around = lambda left, x, right: jnp.concatenate([left, x, right], axis=1)  # [B, K+S+K, H, X]
  out, _ = chunkwise.bidirectional_chunk_scan(
      around(no_queries, q, no_queries), around(unit_keys, k, unit_keys),
      around(rows(enter_forward), u, rows(enter_backward)),
      around(no_decay, inner_gate.at[:, 0].set(first_gate), no_decay),
      around(no_decay, log_decay, no_decay), chunk_size,
      state_pass=state_pass, branch_axis=axis_name)  # [B, K+S+K, H, E]
  return out[:, key_dim:key_dim + length]


def _exchange(summary: _ShardSummary, axis_name: str, symmetric: bool):
  """The one all-gather between shards, and what this shard takes from it.

  Returns:
    ([B, H, K, E] the state entering the shard from the left, [B, H, K, E] from the right),
    and [B, H, G] the forward gate at its first token, f_start.
  """
  gathered = summary.all_gather(axis_name)  # every field [P, ...]
  shard = jax.lax.axis_index(axis_name)
  boundary = gathered.boundary
  if not symmetric:
    boundary = jnp.concatenate([jnp.zeros_like(boundary[:1]), boundary[:-1]])  # f_{start_p}
  return _entering_states(gathered, boundary, shard), boundary[shard]


def context_parallel_recomputed(q, k, v, log_decay, key_mask, *, convention: str,
                                normalize: str, chunk_size: int, eps: float, sequence_axis: str,
                                state_pass: str = "auto"):
  """Normalised LION attention with the sequence split over `sequence_axis`, each shard's
  kernel keeping only its inputs for the backward pass (`lion_jax.ops.recomputed`).

  The shards exchange the same summaries as `shard_chunk_scan`, but what enters a shard from
  the others goes straight into its segments' state pass (`recomputed_chunk_scan`'s
  `outer_states`): no virtual tokens, no carried copies of the values and gates, and the
  normalisation inside the recomputed region.

  Args:
    q, k: [B, L, H, K]; v: [B, L, H, V] (the compute dtype).
    log_decay: None, [H], [H, V], [B, L, H] or [B, L, H, V].
    key_mask: [B, L] bool or None.
    convention, normalize, chunk_size, eps, state_pass: as in `lion_attention` (strings).
    sequence_axis: the mesh axis the sequence is split over.

  Returns:
    [B, L, H, V] outputs.
  """
  shards = check_sequence_axis(sequence_axis, "chunk_scan")
  batch, length, heads, _ = q.shape
  pad = -length % shards
  if key_mask is None:
    key_mask = jnp.ones((batch, length), bool)
  per_token = log_decay is not None and log_decay.ndim >= 3
  pad_tokens = lambda x: jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
  tokens = [pad_tokens(x) for x in [q, k, v, key_mask] + ([log_decay] if per_token else [])]
  whole = [] if per_token or log_decay is None else [log_decay]
  split, replicated = PartitionSpec(None, sequence_axis), PartitionSpec()

  def local(q, k, v, key_mask, decay=None):
    return _recomputed_shard(q, k, v, key_mask, decay, convention=convention,
                             normalize=normalize, chunk_size=chunk_size, eps=eps,
                             axis_name=sequence_axis, state_pass=state_pass)

  specs = (split,) * 4 + ((split,) if per_token else (replicated,) * len(whole))
  out = jax.jit(jax.shard_map(local, in_specs=specs, out_specs=split,
                              axis_names={sequence_axis}, check_vma=False))(*tokens, *whole)
  return out[:, :length]


def _recomputed_shard(q, k, v, key_mask, log_decay, *, convention, normalize, chunk_size, eps,
                      axis_name, state_pass):
  """One shard's normalised outputs (`context_parallel_recomputed`); inside `shard_map`."""
  batch, length, heads, _ = q.shape
  value_dim = v.shape[-1]
  symmetric = masks.Convention(convention) is masks.Convention.SYMMETRIC
  a = masks.per_token_log_decay(log_decay, batch, length, heads, value_dim, q.dtype)
  masked = k * key_mask[:, :, None, None].astype(k.dtype)
  summary = _summarise_values(masked, v, a, normalize == "after", symmetric)
  outer, first_gate = _exchange(summary, axis_name, symmetric)
  forward_gate = None
  if not symmetric:  # f at the shard's first token is the previous shard's last decay
    groups = a.shape[-1]
    f = jnp.concatenate([first_gate[:, None, :, :groups], a[:, :-1]], axis=1)
    forward_gate = f[..., 0] if groups == 1 else f
  key_sum = None
  if normalize == "before":
    key_sum = jax.lax.psum(masked.sum(axis=1), axis_name)
  return recomputed.recomputed_chunk_scan(
      q, k, v, log_decay, key_mask, convention="symmetric" if forward_gate is None else convention,
      normalize=normalize, chunk_size=chunk_size, eps=eps, state_pass=state_pass,
      forward_gate=forward_gate, branch_axis=axis_name, outer_states=outer, key_sum=key_sum)


# A shard's summary under recomputed residuals is taken in pieces of this many tokens, one at a
# time, so that its working set (the decayed carried values) is a piece's, not the shard's.
SUMMARY_PIECE = 4096


@functools.partial(jax.checkpoint, static_argnums=(3, 4))
def _summarise_values(k, v, a, with_normaliser: bool, symmetric: bool):
  """`_summarise` of the carried values built here from v, piece by piece, so that the
  backward pass keeps v and the log-decays rather than the carried copies.

  Args:
    k: [B, S, H, K] masked keys; v: [B, S, H, V]; a: [B, S, H, G] per-token log-decays.
    with_normaliser: carry a channel of ones per decay channel (normalize="after").
    symmetric: the convention (which first or last decay the next shard's gate needs).
  """
  inner_gate = (a if symmetric else masks.forward_gate(a, "code")).at[:, 0].set(0.0)

  def carried(v, *gates):
    if not with_normaliser:
      return v, gates
    return masks.with_unit_values(v, *gates)

  def summary(k, v, a, inner_gate):
    u, (inner_gate, a) = carried(v, inner_gate, a)
    return _summarise(k, u, a, inner_gate, a[:, 0])

  _, (edge,) = carried(v[:, :1], a[:, :1] if symmetric else a[:, -1:])
  length = k.shape[1]
  if length <= SUMMARY_PIECE or length % SUMMARY_PIECE:
    whole = summary(k, v, a, inner_gate)
  else:
    piece = lambda x, i: jax.lax.dynamic_slice_in_dim(x, i * SUMMARY_PIECE, SUMMARY_PIECE, 1)
    parts = jax.lax.map(jax.checkpoint(lambda i: summary(*(piece(x, i) for x in (
        k, v, a, inner_gate)))), jnp.arange(length // SUMMARY_PIECE))  # fields [n, B, H, ...]
    whole = _join_pieces(parts)
  return whole._replace(boundary=edge[:, 0])


def _join_pieces(parts: _ShardSummary) -> _ShardSummary:
  """One summary of consecutive pieces (fields [n, B, H, ...], in order), as `_summarise`
  would give for all of their tokens at once."""
  def step(joined, part):
    forward, backward, forward_total, backward_total = joined
    decay = lambda total: jnp.exp(total)[..., None, :]  # [B, H, 1, G]
    return (decay(part.forward_total) * forward + part.forward,
            backward + decay(backward_total) * part.backward,
            forward_total + part.forward_total, backward_total + part.backward_total), None

  first = jax.tree.map(lambda x: x[0], parts)
  rest = jax.tree.map(lambda x: x[1:], parts)
  (forward, backward, forward_total, backward_total), _ = jax.lax.scan(
      step, (first.forward, first.backward, first.forward_total, first.backward_total), rest)
  return _ShardSummary(forward, backward, forward_total, backward_total, first.boundary)


# Recomputed in the backward pass rather than saving its [B, S, H, E] intermediates.
@jax.checkpoint
def _summarise(k, u, log_decay, inner_gate, boundary):
  """The shard's summary (fields of `_ShardSummary`, [B, H, K, E] states and [B, H, G] decays).

  Args:
    k: [B, S, H, K]; u: [B, S, H, E]; log_decay, inner_gate: [B, S, H, G] (the forward gate
    with its first entry zeroed); boundary: [B, H, G] the decay the next shard's forward gate
    needs from this one ("code") or this shard's own first gate ("symmetric").
  """
  after = _exclusive_suffix_sums(inner_gate)  # Σ_{t=c+1}^{end} f_t
  upto = jnp.cumsum(log_decay, axis=1)  # Σ_{t=start}^{c} a_t
  return _ShardSummary(
      forward=jnp.einsum("bshk,bshe->bhke", k, u * jnp.exp(after)),  # [B, H, K, E]
      backward=jnp.einsum("bshk,bshe->bhke", k, u * jnp.exp(upto)),  # [B, H, K, E]
      forward_total=inner_gate.sum(axis=1),  # [B, H, G]
      backward_total=log_decay.sum(axis=1),  # [B, H, G]
      boundary=boundary)


class _ShardSummary(NamedTuple):
  """What one shard tells the others, per batch row and head (a pytree)."""

  forward: jax.Array  # [B, H, K, E] S→, decayed to the shard's right edge
  backward: jax.Array  # [B, H, K, E] S←, decayed to its left edge
  forward_total: jax.Array  # [B, H, G] Σ f_t over t > start
  backward_total: jax.Array  # [B, H, G] Σ a_t over the shard
  boundary: jax.Array  # [B, H, G] the decay a forward gate at a shard edge needs

  def all_gather(self, axis_name: str) -> _ShardSummary:
    """Every shard's summary, stacked on a leading [P] axis, by one all-gather of one buffer."""
    batch = self.forward.shape[0]
    flat = jnp.concatenate([x.reshape(batch, -1) for x in self], axis=1)  # [B, X]
    stacked = jax.lax.all_gather(flat, axis_name)  # [P, B, X]
    fields, offset = [], 0
    for x in self:
      size = x[0].size
      fields.append(stacked[:, :, offset:offset + size].reshape(stacked.shape[:1] + x.shape))
      offset += size
    return _ShardSummary(*fields)


def _entering_states(gathered: _ShardSummary, boundary, shard):
  """The forward state entering shard `shard` from the left and the backward one from the right.

  Args:
    gathered: every shard's summary, fields [P, B, H, K, E] and [P, B, H, G].
    boundary: [P, B, H, G] the forward gate f_{start_p} at each shard's first token.
    shard: this shard's index s.

  Returns:
    [B, H, K, E] Σ_{m<s} exp(Σ_{m<p<s} w_p) S→_m and [B, H, K, E] Σ_{m>s} exp(Σ_{s<p<m} Ā_p) S←_m.
  """
  count = boundary.shape[0]
  source = jnp.arange(count)[:, None]  # m
  passed = jnp.arange(count)[None, :]  # p
  across = boundary + gathered.forward_total  # [P, B, H, G] w_p: the whole shard, from f_start

  def weights(between, sources, log_decays):  # [P(m), P(p)] bool, [P(m)] bool, [P, B, H, G]
    # Only the shards in between are summed (not differences of running totals), so a long,
    # strongly decaying shard elsewhere costs no precision; `where`, not a 0/1 matmul, so an
    # infinite log-decay outside the range is never multiplied by zero.
    exponent = jnp.where(between[:, :, None, None, None], log_decays[None], 0.0).sum(1)
    return jnp.where(sources[:, None, None, None], jnp.exp(exponent), 0.0)  # [P, B, H, G]

  left = weights((source < passed) & (passed < shard), jnp.arange(count) < shard, across)
  right = weights((shard < passed) & (passed < source), jnp.arange(count) > shard,
                  gathered.backward_total)
  # [P, B, H, 1, G] against [P, B, H, K, E]: G = 1 decays every carried channel alike.
  return ((left[..., None, :] * gathered.forward).sum(0),
          (right[..., None, :] * gathered.backward).sum(0))


def _exclusive_suffix_sums(x):
  """[B, S, H, G] -> Σ_{t > s} x_t along the sequence, accumulated from the end."""
  return jax.lax.cumsum(x, axis=1, reverse=True) - x
