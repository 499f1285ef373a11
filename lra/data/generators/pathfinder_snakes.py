"""Sampling of one Pathfinder image: two target snakes, distractors and two markers.

Follows the Linsley/Kim "snakes2" procedure (docs/data.md §4.2):

1. Seed two target snakes `seed_distance` apart and grow them alternately, dash by dash,
   for `contour_length` dashes each; if either gets stuck, start both again.
2. Add up to `distractor_count` short snakes wherever there is room.
3. Put one disc on the start of one target snake and one on the far end of the same snake
   (label 1) or of the other one (label 0), then min–max rescale to uint8.

Step 1 almost always fails (measured: ≈40 attempts per success at 32 px; at 128 px ≈80
with margin 2 and ≈500 with margin 3), so
`TargetSampler` runs a batch of independent attempts at once with `pathfinder_engine` and
keeps every success, per margin, for later images. Each kept pair is an independent draw
from the same conditional distribution as the original's retry loop, so the data's
distribution is unchanged; only the order in which random numbers are used differs.

Seed starts must be uniform over the pixels left free by the mask dilated with the dash's
seed kernel. For distractors we draw among pixels that pass one kernel offset and accept a
draw if all offsets are free (exact rejection sampling), falling back to the full free set
after a few misses; for the first target dash the mask is always the same, so the free sets
per angle are computed once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from lra.data.generators import pathfinder_draw as draw
from lra.data.generators import pathfinder_engine as engine

_DISTRACTOR_TRIES = 5  # tries per distractor snake (max_distractor_contour_retrial = 4)
_MIN_FREE_FRACTION = 0.01  # distractor seeding stops below this free-pixel fraction
_REJECTION_DRAWS = 16  # seed-start draws before falling back to the full free set
_BATCH = 256  # target-snake attempts run together


@dataclasses.dataclass(frozen=True)
class SnakeParams:
  """All parameters of one generator configuration (one resolution × difficulty).

  Attributes:
    window: Image side in pixels.
    padding: Width of the border where nothing may be drawn.
    antialias: Supersampling factor used to draw dashes and discs.
    margins: Per-image choices of the paddle margin m (keep-out radius; gaps are ≈ 2m).
    seed_distance: Distance between the two target snakes' starting tips.
    marker_radius: Radius of the two marker discs.
    paddle_length: Dash length L.
    paddle_thickness: Dash line width.
    continuity: Turning stiffness; weights cos²(min(continuity·δ, π/2)) for a turn δ.
    snake_contrast: Intensity of every dash.
    paddle_contrast: Extra factor on target-snake dashes.
    distractor_budget: K; distractor snakes = K // distractor_length unless overridden.
    contour_length: Dashes per target snake (6/9/14 for easy/intermediate/hard).
    num_distractors: Override for the number of distractor snakes.
  """

  window: int
  padding: int
  antialias: int
  margins: tuple[int, ...]
  seed_distance: int
  marker_radius: float
  paddle_length: int
  paddle_thickness: float
  continuity: float
  snake_contrast: float
  paddle_contrast: float
  distractor_budget: int
  contour_length: int = 14
  num_distractors: int | None = None

  @property
  def distractor_length(self) -> int:
    return self.contour_length // 3

  @property
  def distractor_count(self) -> int:
    if self.num_distractors is not None:
      return self.num_distractors
    return self.distractor_budget // self.distractor_length


@dataclasses.dataclass
class Sample:
  """One rendered image and how it was built.

  Attributes:
    image: [window, window] uint8, min–max rescaled to 0..255.
    label: 1 if both markers sit on the two ends of the same target snake.
    margin: The paddle margin used.
    snakes: For each target snake, [contour_length, 2] points along it: the start of its
      first dash (its origin tip), then the far end of every later dash (the last one is
      its terminal tip).
    markers: [2, 2] marker centres (origin tip of snake `marked`, then the second one).
    marked: Index of the snake that carries the first marker.
  """

  image: np.ndarray
  label: int
  margin: int
  snakes: list[np.ndarray]
  markers: np.ndarray
  marked: int


@dataclasses.dataclass
class _Targets:
  """A successful pair of target snakes.

  Attributes:
    mask: Flat padded occupancy mask after both snakes (see `pathfinder_engine`).
    pos: [2, contour_length] flat dash starts (seed tail, then the far end of each dash).
    stamp: [2, contour_length] angle ids of the dashes' stamps.
  """

  mask: np.ndarray
  pos: np.ndarray
  stamp: np.ndarray


def _first_valid(decisive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per row, the first column where `decisive` holds, and whether there is one."""
  return np.argmax(decisive, axis=1), decisive.any(axis=1)


