r"""Image: grayscale CIFAR-10 as a pixel sequence (L = 1024, 10 classes).

    python run.py --config configs/image.py:lion_s --workdir runs/image_lion_s

Paper (LION Table 3, test accuracy): LION-S 86.14, LION-D 85.66, LION-LIT 43.29.
Data: put cifar-10-binary.tar.gz (or cifar-10-python.tar.gz) at <data_dir>/cifar10/ (the
error message says where). Smoke run: `--config configs/image.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.grid_order`, docs/scan_orders.png).
"""

from configs import common


def get_config(arg=None):
  """Image with S5's schedule (docs/design.md §3): batch 50, 250 epochs, weight decay 0.07."""
  config, _ = common.get_base_config(
      "image", arg, batch_size=50, num_epochs=250, weight_decay=0.07)
  return config
