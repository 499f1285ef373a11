"""Command line for the LRA data generators (no jax needed).

  python -m lra.data generate listops --out DIR [--num-train 96000 --num-val 2000
      --num-test 2000 --min-length 500 --max-length 2000 --seed 0 --workers N]
  python -m lra.data generate pathfinder --resolution {32,64,128,256}
      --difficulty {easy,intermediate,hard} --num N --out DIR [--seed 0 --workers N]
  python -m lra.data grid --out docs/pathfinder_grid.png [--resolutions 32 128 --per-row 8]
  python -m lra.data scan-orders --out docs/scan_orders.png [--size 8]

`grid` renders fresh images (or tiles existing ones with `--source`, e.g. a release
folder, to compare) into one PNG: one block of rows per resolution, each image framed in
green (label 1, markers on the same curve) or red (label 0).

`scan-orders` draws the token orders of `lion_jax.ops.grid_order` on a small grid (LION♮, LION
paper §C.11, Figure 9): raster, row snake and column snake, each cell numbered by its place
in the order and shaded from dark (first) to light (last), the path drawn from the dot.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time

import numpy as np
from PIL import Image

from lra.data.generators import listops, pathfinder

_GREEN, _RED = (40, 200, 60), (220, 50, 40)


def _listops(args: argparse.Namespace) -> None:
  start = time.time()
  folder = listops.generate(args.out, num_train=args.num_train, num_val=args.num_val,
                            num_test=args.num_test, min_length=args.min_length,
                            max_length=args.max_length, seed=args.seed, workers=args.workers)
  total = args.num_train + args.num_val + args.num_test
  elapsed = time.time() - start
  print(f"wrote {total} examples to {folder} in {elapsed:.1f}s ({total / elapsed:.0f}/s)")


def _pathfinder(args: argparse.Namespace) -> None:
  from tqdm import tqdm  # only the CLI shows progress

  start = time.time()
  with tqdm(total=args.num, unit="img", disable=args.quiet) as bar:
    folder = pathfinder.generate(
        args.out, resolution=args.resolution, difficulty=args.difficulty, num=args.num,
        seed=args.seed, workers=args.workers, images_per_batch=args.images_per_batch,
        num_distractors=args.num_distractors, progress=bar.update)
  elapsed = time.time() - start
  print(f"wrote {args.num} images to {folder} in {elapsed:.1f}s "
        f"({args.num / elapsed:.1f} images/s, workers={args.workers})")


def _read_source(folder: pathlib.Path, num: int) -> list[tuple[np.ndarray, int]]:
  """The first `num` images and labels listed in a difficulty folder's metadata."""
  out = []
  for meta in sorted((folder / "metadata").glob("*.npy"), key=lambda f: int(f.stem)):
    for line in meta.read_text().splitlines():
      fields = line.split()
      png = folder / fields[0] / fields[1]
      if png.stat().st_size == 0:  # the release has one empty PNG (docs/data.md §3)
        continue
      out.append((np.asarray(Image.open(png).convert("L")), int(fields[3])))
      if len(out) == num:
        return out
  return out


