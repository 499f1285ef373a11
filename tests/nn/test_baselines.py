"""The baseline mixers of the paper's Table 7: S5 (`lion_jax.nn.s5`) and softmax attention
(`lion_jax.nn.softmax`), each against its definition in float64 NumPy, and inside
`LraClassifier`."""

import importlib
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import common
from configs import listops as listops_config
from lion_jax import LraClassifier, ModelConfig
from lion_jax.nn.models import sinusoidal_positions
from lion_jax.ops.decay import hippo_n
from lion_jax.nn.s5 import S5Mixer, linear_recurrence
from lion_jax.nn import softmax
from lion_jax.nn.softmax import SoftmaxMixer
from lra import optim, train

S5_TINY = dict(mixer="s5", d_model=4, ssm_size=8, ssm_blocks=2)


def _loop_scan(lambda_bar, bu, reverse=False):
  """x_t = Λ̄ x_{t∓1} + bu_t by a Python loop in complex128."""
  bu = np.asarray(bu, np.complex128)
  lam = np.asarray(lambda_bar, np.complex128)
  out = np.zeros_like(bu)
  x = np.zeros((bu.shape[0], bu.shape[2]), np.complex128)
  order = range(bu.shape[1] - 1, -1, -1) if reverse else range(bu.shape[1])
  for t in order:
    x = lam * x + bu[:, t]
    out[:, t] = x
  return out


@pytest.mark.parametrize("method", ["associative", "linear"])
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_recurrence_equals_python_loop(method, reverse):
  rng = np.random.default_rng(0)
  lam = np.exp((-0.5 + 1j * rng.normal(size=8)) * 0.1).astype(np.complex64)
  bu = (rng.normal(size=(2, 37, 8)) + 1j * rng.normal(size=(2, 37, 8))).astype(np.complex64)
  got = linear_recurrence(jnp.asarray(lam), jnp.asarray(bu), reverse=reverse, method=method)
  np.testing.assert_allclose(np.asarray(got), _loop_scan(lam, bu, reverse), rtol=1e-5, atol=1e-5)


def test_hippo_n_is_diagonalised_with_real_part_one_half():
  lam, v = hippo_n(16)
  np.testing.assert_allclose(lam.real, -0.5, atol=1e-12)  # normal part: constant −½ real part
  np.testing.assert_allclose(v.conj().T @ v, np.eye(16), atol=1e-10)  # unitary eigenvectors
  q = np.sqrt(1 + 2 * np.arange(16))
  legs = -(np.tril(q[:, None] * q[None, :]) - np.diag(np.arange(16)))
  p = np.sqrt(np.arange(16) + 0.5)
  np.testing.assert_allclose(v @ np.diag(lam) @ v.conj().T, legs + np.outer(p, p), atol=1e-9)
  assert np.all(np.abs(lam.imag) > 0)


def test_zoh_closed_form_is_the_integral_it_stands_for():
  """Guards the reference's B̄: (e^{λΔ} − 1)/λ equals ∫₀^Δ e^{λs} ds by the midpoint rule."""
  lam, step = -0.5 + 2.0j, 0.07
  s = (np.arange(10_000) + 0.5) * step / 10_000
  np.testing.assert_allclose((np.exp(lam * step) - 1.0) / lam, np.exp(lam * s).sum() * step / 10_000,
                             rtol=1e-8)


def s5_reference(params, u, lengths):
  """The bidirectional S5 SSM from its definition, per example over its real tokens only.

  Args:
    params: the S5Mixer's parameters as float64 arrays (keys as the module's attributes); Re Λ
      is clipped to ≤ −1e-4 (HiPPO-N has Re Λ = −½, so the clip only matters with clip_eigs).
    u: [B, L, M] float64 inputs (padded positions are never read).
    lengths: [B] real lengths.

  Returns:
    [B, L, M] float64 outputs, zero at padding.
  """
  lam = np.minimum(params["lambda_re"], -1e-4) + 1j * params["lambda_im"]  # [N], clip_eigs
  lambda_bar = np.exp(lam * np.exp(params["log_step"]))  # ZOH; log_step [N] or [1]
  b_bar = ((lambda_bar - 1.0) / lam)[:, None] * (params["b_re"] + 1j * params["b_im"])  # [N, M]
  c = params["c_re"] + 1j * params["c_im"]  # [M, 2N]
  n = lam.shape[0]
  out = np.zeros_like(u)
  for i, length in enumerate(lengths):
    forward, backward = np.zeros((length, n), complex), np.zeros((length, n), complex)
    x = np.zeros(n, complex)
    for t in range(length):
      x = lambda_bar * x + b_bar @ u[i, t]
      forward[t] = x
    x = np.zeros(n, complex)
    for t in reversed(range(length)):  # starts at the last real token
      x = lambda_bar * x + b_bar @ u[i, t]
      backward[t] = x
    y = 2 * (forward @ c[:, :n].T + backward @ c[:, n:].T).real  # conjugate symmetry
    out[i, :length] = y + params["d"] * u[i, :length]
  return out


