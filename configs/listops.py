r"""ListOps (L = 2048, 10 classes, 96k train expressions).

    python run.py --config configs/listops.py:lion_s --workdir runs/listops_lion_s

Paper (LION Table 3, test accuracy): LION-S 62.25, LION-D 62.0, LION-LIT 16.78.
Baselines (Table 7): `:s5` (S5's release settings) and `:transformer` (the LRA Transformer).
Majority class: about 17%. Smoke run (generates a small ListOps when missing, ~1 min):

    python run.py --config configs/listops.py:lion_s,runlocal --workdir /tmp/listops

`demo` is what `make demo` trains (expressions of 50-150 tokens, a small `lion`, 6 epochs):

    python -m lra.demo     # or: python run.py --config configs/listops.py:lion,demo ...
"""

import os

from configs import common


# S5 as the S5 release trains it on ListOps: bin/run_experiments/run_lra_listops.sh of
# lindermanlab/S5 ("script") and the argument defaults of its run_train.py ("release default").
# The script's --bidirectional=True is the only form `lion_jax.nn.s5` has; conj_sym (True),
# discretization (zoh) and --mode=pool (mean pooling) are release defaults the model shares.
S5 = {
    "model.d_model": 128,  # script: --d_model=128
    "model.num_layers": 8,  # script: --n_layers=8
    "model.ssm_size": 16,  # script: --ssm_size_base=16 (P; 8 complex states after conj. symmetry)
    "model.ssm_blocks": 8,  # script: --blocks=8 (J)
    "model.activation": "half_glu2",  # script: --activation_fn=half_glu2
    "model.norm": "batch",  # script: --batchnorm=True
    "model.prenorm": True,  # release default: --prenorm=True
    "model.bn_momentum": 0.95,  # release default: --bn_momentum=0.95
    "model.dropout": 0.0,  # script: --p_dropout=0
    "model.dt_min": 0.001,  # release default: --dt_min=0.001
    "model.dt_max": 0.1,  # release default: --dt_max=0.1
    "model.c_init": "lecun_normal",  # script: --C_init=lecun_normal
    "model.clip_eigs": False,  # release default: --clip_eigs=False
    "batch_size": 50,  # script: --bsz=50
    "num_epochs": 40,  # script: --epochs=40
    "learning_rate": 3e-3,  # script: --lr_factor=3 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001 (S5's ssm_lr)
    "weight_decay": 0.04,  # script: --weight_decay=0.04
    "warmup_epochs": 1.0,  # script: --warmup_end=1
    # script: --opt_config=BfastandCdecay; --dt_global unset: release default False.
    "param_groups": common.S5_PARAM_GROUPS["BfastandCdecay"],
}

# The LRA paper's Transformer on ListOps: lra_benchmarks/listops/configs/base_listops_config.py
# ("LRA config", which transformer_base.py uses unchanged), lra_benchmarks/listops/train.py
# ("LRA train") and lra_benchmarks/models/transformer/transformer.py ("LRA model") of
# google-research/long-range-arena.
TRANSFORMER = {
    "model.d_model": 512,  # LRA config: emb_dim=512, qkv_dim=512
    # LRA config: num_layers=4, mlp_dim=1024 (until March 2021 it said 6 and 2048).
    "model.num_layers": 4,
    "model.num_heads": 8,  # LRA config: num_heads=8
    "model.mlp_ratio": 2,  # LRA config: mlp_dim=1024 = 2 × 512
    # LRA model: learn_pos_emb=False by default, which LRA train leaves: fixed sinusoidal table.
    "model.positional": "sinusoidal",
    # LRA model: dropout_rate=0.1 by default, which LRA train leaves (attention dropout 0.1:
    # not here).
    "model.dropout": 0.1,
    "batch_size": 32,  # LRA config: batch_size=32
    "num_train_steps": 5000,  # LRA config: num_train_steps=5000
    # LRA config: learning_rate=0.05 × linear_warmup × rsqrt_decay with warmup=1000 steps, i.e.
    # a peak of 0.05/√1000 ≈ 1.6e-3 at step 1000; here linear warmup then cosine to 0.
    "learning_rate": 0.05 / 1000 ** 0.5,
    "warmup_epochs": 1000 * 32 / 96_000,  # 1000 steps of 32 on ListOps' 96k training examples
    "weight_decay": 0.1,  # LRA config: weight_decay=1e-1
    "param_groups": (),  # LRA train: Adam's weight decay on every parameter, norms and biases too
    "b2": 0.98,  # LRA train: Adam(beta1=0.9, beta2=0.98, eps=1e-9); eps stays optax's 1e-8 here
    # LRA train passes no classifier_pool, so LRA model's default "CLS" pools a CLS token (the
    # config's pooling_mode is unused); here the masked mean shared by every model.
    # LRA config: max_length=2000; here the task's L (2048), the same for every model.
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5` and `:transformer`.
BASELINES = {"s5": S5, "transformer": TRANSFORMER}


def get_config(arg=None):
  """ListOps with S5's schedule (docs/design.md §3): batch 50, 40 epochs, weight decay 0.04."""
  config, args = common.get_base_config(
      "listops", arg, batch_size=50, num_epochs=40, weight_decay=0.04,
      extra_args={"demo": False}, baselines=BASELINES)
  if args.runlocal:
    config.seq_len = 128
    config.data_dir = common.RUNLOCAL_DATA_DIR
    # Written to <data_dir>/listops-1000/ when the TSVs are missing (lra.data.generators).
    config.generate = dict(num_train=192, num_val=64, num_test=64, min_length=20,
                           max_length=120, seed=0, workers=1)
  if args.demo:
    _demo(config)
  return config


def _demo(config):
  """Short ListOps that `lion` learns in about a minute on a 2-core CPU.

  Expressions of 50-150 tokens instead of 500-2000, a 2-block model of width 64, 6 epochs. The
  HiPPO timescales are scaled to the shorter inputs (Δ in [0.01, 1] instead of [0.001, 0.1],
  i.e. memories of ~2-200 tokens rather than ~20-2000): with the default range LION-S's
  validation accuracy was still 20-22% (majority 16%) after 2.4 epochs, with the scaled one
  30.6% after 1.2. Peak lr 3e-3 (S5's ListOps rate) rather than the paper's 5e-4, for 1,500
  steps instead of 40 epochs. Only sizes, data and schedule are set here, so `<variant>,demo`
  is any variant at this size.
  Measured (`python -m lra.demo`, 2-core CPU shared with six training runs): `lion`, 17,722
  parameters, test 35.2% against the majority class's 15.3% after 1,500 steps at ~1,300
  examples/s.
  """
  config.data_dir = os.path.join(common.DATA_ROOT, "demo")
  config.seq_len = 160
  config.generate = dict(num_train=8000, num_val=500, num_test=1000, min_length=50,
                         max_length=150, seed=0, workers=2)
  common.set_fields(config, {
      "model.d_model": 64, "model.num_layers": 2, "model.chunk_size": 32, "model.dt_min": 0.01,
      "model.dt_max": 1.0, "batch_size": 32, "num_epochs": 6, "learning_rate": 3e-3,
      "weight_decay": 0.01, "warmup_epochs": 0.2, "log_every_steps": 25,
      "eval_every_steps": 125,
  }, "demo")