def _target_batch(g: engine.Geometry, size: int,
                  rng: np.random.Generator) -> list[_Targets]:
  """Runs `size` independent attempts at the two target snakes; returns the successes."""
  p, rows = g.p, np.arange(size)
  head_step, pivot_step = g.seed_steps
  n, tries = p.window, engine.RETRIES

  def in_frame(yx):
    return np.all((yx >= 0) & (yx < n), axis=-1)

  # First snake: up to 3 tries of (angle, uniform free start); a try with no free start
  # ends the attempt, one whose head or pivot leaves the frame is retried.
  points, bounds = g.target_starts
  angle1 = rng.integers(0, engine.SEED_ANGLES, (size, tries))
  count = bounds[angle1 + 1] - bounds[angle1]
  pick = bounds[angle1] + (rng.random((size, tries)) * count).astype(int)
  tail1 = g.to_yx(points[np.minimum(pick, len(points) - 1)])
  head1 = tail1 + head_step[angle1]
  ok = in_frame(head1) & in_frame(head1 + pivot_step[angle1])
  t, found = _first_valid(ok | (count == 0))
  seeded = found & (count[rows, t] > 0)
  angle1, tail1, head1 = angle1[rows, t], tail1[rows, t], head1[rows, t]
  # Second snake: starts seed_distance away in a random direction; frame checks only.
  angle2 = rng.integers(0, engine.SEED_ANGLES, (size, tries))
  phi = np.deg2rad(rng.integers(0, 360, (size, tries)))
  tail2 = np.rint(tail1[:, None, :] + p.seed_distance
                  * np.stack([np.sin(phi), np.cos(phi)], -1)).astype(int)
  head2 = tail2 + head_step[angle2]
  t2, found2 = _first_valid(in_frame(head2) & in_frame(head2 + pivot_step[angle2]))
  alive = np.flatnonzero(seeded & found2)
  t2 = t2[alive]
  angle2, tail2, head2 = angle2[alive, t2], tail2[alive, t2], head2[alive, t2]
  angle1, tail1, head1 = angle1[alive], tail1[alive], head1[alive]

  masks = np.empty((len(alive), g.area), np.float32)
  masks[:] = g.init_mask
  heads, pos, stamp = [], [], []
  for angle, tail, head in ((angle1, tail1, head1), (angle2, tail2, head2)):
    start = g.to_flat(tail)
    heads.append(engine.Heads(g.to_flat(head + pivot_step[angle]), angle, start, angle))
    pos.append(np.zeros((len(alive), p.contour_length), int))
    stamp.append(np.zeros((len(alive), p.contour_length), int))
    pos[-1][:, 0], stamp[-1][:, 0] = start, angle
  live = np.arange(len(alive))
  for step in range(1, p.contour_length):
    for k in range(2):  # grow alternately, sharing the mask
      sub = heads[k].take(live)
      grown = engine.extend(g, masks, live, sub, rng)
      heads[k].put(live, sub)
      live = live[grown]
      pos[k][live, step], stamp[k][live, step] = heads[k].pos[live], heads[k].stamp[live]
  # As in the original, only the second snake's last footprint enters the mask.
  engine.commit(g, masks, live, heads[1].pos[live], heads[1].stamp[live])
  return [_Targets(masks[i].copy(), np.stack([pos[0][i], pos[1][i]]),
                   np.stack([stamp[0][i], stamp[1][i]])) for i in live]


class TargetSampler:
  """Yields independent successful target-snake pairs, buffered per margin."""

  def __init__(self, p: SnakeParams, rng: np.random.Generator, batch: int = _BATCH):
    self.p, self.rng, self.batch = p, rng, batch
    self.buffers: dict[int, list[_Targets]] = {}

  def next(self, margin: int) -> _Targets:
    buffer = self.buffers.setdefault(margin, [])
    while not buffer:
      buffer.extend(_target_batch(engine.geometry(self.p, margin), self.batch, self.rng))
    return buffer.pop(0)


