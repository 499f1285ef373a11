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
                   key_mask=None, eps=1e-6, side=None, phase=None):
  """LION output by direct summation over queries i and keys j.

  Args:
    q, k: [B, L, H, K]; v: [B, L, H, V]; log_decay: any shape `lion_attention` accepts;
    convention, normalize, key_mask, eps: as in `lion_attention`.
    side: None (the output), or "left"/"right": one half of `split_directions`, the numerator
      over the keys j < i (j > i) and half the key j = i, over the whole row's normaliser.
    phase: None, or [H, V] θ with normalize="none": complex decays λ e^{iθ}, each mask entry
      times e^{iθ|i−j|} (the same rotation per step in either direction).

  Returns:
    [B, L, H, V] float64 (complex128 with a phase).
  """
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  batch, length, heads, _ = q.shape
  value_dim = v.shape[-1]
  decay = np.exp(expand_log_decay(log_decay, batch, length, heads, value_dim))
  valid = np.ones((batch, length)) if key_mask is None else np.asarray(key_mask, np.float64)
  out = np.zeros((batch, length, heads, value_dim), np.float64 if phase is None else np.complex128)
  distance = np.abs(np.arange(length)[:, None] - np.arange(length)[None, :])  # [L(i), L(j)]
  for b in range(batch):
    for h in range(heads):
      mask = reference_mask(decay[b, :, h], convention)  # [L, L, V]
      for i in range(length):
        scores = np.array([q[b, i, h] @ k[b, j, h] * valid[b, j] for j in range(length)])  # [L]
        weights = scores[:, None] * mask[i]  # [L(j), V]
        if phase is not None:
          weights = weights * np.exp(1j * distance[i][:, None] * np.asarray(phase)[h])
        share = np.ones(length)
        if side is not None:
          keys = np.arange(length)
          share = np.where(keys == i, 0.5, (keys < i) if side == "left" else (keys > i))
        numerator = (share[:, None] * weights * v[b, :, h]).sum(axis=0)
        if normalize == "none":
          out[b, i, h] = numerator
        elif normalize == "before":
          out[b, i, h] = numerator / (scores.sum() + eps)
        else:
          out[b, i, h] = numerator / (weights.sum(axis=0) + eps)
  return out


# --- LION♮: masks along snake orders of an H×W grid (LION paper §C.11, Figure 9) ---------------
# Token r·W + c is pixel (r, c). The row snake visits even rows left→right and odd rows
# right→left; the column snake visits even columns top→bottom and odd columns bottom→top. Both
# are written here as closed formulas for a token's place in the order, and the masks are built
# entry by entry from the λ's of the tokens the order passes between the two.


def snake_place(row, col, height, width, scan):
  """Position of pixel (row, col) in the scan: "raster", "row_snake" or "column_snake"."""
  if scan == "raster":
    return row * width + col
  if scan == "row_snake":
    return row * width + (col if row % 2 == 0 else width - 1 - col)
  if scan == "column_snake":
    return col * height + (row if col % 2 == 0 else height - 1 - row)
  raise ValueError(scan)


def reference_grid_mask(decay, grid, scan, convention):
  """[L, V] decays λ at raster positions -> [L, L, V] mask at raster rows and columns.

  Entry (i, j) is the product the definition names for the places p = place(i), s = place(j)
  of the two tokens in the scan, over the λ's of the tokens at the places in between:
  symmetric Π_{t=min(p,s)+1}^{max(p,s)}; code Π_{t=s}^{p-1} when p > s (Π_{t=p+1}^{s} above).
  """
  height, width = grid
  length = height * width
  place = [snake_place(i // width, i % width, height, width, scan) for i in range(length)]
  token_at = {p: i for i, p in enumerate(place)}
  mask = np.ones((length, length) + decay.shape[1:])
  for i in range(length):
    for j in range(length):
      p, s = place[i], place[j]
      if p > s:
        span = range(s + 1, p + 1) if convention == "symmetric" else range(s, p)
      elif p < s:
        span = range(p + 1, s + 1)
      else:
        continue
      mask[i, j] = np.prod([decay[token_at[t]] for t in span], axis=0)
  return mask


def reference_grid_lion(q, k, v, log_decays, grid, scan_order, *, convention="symmetric",
                        normalize="after", key_mask=None, eps=1e-6):
  """LION♮ output by direct summation, one mask per scan (`log_decays` one per scan).

  scan_order "raster": one raster mask; "snake": M = ½(M_row + M_col) in one normalised sum;
  "snake_outputs": the mean of the two normalised sums.

  Returns:
    [B, L, H, V] float64.
  """
  scans = {"raster": ("raster",), "snake": ("row_snake", "column_snake"),
           "snake_outputs": ("row_snake", "column_snake")}[scan_order]
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  batch, length, heads, _ = q.shape
  value_dim = v.shape[-1]
  decays = [np.exp(expand_log_decay(a, batch, length, heads, value_dim)) for a in log_decays]
  valid = np.ones((batch, length)) if key_mask is None else np.asarray(key_mask, np.float64)
  out = np.zeros((batch, length, heads, value_dim))
  for b in range(batch):
    for h in range(heads):
      masks = [reference_grid_mask(d[b, :, h], grid, scan, convention)
               for d, scan in zip(decays, scans)]  # S × [L, L, V]
      if scan_order == "snake":
        masks = [sum(masks) / len(masks)]
      for i in range(length):
        scores = np.array([q[b, i, h] @ k[b, j, h] * valid[b, j] for j in range(length)])  # [L]
        rows = []
        for mask in masks:
          weights = scores[:, None] * mask[i]  # [L(j), V]
          numerator = (weights * v[b, :, h]).sum(axis=0)
          if normalize == "none":
            rows.append(numerator)
          elif normalize == "before":
            rows.append(numerator / (scores.sum() + eps))
          else:
            rows.append(numerator / (weights.sum(axis=0) + eps))
        out[b, i, h] = sum(rows) / len(rows)
  return out
