r"""Text: byte-level IMDB sentiment (L = 4096, 2 classes, 25k train reviews).

    python run.py --config configs/text.py:lion_s --workdir runs/text_lion_s

Paper (LION Table 3, test accuracy): LION-S 88.10, LION-D 88.78, LION-LIT 65.21.
Data: put aclImdb_v1.tar.gz at <data_dir>/imdb/ (the error message says where). As in
LRA and S5, validation is the test split (`task_options.val_split="test"`).
Smoke run: `--config configs/text.py:lion_s,runlocal` (needs the same file).
"""

from configs import common


# S5 as the S5 release trains it on Text (IMDb): bin/run_experiments/run_lra_imdb.sh
# of lindermanlab/S5 ("script"). The schedule passed to `get_base_config` below (batch,
# epochs, weight decay, warmup) is the same script's.
# Fields the script leaves unset keep the argument defaults of the release's run_train.py, which
# the preset shares: --prenorm=True, --bn_momentum=0.95, --dt_min=0.001, --dt_max=0.1,
# --clip_eigs=False (--bidirectional=True, --batchnorm=True: as in the preset).
S5 = {
    "model.d_model": 256,  # script: --d_model=256
    "model.num_layers": 6,  # script: --n_layers=6
    "model.ssm_size": 192,  # script: --ssm_size_base=192
    "model.ssm_blocks": 12,  # script: --blocks=12
    "model.activation": "half_glu2",  # script: --activation_fn=half_glu2
    "model.dropout": 0.1,  # script: --p_dropout=0.1
    "model.c_init": "lecun_normal",  # script: --C_init=lecun_normal
    "learning_rate": 4e-3,  # script: --lr_factor=4 × --ssm_lr_base=0.001
    "decay_learning_rate": 1e-3,  # script: --ssm_lr_base=0.001
    # script: --opt_config=standard --dt_global=True (log Δ at the learning rate, weight decay).
    "param_groups": common.s5_param_groups("standard", dt_global=True),
}


# The LRA paper's Transformer on Text: lra_benchmarks/text_classification/configs/
# base_tc_config.py ("LRA config", which transformer_base.py uses unchanged),
# lra_benchmarks/text_classification/train.py ("LRA train") and
# lra_benchmarks/models/transformer/transformer.py ("LRA model")
# of google-research/long-range-arena.
TRANSFORMER = {
    "model.d_model": 256,  # LRA config: emb_dim=256, qkv_dim=256
    "model.num_layers": 4,  # LRA config: num_layers=4
    "model.num_heads": 4,  # LRA config: num_heads=4
    "model.mlp_ratio": 4,  # LRA config: mlp_dim=1024 = 4 × 256
    # LRA model: learn_pos_emb=False by default, which LRA train leaves: fixed sinusoidal table.
    "model.positional": "sinusoidal",
    # LRA model: dropout_rate=0.1 by default, which LRA train leaves (attention dropout 0.1:
    # not here).
    "model.dropout": 0.1,
    "batch_size": 32,  # LRA config: batch_size=32
    "num_train_steps": 20_000,  # LRA config: num_train_steps=20000
    # LRA config: 0.05 × linear_warmup × rsqrt_decay, warmup=8000 steps: peak 0.05/√8000 at step
    # 8000; here linear warmup then cosine to 0.
    "learning_rate": 0.05 / 8000 ** 0.5,
    "warmup_epochs": 8000 * 32 / 25_000,  # 8000 steps of 32 on IMDb's 25k training reviews
    "weight_decay": 0.1,  # LRA config: weight_decay=1e-1
    "param_groups": (),  # LRA train: Adam's weight decay on every parameter, norms and biases too
    "b2": 0.98,  # LRA train: Adam(beta1=0.9, beta2=0.98, eps=1e-9); eps stays optax's 1e-8 here
    # LRA pools a CLS token (classifier_pool="CLS"); here the masked mean shared by every model.
    # LRA config: max_length=1000; here the task's L, the same for every model.
}


# The Table 7 baselines of this task (`common.BASELINE_VARIANTS`), as `:s5` and `:transformer`.
BASELINES = {"s5": S5, "transformer": TRANSFORMER}


def get_config(arg=None):
  """Text with S5's schedule (docs/design.md §3): batch 50, 35 epochs, no warmup."""
  config, args = common.get_base_config(
      "text", arg, batch_size=50, num_epochs=35, weight_decay=0.07, warmup_epochs=0.0,
      baselines=BASELINES)
  config.task_options.val_split = "test"
  if args.runlocal:
    config.seq_len = 256
  return config
