r"""Retrieval: AAN citation matching of two documents (L = 4000 each, 2 classes).

    python run.py --config configs/retrieval.py:lion_s --workdir runs/retrieval_lion_s

Paper (LION Table 3, test accuracy): LION-S 90.35, LION-D 90.12, LION-LIT 54.00.
Data: copy lra_release/lra_release/tsv_data/ to <data_dir>/aan/ (the error message says
which files). Smoke run: `--config configs/retrieval.py:lion_s,runlocal`.
"""

from configs import common


# S5 as the S5 release trains it on Retrieval (AAN): bin/run_experiments/run_lra_aan.sh of lindermanlab/S5
# ("script"); the schedule above (batch, epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the release defaults this preset shares with LION
# (activation, prenorm, Δ range), read in a fork's copy of run_train.py, not verified.
S5 = {
    "model.d_model": 128,  # script: --d_model=128
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 256,  # script: --ssm_size_base=256
    "model.ssm_blocks": 16,  # script: --blocks=16
    "model.dropout": 0.0,  # script: --p_dropout=0.0
    "model.c_init": "trunc_standard_normal",  # script: --C_init=trunc_standard_normal
    "model.dt_global": True,  # script: --dt_global=True
    "learning_rate": 2e-3,  # script: --lr_factor=2 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001
    "param_groups": common.S5_PARAM_GROUPS["standard"],  # script: --opt_config=standard
}


def get_config(arg=None):
  """Retrieval with S5's schedule (docs/design.md §3): batch 32, 20 epochs, weight decay 0.05."""
  config, args = common.get_base_config(
      "retrieval", arg, batch_size=32, num_epochs=20, weight_decay=0.05, baselines={"s5": S5})
  if args.runlocal:
    config.seq_len = 128
  return config
