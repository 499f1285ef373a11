"""Vectorised snake growth: the extension rule (docs/data.md §4.2) for many masks.

The original grows one snake at a time and throws both target snakes away whenever one gets
stuck: at 128 px a pair reaches full length once in ≈80 (margin 2) to ≈500 (margin 3)
attempts, at 32 px once in ≈40. Attempts are independent draws, so we run a batch of them
at once and keep every one that succeeds (in attempt order). Distractor snakes go through
the same code with a batch of one.

Representation: every mask is a flat float32 row over a frame zero-padded by `pad` pixels
on each side, so a point is one integer and every neighbourhood (candidate circle, disk,
dash footprint) is a fixed table of flat offsets. The padding stays zero, which is how the
original treats pixels outside the image (clipped stamps, dilation ignoring the border).

All tables depend only on `(params, margin)` and are built once per process.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from lra.data.generators import pathfinder_draw as draw

RETRIES = 3  # tries per dash (original max_paddle_retrial = 2 → 3 tries)
FREE = 0.3  # a mask value ≤ this counts as free (original: ceil(v - 0.3) == 0)
_COLLIDE = 1.8  # a dash is rejected where mask + its footprint reaches this
# Masks never exceed 1, so only footprint pixels above 0.8 can collide (margin for rounding).
_HIT = _COLLIDE - 1 - 0.01
_MIN_TOTAL = 1e-4  # candidate weights summing below this end the snake
_NEGLIGIBLE_TURN = 1e-9  # turn weights below this (cos² at ±90°) are dropped from the tables
SEED_ANGLES = 360  # angle ids 0..359 are integer degrees -180..179 (seeds)


def _pad_rows(rows: list[np.ndarray]) -> np.ndarray:
  """Stacks ragged 1-D arrays, padding each with repeats of its first entry.

  Repeating a real entry keeps max-reductions and max-scatters unchanged, where a dummy
  value could overwrite a real write at the same index.
  """
  width = max(len(r) for r in rows)
  return np.stack([np.concatenate([r, np.repeat(r[:1], width - len(r))]) for r in rows])


@dataclasses.dataclass(frozen=True)
class StampTable:
  """Flat-offset tables for one family of stamps, indexed by angle id.

  Attributes:
    angles: [A] headings in radians: ids < 360 are seed angles, the rest candidate angles.
    step: [A] flat offset of `translate(p, angle, L + 2m)` (the next pivot).
    offsets: [A, F] flat offsets of the nonzero footprint pixels of the dash drawn for that
      id (seed id: from the tail along the angle; candidate id: from the head back).
    values: [A, F] the footprint values there.
    hit_offsets: [A, H] the offsets whose value can reach the collision threshold.
    hit_values: [A, H] their values.
  """

  angles: np.ndarray
  step: np.ndarray
  offsets: np.ndarray
  values: np.ndarray
  hit_offsets: np.ndarray
  hit_values: np.ndarray


class Geometry:
  """Lookup tables for one `(params, margin)` on a zero-padded frame."""

  def __init__(self, p, margin: int):
    self.p, self.margin = p, margin
    n, length = p.window, p.paddle_length
    radius = draw.dash_radius(length, p.paddle_thickness, margin)
    # Candidate heads and their disks reach L + 3m + 2 beyond a pivot that lies ≤ m + 1
    # outside the frame; stamps reach `radius` beyond an in-frame point.
    self.pad = pad = max(radius, length + 3 * margin + 3) + 1
    self.width = width = n + 2 * pad
    self.area = width * width
    rows = np.arange(n) + pad
    self.frame = (rows[:, None] * width + rows[None, :]).ravel()
    self.inside = np.zeros(self.area, np.float32)
    self.inside[self.frame] = 1
    init = np.zeros((n, n), np.float32)
    for side in (np.s_[:p.padding], np.s_[n - p.padding:]):
      init[side, :] = init[:, side] = 1.0
    self.init_mask = np.zeros(self.area, np.float32)
    self.init_mask[self.frame] = init.ravel()

    cand_off, cand_ang = draw.circle_offsets(length + margin)
    self.num_cand = len(cand_ang)
    self.cand_flat = np.append(cand_off @ [width, 1], 0)  # last entry: dummy candidate
    self.disk_flat = draw.disk_offsets(margin) @ [width, 1]
    seed_ang = np.deg2rad(np.arange(-180, 180)).tolist()
    angles = np.array(seed_ang + cand_ang.tolist())
    dist = length + 2 * margin
    step = np.array([draw.translate((0, 0), a, dist) for a in angles]) @ [width, 1]
    stamp_angles = seed_ang + [draw.flip(a) for a in cand_ang.tolist()]
    offsets, values, hit_offsets, hit_values = [], [], [], []
    for a in stamp_angles:
      fp = draw.dash_stamp(length, p.paddle_thickness, margin, p.antialias, a)[1]
      for threshold, offs, vals in ((0, offsets, values), (_HIT, hit_offsets, hit_values)):
        ys, xs = np.nonzero(fp > threshold)
        offs.append((ys - radius) * width + (xs - radius))
        vals.append(fp[ys, xs])
    self.stamps = StampTable(angles, step, _pad_rows(offsets), _pad_rows(values),
                             _pad_rows(hit_offsets), _pad_rows(hit_values))

    # Turning weights cos²(min(c·δ, π/2)) for every (previous heading, candidate), keeping
    # per heading only candidates with a non-negligible weight (the rest pad to the dummy).
    delta = np.abs(angles[:, None] - cand_ang[None, :])
    delta = np.minimum(np.minimum(delta, 2 * np.pi - delta) * p.continuity, np.pi / 2)
    turn = np.cos(delta) ** 2
    keep = turn > _NEGLIGIBLE_TURN
    width_sel = keep.sum(1).max()
    self.sel = np.full((len(angles), width_sel), self.num_cand)
    self.turn = np.zeros((len(angles), width_sel), np.float32)
    for a in range(len(angles)):
      idx = np.flatnonzero(keep[a])
      self.sel[a, :len(idx)], self.turn[a, :len(idx)] = idx, turn[a, idx]
    # [A, S, K] offsets from the pivot of the disk around every selected candidate.
    self.cand_disk = self.cand_flat[self.sel][..., None] + self.disk_flat

  def to_flat(self, yx: np.ndarray) -> np.ndarray:
    """[..., 2] frame coordinates → flat indices in the padded frame."""
    return (yx[..., 0] + self.pad) * self.width + yx[..., 1] + self.pad

  def to_yx(self, flat: np.ndarray) -> np.ndarray:
    """Flat indices → [..., 2] frame coordinates."""
    flat = np.asarray(flat)[..., None]
    return np.concatenate([flat // self.width, flat % self.width], axis=-1) - self.pad

  def seed_kernel(self, angle_id: int) -> np.ndarray:
    """Flat offsets that must be free for a seed dash starting at a point."""
    p = self.p
    off = draw.seed_offsets(p.paddle_length, p.paddle_thickness, self.margin, p.antialias,
                            float(self.stamps.angles[angle_id]))
    return off @ [self.width, 1]

  def blocked(self, mask: np.ndarray, band: int) -> np.ndarray:
    """Flat padded bool: mask > 0.3 or within `band` pixels of the frame edge."""
    n = self.p.window
    edge = np.zeros((n, n), bool)
    edge[:band] = edge[n - band:] = True
    edge[:, :band] = edge[:, n - band:] = True
    out = mask > FREE
    out[self.frame] |= edge.ravel()
    return out

  def candidate_starts(self, blocked: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Frame points that pass the first kernel offset (a superset of the free starts)."""
    return self.frame[~blocked[self.frame + kernel[0]]]

  def free_starts(self, blocked: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """All frame points whose seed kernel misses `blocked` (flat, padded)."""
    cand = self.candidate_starts(blocked, kernel)
    return cand[~blocked[cand[:, None] + kernel].any(1)]

  @functools.cached_property
  def target_starts(self) -> tuple[np.ndarray, np.ndarray]:
    """Free starts of the first target dash for each seed angle id (empty mask, band 2·sd).

    Returns:
      `(points, bounds)`: the concatenated flat points and [361] offsets into them.
    """
    blocked = self.blocked(self.init_mask, 2 * self.p.seed_distance)
    sets = [self.free_starts(blocked, self.seed_kernel(a)) for a in range(SEED_ANGLES)]
    bounds = np.concatenate([[0], np.cumsum([len(s) for s in sets])])
    return np.concatenate(sets), bounds

  @functools.cached_property
  def seed_steps(self) -> tuple[np.ndarray, np.ndarray]:
    """[360, 2] offsets tail → head and head → pivot of a seed dash, per seed angle id."""
    p = self.p
    angles = self.stamps.angles[:SEED_ANGLES].tolist()
    head = np.array([draw.translate((0, 0), a, p.paddle_length) for a in angles])
    pivot = np.array([draw.translate((0, 0), draw.flip(a), p.paddle_length + self.margin)
                      for a in angles])
    return head, pivot


@functools.lru_cache(maxsize=8)
def geometry(p, margin: int) -> Geometry:
  """Cached `Geometry` (parameters are a frozen dataclass, hence hashable)."""
  return Geometry(p, margin)


@dataclasses.dataclass
class Heads:
  """Growth state of a batch of snakes (all [B] int arrays).

  Attributes:
    pivot: Flat pivot the next dash is placed around.
    angle: Angle id of the current heading.
    pos: Flat start of the newest dash (its far end for extension dashes).
    stamp: Angle id of the newest dash's stamp; its footprint is not in the mask yet.
  """

  pivot: np.ndarray
  angle: np.ndarray
  pos: np.ndarray
  stamp: np.ndarray

  def take(self, idx: np.ndarray) -> "Heads":
    return Heads(self.pivot[idx], self.angle[idx], self.pos[idx], self.stamp[idx])

  def put(self, idx: np.ndarray, other: "Heads") -> None:
    self.pivot[idx], self.angle[idx] = other.pivot, other.angle
    self.pos[idx], self.stamp[idx] = other.pos, other.stamp


def commit(g: Geometry, masks: np.ndarray, rows: np.ndarray, pos: np.ndarray,
           stamp: np.ndarray) -> None:
  """Max-stamps dash footprints into `masks[rows]` (in-frame part only)."""
  where = pos[:, None] + g.stamps.offsets[stamp]
  flat = masks.reshape(-1)
  idx = rows[:, None] * g.area + where
  flat[idx] = np.maximum(flat[idx], g.stamps.values[stamp] * g.inside[where])


def extend(g: Geometry, masks: np.ndarray, rows: np.ndarray, heads: Heads,
           rng: np.random.Generator) -> np.ndarray:
  """Adds one dash to each snake `heads` (snake i grows in `masks[rows[i]]`).

  Updates `heads` in place for the snakes that grew and commits their previous dash's
  footprint (the mask lags one dash so that a dash never collides with its predecessor).

  Returns:
    [B] bool, True where a dash was added; the others are dead ends.
  """
  flat = masks.reshape(-1)
  base = rows * g.area
  q = heads.pivot + g.stamps.step[heads.angle]
  sel = g.sel[heads.angle]  # [B, S] candidate ids
  cand = q[:, None] + g.cand_flat[sel]  # [B, S] flat candidate heads
  # Mask dilated by a disk of radius m, evaluated at the candidates only.
  dilated = flat[(base + q)[:, None, None] + g.cand_disk[heads.angle]].max(-1)
  weights = g.turn[heads.angle] * g.inside[cand] * (1 - dilated)
  total = weights.sum(1)
  cmf = np.cumsum(weights, 1) / np.maximum(total, 1e-30)[:, None]
  last = weights.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
  chosen = np.full(len(rows), -1)
  pending = np.flatnonzero(total >= _MIN_TOTAL)
  for _ in range(RETRIES):
    if pending.size == 0:
      break
    u = rng.random(pending.size)
    j = np.minimum((cmf[pending] <= u[:, None]).sum(1), last[pending])
    stamp = SEED_ANGLES + sel[pending, j]
    head = cand[pending, j]
    where = (base[pending] + head)[:, None] + g.stamps.hit_offsets[stamp]
    hit = (flat[where] + g.stamps.hit_values[stamp]).max(1) >= _COLLIDE
    chosen[pending[~hit]] = j[~hit]
    pending = pending[hit]
  grown = np.flatnonzero(chosen >= 0)
  j = chosen[grown]
  commit(g, masks, rows[grown], heads.pos[grown], heads.stamp[grown])
  new_angle = SEED_ANGLES + sel[grown, j]
  heads.put(grown, Heads(q[grown], new_angle, cand[grown, j], new_angle))
  return chosen >= 0
