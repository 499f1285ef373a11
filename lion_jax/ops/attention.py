"""`lion_attention`: Y = Scale(QKᵀ ⊙ M) V in five interchangeable forms.

    y_i = Σ_j (q_i·k_j) M_ij v_j / (Σ_j (q_i·k_j) M_ij + eps)        normalize="after" (LION)

Forms (all exact, all differentiable, all accepting every decay shape and option):
  attention:  the full L×L (×V for vector decays) mask from stable segment sums. O(L²) memory.
  rnn:        a forward and a backward `lax.scan` over tokens (Theorem 3.3). O(L) steps.
  scan:       the same recurrence by `lax.associative_scan` (log depth, for accelerators); on a
              CPU `state_pass="auto"` passes its states token by token, the rnn form's kernel.
  chunk:      the paper's LION-Chunk: query chunks mapped with `jax.vmap`, key chunks
              accumulated by `lax.scan`. O(L·C) memory but still O(L²) work.
  chunk_scan: exact C×C blocks plus forward and backward scans over chunk states.
              O(L·C·d + L·d²) work; the fast default for long sequences.
  auto:       "attention" when L ≤ chunk_size (a single chunk, where both are the same
              computation and the full form has no scan), otherwise "chunk_scan".

`sequence_axis=` splits the sequence over a mesh axis (context parallelism,
`lion_jax.ops.context_parallel`): only "chunk_scan" (and "auto", which then means it) can run so.

`split_directions=True` returns the output's left and right halves apart (`lion_attention`):
what LION with directional read-outs (`ModelConfig.directional_readout`) projects through two
W_o; `v_right=` gives the right half values of its own (complex decays,
`lion_jax.ops.rotation`). Every form computes them; "chunk_scan" then runs
`recurrent.causal_chunk_scan` on the sequence and on its flip, which stores its residuals (on a
CPU in chunks of at most `recurrent.CAUSAL_CHUNK_CPU` tokens).

`segment_ids=` packs several examples into one row (`lion_jax.ops.segments`): a query sees only the
keys of its own example, in every form, because the gate at each example's first token is
lowered by `segments.barrier` (the mask across it is below the dtype's rounding squared).

Which function runs for each call, and the measurement that chose it: the table in the package
docstring of `lion_jax.ops`, and docs/math.md §3.

Shapes follow the legend in `lion_jax.ops.masks`.
"""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp

from lion_jax.ops import chunkwise
from lion_jax.ops import context_parallel
from lion_jax.ops import masks
from lion_jax.ops import recomputed
from lion_jax.ops import recurrent
from lion_jax.ops import segments
from lion_jax.options import check_choice, str_enum

LionForm = str_enum("LionForm", "form", __name__,
                    "How `lion_attention` evaluates the same output (module docstring).")
Normalize = str_enum("Normalize", "normalize", __name__, """Where the row normalisation sits
(paper App. C.2–C.3, Table 6 ablations [4] and [5]): AFTER Scale(QKᵀ ⊙ M) V (LION); BEFORE (Scale(QKᵀ) ⊙ M) V, the
normaliser ignores the decays; NONE (QKᵀ ⊙ M) V.""")


def resolve_form(form: str | LionForm, length: int, chunk_size: int) -> LionForm:
  """Turns "auto" into a concrete form (rule in the module docstring).

  Raises:
    ValueError or TypeError: `form` is not one of the forms (the message lists them).
  """
  form = LionForm(check_choice("form", form))
  if form is LionForm.AUTO:
    return LionForm.ATTENTION if length <= chunk_size else LionForm.CHUNK_SCAN
  return form


