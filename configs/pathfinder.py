r"""Pathfinder: are two dots connected? 32×32 images as pixel sequences (L = 1024, 2 classes).

    python run.py --config configs/pathfinder.py:lion_s --workdir runs/pathfinder_lion_s

Paper (LION Table 3, test accuracy): LION-S 91.30, LION-D 90.25, LION-LIT 72.78.
Data: the LRA release's pathfinder32/ (curv_contour_length_14) or our generator
(`python -m lra.data generate pathfinder --resolution 32 ...`). Smoke run (generates a few
hundred images when missing): `--config configs/pathfinder.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.grid_order`, docs/scan_orders.png).
"""

from configs import common


def get_config(arg=None):
  """Pathfinder with S5's schedule (docs/design.md §3): batch 64, 200 epochs, weight decay 0.03."""
  config, args = common.get_base_config(
      "pathfinder", arg, batch_size=64, num_epochs=200, weight_decay=0.03)
  if args.runlocal:
    config.data_dir = common.RUNLOCAL_DATA_DIR
    config.generate = dict(num=192, seed=0, workers=1)
  return config
