r"""Path-X: Pathfinder on 128×128 images (L = 16384, 2 classes).

    python run.py --config configs/pathx.py:lion_s --workdir runs/pathx_lion_s

Paper (LION Table 3, test accuracy): LION-S 97.99, LION-D 97.28, LION-LIT fails (50).
Data: the LRA release's pathfinder128/ or our generator (`python -m lra.data generate
pathfinder --resolution 128 ...`). Smoke run (generates a few images when missing):
`--config configs/pathx.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.grid_order`, docs/scan_orders.png).
"""

from configs import common


def get_config(arg=None):
  """Path-X with S5's schedule (docs/design.md §3): batch 32, 75 epochs, weight decay 0.06."""
  config, args = common.get_base_config(
      "pathx", arg, batch_size=32, num_epochs=75, weight_decay=0.06)
  if args.runlocal:
    config.data_dir = common.RUNLOCAL_DATA_DIR
    config.batch_size = 4
    config.num_train_steps = 10
    config.eval_every_steps = 10
    config.max_examples = 16
    config.generate = dict(num=48, seed=0, workers=1)
  return config