def resolve_residuals(residuals: str, length: int) -> str:
  """The concrete residuals ("stored" or "recomputed") of a "chunk_scan" call over L tokens.

  "auto" recomputes rows longer than the CPU's longest segment (`recomputed.SEGMENT_MAX`, 512
  tokens), every LRA preset's: there the stored kernel makes a training step plan 2.9–3.3× the
  memory for 0.87–1.0× the time on a CPU (docs/benchmarks.md §10). Shorter rows keep the
  stored kernel, whose residuals are small there and which compiles faster. On a GPU with
  memory to spare, "stored" is faster: 1.44× at the ListOps preset on an H100, in 2.6× the
  memory (§11); "auto" does not choose it, since only the caller knows what fits (Path-X at
  its paper batch does not, stored, on an 80 GB card). `model.remat`
  (`jax.checkpoint` around each block) is no substitute on XLA:CPU, which plans no less with
  it; on GPU and TPU the two combine (remat keeps the block inputs, this the kernel's).
  """
  residuals = check_choice("residuals", residuals)
  if residuals != "auto":
    return residuals
  return "recomputed" if length > recomputed.SEGMENT_MAX else "stored"


def lion_attention(q, k, v, log_decay=None, *, form: str | LionForm = "auto",
                   convention: str = "symmetric", normalize: str | Normalize = "after",
                   key_mask=None, chunk_size: int = 64, eps: float = 1e-6,
                   sequence_axis: str | None = None, state_pass: str = "auto",
                   residuals: str = "auto", segment_ids=None, split_directions: bool = False,
                   v_right=None, phase=None):
  """Bidirectional LION attention.

  Args:
    q: [B, L, H, K] queries, already feature-mapped (non-negative for a positive normaliser).
    k: [B, L, H, K] keys, already feature-mapped.
    v: [B, L, H, V] values.
    log_decay: log λ ≤ 0: None (LION-LIT), [H] (LION-D), [H, V] (fixed per value channel),
      [B, L, H] (LION-S) or [B, L, H, V] (selective vector decays, one mask and one normaliser
      per value channel).
    form: "auto", "attention", "rnn", "scan", "chunk" or "chunk_scan" (module docstring).
    convention: "symmetric" (paper eq. 17) or "code" (official release); `lion_jax.ops.masks`.
    normalize: "after" (LION), "before" (Scale(QKᵀ) ⊙ M) or "none" ((QKᵀ ⊙ M) V).
    key_mask: [B, L] bool; keys where it is False take no part in any sum (padding).
    chunk_size: C for "chunk" and "chunk_scan" (any L works; the last chunk is padded).
    eps: added to every normaliser (all forms, so they agree).
    sequence_axis: a mesh axis of the current mesh (`jax.set_mesh`) to split the sequence over
      (context parallelism: each device holds L / P tokens and only K×E states per head cross
      devices); None keeps the sequence whole. Needs form "chunk_scan" or "auto".
    state_pass: how "chunk_scan" passes states between chunks, and "scan" between tokens:
      "scan" (`lax.scan`), "associative" (`lax.associative_scan`, log depth, for accelerators)
      or "auto" (`chunkwise.resolve_state_pass`: "scan" on a CPU); the values are the same.
      Also each shard's kernel under `sequence_axis`. Other forms ignore it.
    residuals: what "chunk_scan" keeps for the backward pass: "stored" (chunk blocks, states
      and normalisers: the fastest), "recomputed" (only the inputs; the kernel runs segment by
      segment and again in the backward pass, `lion_jax.ops.recomputed`) or "auto"
      (`resolve_residuals`). The values are the same. Other forms ignore it.
    segment_ids: [B, L] integers: several examples packed end to end in a row, each one
      contiguous run of one positive id, 0 at padding (`lion_jax.ops.segments`). A query then sees
      only the keys of its own example, and every example's outputs equal those of the example
      alone, to the dtype's rounding. Padding tokens are masked as keys (as by key_mask, which
      may also be given); their own outputs are meaningless. Not with convention="code" under
      sequence_axis.
    split_directions: return the output's two halves apart, (y^F, y^B) with y^F + y^B = y:
      y^F_i = (Σ_{j<i} w_ij v_j + ½ w_ii v_i) / Z_i and
      y^B_i = (Σ_{j>i} w_ij v_j + ½ w_ii v_i) / Z_i,
      w_ij = (q_i·k_j) M_ij and Z_i the row's usual normaliser, so each key on the left of the
      query counts in y^F and each on its right in y^B. Not with sequence_axis or
      residuals="recomputed"; chunk_scan then stores its residuals and ignores state_pass.
    v_right: None, or [B, L, H, V] the values that y^B sums instead of v (split_directions
      only): y^B_i = (Σ_{j>i} w_ij v_right_j + ½ w_ii v_right_i) / Z_i. Each direction carries
      only its own values, as complex decays need (`lion_jax.ops.rotation`).
    phase: None, or [H, 1 or V/2] θ: complex decays λ e^{iθ} (forms "rnn" and "scan",
      normalize="none", no v_right; `lion_jax.ops.rotation`): v holds V/2 complex values per
      head, their real parts, then their imaginary parts, log_decay one log λ per head or per
      complex channel, and the outputs are complex in the same layout.

  Returns:
    [B, L, H, V] outputs in the dtype of `v` (a pair of them with split_directions). Decays,
    cumulative sums, normalisers and states are computed in at least float32, also for
    bfloat16 inputs.

  Raises:
    ValueError: a shape that does not fit the others (q, k, v, log_decay, key_mask), an option
      string that is not one of its values, chunk_size < 1 or eps < 0, or a sequence_axis that
      the current mesh lacks or the form cannot use; the message names the argument and what
      it accepts.
    TypeError: an array of the wrong kind (q, k, v or log_decay not floating point, key_mask not
      bool), a non-string option, or a chunk_size that is not an integer.
  """
  _check_arrays(q, k, v, log_decay, key_mask)
  if v_right is not None:
    _check_v_right(v, v_right, split_directions)
  batch, length, heads, _ = q.shape
  if segment_ids is not None:
    segments.check_segment_ids(segment_ids, batch, length)
  value_dim = v.shape[-1]
  normalize = Normalize(check_choice("normalize", normalize))
  check_choice("convention", convention)
  check_choice("state_pass", state_pass)
  residuals = check_choice("residuals", residuals)
  _check_numbers(chunk_size, eps)
  if phase is not None:
    _check_phase(form, length, chunk_size, normalize, v, v_right, phase)
    value_dim //= 2  # complex channels: each a real and an imaginary part
  if split_directions and sequence_axis is not None:
    raise ValueError(f"split_directions=True cannot run with sequence_axis={sequence_axis!r}: "
                     "the context-parallel kernel sums both directions; use sequence_axis=None.")
  if split_directions and residuals == "recomputed":
    raise ValueError("split_directions=True cannot run with residuals='recomputed': its causal "
                     "chunk kernel stores its residuals; use residuals='auto' or 'stored'.")
  if sequence_axis is not None and LionForm(check_choice("form", form)) is LionForm.AUTO:
    form = LionForm.CHUNK_SCAN  # at any L: the full form cannot be split over devices
  form = resolve_form(form, length, chunk_size)
  if sequence_axis is not None:
    context_parallel.check_sequence_axis(sequence_axis, form.value)
    if segment_ids is not None and check_choice("convention", convention) == "code":
      raise ValueError("segment_ids with convention='code' cannot run with sequence_axis="
                       f"{sequence_axis!r} (the shards' boundary gates would need each "
                       "example's first gate); use convention='symmetric' or no sequence_axis.")
  if segment_ids is not None and normalize is Normalize.BEFORE:
    # Σ_j q_i·k_j over the query's own example only: the numerator is the "none" form's.
    numerator = lion_attention(q, k, v, log_decay, form=form, convention=convention,
                               normalize="none", key_mask=key_mask, chunk_size=chunk_size,
                               eps=eps, sequence_axis=sequence_axis, state_pass=state_pass,
                               residuals=residuals, segment_ids=segment_ids,
                               split_directions=split_directions, v_right=v_right)
    dtype = jnp.promote_types(jnp.promote_types(q.dtype, v.dtype), jnp.float32)
    denominator = segments.example_key_dots(q.astype(dtype), k.astype(dtype), segment_ids,
                                            key_mask)  # [B, L, H]
    divide = lambda x: (x.astype(dtype) / (denominator[..., None] + eps)).astype(v.dtype)
    return tuple(map(divide, numerator)) if split_directions else divide(numerator)

  out_dtype = v.dtype
  dtype = jnp.promote_types(jnp.promote_types(q.dtype, v.dtype), jnp.float32)
  q, k, v = (x.astype(dtype) for x in (q, k, v))
  v_right = None if v_right is None else v_right.astype(dtype)
  phase = None if phase is None else jnp.asarray(phase, dtype)
  given_log_decay = None if log_decay is None else jnp.asarray(log_decay, dtype)
  log_decay = masks.per_token_log_decay(log_decay, batch, length, heads, value_dim, dtype)
  gate_f = masks.forward_gate(log_decay, convention)
  explicit_forward_gate = None  # the recomputing kernels derive theirs from the convention
  if segment_ids is not None:
    log_decay, gate_f = segments.separate_examples(log_decay, gate_f, segment_ids)
    # Per token now, each example's first gate a barrier; [B, L, H] for one decay per head.
    given_log_decay = log_decay[..., 0] if log_decay.shape[-1] == 1 else log_decay
    if check_choice("convention", convention) == "code":
      explicit_forward_gate = gate_f if gate_f.shape[-1] > 1 else gate_f[..., 0]
    real = segment_ids > 0
    key_mask = real if key_mask is None else key_mask & real
  if split_directions:
    if key_mask is not None:
      k = k * key_mask[:, :, None, None].astype(dtype)
    halves, denominator = _direction_halves(form, q, k, v, v_right, gate_f, log_decay,
                                            normalize, chunk_size, state_pass, phase)
    if normalize is Normalize.BEFORE:
      denominator = jnp.einsum("blhk,bhk->blh", q, k.sum(axis=1))[..., None]
    if normalize is not Normalize.NONE:
      halves = tuple(half / (denominator + eps) for half in halves)
    return tuple(half.astype(out_dtype) for half in halves)
  if sequence_axis is not None and resolve_residuals(residuals, length) == "recomputed":
    out = context_parallel.context_parallel_recomputed(
        q, k, v, given_log_decay, key_mask, convention=check_choice("convention", convention),
        normalize=normalize.value, chunk_size=chunk_size, eps=eps, sequence_axis=sequence_axis,
        state_pass=check_choice("state_pass", state_pass))
    return out.astype(out_dtype)
  if form is LionForm.CHUNK_SCAN and resolve_residuals(residuals, length) == "recomputed":
    # Fixed decays stay [H] or [H, V]: what the backward pass keeps is what was passed.
    out = recomputed.recomputed_chunk_scan(
        q, k, v, given_log_decay, key_mask, convention=check_choice("convention", convention),
        normalize=normalize.value, chunk_size=chunk_size, eps=eps,
        state_pass=check_choice("state_pass", state_pass), forward_gate=explicit_forward_gate)
    return out.astype(out_dtype)
  if key_mask is not None:
    k = k * key_mask[:, :, None, None].astype(dtype)

  if sequence_axis is not None:
    numerator, denominator = _context_parallel_chunk_scan(q, k, v, log_decay, convention,
                                                          normalize, chunk_size, sequence_axis,
                                                          state_pass)
  elif form in (LionForm.ATTENTION, LionForm.CHUNK, LionForm.CHUNK_SCAN):
    evaluate = {LionForm.ATTENTION: _attention, LionForm.CHUNK: _chunked_queries,
                LionForm.CHUNK_SCAN: functools.partial(_chunk_scan, state_pass=state_pass)}[form]
    numerator, denominator = evaluate(q, k, v, gate_f, log_decay, normalize, chunk_size)
  else:
    numerator, denominator = _recurrent(_causal_kernel(form, state_pass, phase), q, k, v,
                                        gate_f, log_decay, normalize)
  if normalize is Normalize.BEFORE:
    # Σ_j q_i·k_j without decays: one dot product with the summed (masked) keys.
    denominator = jnp.einsum("blhk,bhk->blh", q, k.sum(axis=1))[..., None]
  out = numerator if normalize is Normalize.NONE else numerator / (denominator + eps)
  return out.astype(out_dtype)


