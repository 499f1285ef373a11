r"""Pathfinder: are two dots connected? 32×32 images as pixel sequences (L = 1024, 2 classes).

    python run.py --config configs/pathfinder.py:lion_s --workdir runs/pathfinder_lion_s

Paper (LION Table 3, test accuracy): LION-S 91.30, LION-D 90.25, LION-LIT 72.78.
Data: the LRA release's pathfinder32/ (curv_contour_length_14) or our generator
(`python -m lra.data generate pathfinder --resolution 32 ...`). Smoke run (generates a few
hundred images when missing): `--config configs/pathfinder.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.ops.grid_order`, docs/scan_orders.png).
"""

from configs import common


# S5 as the S5 release trains it on Pathfinder-32: bin/run_experiments/run_lra_pathfinder.sh
# of lindermanlab/S5 ("script"). The schedule passed to `get_base_config` below (batch,
# epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the argument defaults of the release's run_train.py, which
# the preset shares: --activation_fn=half_glu1, --prenorm=True, --dt_min=0.001, --dt_max=0.1,
# --clip_eigs=False, --dt_global=False (--bidirectional=True, --batchnorm=True: as in the preset).
S5 = {
    "model.d_model": 192,  # script: --d_model=192
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 256,  # script: --ssm_size_base=256
    "model.ssm_blocks": 8,  # script: --blocks=8
    "model.bn_momentum": 0.9,  # script: --bn_momentum=0.9
    "model.dropout": 0.05,  # script: --p_dropout=0.05
    "model.c_init": "trunc_standard_normal",  # script: --C_init=trunc_standard_normal
    "learning_rate": 4.5e-3,  # script: --lr_factor=5 × --ssm_lr_base=0.0009
    "decay_learning_rate": 9e-4,  # script: --ssm_lr_base=0.0009
    "param_groups": common.S5_PARAM_GROUPS["standard"],  # script: --opt_config=standard
}

# The LRA paper's Transformer on Pathfinder-32: lra_benchmarks/image/configs/pathfinder32/
# transformer_base.py ("LRA transformer") on base_pathfinder32_config.py ("LRA base"), with
# lra_benchmarks/image/train.py ("LRA train") of google-research/long-range-arena.
TRANSFORMER = {
    "model.d_model": 32,  # LRA transformer: emb_dim=32
    "model.num_layers": 4,  # LRA transformer: num_layers=4
    "model.num_heads": 4,  # LRA transformer: num_heads=4
    "model.attention_dim": 16,  # LRA transformer: qkv_dim=16
    "model.mlp_ratio": 1,  # LRA transformer: mlp_dim=32 = 1 × 32
    "model.dropout": 0.2,  # LRA transformer: dropout_rate=0.2 (attention dropout 0.1: not here)
    "model.positional": "sinusoidal",  # LRA base: learn_pos_emb=False (fixed encodings)
    "batch_size": 512,  # LRA base: batch_size=512
    "num_epochs": 200,  # LRA base: NUM_EPOCHS=200
    "learning_rate": 1e-3,  # LRA base: 0.001 × linear_warmup × cosine_decay
    "warmup_epochs": 1.0,  # LRA base: warmup = one epoch of steps
    "weight_decay": 0.0,  # LRA base: weight_decay=0.
    "b2": 0.98,  # LRA train: Adam(beta1=0.9, beta2=0.98, eps=1e-9); eps stays optax's 1e-8 here
    # LRA base: classifier_pool='MEAN', as here. LRA train feeds the 8-bit pixels as tokens to
    # an embedding table (vocabulary 256); here the preset's Dense encoder shared by every model.
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5` and `:transformer`.
BASELINES = {"s5": S5, "transformer": TRANSFORMER}


def get_config(arg=None):
  """Pathfinder with S5's schedule (docs/design.md §3): batch 64, 200 epochs, weight decay 0.03."""
  config, args = common.get_base_config(
      "pathfinder", arg, batch_size=64, num_epochs=200, weight_decay=0.03,
      baselines=BASELINES)
  if args.runlocal:
    config.data_dir = common.RUNLOCAL_DATA_DIR
    config.generate = dict(num=192, seed=0, workers=1)
  return config
