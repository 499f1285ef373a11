r"""Text: byte-level IMDB sentiment (L = 4096, 2 classes, 25k train reviews).

    python run.py --config configs/text.py:lion_s --workdir runs/text_lion_s

Paper (LION Table 3, test accuracy): LION-S 88.10, LION-D 88.78, LION-LIT 65.21.
Data: put aclImdb_v1.tar.gz at <data_dir>/imdb/ (the error message says where). As in
LRA and S5, validation is the test split (`task_options.val_split="test"`).
Smoke run: `--config configs/text.py:lion_s,runlocal` (needs the same file).
"""

from configs import common


# S5 as the S5 release trains it on Text (IMDb): bin/run_experiments/run_lra_imdb.sh of lindermanlab/S5
# ("script"); the schedule above (batch, epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the release defaults this preset shares with LION
# (activation, prenorm, Δ range), read in a fork's copy of run_train.py, not verified.
S5 = {
    "model.d_model": 256,  # script: --d_model=256
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 192,  # script: --ssm_size_base=192
    "model.ssm_blocks": 12,  # script: --blocks=12
    "model.activation": "half_glu2",  # script: --activation_fn=half_glu2
    "model.dropout": 0.1,  # script: --p_dropout=0.1
    "model.c_init": "lecun_normal",  # script: --C_init=lecun_normal
    "model.dt_global": True,  # script: --dt_global=True
    "learning_rate": 4e-3,  # script: --lr_factor=4 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001
    "param_groups": common.S5_PARAM_GROUPS["standard"],  # script: --opt_config=standard
}


def get_config(arg=None):
  """Text with S5's schedule (docs/design.md §3): batch 50, 35 epochs, no warmup."""
  config, args = common.get_base_config(
      "text", arg, batch_size=50, num_epochs=35, weight_decay=0.07, warmup_epochs=0.0,
      baselines={"s5": S5})
  config.task_options = dict(val_split="test")
  if args.runlocal:
    config.seq_len = 256
  return config