def _check_arrays(q, k, v, log_decay, key_mask):
  """Raises a ValueError or TypeError naming the argument when an input has the wrong rank,
  shape or dtype (the log_decay shape is checked by `masks.per_token_log_decay`)."""
  arrays = {"q": q, "k": k, "v": v, "log_decay": log_decay, "key_mask": key_mask}
  for name, x in arrays.items():
    if x is not None and not (hasattr(x, "shape") and hasattr(x, "dtype")):
      raise TypeError(f"{name} must be an array; got {type(x).__name__}.")
  for name, layout in (("q", "[B, L, H, K]"), ("k", "[B, L, H, K]"), ("v", "[B, L, H, V]")):
    if len(arrays[name].shape) != 4:
      raise ValueError(f"{name} must be 4-D {layout}; got shape {tuple(arrays[name].shape)}.")
  if k.shape != q.shape:
    raise ValueError(f"k must have the shape of q, [B, L, H, K]={tuple(q.shape)}; got "
                     f"{tuple(k.shape)}.")
  if v.shape[:3] != q.shape[:3]:
    raise ValueError(f"v must share [B, L, H]={tuple(q.shape[:3])} with q; got shape "
                     f"{tuple(v.shape)}.")
  for name in ("q", "k", "v", "log_decay"):
    x = arrays[name]
    if x is not None and not jnp.issubdtype(x.dtype, jnp.floating):
      raise TypeError(f"{name} must be floating point (float32, bfloat16, float64, ...); got "
                      f"dtype {x.dtype}.")
  if key_mask is not None:
    if tuple(key_mask.shape) != tuple(q.shape[:2]):
      raise ValueError(f"key_mask has shape {tuple(key_mask.shape)}; expected [B, L]="
                       f"{list(q.shape[:2])}.")
    if key_mask.dtype != jnp.bool_:
      raise TypeError(f"key_mask must be bool (False at padding keys); got dtype {key_mask.dtype}.")