def _tile(images: list[tuple[np.ndarray, int]], per_row: int, cell: int) -> np.ndarray:
  """Upscales (nearest) each image to `cell` px, frames it by label, tiles into rows."""
  border = 3
  side = cell + 2 * border
  rows = -(-len(images) // per_row)
  sheet = np.zeros((rows * side, per_row * side, 3), np.uint8)
  for k, (image, label) in enumerate(images):
    scale = cell // image.shape[0]
    big = np.kron(image, np.ones((scale, scale), np.uint8))
    y, x = (k // per_row) * side, (k % per_row) * side
    sheet[y:y + side, x:x + side] = _GREEN if label else _RED
    sheet[y + border:y + border + cell, x + border:x + border + cell] = big[..., None]
  return sheet


def _grid(args: argparse.Namespace) -> None:
  blocks = []
  for res in args.resolutions:
    num = args.per_row * args.rows
    if args.source:
      images = _read_source(pathlib.Path(args.source), num)
    else:
      p = pathfinder.params_for(res, args.difficulty)
      rng = pathfinder.batch_rng(args.seed, p, 0)
      images = [(s.image, s.label) for s in pathfinder.samples(p, num, rng)]
    blocks.append(_tile(images, args.per_row, args.cell))
  gap = np.full((8, blocks[0].shape[1], 3), 255, np.uint8)
  sheet = np.concatenate([x for b in blocks for x in (b, gap)][:-1])
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  Image.fromarray(sheet).save(out, optimize=True)
  print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KB)")


def _scan_orders(args: argparse.Namespace) -> None:
  from PIL import ImageDraw

  from lion_jax.ops.grid_order import column_snake_order, raster_order, row_snake_order

  panels = (("raster", raster_order), ("row snake", row_snake_order),
            ("column snake", column_snake_order))
  side, cell, margin, title = args.size, args.cell, 16, 24
  panel = side * cell
  sheet = Image.new("RGB", (len(panels) * (panel + margin) + margin, panel + title + 2 * margin),
                    (255, 255, 255))
  draw = ImageDraw.Draw(sheet)
  for p, (name, order_of) in enumerate(panels):
    left, top = margin + p * (panel + margin), margin + title
    order = order_of(side, side)  # raster index of the t-th visited cell
    centre = lambda token: (left + (token % side + 0.5) * cell, top + (token // side + 0.5) * cell)
    for place, token in enumerate(order):
      shade = int(70 + 170 * place / (len(order) - 1))  # dark blue first, light last
      x, y = left + (token % side) * cell, top + (token // side) * cell
      draw.rectangle([x, y, x + cell - 1, y + cell - 1], fill=(shade, shade, 255),
                     outline=(255, 255, 255))
    draw.line([centre(token) for token in order], fill=(200, 30, 30), width=2)
    x, y = centre(order[0])
    draw.ellipse([x - 5, y - 5, x + 5, y + 5], fill=(200, 30, 30))  # where the scan starts
    for place, token in enumerate(order):  # the place in the order, in the cell's corner
      draw.text((left + (token % side) * cell + 3, top + (token // side) * cell + 2), str(place),
                fill=(0, 0, 0))
    draw.text((left, margin), f"{name} ({side}x{side})", fill=(0, 0, 0))
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  sheet.save(out, optimize=True)
  print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KB)")


def build_parser() -> argparse.ArgumentParser:
  """The command-line parser of `lion-data` (`python -m lra.data`)."""
  parser = argparse.ArgumentParser(prog="lion-data", description=__doc__.split("\n")[0])
  sub = parser.add_subparsers(dest="command", required=True)
  gen = sub.add_parser("generate", help="write a generated dataset in the release layout")
  tasks = gen.add_subparsers(dest="task", required=True)
  workers = min(os.cpu_count() or 1, 8)

  lo = tasks.add_parser("listops", help="ListOps TSVs (listops-1000/basic_*.tsv)")
  lo.add_argument("--out", required=True, help="parent folder of listops-1000/")
  lo.add_argument("--num-train", type=int, default=96000)
  lo.add_argument("--num-val", type=int, default=2000)
  lo.add_argument("--num-test", type=int, default=2000)
  lo.add_argument("--min-length", type=int, default=500, help="exclusive lower bound")
  lo.add_argument("--max-length", type=int, default=2000, help="exclusive upper bound")
  lo.add_argument("--seed", type=int, default=0)
  lo.add_argument("--workers", type=int, default=workers)
  lo.set_defaults(run=_listops)

  pf = tasks.add_parser("pathfinder", help="Pathfinder / Path-X PNGs and metadata")
  pf.add_argument("--out", required=True, help="parent folder of pathfinder<res>/")
  pf.add_argument("--resolution", type=int, choices=sorted(pathfinder.RESOLUTIONS), default=32)
  pf.add_argument("--difficulty", choices=list(pathfinder.DIFFICULTIES), default="hard")
  pf.add_argument("--num", type=int, default=200000)
  pf.add_argument("--seed", type=int, default=0)
  pf.add_argument("--workers", type=int, default=workers)
  pf.add_argument("--images-per-batch", type=int, default=pathfinder.DEFAULT_IMAGES_PER_BATCH,
                  help="images per imgs/<batch>/ (default %(default)s)")
  pf.add_argument("--num-distractors", type=int, default=None,
                  help="distractor snakes per image (default: budget // distractor length)")
  pf.add_argument("--quiet", action="store_true", help="no progress bar")
  pf.set_defaults(run=_pathfinder)

  grid = sub.add_parser("grid", help="PNG grid of Pathfinder images, framed by label")
  grid.add_argument("--out", required=True, help="PNG file to write")
  grid.add_argument("--resolutions", type=int, nargs="+", default=[32, 128],
                    choices=sorted(pathfinder.RESOLUTIONS))
  grid.add_argument("--difficulty", choices=list(pathfinder.DIFFICULTIES), default="hard")
  grid.add_argument("--per-row", type=int, default=8)
  grid.add_argument("--rows", type=int, default=2, help="rows per resolution")
  grid.add_argument("--cell", type=int, default=128, help="cell size in px (nearest upscale)")
  grid.add_argument("--seed", type=int, default=0)
  grid.add_argument("--source", default=None,
                    help="tile images from this difficulty folder instead of rendering "
                         "(use with one --resolutions value)")
  grid.set_defaults(run=_grid)

  orders = sub.add_parser("scan-orders", help="PNG of the raster and snake token orders (LION♮)")
  orders.add_argument("--out", required=True, help="PNG file to write")
  orders.add_argument("--size", type=int, default=8, help="grid side (cells)")
  orders.add_argument("--cell", type=int, default=40, help="cell size in px")
  orders.set_defaults(run=_scan_orders)
  return parser


def main(argv: list[str] | None = None) -> None:
  args = build_parser().parse_args(argv)
  try:
    args.run(args)
  except OSError as error:
    # A folder or file under --out that cannot be written: the user's to fix, one message.
    if not error.filename or not str(error.filename).startswith(str(args.out)):
      raise
    from lra.cli import CommandLineError  # pylint: disable=import-outside-toplevel
    raise CommandLineError(
        f"--out {args.out}: cannot write {error.filename} ({error.strerror}); pass an --out "
        "you can write to.") from None


def console_main(program: str = "lion-data") -> int:
  """The `lion-data` console script (and `python -m lra.data`): `main` with the user's errors as
  one message (`lra.cli`)."""
  from lra import cli  # pylint: disable=import-outside-toplevel  (the command line's errors)
  return cli.run(main, program, sys.argv[1:])


if __name__ == "__main__":
  sys.exit(console_main("python -m lra.data"))
