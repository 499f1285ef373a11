r"""Path-X: Pathfinder on 128×128 images (L = 16384, 2 classes).

    python run.py --config configs/pathx.py:lion_s --workdir runs/pathx_lion_s

Paper (LION Table 3, test accuracy): LION-S 97.99, LION-D 97.28, LION-LIT fails (50).
Data: the LRA release's pathfinder128/ or our generator (`python -m lra.data generate
pathfinder --resolution 128 ...`). Smoke run (generates a few images when missing):
`--config configs/pathx.py:lion_s,runlocal`.
LION♮ (paper §C.11, Figure 9): `:lion_s_snake` and `:lion_d_snake` run the decays along the
row and column snakes of the image (`lion_jax.ops.grid_order`, docs/scan_orders.png).
Baseline (Table 7): `:s5` (S5's release settings, 98.58 in the paper). There is no
`:transformer`: Table 7 marks the Transformer on Path-X as failed (✗), as the LRA paper marks
every model it ran there (no better than chance), so there is no number to reproduce; and the
LRA release's pathfinder128 Transformer (1 layer, 2 heads, batch 64) would hold a
[64, 2, 16384, 16384] attention matrix, 128 GiB in float32, in every step.
"""

from configs import common


# S5 as the S5 release trains it on Path-X: bin/run_experiments/run_lra_pathx.sh of
# lindermanlab/S5 ("script"). The schedule passed to `get_base_config` below (batch 32,
# 75 epochs, weight decay 0.06, warmup 1 epoch) is the same script's.
# Fields the script leaves unset keep the argument defaults of the release's run_train.py, which
# the preset shares: --activation_fn=half_glu1, --prenorm=True, --dt_max=0.1, --clip_eigs=False,
# --dt_global=False (--bidirectional=True, --batchnorm=True: as in the preset).
S5 = {
    "model.d_model": 128,  # script: --d_model=128
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 256,  # script: --ssm_size_base=256
    "model.ssm_blocks": 16,  # script: --blocks=16
    "model.bn_momentum": 0.9,  # script: --bn_momentum=0.9
    "model.dropout": 0.0,  # script: --p_dropout=0.0
    "model.dt_min": 1e-4,  # script: --dt_min=0.0001
    "model.c_init": "complex_normal",  # script: --C_init=complex_normal
    "learning_rate": 1.8e-3,  # script: --lr_factor=3 × --ssm_lr_base=0.0006
    "decay_learning_rate": 6e-4,  # script: --ssm_lr_base=0.0006
    # script: --opt_config=BandCdecay: B at ssm_lr with weight decay, C at the learning rate.
    "param_groups": common.S5_PARAM_GROUPS["BandCdecay"],
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5`.
BASELINES = {"s5": S5}


def get_config(arg=None):
  """Path-X with S5's schedule (docs/design.md §3): batch 32, 75 epochs, weight decay 0.06."""
  config, args = common.get_base_config(
      "pathx", arg, batch_size=32, num_epochs=75, weight_decay=0.06, baselines=BASELINES)
  if args.runlocal:
    config.data_dir = common.RUNLOCAL_DATA_DIR
    config.batch_size = 4
    config.num_train_steps = 10
    config.eval_every_steps = 10
    config.max_examples = 16
    config.generate = dict(num=48, seed=0, workers=1)
  return config