def _check_v_right(v, v_right, split_directions):
  """Raises unless v_right is a floating array of v's shape, given with split_directions."""
  if not split_directions:
    raise ValueError("v_right (the values of the right half y^B) needs split_directions=True.")
  if not (hasattr(v_right, "shape") and hasattr(v_right, "dtype")):
    raise TypeError(f"v_right must be an array; got {type(v_right).__name__}.")
  if tuple(v_right.shape) != tuple(v.shape):
    raise ValueError(f"v_right must have v's shape [B, L, H, V]={tuple(v.shape)}; got "
                     f"{tuple(v_right.shape)}.")
  if not jnp.issubdtype(v_right.dtype, jnp.floating):
    raise TypeError(f"v_right must be floating point; got dtype {v_right.dtype}.")


def _check_phase(form, length, chunk_size, normalize, v, v_right, phase):
  """Raises unless complex decays can run: form rnn or scan, normalize "none", no v_right, an
  even V and a floating phase of shape [H, 1 or V/2]."""
  if resolve_form(form, length, chunk_size) not in (LionForm.RNN, LionForm.SCAN):
    raise ValueError(f"phase needs form 'rnn' or 'scan' (got {form!r}); "
                     "`lion_jax.ops.rotation.rotating_lion_attention` runs every form.")
  if normalize is not Normalize.NONE or v_right is not None:
    raise ValueError("phase needs normalize='none' and no v_right: the row normaliser of a "
                     "complex mask would be complex, and both directions sum the same values.")
  heads, value_dim = v.shape[2], v.shape[3]
  if (value_dim % 2 or not hasattr(phase, "shape") or phase.ndim != 2 or phase.shape[0] != heads
      or phase.shape[1] not in (1, value_dim // 2)):
    raise ValueError(f"phase needs v of an even V (got {value_dim}) and shape [H, 1 or V/2] = "
                     f"[{heads}, 1 or {value_dim // 2}] (got {getattr(phase, 'shape', phase)}).")


def _causal_kernel(form, state_pass, phase=None):
  """The causal kernel of form "rnn" or "scan": "scan" passes its states by `lax.scan` where
  `state_pass` resolves to "scan" (a CPU: fwd+bwd of the associative scan took 2-2.5x as long at
  B = 64, L = 1,024, H = 2, K = 4, E = 8), by `lax.associative_scan` elsewhere."""
  if form is LionForm.SCAN and chunkwise.resolve_state_pass(state_pass) == "scan":
    form = LionForm.RNN
  kernel = recurrent.CAUSAL_KERNELS[form.value]
  return kernel if phase is None else functools.partial(kernel, phase=phase)


def _check_numbers(chunk_size, eps):
  """Raises when chunk_size is not a positive integer or eps is a negative or non-finite number."""
  if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
    raise TypeError(f"chunk_size must be a positive integer; got {type(chunk_size).__name__} "
                    f"{chunk_size!r}.")
  if chunk_size < 1:
    raise ValueError(f"chunk_size={chunk_size} must be a positive integer (the chunk length C).")
  if isinstance(eps, numbers.Real) and not 0.0 <= eps < float("inf"):  # traced eps: unchecked
    raise ValueError(f"eps={eps!r} must be a finite number >= 0.")


def _recurrent(kernel, q, k, v, gate_f, log_decay, normalize):
  """Numerator and decayed normaliser from a causal kernel run in both directions."""
  gate_b = masks.backward_gate_flipped(log_decay)
  if normalize is not Normalize.AFTER:
    return recurrent.bidirectional(kernel, q, k, v, gate_f, gate_b), None
  carried, (gate_f, gate_b) = masks.with_unit_values(v, gate_f, gate_b)
  out = recurrent.bidirectional(kernel, q, k, carried, gate_f, gate_b)
  return out[..., :v.shape[-1]], out[..., v.shape[-1]:]


def _direction_halves(form, q, k, v, v_right, gate_f, log_decay, normalize, chunk_size,
                      state_pass="auto", phase=None):
  """The numerator's left and right halves (`split_directions`) and the decayed normaliser.

  v_right: None, or [B, L, H, V] the values of the right half (`lion_attention`).
  state_pass, phase: as `lion_attention` takes them (phase: forms rnn and scan only).

  Returns:
    ([B, L, H, V], [B, L, H, V]) halves, and [B, L, H, G] Σ_j w_ij (None unless
    normalize="after").
  """
  if form in (LionForm.ATTENTION, LionForm.CHUNK):
    evaluate = _attention if form is LionForm.ATTENTION else _chunked_queries
    parts = [evaluate(q, k, values, gate_f, log_decay, normalize, chunk_size, side=side)
             for values, side in ((v, "left"), (v if v_right is None else v_right, "right"))]
    halves = tuple(numerator for numerator, _ in parts)
    if normalize is not Normalize.AFTER:
      return halves, None
    return halves, parts[0][1] + parts[1][1]
  if form is LionForm.CHUNK_SCAN:
    if jax.default_backend() == "cpu":
      chunk_size = min(chunk_size, recurrent.CAUSAL_CHUNK_CPU)
    kernel = functools.partial(recurrent.causal_chunk_scan, chunk_size=chunk_size)
  else:
    kernel = _causal_kernel(form, state_pass, phase)
  gate_b = masks.backward_gate_flipped(log_decay)
  if normalize is not Normalize.AFTER:
    return recurrent.bidirectional_halves(kernel, q, k, v, gate_f, gate_b, v_right), None
  carried_right = None if v_right is None else masks.with_unit_values(v_right, gate_f)[0]
  carried, (gate_f, gate_b) = masks.with_unit_values(v, gate_f, gate_b)
  left, right = recurrent.bidirectional_halves(kernel, q, k, carried, gate_f, gate_b,
                                               carried_right)
  value_dim = v.shape[-1]
  return (left[..., :value_dim], right[..., :value_dim]), (left[..., value_dim:]
                                                           + right[..., value_dim:])


def _side_weights(query_pos, key_pos, side):
  """[I, J] weights of each key in one half (`split_directions`): 1 on the side, ½ on the
  diagonal, 0 across; None for the whole row (side=None)."""
  if side is None:
    return None
  on_side = (query_pos[:, None] > key_pos[None, :] if side == "left"
             else query_pos[:, None] < key_pos[None, :])
  return jnp.where(on_side, 1.0, jnp.where(query_pos[:, None] == key_pos[None, :], 0.5, 0.0))


def _chunk_scan(q, k, v, gate_f, log_decay, normalize, chunk_size, state_pass="auto"):
  """Numerator and decayed normaliser from the bidirectional chunk kernel."""
  if normalize is not Normalize.AFTER or log_decay.shape[-1] == 1:
    # One decay per head: the normaliser is a row sum of the same weights, no extra channel.
    return chunkwise.bidirectional_chunk_scan(q, k, v, gate_f, log_decay, chunk_size,
                                              with_key_sums=normalize is Normalize.AFTER,
                                              state_pass=state_pass)
  carried, (gate_f, log_decay) = masks.with_unit_values(v, gate_f, log_decay)
  out, _ = chunkwise.bidirectional_chunk_scan(q, k, carried, gate_f, log_decay, chunk_size,
                                              state_pass=state_pass)
  return out[..., :v.shape[-1]], out[..., v.shape[-1]:]


def _context_parallel_chunk_scan(q, k, v, log_decay, convention, normalize, chunk_size, axis,
                                 state_pass):
  """Numerator and decayed normaliser with the sequence split over mesh axis `axis`."""
  scan = lambda u, log_decay: context_parallel.context_parallel_chunk_scan(
      q, k, u, log_decay, convention=convention, chunk_size=chunk_size, sequence_axis=axis,
      state_pass=state_pass)
  if normalize is not Normalize.AFTER:
    return scan(v, log_decay), None
  carried, (log_decay,) = masks.with_unit_values(v, log_decay)
  out = scan(carried, log_decay)
  return out[..., :v.shape[-1]], out[..., v.shape[-1]:]


def _contract(scores, decay, v, normalize):
  """Σ_j scores_ij · decay_ij · v_j and the decayed row sums.

  Args:
    scores: [B, H, I, J] qᵀk for a block of queries I and keys J.
    decay: [B, H, G, I, J] mask entries.
    v: [B, J, H, V] values.
    normalize: whether a decayed row sum is needed.

  Returns:
    numerator [B, I, H, V] and denominator [B, I, H, G] (or None).
  """
  weights = scores[:, :, None] * decay  # [B, H, G, I, J]
  if decay.shape[2] == 1:
    numerator = jnp.einsum("bhij,bjhv->bihv", weights[:, :, 0], v)
  else:
    numerator = jnp.einsum("bhvij,bjhv->bihv", weights, v)
  if normalize is not Normalize.AFTER:
    return numerator, None
  return numerator, jnp.einsum("bhgij->bihg", weights)


def _attention(q, k, v, gate_f, log_decay, normalize, chunk_size, side=None):
  """Full form: the whole [B, H, G, L, L] mask from stable segment sums.

  side: None (every key), or "left"/"right": one half of `split_directions` (`_side_weights`).
  """
  del chunk_size
  decay = masks.mask_from_gates(jnp.moveaxis(gate_f, 1, -1),
                                jnp.moveaxis(log_decay, 1, -1))  # [B, H, G, L, L]
  positions = jnp.arange(q.shape[1])
  weights = _side_weights(positions, positions, side)  # [L, L] or None
  if weights is not None:
    decay = decay * weights.astype(decay.dtype)
  scores = jnp.einsum("bihk,bjhk->bhij", q, k)  # [B, H, L, L]
  return _contract(scores, decay, v, normalize)


def _relative_cumsum(gate, start):
  """Log-decay from the boundary before position `start` to every position, stable in float32.

  Args:
    gate: [B, L, H, G] per-token log-gates.
    start: index of the first token of the query chunk.

  Returns:
    [B, L, H, G] P with P_x = Σ_{t=start}^{x} gate_t for x ≥ start and −Σ_{t=x+1}^{start-1} gate_t
    for x < start, so Σ_{t=s+1}^{x} gate_t = P_x − P_s with both sums accumulated outwards from
    the query chunk: entries near the queries never come from differences of large totals.
  """
  position = jnp.arange(gate.shape[1])[None, :, None, None]
  right = jnp.cumsum(jnp.where(position >= start, gate, 0.0), axis=1)
  left = jnp.where(position < start, gate, 0.0)
  left_exclusive = jnp.flip(jnp.cumsum(jnp.flip(left, 1), axis=1), 1) - left  # Σ_{t>x}
  return right - left_exclusive


def _chunked_queries(q, k, v, gate_f, log_decay, normalize, chunk_size, side=None):
  """LION-Chunk (paper C.10): each query chunk, in parallel, accumulates over key chunks.

  side: None (every key), or "left"/"right": one half of `split_directions` (`_side_weights`).
  """
  batch, length, heads, _ = q.shape
  chunk = max(1, min(chunk_size, length))
  num_chunks = -(-length // chunk)
  pad = num_chunks * chunk - length
  padded = lambda x: jnp.pad(x, [(0, 0), (0, pad), (0, 0), (0, 0)])
  q, k, v, gate_f, log_decay = map(padded, (q, k, v, gate_f, log_decay))
  to_chunks = lambda x: jnp.moveaxis(x.reshape(batch, num_chunks, chunk, *x.shape[2:]), 1, 0)
  key_chunks = tuple(map(to_chunks, (k, v)))  # [N, B, C, H, ...] each
  positions = jnp.arange(num_chunks * chunk).reshape(num_chunks, chunk)

  def one_query_chunk(index):
    start = index * chunk
    rel_f = _relative_cumsum(gate_f, start)  # [B, L, H, G] lower-triangle exponents
    rel_a = _relative_cumsum(log_decay, start)  # [B, L, H, G] upper-triangle exponents
    take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, chunk, axis=1)
    q_i, f_i, a_i = take(q), take(rel_f), take(rel_a)  # [B, C, H, ...]
    query_pos = start + jnp.arange(chunk)

    def add_key_chunk(acc, key_chunk):
      k_j, v_j, f_j, a_j, key_pos = key_chunk
      scores = jnp.einsum("bihk,bjhk->bhij", q_i, k_j)  # [B, H, C, C]
      lower = query_pos[:, None] > key_pos[None, :]
      upper = query_pos[:, None] < key_pos[None, :]
      head_first = lambda x: jnp.moveaxis(x, 1, -1)  # [B, C, H, G] -> [B, H, G, C]
      exponent = jnp.where(lower, head_first(f_i)[..., :, None] - head_first(f_j)[..., None, :],
                           jnp.where(upper, head_first(a_j)[..., None, :]
                                     - head_first(a_i)[..., :, None], 0.0))  # [B, H, G, C, C]
      decay = jnp.exp(exponent)  # [B, H, G, C, C]
      weights = _side_weights(query_pos, key_pos, side)
      if weights is not None:
        decay = decay * weights.astype(decay.dtype)
      num, den = _contract(scores, decay, v_j, normalize)
      return jax.tree.map(jnp.add, acc, (num, den)), None

    zeros = jnp.zeros(q_i.shape[:3] + (v.shape[-1],), q.dtype)  # [B, C, H, V]
    den0 = None if normalize is not Normalize.AFTER else zeros[..., :log_decay.shape[-1]]
    f_keys, a_keys = to_chunks(rel_f), to_chunks(rel_a)
    (num, den), _ = jax.lax.scan(add_key_chunk, (zeros, den0),
                                 (*key_chunks, f_keys, a_keys, positions))
    return num, den

  num, den = jax.vmap(one_query_chunk)(jnp.arange(num_chunks))  # [N, B, C, H, ...]
  unchunk = lambda x: jnp.moveaxis(x, 0, 1).reshape(batch, num_chunks * chunk, heads, -1)[:, :length]
  return unchunk(num), (None if den is None else unchunk(den))
