r"""Image: grayscale CIFAR-10 as a pixel sequence (L = 1024, 10 classes).

    python run.py --config configs/image.py:lion_s --workdir runs/image_lion_s

Paper (LION Table 3, test accuracy): LION-S 86.14, LION-D 85.66, LION-LIT 43.29.
Data: put cifar-10-binary.tar.gz (or cifar-10-python.tar.gz) at <data_dir>/cifar10/ (the
error message says where). Smoke run: `--config configs/image.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.ops.grid_order`, docs/scan_orders.png).
"""

from configs import common


# S5 as the S5 release trains it on Image (CIFAR-10): bin/run_experiments/run_lra_cifar.sh
# of lindermanlab/S5 ("script"). The schedule passed to `get_base_config` below (batch,
# epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the argument defaults of the release's run_train.py, which
# the preset shares: --activation_fn=half_glu1, --prenorm=True, --bn_momentum=0.95,
# --dt_min=0.001, --dt_max=0.1, --dt_global=False (--bidirectional=True, --batchnorm=True: as in
# the preset).
S5 = {
    "model.d_model": 512,  # script: --d_model=512
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 384,  # script: --ssm_size_base=384
    "model.ssm_blocks": 3,  # script: --blocks=3
    "model.dropout": 0.1,  # script: --p_dropout=0.1
    "model.c_init": "lecun_normal",  # script: --C_init=lecun_normal
    "model.clip_eigs": True,  # script: --clip_eigs=True
    "learning_rate": 4.5e-3,  # script: --lr_factor=4.5 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001
    "param_groups": common.S5_PARAM_GROUPS["BfastandCdecay"],  # script: --opt_config=BfastandCdecay
}


# The LRA paper's Transformer on Image (CIFAR-10): lra_benchmarks/image/configs/cifar10/
# transformer_base.py ("LRA transformer") on base_cifar10_config.py ("LRA base"), with
# lra_benchmarks/image/train.py ("LRA train") of google-research/long-range-arena.
TRANSFORMER = {
    "model.d_model": 128,  # LRA transformer: emb_dim=128
    "model.num_layers": 1,  # LRA transformer: num_layers=1
    "model.num_heads": 8,  # LRA transformer: num_heads=8
    "model.attention_dim": 64,  # LRA transformer: qkv_dim=64
    "model.mlp_ratio": 1,  # LRA transformer: mlp_dim=128 = 1 × 128
    "model.dropout": 0.3,  # LRA base: dropout_rate=0.3 (attention dropout 0.2: not here)
    # LRA base: learn_pos_emb=True. Learnt position embeddings are not implemented: fixed
    # sinusoidal encodings instead (a deviation).
    "model.positional": "sinusoidal",
    "batch_size": 256,  # LRA base: batch_size=256
    "num_epochs": 200,  # LRA base: NUM_EPOCHS=200
    "learning_rate": 5e-4,  # LRA base: 0.0005 × linear_warmup × cosine_decay
    "warmup_epochs": 1.0,  # LRA base: warmup = one epoch of steps
    "weight_decay": 0.0,  # LRA base: weight_decay=0.
    "b2": 0.98,  # LRA train: Adam(beta1=0.9, beta2=0.98, eps=1e-9); eps stays optax's 1e-8 here
    # LRA transformer: classifier_pool="CLS"; here the masked mean shared by every model.
    # LRA train feeds the 8-bit pixels as tokens to an embedding table (vocabulary 256); here
    # the preset's Dense encoder shared by every model.
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5` and `:transformer`.
BASELINES = {"s5": S5, "transformer": TRANSFORMER}


def get_config(arg=None):
  """Image with S5's schedule (docs/design.md §3): batch 50, 250 epochs, weight decay 0.07."""
  config, _ = common.get_base_config(
      "image", arg, batch_size=50, num_epochs=250, weight_decay=0.07,
      baselines=BASELINES)
  return config
