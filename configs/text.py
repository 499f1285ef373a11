r"""Text: byte-level IMDB sentiment (L = 4096, 2 classes, 25k train reviews).

    python run.py --config configs/text.py:lion_s --workdir runs/text_lion_s

Paper (LION Table 3, test accuracy): LION-S 88.10, LION-D 88.78, LION-LIT 65.21.
Data: put aclImdb_v1.tar.gz at <data_dir>/imdb/ (the error message says where). As in
LRA and S5, validation is the test split (`task_options.val_split="test"`).
Smoke run: `--config configs/text.py:lion_s,runlocal` (needs the same file).
"""

from configs import common


def get_config(arg=None):
  """Text with S5's schedule (docs/design.md §3): batch 50, 35 epochs, no warmup."""
  config, args = common.get_base_config(
      "text", arg, batch_size=50, num_epochs=35, weight_decay=0.07, warmup_epochs=0.0)
  config.task_options = dict(val_split="test")
  if args.runlocal:
    config.seq_len = 256
  return config
