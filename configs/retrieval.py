r"""Retrieval: AAN citation matching of two documents (L = 4000 each, 2 classes).

    python run.py --config configs/retrieval.py:lion_s --workdir runs/retrieval_lion_s

Paper (LION Table 3, test accuracy): LION-S 90.35, LION-D 90.12, LION-LIT 54.00.
Data: copy lra_release/lra_release/tsv_data/ to <data_dir>/aan/ (the error message says
which files). Smoke run: `--config configs/retrieval.py:lion_s,runlocal`.
"""

from configs import common


# S5 as the S5 release trains it on Retrieval (AAN): bin/run_experiments/run_lra_aan.sh
# of lindermanlab/S5 ("script"). The schedule passed to `get_base_config` below (batch,
# epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the argument defaults of the release's run_train.py, which
# the preset shares: --activation_fn=half_glu1, --prenorm=True, --bn_momentum=0.95,
# --dt_min=0.001, --dt_max=0.1, --clip_eigs=False (--bidirectional=True, --batchnorm=True: as in
# the preset).
S5 = {
    "model.d_model": 128,  # script: --d_model=128
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 256,  # script: --ssm_size_base=256
    "model.ssm_blocks": 16,  # script: --blocks=16
    "model.dropout": 0.0,  # script: --p_dropout=0.0
    "model.c_init": "trunc_standard_normal",  # script: --C_init=trunc_standard_normal
    "learning_rate": 2e-3,  # script: --lr_factor=2 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001
    # script: --opt_config=standard --dt_global=True (log Δ at the learning rate, weight decay).
    "param_groups": common.s5_param_groups("standard", dt_global=True),
}


# The LRA paper's Transformer on Retrieval: lra_benchmarks/matching/configs/base_match_config.py
# ("LRA config", which transformer_base.py uses unchanged), lra_benchmarks/matching/train.py
# ("LRA train") and lra_benchmarks/models/transformer/transformer.py ("LRA model",
# TransformerDualEncoder) of google-research/long-range-arena.
TRANSFORMER = {
    "model.d_model": 128,  # LRA config: emb_dim=128, qkv_dim=128
    "model.num_layers": 4,  # LRA config: num_layers=4
    "model.num_heads": 4,  # LRA config: num_heads=4
    "model.mlp_ratio": 4,  # LRA config: mlp_dim=512 = 4 × 128
    # LRA model: learn_pos_emb=False by default, which LRA train leaves: fixed sinusoidal table.
    "model.positional": "sinusoidal",
    # LRA model: dropout_rate=0.1 by default, which LRA train leaves (attention dropout 0.1:
    # not here).
    "model.dropout": 0.1,
    "batch_size": 32,  # LRA config: batch_size=32
    "num_train_steps": 5000,  # LRA config: num_train_steps=5000
    # LRA config: 0.05 × linear_warmup × rsqrt_decay with warmup=8000 steps, longer than the run:
    # the rate rises to 0.05 · (5000/8000)/√8000 and never decays. Here the same peak rate
    # 0.05/√8000 with the warmup cut to the run (lra.optim) and then cosine: not the LRA curve.
    "learning_rate": 0.05 / 8000 ** 0.5,
    "warmup_epochs": 8000 * 32 / 147_086,  # 8000 steps of 32 on AAN's 147,086 training pairs
    "weight_decay": 0.1,  # LRA config: weight_decay=1e-1
    "param_groups": (),  # LRA train: Adam's weight decay on every parameter, norms and biases too
    "b2": 0.98,  # LRA train: Adam(beta1=0.9, beta2=0.98, eps=1e-9); eps stays optax's 1e-8 here
    # LRA pools a CLS token (pooling_mode="CLS"); here the masked mean shared by every model.
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5` and `:transformer`.
BASELINES = {"s5": S5, "transformer": TRANSFORMER}


def get_config(arg=None):
  """Retrieval with S5's schedule (docs/design.md §3): batch 32, 20 epochs, weight decay 0.05."""
  config, args = common.get_base_config(
      "retrieval", arg, batch_size=32, num_epochs=20, weight_decay=0.05,
      baselines=BASELINES)
  if args.runlocal:
    config.seq_len = 128
  return config
