"""A float64 NumPy reference for LION that sums the definition directly.

Written independently of `lion_jax`: no segment sums, no recurrences, no shared helpers. For each
query i and key j the mask entry is the product of the λ's the definition names (paper eq. 17 and
the official release; docs/math.md §1.1):

  symmetric: M_ij = Π_{t=min(i,j)+1}^{max(i,j)} λ_t
  code:      M_ij = Π_{t=j}^{i-1} λ_t (i > j),  Π_{t=i+1}^{j} λ_t (i < j),  1 (i = j)

and y_i = Σ_j (q_i·k_j) M_ij v_j / (Σ_j (q_i·k_j) M_ij + eps) with one mask (and one normaliser)
per value channel for vector decays.
"""

import numpy as np


def expand_log_decay(log_decay, batch, length, heads, value_dim):
  """Any accepted decay shape -> [B, L, H, V] float64 log-decays (zeros for LIT)."""
  if log_decay is None:
    return np.zeros((batch, length, heads, value_dim))
  a = np.asarray(log_decay, np.float64)
  if a.shape == (heads,):
    a = a[None, None, :, None]
  elif a.shape == (heads, value_dim):
    a = a[None, None]
  elif a.shape == (batch, length, heads):
    a = a[..., None]
  return np.broadcast_to(a, (batch, length, heads, value_dim))


def reference_mask(decay, convention):
  """[L, V] decays λ -> [L, L, V] mask, entry by entry from the products in the definition."""
  length = decay.shape[0]
  mask = np.ones((length, length) + decay.shape[1:])
  for i in range(length):
    for j in range(length):
      if i > j:
        span = decay[j + 1:i + 1] if convention == "symmetric" else decay[j:i]
      elif i < j:
        span = decay[i + 1:j + 1]
      else:
        continue
      mask[i, j] = np.prod(span, axis=0)
  return mask


def reference_lion(q, k, v, log_decay=None, *, convention="symmetric", normalize="after",
                   key_mask=None, eps=1e-6):
  """LION output by direct summation over queries i and keys j.

  Args:
    q, k: [B, L, H, K]; v: [B, L, H, V]; log_decay: any shape `lion_attention` accepts;
    convention, normalize, key_mask, eps: as in `lion_attention`.

  Returns:
    [B, L, H, V] float64.
  """
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  batch, length, heads, _ = q.shape
  value_dim = v.shape[-1]
  decay = np.exp(expand_log_decay(log_decay, batch, length, heads, value_dim))
  valid = np.ones((batch, length)) if key_mask is None else np.asarray(key_mask, np.float64)
  out = np.zeros((batch, length, heads, value_dim))
  for b in range(batch):
    for h in range(heads):
      mask = reference_mask(decay[b, :, h], convention)  # [L, L, V]
      for i in range(length):
        scores = np.array([q[b, i, h] @ k[b, j, h] * valid[b, j] for j in range(length)])  # [L]
        weights = scores[:, None] * mask[i]  # [L(j), V]
        numerator = (weights * v[b, :, h]).sum(axis=0)
        if normalize == "none":
          out[b, i, h] = numerator
        elif normalize == "before":
          out[b, i, h] = numerator / (scores.sum() + eps)
        else:
          out[b, i, h] = numerator / (weights.sum(axis=0) + eps)
  return out