@pytest.mark.parametrize("method,options", [
    ("associative", {}),
    pytest.param("linear", dict(dt_global=True, c_init="complex_normal", clip_eigs=True),
                 marks=pytest.mark.slow),
])
def test_s5_mixer_equals_the_definition_in_float64_with_padding(method, options):
  """Outputs and gradients (parameters and inputs) of the mixer against `s5_reference`, with
  garbage in the padding; gradients against central differences of the reference."""
  with jax.enable_x64(True):
    mixer = S5Mixer(ModelConfig(**S5_TINY, ssm_scan=method, **options), rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(mixer)
    state = jax.tree.map(lambda x: x.astype(jnp.float64), state)
    names = ("lambda_re", "lambda_im", "b_re", "b_im", "c_re", "c_im", "d", "log_step")
    params = {k: np.asarray(state[k][...]) for k in names}
    rng = np.random.default_rng(1)
    lengths = np.array([9, 5])
    u = rng.normal(size=(2, 9, 4))
    u[1, 5:] = 50.0 * rng.normal(size=(4, 4))  # padding: garbage the mixer must ignore
    mask = np.arange(9) < lengths[:, None]
    weights = rng.normal(size=u.shape) * mask[..., None]  # the loss reads real positions only

    def loss(params, u):
      for k in names:
        state[k] = nnx.Param(params[k])
      return jnp.sum(nnx.merge(graphdef, state)(u, jnp.asarray(mask)) * weights)

    with_padding = jax.jit(lambda u: nnx.merge(graphdef, state)(u, jnp.asarray(mask)))(
        jnp.asarray(u))
    np.testing.assert_allclose(np.asarray(with_padding) * mask[..., None],
                               s5_reference(params, u, lengths), rtol=1e-10, atol=1e-12)

    grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(jax.tree.map(jnp.asarray, params),
                                                     jnp.asarray(u))
    reference_loss = lambda p, x: np.sum(s5_reference(p, x, lengths) * weights)
    for seed in range(3):  # directional derivatives along random directions
      d_rng = np.random.default_rng(10 + seed)
      dp = {k: d_rng.normal(size=v.shape) for k, v in params.items()}
      du = d_rng.normal(size=u.shape)
      eps = 1e-6
      plus = reference_loss({k: params[k] + eps * dp[k] for k in names}, u + eps * du)
      minus = reference_loss({k: params[k] - eps * dp[k] for k in names}, u - eps * du)
      numeric = (plus - minus) / (2 * eps)
      analytic = sum(np.sum(np.asarray(grads[0][k]) * dp[k]) for k in names)
      analytic += np.sum(np.asarray(grads[1]) * du)
      np.testing.assert_allclose(analytic, numeric, rtol=1e-6)


@pytest.mark.parametrize("tied", [False, True])
def test_s5_with_real_eigenvalues_is_the_definition_with_imaginary_parts_zero(tied):
  """`ssm_real`: no lambda_im parameter, and the outputs of `s5_reference` with Im Λ = 0;
  `ssm_tied_readout`: the reference with the one read-out [M, N] for both directions."""
  with jax.enable_x64(True):
    graphdef, state = nnx.split(S5Mixer(ModelConfig(**S5_TINY, ssm_real=True,
                                                    ssm_tied_readout=tied), rngs=nnx.Rngs(0)))
    assert "lambda_im" not in state
    assert state["c_re"][...].shape[1] == (1 if tied else 2) * state["lambda_re"][...].shape[0]
    state = jax.tree.map(lambda x: x.astype(jnp.float64), state)
    mixer = nnx.merge(graphdef, state)
    params = {k: np.asarray(state[k][...])
              for k in ("lambda_re", "b_re", "b_im", "c_re", "c_im", "d", "log_step")}
    params["lambda_im"] = np.zeros_like(params["lambda_re"])
    if tied:
      params["c_re"], params["c_im"] = (np.concatenate([params[k], params[k]], axis=1)
                                        for k in ("c_re", "c_im"))
    rng = np.random.default_rng(2)
    lengths = np.array([9, 6])
    u = rng.normal(size=(2, 9, 4))
    mask = np.arange(9) < lengths[:, None]
    out = mixer(jnp.asarray(u), jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(out) * mask[..., None],
                               s5_reference(params, u, lengths), rtol=1e-10, atol=1e-12)
    assert np.all(np.asarray(mixer.discretize()[0]).imag == 0)


@pytest.mark.parametrize("c_init,mean_square", [
    ("lecun_normal", lambda p, m: 2 / (p * m)),  # C entries ~ 1/√(P·M) per real part
    ("trunc_standard_normal", lambda p, m: 2 / p),
    ("complex_normal", lambda p, m: 1.0),
])
def test_s5_c_init_scales(c_init, mean_square):
  """E|C̃|² = 2σ² (V's columns have unit norm), σ the std of C's real and imaginary parts."""
  mixer = S5Mixer(ModelConfig(mixer="s5", d_model=64, ssm_size=64, ssm_blocks=4, c_init=c_init),
                  rngs=nnx.Rngs(0))
  c = np.asarray(mixer.c_re[...]) + 1j * np.asarray(mixer.c_im[...])
  assert c.shape == (64, 64)  # [M, 2N], N = 32
  np.testing.assert_allclose(np.mean(np.abs(c) ** 2), mean_square(64, 64), rtol=0.1)


# make test: the definition above, whose reference reads both directions; make test-all: this.
@pytest.mark.slow
def test_s5_mixer_reads_both_directions():
  mixer = S5Mixer(ModelConfig(**S5_TINY), rngs=nnx.Rngs(0))
  x = jnp.zeros((1, 9, 4)).at[0, 6].set(1.0)
  y = mixer(x) - mixer.d[...] * x
  assert float(jnp.abs(y[0, 2]).sum()) > 0 and float(jnp.abs(y[0, 8]).sum()) > 0


def test_s5_eigenvalues_are_stable_and_clipped_when_asked():
  mixer = S5Mixer(ModelConfig(**S5_TINY, clip_eigs=True), rngs=nnx.Rngs(0))
  lambda_bar, _ = mixer.discretize()
  assert np.all(np.abs(np.asarray(lambda_bar)) < 1)
  mixer.lambda_re[...] = jnp.full_like(mixer.lambda_re[...], 0.3)
  assert np.all(np.asarray(mixer.eigenvalues().real) == np.float32(-1e-4))


@pytest.mark.parametrize("attention_dim", [None, 8])
def test_softmax_mixer_equals_the_definition(attention_dim):
  config = ModelConfig(mixer="softmax", d_model=16, num_heads=4, attention_dim=attention_dim)
  mixer = SoftmaxMixer(config, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(2), (2, 13, 16))
  mask = np.arange(13)[None, :] < np.array([[13], [9]])
  got = mixer(x, jnp.asarray(mask))
  assert got.shape == (2, 13, 16)
  q, k, v = np.split(np.asarray(x, np.float64) @ np.asarray(mixer.qkv.kernel[...], np.float64), 3,
                     axis=-1)
  width = attention_dim or 16
  heads = lambda t: t.reshape(2, 13, 4, width // 4)
  q, k, v = heads(q), heads(k), heads(v)
  logits = np.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(width // 4)
  logits = np.where(mask[:, None, None, :], logits, -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  y = np.einsum("bhij,bjhd->bihd", weights, v).reshape(2, 13, width)
  want = y @ np.asarray(mixer.out.kernel[...]) + np.asarray(mixer.out.bias[...])
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)


def _softmax_attention_definition(q, k, v, allowed):
  """y_i = Σ_j softmax_j(q_i·k_j / √D) v_j over the keys j allowed to query i, by loops in
  float64; a query allowed no key takes the plain mean of its row's values."""
  batch, length, heads, width = q.shape
  out = np.zeros(q.shape)
  for b in range(batch):
    for h in range(heads):
      for i in range(length):
        if not allowed[b, i].any():
          out[b, i, h] = v[b, :, h].mean(0)
          continue
        keys = np.flatnonzero(allowed[b, i])
        logits = np.array([q[b, i, h] @ k[b, j, h] for j in keys]) / np.sqrt(width)
        weights = np.exp(logits - logits.max())
        out[b, i, h] = (weights / weights.sum()) @ v[b, keys, h]
  return out


@pytest.mark.parametrize("one_example_at_a_time", [True, False], ids=["row_by_row", "batched"])
def test_softmax_attention_equals_its_float64_definition_batched_or_row_by_row(
    one_example_at_a_time):
  """Outputs and input gradients in float64, with padded keys, packed rows, padding queries and
  a row with no real key (whose queries see none). Row 0: one example; row 1: keys 6-8 padded,
  examples of 4 and 3 tokens; row 2: examples of 5 and 2 tokens with 2 padding tokens between;
  row 3: every key padded."""
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal((4, 9, 2, 4)) for _ in range(3))
  key_mask = np.arange(9)[None, :] < np.array([[9], [6], [9], [0]])
  segment_ids = np.array([[1] * 9, [1] * 4 + [2] * 3 + [0] * 2, [1] * 5 + [0] * 2 + [3] * 2,
                          [1] * 9])
  allowed = (key_mask[:, None, :] & (segment_ids[:, :, None] == segment_ids[:, None, :])
             & (segment_ids[:, None, :] > 0))  # [B, L(query), L(key)]
  cotangent = rng.standard_normal(q.shape)

  def dense_definition(q, k, v):  # the same sum as `_softmax_attention_definition`, for autodiff
    logits = jnp.einsum("bihd,bjhd->bhij", q, k) / np.sqrt(q.shape[-1])
    logits = jnp.where(jnp.asarray(allowed)[:, None], logits, -jnp.inf)
    blind = jnp.asarray(~allowed.any(-1, keepdims=True))[:, None]  # [B, 1, L, 1] no key seen
    weights = jax.nn.softmax(jnp.where(blind, 0.0, logits), axis=-1)  # blind: uniform
    return jnp.einsum("bhij,bjhd->bihd", weights, v)

  # flax's batched attention takes its softmax in float32 whatever the inputs' dtype
  tolerance = 1e-12 if one_example_at_a_time else 1e-6
  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x, jnp.float64) for x in (q, k, v))
    attend = jax.jit(lambda q, k, v: softmax.softmax_attention(
        q, k, v, jnp.asarray(key_mask), jnp.asarray(segment_ids),
        one_example_at_a_time=one_example_at_a_time))
    np.testing.assert_allclose(np.asarray(attend(*args)),
                               _softmax_attention_definition(q, k, v, allowed),
                               rtol=tolerance, atol=tolerance)
    got = jax.vjp(attend, *args)[1](jnp.asarray(cotangent))
    want = jax.vjp(dense_definition, *args)[1](jnp.asarray(cotangent))
    for name, g, w in zip("qkv", got, want):
      np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tolerance, atol=tolerance,
                                 err_msg=f"gradient with respect to {name}")


