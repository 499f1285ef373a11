"""Rendering primitives of the Pathfinder generator: cached stamps and local-window pasting.

Everything the sampler draws is a small patch ("stamp") placed around a pixel, so nothing
here touches a whole frame. Stamps depend only on a handful of scalars and an angle taken
from a finite set (integer degrees for seeds, integer pixel offsets on a circle for
extensions), so they are built once per process with `functools.lru_cache`.

Conventions (docs/data.md §4.2): points are `(row, col)`, `u(θ) = (sin θ, cos θ)`,
"translate" adds `d·u(θ)` and rounds each coordinate up. Antialiasing draws at `aa`× scale
with Pillow and downsamples with Lanczos into uint8, which also clips to [0, 1] like the
original's `scipy.misc.imresize`.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from PIL import Image, ImageDraw


def translate(point: tuple[int, int], angle: float, dist: float) -> tuple[int, int]:
  """Moves `point` by `dist` along `angle` and rounds each coordinate up."""
  return (math.ceil(point[0] + dist * math.sin(angle)),
          math.ceil(point[1] + dist * math.cos(angle)))


def flip(angle: float) -> float:
  """Turns an angle in (-π, π] around by π, staying in the same range."""
  return angle + math.pi if angle < 0 else angle - math.pi


def _lanczos_down(fine: np.ndarray, size: int) -> np.ndarray:
  """Downsamples a 0/1 image to `size`×`size` floats in [0, 1] (uint8 Lanczos, as imresize)."""
  img = Image.fromarray((fine * 255).astype(np.uint8), mode="L")
  return np.asarray(img.resize((size, size), Image.Resampling.LANCZOS), np.float32) / 255


@functools.lru_cache(maxsize=None)
def disk_offsets(radius: int) -> np.ndarray:
  """[K, 2] integer offsets of the disk `y² + x² ≤ radius²` (the dilation structure)."""
  ys, xs = np.mgrid[-radius:radius + 1, -radius:radius + 1]
  inside = ys**2 + xs**2 <= radius**2
  return np.stack([ys[inside], xs[inside]], axis=1)


def _shifted(frame: np.ndarray, offset) -> np.ndarray:
  """Returns `out[p] = frame[p + offset]`, zero (False) where `p + offset` leaves the frame."""
  (h, w), (dy, dx) = frame.shape, offset
  out = np.zeros_like(frame)
  out[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)] = (
      frame[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)])
  return out


def _dilate(binary: np.ndarray, radius: int) -> np.ndarray:
  """Binary dilation by a disk (pixels outside the array count as empty)."""
  out = np.zeros_like(binary)
  for offset in disk_offsets(radius):
    out |= _shifted(binary, offset)
  return out


def dash_radius(length: int, thickness: float, margin: int) -> int:
  """Half-size R of a dash stamp (the stamp is (2R+1)² and centred on the dash's start)."""
  return length + math.ceil(thickness) + margin


@functools.lru_cache(maxsize=None)
def dash_stamp(length: int, thickness: float, margin: int, aa: int,
               angle: float) -> tuple[np.ndarray, np.ndarray]:
  """Draws one dash ("paddle") starting at the stamp centre and heading along `angle`.

  Args:
    length: Dash length L in pixels.
    thickness: Line width in pixels; `thickness * aa` must be an integer.
    margin: Radius of the keep-out zone around the dash (occupancy footprint).
    aa: Antialiasing scale.
    angle: Heading in radians.

  Returns:
    `(line, footprint)`, both [2R+1, 2R+1] float32 in [0, 1] (R = `dash_radius(...)`): the
    antialiased dash, and the same supersampled line dilated by a disk of radius
    `margin·aa`, downsampled the same way. Read-only (shared by the cache).
  """
  width = thickness * aa
  if width != round(width):
    raise ValueError(f"thickness*aa must be an integer, got {thickness}*{aa}")
  radius = dash_radius(length, thickness, margin)
  # The original draws on an odd (2·R·aa + 1) canvas and resizes to 2R+1; kept for its look.
  side, centre = 2 * radius * aa + 1, radius * aa
  head = translate((centre, centre), angle, length * aa)
  canvas = Image.new("L", (side, side), 0)
  ImageDraw.Draw(canvas).line([(centre, centre), (head[1], head[0])], fill=255,
                              width=int(round(width)))
  fine = np.asarray(canvas) > 0
  line = _lanczos_down(fine, 2 * radius + 1)
  footprint = _lanczos_down(_dilate(fine, margin * aa), 2 * radius + 1)
  line.flags.writeable = footprint.flags.writeable = False
  return line, footprint


@functools.lru_cache(maxsize=None)
def seed_offsets(length: int, thickness: float, margin: int, aa: int,
                 angle: float) -> np.ndarray:
  """[K, 2] offsets o such that a dash may start at p only if the mask is free at all p + o.

  This is the binary structuring element the original dilates the mask with before picking
  a seed tail: the dash footprint pixels that are fully set (value 1 after downsampling),
  laid out as in the original, i.e. cropped to a (2(L+m)+1)² box whose anchor sits one
  pixel before the dash start on both axes.
  """
  _, footprint = dash_stamp(length, thickness, margin, aa, angle)
  radius = dash_radius(length, thickness, margin)
  ys, xs = np.nonzero(footprint >= 1.0)
  offsets = np.stack([ys, xs], axis=1) - radius + 1
  reach = length + margin
  keep = np.all((offsets >= -reach) & (offsets <= reach), axis=1)
  return offsets[keep]


@functools.lru_cache(maxsize=None)
def disc_stamp(radius: float, aa: int) -> np.ndarray:
  """[2P+1, 2P+1] antialiased filled disc of `radius` pixels centred on the middle pixel.

  The original draws the disc over the whole supersampled frame; Lanczos is local, so a
  patch covering the disc plus the filter support (3 output pixels) gives the same values.
  """
  half = math.ceil(radius) + 4
  n = (2 * half + 1) * aa
  ys, xs = np.ogrid[:n, :n]
  centre = half * aa  # the original centres the disc on fine pixel `point * aa`
  fine = (ys - centre) ** 2 + (xs - centre) ** 2 <= (radius * aa) ** 2
  stamp = _lanczos_down(fine, 2 * half + 1)
  stamp.flags.writeable = False
  return stamp


@functools.lru_cache(maxsize=None)
def circle_offsets(radius: int) -> tuple[np.ndarray, np.ndarray]:
  """Candidate head offsets on a circle around a pivot, one per pixel of arc.

  Returns:
    `(offsets, angles)`: [N, 2] distinct integer offsets `floor(radius·u(φ))` for φ stepped
    by one pixel of arc, and [N] their directions `atan2(dy, dx)` in (-π, π].
  """
  step = 360.0 / (2 * radius * math.pi)
  phis = np.deg2rad(np.arange(0, 360, step))
  # Truncation of `pivot + offset` equals pivot + floor(offset) for every in-bounds point.
  offsets = np.unique(np.stack([np.floor(radius * np.sin(phis)),
                                np.floor(radius * np.cos(phis))], axis=1).astype(int), axis=0)
  return offsets, np.arctan2(offsets[:, 0], offsets[:, 1])


def window(shape: tuple[int, int], centre: tuple[int, int],
           half: int) -> tuple[tuple[slice, slice], tuple[slice, slice]] | None:
  """Slices pairing a (2·half+1)² stamp centred on `centre` with the part inside a frame.

  Returns:
    `(frame_slices, stamp_slices)`, or None when the stamp misses the frame entirely.
  """
  (h, w), (cy, cx) = shape, centre
  y0, y1 = max(cy - half, 0), min(cy + half + 1, h)
  x0, x1 = max(cx - half, 0), min(cx + half + 1, w)
  if y0 >= y1 or x0 >= x1:
    return None
  oy, ox = cy - half, cx - half
  return ((slice(y0, y1), slice(x0, x1)),
          (slice(y0 - oy, y1 - oy), slice(x0 - ox, x1 - ox)))


def stamp_max(frame: np.ndarray, stamp: np.ndarray, centre: tuple[int, int],
              scale: float = 1.0) -> None:
  """`frame = max(frame, scale · stamp)` in place, with the stamp centred on `centre`."""
  win = window(frame.shape, centre, stamp.shape[0] // 2)
  if win is not None:
    np.maximum(frame[win[0]], stamp[win[1]] * scale, out=frame[win[0]])