def _sample_start(g: engine.Geometry, blocked: np.ndarray, kernel: np.ndarray,
                  rng: np.random.Generator) -> int | None:
  """Uniform flat start among points whose kernel misses `blocked`; None if none."""
  cand = g.candidate_starts(blocked, kernel)
  if cand.size == 0:
    return None
  for point in rng.choice(cand, size=_REJECTION_DRAWS):
    if not blocked[point + kernel].any():
      return int(point)
  free = g.free_starts(blocked, kernel)
  return int(rng.choice(free)) if free.size else None


def _distractor(g: engine.Geometry, mask: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, list] | None:
  """One attempt at a short snake on a copy of `mask`; returns (new mask, dashes) or None."""
  p = g.p
  head_step, pivot_step = g.seed_steps
  blocked = g.blocked(mask, band=1)
  for _ in range(engine.RETRIES):
    angle = int(rng.integers(0, engine.SEED_ANGLES))
    start = _sample_start(g, blocked, g.seed_kernel(angle), rng)
    if start is None:
      return None
    head = g.to_yx(np.array(start)) + head_step[angle]
    pivot = head + pivot_step[angle]
    if np.all((head >= 0) & (head < p.window) & (pivot >= 0) & (pivot < p.window)):
      break
  else:
    return None
  masks = mask[None].copy()
  heads = engine.Heads(*(np.array([v]) for v in (g.to_flat(pivot), angle, start, angle)))
  dashes = [(start, angle)]
  for _ in range(p.distractor_length - 1):
    if not engine.extend(g, masks, np.zeros(1, int), heads, rng)[0]:
      return None
    dashes.append((int(heads.pos[0]), int(heads.stamp[0])))
  engine.commit(g, masks, np.zeros(1, int), heads.pos, heads.stamp)
  return masks[0], dashes


def _draw_dashes(g: engine.Geometry, image: np.ndarray, dashes, contrast: float) -> None:
  """Max-stamps antialiased dashes given as (flat start, stamp angle id) pairs."""
  p = g.p
  for start, stamp in dashes:
    angle = float(g.stamps.angles[stamp])
    if stamp >= engine.SEED_ANGLES:  # extension dashes point from their head back
      angle = draw.flip(angle)
    line = draw.dash_stamp(p.paddle_length, p.paddle_thickness, g.margin, p.antialias,
                           angle)[0]
    draw.stamp_max(image, line, tuple(int(v) for v in g.to_yx(np.array(start))), contrast)


def render(p: SnakeParams, label: int, rng: np.random.Generator,
           targets: TargetSampler | None = None) -> Sample:
  """Samples one image with the given label.

  Args:
    p: Generator parameters.
    label: 1 for a positive image (markers on both ends of one snake), 0 for a negative.
    rng: Random source; the output is a deterministic function of its state.
    targets: Buffer of target-snake pairs to draw from (reuse it across images: one batch
      of attempts usually yields several pairs at 32 px). Default: a fresh one.

  Returns:
    The rendered `Sample`.
  """
  targets = targets or TargetSampler(p, rng)
  margin = int(rng.choice(p.margins))
  g = engine.geometry(p, margin)
  pair = targets.next(margin)
  mask = pair.mask.copy()
  image = np.zeros((p.window, p.window), np.float32)
  for k in range(2):
    _draw_dashes(g, image, zip(pair.pos[k], pair.stamp[k]),
                 p.snake_contrast * p.paddle_contrast)
  for _ in range(p.distractor_count):
    for _ in range(_DISTRACTOR_TRIES):
      if np.mean(mask[g.frame] <= engine.FREE) < _MIN_FREE_FRACTION:
        break
      drawn = _distractor(g, mask, rng)
      if drawn is not None:
        mask, dashes = drawn
        _draw_dashes(g, image, dashes, p.snake_contrast)
        break
  chains = [g.to_yx(pair.pos[k]) for k in range(2)]
  marked = int(rng.integers(0, 2))
  other = marked if label == 1 else 1 - marked
  markers = np.array([chains[marked][0], chains[other][-1]])
  disc = draw.disc_stamp(p.marker_radius, p.antialias)
  for centre in markers:
    draw.stamp_max(image, disc, (int(centre[0]), int(centre[1])))
  # Min–max rescale to 0..255 with rounding, as the original's scipy.misc.imsave did.
  low, high = float(image.min()), float(image.max())
  scaled = (image - low) * (255.0 / max(high - low, 1e-12))
  return Sample(np.clip(scaled + 0.5, 0, 255).astype(np.uint8), label, margin, chains,
                markers, marked)