def test_softmax_attention_evaluates_row_by_row_on_one_cpu_device_only():
  """On one CPU device a loop over the rows, each row's weights recomputed for the backward
  pass, is 1.8-3.3x faster in 5-14x less memory at the presets (docs/benchmarks.md section 3);
  elsewhere the batch is evaluated at once. The choice shows in the traced program."""
  q = jnp.ones((2, 8, 2, 4))
  program = str(jax.make_jaxpr(softmax.softmax_attention)(q, q, q))
  assert ("scan" in program) == (jax.default_backend() == "cpu" and jax.device_count() == 1)


_SHARDED_ATTENTION = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from lion_jax.nn import softmax
batch = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
def gathers(one_example_at_a_time):
  loss = lambda q: (softmax.softmax_attention(
      q, q, q, one_example_at_a_time=one_example_at_a_time) ** 2).sum()
  step = jax.jit(jax.grad(loss), in_shardings=batch)
  return step.lower(jnp.ones((8, 16, 2, 4))).compile().as_text().count("all-gather")
print(jax.device_count(), gathers(True) > 0, gathers(None))
"""


def test_softmax_attention_keeps_a_batch_split_over_devices_split():
  """Over two CPU devices the default evaluates the batch at once: the row loop would make the
  partitioner gather the whole batch onto each device (the second field shows it does)."""
  result = subprocess.run(
      [sys.executable, "-c", _SHARDED_ATTENTION], capture_output=True, text=True, timeout=300,
      env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "JAX_PLATFORMS": "cpu"})
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ["2", "True", "0"]


BASELINES = {
    "s5": dict(mixer="s5", ssm_size=16, ssm_blocks=2),
    "softmax": dict(mixer="softmax", block="transformer", norm="layer"),
}


# make test: each mixer's padding against its definition above; make test-all: both classifiers.
@pytest.mark.parametrize("name", [pytest.param("s5", marks=pytest.mark.slow),
                                  pytest.param("softmax", marks=pytest.mark.slow)])
def test_padding_changes_no_logits_in_a_baseline_classifier(name):
  """One example alone vs padded with garbage: the same logits in train and eval mode."""
  config = ModelConfig(d_model=16, num_layers=2, num_heads=2, **BASELINES[name])
  model = LraClassifier(config, num_classes=5, vocab_size=16, rngs=nnx.Rngs(0))
  tokens = jax.random.randint(jax.random.key(3), (1, 11), 1, 16)
  padded = jnp.concatenate([tokens, jax.random.randint(jax.random.key(4), (1, 9), 0, 16)], axis=1)
  run = nnx.jit(lambda m, x: m(x, jnp.array([11])))
  for train_mode in (True, False):
    copies = [nnx.clone(model) for _ in range(2)]
    for copy in copies:
      copy.train() if train_mode else copy.eval()
    short = run(copies[0], tokens)
    long = run(copies[1], padded)
    np.testing.assert_allclose(np.asarray(long), np.asarray(short), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("field,value", [("decay", "fixed"), ("form", "rnn"), ("chunk_size", 16),
                                         ("feature_map", "elu1")])
def test_a_lion_field_on_s5_is_an_error_naming_field_and_mixer(field, value):
  with pytest.raises(ValueError, match=rf"ModelConfig\.{field}=.*mixer='s5'"):
    ModelConfig(mixer="s5", **{field: value})


def test_an_s5_field_on_lion_is_an_error():
  with pytest.raises(ValueError, match=r"ModelConfig\.ssm_size=.*mixer='lion'"):
    ModelConfig(ssm_size=64)


def test_sinusoidal_positions_follow_the_definition():
  table = np.asarray(sinusoidal_positions(7, 6))
  t, i = np.arange(7)[:, None], np.arange(3)[None, :]
  angle = t / 10000.0 ** (2 * i / 6)
  np.testing.assert_allclose(table[:, 0::2], np.sin(angle), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(table[:, 1::2], np.cos(angle), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("task", ["text", "retrieval", "image", "pathfinder"])
@pytest.mark.parametrize("variant,mixer", [("s5", "s5"), ("transformer", "softmax")])
def test_every_baseline_config_builds_a_valid_model_config(variant, mixer, task):
  config = importlib.import_module(f"configs.{task}").get_config(variant)
  assert train.check_config(config).mixer == mixer


def test_pathx_has_s5_with_the_release_script_and_no_transformer():
  """run_lra_pathx.sh: complex-normal C, Δ from 1e-4, BandCdecay at ssm_lr 6e-4 and lr 3 × 6e-4;
  Table 7 has no Transformer number on Path-X (✗), so no such variant."""
  pathx = importlib.import_module("configs.pathx")
  config = pathx.get_config("s5")
  model = train.check_config(config)
  assert (model.mixer, model.c_init, model.dt_min, model.ssm_blocks) == ("s5", "complex_normal",
                                                                         1e-4, 16)
  assert (config.learning_rate, config.decay_learning_rate) == (1.8e-3, 6e-4)
  assert [tuple(e) for e in config.param_groups] == list(common.S5_PARAM_GROUPS["BandCdecay"])
  with pytest.raises(ValueError, match="unknown variant 'transformer'"):
    pathx.get_config("transformer")


@pytest.mark.parametrize("variant,mixer", [("s5", "s5"), ("transformer", "softmax")])
def test_listops_baseline_configs_are_valid_and_reject_eval_form(variant, mixer):
  config = listops_config.get_config(variant)
  assert train.check_config(config).mixer == mixer
  config.eval_form = "rnn"
  with pytest.raises(ValueError, match=rf"config\.eval_form='rnn'.*mixer='{mixer}'"):
    train.check_config(config)


def test_a_form_asked_of_a_baseline_at_call_time_is_an_error():
  model = LraClassifier(ModelConfig(**S5_TINY), num_classes=3, vocab_size=8, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match=r"mixer='s5'"):
    model(jnp.ones((1, 4), jnp.int32), jnp.array([4]), form="rnn")


_SSM = {"lambda_re", "lambda_im", "log_step", "b_re", "b_im", "c_re", "c_im", "d"}


@pytest.mark.parametrize("opt_config,dt_global,ssm_lr,ssm_lr_weight_decay", [
    ("standard", False, {"lambda_re", "lambda_im", "log_step", "b_re", "b_im"}, set()),
    ("standard", True, {"lambda_re", "lambda_im", "b_re", "b_im"}, set()),
    ("BandCdecay", False, {"lambda_re", "lambda_im", "log_step"}, {"b_re", "b_im"}),
    ("BfastandCdecay", False, {"lambda_re", "lambda_im", "log_step"}, set()),
    ("noBCdecay", False, _SSM, set()),
    ("noBCdecay", True, _SSM - {"log_step"}, set()),
])
def test_s5_param_groups_follow_the_release_opt_config(opt_config, dt_global, ssm_lr,
                                                       ssm_lr_weight_decay):
  """The S5 release's train_helpers.py: its "ssm" labels (`decay`: decay_learning_rate, no weight
  decay), BandCdecay's "none" (B: decay_learning_rate with weight decay) and "regular" for every
  other parameter, norms and biases included (`default`: learning rate, weight decay)."""
  model = LraClassifier(ModelConfig(**S5_TINY), num_classes=3, vocab_size=8, rngs=nnx.Rngs(0))
  table = optim.group_table(nnx.state(model, nnx.Param),
                            common.s5_param_groups(opt_config, dt_global=dt_global))
  leaf = lambda names: {name.rsplit("/", 1)[1] for name in names if "/mixer/" in name}
  assert all("/mixer/" in name for name in table["decay"] + table["decay_weight_decay"])
  assert leaf(table["decay"]) == ssm_lr
  assert leaf(table["decay_weight_decay"]) == ssm_lr_weight_decay
  assert leaf(table["default"]) == _SSM - ssm_lr - ssm_lr_weight_decay
  assert not table["no_weight_decay"]
  assert any("/norm/" in name for name in table["default"])
  if not dt_global:
    assert common.S5_PARAM_GROUPS[opt_config] == common.s5_param_groups(opt_config)


def test_decay_weight_decay_group_takes_the_decay_rate_and_weight_decay():
  """Zero gradients move only weight-decayed parameters, by lr · weight_decay."""
  config = listops_config.get_config("s5,runlocal")
  config.update(learning_rate=0.1, decay_learning_rate=0.01, weight_decay=0.5, warmup_epochs=0.0,
                param_groups=common.S5_PARAM_GROUPS["BandCdecay"])
  params = {"mixer": {"b_re": jnp.ones(3), "lambda_re": jnp.ones(3), "c_re": jnp.ones(3)}}
  tx = optim.make_optimizer(config, total_steps=1000, steps_per_epoch=10)
  updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
  np.testing.assert_allclose(updates["mixer"]["b_re"], -0.01 * 0.5, rtol=1e-6)
  np.testing.assert_allclose(updates["mixer"]["c_re"], -0.1 * 0.5, rtol=1e-6)
  assert not updates["mixer"]["lambda_re"].any()
