r"""Retrieval: AAN citation matching of two documents (L = 4000 each, 2 classes).

    python run.py --config configs/retrieval.py:lion_s --workdir runs/retrieval_lion_s

Paper (LION Table 3, test accuracy): LION-S 90.35, LION-D 90.12, LION-LIT 54.00.
Data: copy lra_release/lra_release/tsv_data/ to <data_dir>/aan/ (the error message says
which files). Smoke run: `--config configs/retrieval.py:lion_s,runlocal`.
"""

from configs import common


def get_config(arg=None):
  """Retrieval with S5's schedule (docs/design.md §3): batch 32, 20 epochs, weight decay 0.05."""
  config, args = common.get_base_config(
      "retrieval", arg, batch_size=32, num_epochs=20, weight_decay=0.05)
  if args.runlocal:
    config.seq_len = 128
  return config
