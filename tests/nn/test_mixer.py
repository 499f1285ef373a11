"""LionMixer, decay parameterisations and ModelConfig: inits, bounds, forms, padding, gradients."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from lion_jax import LionMixer, ModelConfig, feature_map, preset
from lion_jax.ops import decay as decay_lib

from lion_jax.options import CHOICES, ConfigError

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")
SELECTIVE_MODES = CHOICES["selective_mode"]


def small(**overrides):
  fields = dict(d_model=16, num_heads=2, num_layers=1, chunk_size=8)
  fields.update(overrides)
  return ModelConfig(**fields)


def mixer_inputs(batch=2, length=21, width=16, seed=1):
  x = jax.random.normal(jax.random.key(seed), (batch, length, width))
  lengths = jnp.array([length, length - 8][:batch])
  return x, jnp.arange(length) < lengths[:, None]


def real_lambda(mixer):
  return np.exp(np.asarray(decay_lib.base_log_decay(mixer.decay_base[...], mixer.config.decay_param)))


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", list(CHOICES))
def test_config_rejects_unknown_strings_naming_field_and_choices(field):
  listed = re.escape(", ".join(map(repr, CHOICES[field])))
  with pytest.raises(ValueError, match=rf"ModelConfig\.{field}='bogus' is not one of {listed}\."):
    ModelConfig(**{field: "bogus"})


def test_config_rejects_a_non_string_option_naming_the_field():
  with pytest.raises(TypeError, match=r"ModelConfig\.form must be a string, one of 'auto', .*; "
                                      "got NoneType None"):
    ModelConfig(form=None)


def test_every_valid_option_string_is_implemented_and_every_other_is_rejected_by_name():
  """The option table is the one source: each listed value runs where it is used, and the
  functions that take an option reject anything else with the same list of values."""
  x = jnp.linspace(-2.0, 2.0, 8).reshape(2, 4)
  for name in CHOICES["feature_map"]:
    assert feature_map(x, name).shape == (2, 4)
  base = -jnp.full((2, 1), 0.1)
  assert set(decay_lib.DEFAULT_SELECTIVE_BIAS) == set(CHOICES["selective_mode"])
  for mode in CHOICES["selective_mode"]:
    assert decay_lib.selective_log_decay(base, jnp.zeros((1, 3, 2, 1)), mode).shape == (1, 3, 2, 1)
  for init in CHOICES["decay_init"]:
    log_lambda, _ = decay_lib.init_log_decay(jax.random.key(0), 2, 3, init, 1e-3, 1e-1)
    assert log_lambda.shape == (2, 3) and float(log_lambda.max()) < 0.0
  for param in CHOICES["decay_param"]:
    assert decay_lib.base_log_decay(decay_lib.to_param(base, param), param).shape == (2, 1)

  listed = lambda option: re.escape(", ".join(map(repr, CHOICES[option])))
  with pytest.raises(ValueError, match=f"feature_map='tanh' is not one of {listed('feature_map')}"):
    feature_map(x, "tanh")
  with pytest.raises(ValueError, match=f"selective_mode='gate' is not one of "
                                       f"{listed('selective_mode')}"):
    decay_lib.selective_log_decay(base, jnp.zeros((1, 3, 2, 1)), "gate")
  with pytest.raises(ValueError, match=f"decay_init='s4d' is not one of {listed('decay_init')}"):
    decay_lib.init_log_decay(jax.random.key(0), 2, 3, "s4d", 1e-3, 1e-1)
  for function in (decay_lib.to_param, decay_lib.base_log_decay):
    with pytest.raises(ValueError, match=f"decay_param='exp' is not one of {listed('decay_param')}"):
      function(base, "exp")


def test_config_checks_numbers_and_presets():
  with pytest.raises(ValueError, match="divisible"):
    ModelConfig(d_model=30, num_heads=4)
  with pytest.raises(ValueError, match="dt_min"):
    ModelConfig(dt_min=0.2, dt_max=0.1)
  with pytest.raises(ValueError, match="presets exist for"):
    preset("cifar")
  with pytest.raises(ValueError, match="fields are"):
    preset("listops", widht=3)
  config = preset("pathx", d_model=64, num_heads=1)
  assert (config.d_model, config.num_layers, config.dt_min, config.encoder) == (64, 6, 1e-4, "dense")
  for task, width, depth in [("listops", 128, 8), ("text", 256, 6), ("retrieval", 128, 6),
                             ("image", 512, 6), ("pathfinder", 192, 6), ("pathx", 128, 6)]:
    config = preset(task)
    assert (config.d_model, config.num_layers, config.head_dim) == (width, depth, 64)


# --- init statistics -----------------------------------------------------------------------------


@pytest.mark.parametrize("dt_min,dt_max", [(1e-3, 1e-1), (1e-4, 1e-1)])
def test_hippo_decays_lie_in_the_intended_range(dt_min, dt_max):
  mixer = LionMixer(small(d_model=256, num_heads=4, decay="fixed", dt_min=dt_min, dt_max=dt_max),
                    rngs=nnx.Rngs(0))
  lam = real_lambda(mixer)
  assert lam.shape == (4, 64)
  dt = -2.0 * np.log(lam)  # log λ = −Δ/2
  assert dt.min() >= dt_min * (1 - 1e-5) and dt.max() <= dt_max * (1 + 1e-5)
  # log-uniform: log Δ spreads over the whole range, about half below the geometric middle
  log_dt = (np.log(dt) - np.log(dt_min)) / (np.log(dt_max) - np.log(dt_min))
  assert log_dt.min() < 0.05 and log_dt.max() > 0.95 and 0.4 < np.mean(log_dt < 0.5) < 0.6


def test_s4d_real_and_random_inits():
  s4d = real_lambda(LionMixer(small(decay="fixed", decay_init="s4d_real"), rngs=nnx.Rngs(0)))
  dt = -np.log(s4d) / (np.arange(8) + 1.0)  # log λ_n = −(n + 1) Δ, n the channel in the head
  assert dt.min() >= 1e-3 * (1 - 1e-5) and dt.max() <= 1e-1 * (1 + 1e-5)
  rand = real_lambda(LionMixer(small(d_model=256, num_heads=4, decay="fixed", decay_init="random"),
                               rngs=nnx.Rngs(0)))
  logits = np.log(rand) - np.log1p(-rand)  # λ = σ(N(0, 1))
  assert abs(logits.mean()) < 0.2 and 0.85 < logits.std() < 1.15


@pytest.mark.parametrize("decay_param", ["neg_exp", "sigmoid"])
def test_decay_parameterisations_invert(decay_param):
  log_lambda = -jnp.logspace(-4.5, 1.0, 50)
  param = decay_lib.to_param(log_lambda, decay_param)
  np.testing.assert_allclose(decay_lib.base_log_decay(param, decay_param), log_lambda, rtol=1e-5)


@pytest.mark.parametrize("shape", ["vector", "scalar"])
def test_zoh_v_init_matches_its_formula(shape):
  config = small(d_model=32, decay="fixed", decay_shape=shape, v_init="zoh_diag")
  mixer = LionMixer(config, rngs=nnx.Rngs(0))
  log_lam = -np.exp(np.asarray(mixer.decay_base[...], np.float64))  # log λ = −e^ρ = −Δ/2
  log_lam = np.broadcast_to(log_lam, (2, 16)).reshape(32)
  gain = -2.0 * np.expm1(log_lam)  # γ = (λ − 1)/Λ with Λ = −½, i.e. 2(1 − e^{−Δ/2}) ≈ Δ
  np.testing.assert_allclose(mixer.v_proj.kernel[...], np.diag(gain), rtol=1e-5, atol=1e-9)
  dt = -2.0 * log_lam
  np.testing.assert_allclose(gain, dt, rtol=0.03)  # ≈ Δ for small Δ

  wide = small(d_model=256, num_heads=4, decay="fixed", v_init="zoh_lecun")
  lecun_mixer = LionMixer(wide, rngs=nnx.Rngs(0))
  gain = np.broadcast_to(2.0 * (1.0 - real_lambda(lecun_mixer)), (4, 64)).reshape(256)
  base = np.asarray(lecun_mixer.v_proj.kernel[...]) / gain[None, :]  # diag(γ) on the state side
  assert abs(base.std() * np.sqrt(256) - 1.0) < 0.05
  plain = LionMixer(small(v_init="lecun"), rngs=nnx.Rngs(0)).v_proj.kernel[...]
  assert np.count_nonzero(np.asarray(plain) - np.diag(np.diag(plain))) > 0


@pytest.mark.parametrize("shape", ["vector", "scalar"])
def test_hippo_modulus_decays_are_the_capped_spectrum_moduli_times_delta(shape):
  """decay_init="hippo_modulus": log λ = −min(|Λ_n|·Δ, ½) with |Λ_n| the HiPPO-N moduli of one
  conjugate pair per channel (per head for scalar decays) and Δ log-uniform in [dt_min, dt_max];
  W_v stays the identity (the default v_init)."""
  config = small(d_model=32, decay="fixed", decay_shape=shape, decay_init="hippo_modulus",
                 dt_min=1e-3, dt_max=1e-1)
  mixer = LionMixer(config, rngs=nnx.Rngs(0))
  log_lam = -np.exp(np.asarray(mixer.decay_base[...], np.float64))  # [H, G]
  # HiPPO-N of size 2 is −½ ± i√3/2, modulus 1; the sizes used here start near 0.6 and grow.
  np.testing.assert_allclose(decay_lib.hippo_moduli(1), [1.0], rtol=1e-12)
  count = 16 if shape == "vector" else 2
  modulus = decay_lib.hippo_moduli(count)  # [G] or [H], ascending
  modulus = modulus[None, :] if shape == "vector" else modulus[:, None]
  dt = -log_lam / modulus  # Δ wherever the cap is not reached
  free = log_lam > -0.5 + 1e-6
  assert free.any() and np.all(log_lam >= -0.5 - 1e-6)
  assert np.all((dt[free] >= 1e-3 * (1 - 1e-5)) & (dt[free] <= 1e-1 * (1 + 1e-5)))
  if shape == "vector":
    assert (~free).any()  # the fastest modes hit the 2-token cap
  np.testing.assert_array_equal(mixer.v_proj.kernel[...], np.eye(32))


def test_qk_and_selective_weights_have_std_0_1():
  mixer = LionMixer(small(d_model=256, num_heads=4), rngs=nnx.Rngs(0))
  for kernel in (mixer.q_proj.kernel, mixer.k_proj.kernel, mixer.decay_gate.kernel):
    assert abs(float(jnp.std(kernel[...])) - 0.1) < 0.005
  # The default gate (log_additive) starts at b = 1: log σ(1) ≈ −0.31 per token (docs/math.md §5).
  np.testing.assert_array_equal(mixer.decay_gate.bias[...], 1.0)


# --- selective modes -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", SELECTIVE_MODES)
def test_selective_lambda_bounds(mode):
  mixer = LionMixer(small(d_model=32, selective_mode=mode), rngs=nnx.Rngs(0))
  # Large gate logits of both signs, far beyond init, to probe the bounds.
  mixer.decay_gate.kernel[...] = 5.0 * mixer.decay_gate.kernel[...]
  x, _ = mixer_inputs(width=32)
  lam = np.exp(np.asarray(mixer.log_decay(x), np.float64))  # [B, L, H, V]
  assert lam.shape == (2, 21, 2, 16) and np.all(np.isfinite(lam))
  if mode == "paper_literal":  # σ(z) + B clamped at 0: λ ≤ 1
    assert lam.min() > 0.0 and lam.max() <= 1.0
  else:
    assert lam.min() > 0.0 and lam.max() < 1.0


@pytest.mark.parametrize("mode", ["sigmoid_dt", "softplus_dt"])
def test_selective_steps_reproduce_the_hippo_decay_at_zero_logits(mode):
  mixer = LionMixer(small(selective_mode=mode), rngs=nnx.Rngs(0))
  mixer.decay_gate.kernel[...] = jnp.zeros_like(mixer.decay_gate.kernel[...])
  x, _ = mixer_inputs()
  lam = np.exp(np.asarray(mixer.log_decay(x)))
  np.testing.assert_allclose(lam, np.broadcast_to(real_lambda(mixer), lam.shape), rtol=1e-6)


def test_softplus_step_is_in_unit_interval_at_init_with_an_unbounded_rate():
  # Table 6 row [7]: log λ = B · softplus(z + c). At init (gate weights N(0, 0.1²) on unit-scale
  # inputs) every λ lies strictly inside (0, 1); large logits shorten the memory without bound,
  # where sigmoid_dt stops at twice the base rate.
  mixer = LionMixer(small(d_model=64, num_heads=2, selective_mode="softplus_dt"), rngs=nnx.Rngs(0))
  x, _ = mixer_inputs(batch=4, length=64, width=64)
  lam = np.exp(np.asarray(mixer.log_decay(x), np.float64))  # [B, L, H, V]
  assert lam.min() > 0.0 and lam.max() < 1.0
  base = np.asarray(decay_lib.base_log_decay(mixer.decay_base[...], "neg_exp"))  # [H, V]
  logits = jnp.full((1, 1) + base.shape, 20.0)
  rate = {mode: np.asarray(decay_lib.selective_log_decay(base, logits, mode)) / base
          for mode in ("sigmoid_dt", "softplus_dt")}  # the step's factor on the base Δ
  np.testing.assert_allclose(rate["sigmoid_dt"], 2.0, rtol=1e-6)
  np.testing.assert_allclose(rate["softplus_dt"], 20.0 + decay_lib.SOFTPLUS_SHIFT, rtol=1e-6)


def test_default_gate_starts_short_and_opens_to_the_hippo_memory():
  """log λ = B + log σ(z) with b = 1: every token starts with a memory of a few tokens
  (log σ(1) ≈ −0.31 on top of the HiPPO base), and an open gate (z → ∞) reaches the base."""
  mixer = LionMixer(small(), rngs=nnx.Rngs(0))
  x, _ = mixer_inputs()
  log_lam = np.asarray(mixer.log_decay(x))  # [B, L, H, V]
  base = np.asarray(decay_lib.base_log_decay(mixer.decay_base[...], "neg_exp"))  # [H, V]
  assert -0.6 < float(np.median(log_lam)) < -0.25  # memories of ~2-4 tokens
  opened = decay_lib.selective_log_decay(base, jnp.full(log_lam.shape, 30.0), "log_additive")
  np.testing.assert_allclose(opened, np.broadcast_to(base, log_lam.shape), rtol=1e-6)


def local_share(log_lambda, length=512, reach=8):
  """Share of a middle row's mask weight λ^|i−j| within ±reach tokens, per decay channel."""
  distance = np.abs(np.arange(length) - length // 2)  # [L]
  weights = np.exp(np.asarray(log_lambda, np.float64)[..., None] * distance)  # [..., L]
  return weights[..., distance <= reach].sum(-1) / weights.sum(-1)


@pytest.mark.parametrize("gated", [True, False], ids=["default", "ungated"])
def test_default_lion_d_gate_starts_local_and_opens_to_the_hippo_memory(gated):
  """LION-D's decay is log λ = B + log σ(b): LION-S's default gate without its input weights
  (docs/math.md §5.3). With b = 1 every channel starts with a memory of about 3 tokens, so
  almost all of a row's weight is local, as with the random init that trained better on long
  ListOps; an open gate (b → ∞) reaches the HiPPO base, the longest memory the channel has.
  Without the gate (`lion_d_ungated`, App. D.2 literally) the HiPPO memories of 20-2000 tokens
  spread each row over the sequence: this test fails with that init."""
  config = preset("listops", num_layers=1, decay="fixed", fixed_gate=gated)
  mixer = LionMixer(config, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 512, config.d_model))
  log_lam = np.asarray(mixer.log_decay(x))  # [H, V]
  base = np.asarray(decay_lib.base_log_decay(mixer.decay_base[...], "neg_exp"))  # [H, V]
  share = local_share(log_lam)
  if not gated:
    assert mixer.decay_gate is None
    np.testing.assert_array_equal(log_lam, base)
    assert np.median(share) < 0.2  # measured: 0.06
    return
  np.testing.assert_array_equal(mixer.decay_gate[...], 1.0)
  np.testing.assert_allclose(log_lam, base + np.log(1 / (1 + np.exp(-1.0))), rtol=1e-6)
  assert share.min() > 0.9  # measured: 0.93-0.95
  mixer.decay_gate[...] = jnp.full(log_lam.shape, 30.0)
  np.testing.assert_allclose(mixer.log_decay(x), base, rtol=1e-6)
  # `selective_bias_init` sets where b starts (LION-S's gate bias field), whatever the mode.
  half_open = LionMixer(dataclasses.replace(config, selective_bias_init=0.0,
                                            selective_mode="sigmoid_dt"), rngs=nnx.Rngs(0))
  np.testing.assert_allclose(half_open.log_decay(x), base + np.log(0.5), rtol=1e-6)


@pytest.mark.slow  # make test: LION-S's gate and decays below; make test-all adds LION-D's
def test_lion_d_gate_and_base_receive_gradients():
  mixer = LionMixer(small(decay="fixed", v_init="lecun"), rngs=nnx.Rngs(0))
  x, mask = mixer_inputs(length=12)
  grads = nnx.jit(nnx.grad(lambda m: jnp.sum(jnp.sin(3.0 * m(x, mask)))))(mixer)
  paths = {"/".join(map(str, path)): leaf for path, leaf in nnx.to_flat_state(grads)}
  for name in ("decay_base", "decay_gate"):
    assert float(jnp.abs(paths[name][...]).sum()) > 0.0, name


# The earlier default, the paper's ZOH reading taken literally (variant `lion_s_zoh`), which
# stayed near the label prior on long ListOps (docs/paper_notes.md §13).
LITERAL_ZOH = dict(selective_mode="sigmoid_dt", v_init="zoh_diag")


# make test: the default; make test-all adds the literal ZOH init, which fails both checks.
@pytest.mark.parametrize("literal", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["default", "literal_zoh"])
def test_default_lion_s_mixes_at_unit_scale_and_selects_per_token_at_init(literal):
  """What would have caught the long-ListOps failure: at the LRA preset's width and the paper's
  HiPPO steps, the default mixer's output is at its input's scale (not at Δ's), and its gate
  moves each token's log-decay by O(1) (not by a fraction of the HiPPO rate). The literal ZOH
  init fails both by two orders of magnitude."""
  config = preset("listops", num_layers=1, **(LITERAL_ZOH if literal else {}))
  mixer = LionMixer(config, rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.key(1), (2, 512, config.d_model))  # a normalised block input
  out, log_decay = nnx.jit(lambda m, x: (m(x), m.log_decay(x)))(mixer, x)
  out_scale = float(jnp.std(out) / jnp.std(x))
  spread = float(jnp.std(log_decay, axis=1).mean())  # per-token spread of log λ
  if literal:  # measured: 0.003 and 0.005
    assert out_scale < 0.02 and spread < 0.02
  else:  # measured: 0.34 and 0.39
    assert 0.1 < out_scale < 3.0 and spread > 0.1


# --- forms, padding, feature maps, gradients --------------------------------------------------------


# make test: the LRA default (selective, vector decays) and LION-LIT; make test-all adds the
# other decays, normalisations, feature maps and read-outs.
@pytest.mark.parametrize("overrides", [
    dict(),  # the LRA default: LION-S with vector decays
    dict(decay="lit", normalize="none", feature_map="sigmoid", output_proj=False),
    pytest.param(dict(decay="fixed", decay_shape="scalar", decay_param="sigmoid"),
                 marks=pytest.mark.slow),
    pytest.param(dict(decay="fixed"), marks=pytest.mark.slow),
    pytest.param(dict(decay_shape="scalar", selective_mode="log_additive", convention="code"),
                 marks=pytest.mark.slow),
    pytest.param(dict(selective_mode="paper_literal", decay_init="random", feature_map="elu1",
                      key_dim=4), marks=pytest.mark.slow),
    # The ladder's S5-like LION-S: a plain decayed sum with S5's input gain and feed-through.
    pytest.param(dict(normalize="none", value_gain="one_minus_decay", feedthrough=True),
                 marks=pytest.mark.slow),
    # Directional read-outs: W_F and W_B over the output's left and right halves.
    pytest.param(dict(directional_readout=True), marks=pytest.mark.slow),
    # LION-S in S5's form (`lion_s_s5_form`): a state narrower than the stream (V = 4 and K = 2
    # a head at M = 16), the plain sum with S5's gain, D, two read-outs, the gate open.
    pytest.param(dict(attention_dim=8, key_dim=2, normalize="none", value_gain="one_minus_decay",
                      feedthrough=True, directional_readout=True, selective_bias_init=8.0),
                 marks=pytest.mark.slow),
    # and with complex decays (`lion_s_s5_form_complex`).
    pytest.param(dict(attention_dim=8, key_dim=2, normalize="none", value_gain="one_minus_decay",
                      feedthrough=True, directional_readout=True, selective_bias_init=8.0,
                      decay_phase="hippo"), marks=pytest.mark.slow),
])
def test_same_parameters_give_the_same_output_in_every_form(overrides):
  # lecun W_v: the ZOH gain (~Δ) would make the mixer output too small for a meaningful check.
  mixer = LionMixer(small(v_init="lecun", **overrides), rngs=nnx.Rngs(0))
  x, mask = mixer_inputs()
  outputs = nnx.jit(lambda m, x, mask: {f: m(x, mask, form=f) for f in FORMS})(mixer, x, mask)
  real = np.asarray(mask)
  reference = np.asarray(outputs["attention"])[real]
  assert np.abs(reference).mean() > 0.1
  for form in FORMS[1:]:
    np.testing.assert_allclose(np.asarray(outputs[form])[real], reference, rtol=1e-5, atol=1e-5,
                               err_msg=form)


# make test: the classifiers' padding test (tests/nn/test_models.py); make test-all adds this one.
@pytest.mark.slow
def test_padding_content_and_amount_do_not_change_real_outputs():
  mixer = LionMixer(small(v_init="lecun"), rngs=nnx.Rngs(0))
  x, mask = mixer_inputs(batch=1, length=13)
  noise = 5.0 * jax.random.normal(jax.random.key(7), (1, 10, 16))
  padded = jnp.concatenate([x, noise], axis=1)
  padded_mask = jnp.concatenate([mask, jnp.zeros((1, 10), bool)], axis=1)
  run = nnx.jit(lambda m, x, mask: (m(x, mask, form="attention"), m(x, mask, form="chunk_scan")))
  for long, short in zip(run(mixer, padded, padded_mask), run(mixer, x, mask)):
    np.testing.assert_allclose(long[:, :13], short, rtol=1e-5, atol=1e-6)


def _feature_map_definition(x, name):
  """φ in float64 NumPy, written from the formulas in the feature_map docstring."""
  sigmoid = 1.0 / (1.0 + np.exp(-x))
  if name == "silu_norm":
    y = x * sigmoid + 0.5
    return y / np.sqrt((y * y).sum(axis=-1, keepdims=True))
  return {"elu1": np.where(x > 0, x + 1.0, np.exp(x)), "sigmoid": sigmoid,
          "relu": np.maximum(x, 0.0), "identity": x,
          "constant": np.full_like(x, x.shape[-1] ** -0.5)}[name]


@pytest.mark.parametrize("name", CHOICES["feature_map"])
def test_feature_maps_follow_their_formulas(name):
  x = 3.0 * jax.random.normal(jax.random.key(0), (4, 8))
  y = np.asarray(feature_map(x, name))
  np.testing.assert_allclose(y, _feature_map_definition(np.asarray(x, np.float64), name),
                             rtol=1e-6, atol=1e-7)
  if name == "silu_norm":  # positive and unit-norm, so every q·k lies in (0, 1]
    assert y.min() > 0.0
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 1.0, rtol=1e-6)


# make test: identity, whose q·k take either sign (the default runs in every other test);
# make test-all adds every other feature map.
@pytest.mark.parametrize("name", [
    name if name == "identity" else pytest.param(name, marks=pytest.mark.slow)
    for name in CHOICES["feature_map"]])
def test_every_feature_map_gives_finite_mixer_outputs(name):
  out = nnx.jit(lambda m, x, mask: m(x, mask))(LionMixer(small(feature_map=name), rngs=nnx.Rngs(0)),
                                              *mixer_inputs())
  assert np.all(np.isfinite(np.asarray(out)))


# make test: the default gate (log_additive); make test-all adds sigmoid_dt and softplus_dt.
@pytest.mark.parametrize("mode", [pytest.param("sigmoid_dt", marks=pytest.mark.slow),
                                  pytest.param("softplus_dt", marks=pytest.mark.slow),
                                  "log_additive"])
def test_selective_gate_and_decays_receive_gradients(mode):
  mixer = LionMixer(small(selective_mode=mode, v_init="lecun"), rngs=nnx.Rngs(0))
  x, mask = mixer_inputs(length=12)

  def loss(m):
    return jnp.sum(jnp.sin(3.0 * m(x, mask, form="chunk_scan")))

  grads = nnx.jit(nnx.grad(loss))(mixer)
  for path, leaf in nnx.to_flat_state(grads):
    assert float(jnp.abs(leaf[...]).sum()) > 0.0, path
  paths = {"/".join(map(str, path)) for path, _ in nnx.to_flat_state(grads)}
  assert {"decay_base", "decay_gate/kernel", "decay_gate/bias"} <= paths


# --- the ladder's options (docs/paper_notes.md §20) ------------------------------------------


def _float64_operands(mixer, x):
  """φ(q), φ(k), v and per-channel log λ of a mixer's input, projected in float64 NumPy.

  Returns:
    q, k [B, L, H, K]; v [B, L, H, V]; log_decay [B, L, H, V]; x [B, L, M] in float64.
  """
  from tests.reference import expand_log_decay  # pylint: disable=import-outside-toplevel
  config = mixer.config
  batch, length, _ = x.shape
  x64 = np.asarray(x, np.float64)
  split = lambda proj: (x64 @ np.asarray(proj.kernel[...], np.float64)).reshape(
      batch, length, config.num_heads, -1)
  phi = lambda z: _feature_map_definition(z, "silu_norm")
  log_decay = expand_log_decay(np.asarray(mixer.log_decay(x), np.float64), batch, length,
                               config.num_heads, config.head_dim)
  if mixer.q_proj is None:  # feature_map="constant": q·k = 1
    q = k = np.full((batch, length, config.num_heads, 1), 1.0)
  else:
    q, k = phi(split(mixer.q_proj)), phi(split(mixer.k_proj))
  return q, k, split(mixer.v_proj), log_decay, x64


# make test: both gains with vector decays; make test-all adds S5's 1 − λ with scalar decays.
@pytest.mark.parametrize("decay_shape,value_gain,scale", [
    ("vector", "one_minus_decay", 1.0), ("vector", "s5_zoh", 4.0),
    pytest.param("scalar", "one_minus_decay", 1.0, marks=pytest.mark.slow)])
def test_value_gain_and_feedthrough_follow_their_float64_definition(decay_shape, value_gain, scale):
  """y = W_o · Σ_j (q_i·k_j) M_ij c(1 − λ_j) v_j + D ⊙ x, summed directly in float64: c = 1 for
  S5's gain 1 − λ, c = 4 for the gain S5 with real decays starts with."""
  from tests.reference import reference_lion  # pylint: disable=import-outside-toplevel
  config = small(normalize="none", value_gain=value_gain, feedthrough=True,
                 decay_shape=decay_shape, v_init="lecun")
  mixer = LionMixer(config, rngs=nnx.Rngs(3))
  x, mask = mixer_inputs(length=13)
  out = np.asarray(nnx.jit(lambda m, x, mask: m(x, mask, form="chunk_scan"))(mixer, x, mask))
  batch, length, _ = x.shape
  q, k, v, log_decay, x64 = _float64_operands(mixer, x)
  mixed = reference_lion(q, k, v * scale * (1.0 - np.exp(log_decay)), log_decay, normalize="none",
                         key_mask=np.asarray(mask))
  expected = (mixed.reshape(batch, length, -1) @ np.asarray(mixer.out_proj.kernel[...], np.float64)
              + np.asarray(mixer.out_proj.bias[...]) + np.asarray(mixer.feedthrough[...]) * x64)
  real = np.asarray(mask)
  np.testing.assert_allclose(out[real], expected[real], rtol=2e-5, atol=2e-5)


# make test: the narrow state (LION-D's decay); make test-all adds LION-S and LION-D at full width.
@pytest.mark.parametrize("decay,attention_dim", [
    pytest.param("selective", None, marks=pytest.mark.slow),
    pytest.param("fixed", None, marks=pytest.mark.slow),
    # S5's shape: a state narrower than the residual stream (A = 6 < M = 16, K = V = 3 a head).
    ("fixed", 6)])
def test_directional_readout_follows_its_float64_definition(decay, attention_dim):
  """y = W_F y^F + W_B y^B + b, each half summed directly in float64 over its side's keys."""
  from tests.reference import reference_lion  # pylint: disable=import-outside-toplevel
  config = small(directional_readout=True, decay=decay, v_init="lecun",
                 attention_dim=attention_dim)
  width = attention_dim or config.d_model  # A = H·V, the state's channels over all heads
  mixer = LionMixer(config, rngs=nnx.Rngs(4))
  x, mask = mixer_inputs(length=13)
  run = nnx.jit(lambda m, x, mask: m(x, mask, form="chunk_scan"))
  out = np.asarray(run(mixer, x, mask))
  batch, length, _ = x.shape
  q, k, v, log_decay, _ = _float64_operands(mixer, x)
  halves = [reference_lion(q, k, v, log_decay, key_mask=np.asarray(mask), side=side)
            for side in ("left", "right")]
  kernel = np.asarray(mixer.out_proj.kernel[...], np.float64)  # [2·H·V, M]: W_F's rows, W_B's
  assert kernel.shape == (2 * width, config.d_model)
  assert mixer.v_proj.kernel.shape == (config.d_model, width)
  expected = (halves[0].reshape(batch, length, -1) @ kernel[:width]
              + halves[1].reshape(batch, length, -1) @ kernel[width:]
              + np.asarray(mixer.out_proj.bias[...]))
  real = np.asarray(mask)
  np.testing.assert_allclose(out[real], expected[real], rtol=2e-5, atol=2e-5)
  # W_F = W_B is LION: the same mixer with one W_o gives the same output.
  tied = LionMixer(config.replace(directional_readout=False), rngs=nnx.Rngs(4))
  for name in ("q_proj", "k_proj", "v_proj"):
    getattr(tied, name).kernel[...] = getattr(mixer, name).kernel[...]
  tied.decay_base[...] = mixer.decay_base[...]
  if decay == "selective":
    tied.decay_gate.kernel[...] = mixer.decay_gate.kernel[...]
    tied.decay_gate.bias[...] = mixer.decay_gate.bias[...]
  else:
    tied.decay_gate[...] = mixer.decay_gate[...]
  tied.out_proj.kernel[...] = mixer.out_proj.kernel[:width]
  tied.out_proj.bias[...] = mixer.out_proj.bias[...]
  mixer.out_proj.kernel[...] = jnp.concatenate([tied.out_proj.kernel[...]] * 2)
  np.testing.assert_allclose(np.asarray(run(mixer, x, mask))[real],
                             np.asarray(run(tied, x, mask))[real], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("decay_phase,complex_input,feature_map", [
    ("hippo", False, "silu_norm"), ("hippo", True, "silu_norm"), ("s5", False, "silu_norm"),
    ("s5", True, "silu_norm"),
    ("s5", True, "constant")])  # `lion`'s mixer: q·k = 1 without W_q, W_k, in every form
def test_complex_decays_follow_their_float64_definition(decay_phase, complex_input, feature_map):
  """decay_phase="hippo": each half h = Σ_j (q_i·k_j) M_ij e^{iθ|i−j|} (1 − λ_j) v_j over its side's
  keys, summed directly in float64; W_F and W_B read each head's Re h, then its Im h; D ⊙ x.
  complex_input: v_j = W_v's real part + i·its imaginary part, per head. "s5": θ = Im Λ·Δ, Im Λ
  the parameter and Δ = log λ_base / (−½)."""
  from tests.reference import reference_lion  # pylint: disable=import-outside-toplevel
  config = small(normalize="none", value_gain="one_minus_decay", feedthrough=True,
                 v_init="lecun", directional_readout=True, decay_phase=decay_phase, attention_dim=8,
                 key_dim=2, selective_bias_init=8.0, complex_input=complex_input,
                 feature_map=feature_map)
  mixer = LionMixer(config, rngs=nnx.Rngs(5))
  theta = np.asarray(mixer.phase(), np.float64)  # [H, V]
  lam = np.exp(np.asarray(decay_lib.base_log_decay(mixer.decay_base[...], config.decay_param)))
  np.testing.assert_allclose(theta, np.sqrt(3) * np.log(lam), rtol=1e-4)  # S5's Im Λ·Δ at init
  mixer.decay_phase[...] = jnp.asarray(np.linspace(-2.0, 2.0, theta.size).reshape(theta.shape))
  x, mask = mixer_inputs(length=13)
  forms = FORMS if feature_map == "constant" else ("chunk_scan",)
  outputs = nnx.jit(lambda m, x, mask: {f: m(x, mask, form=f) for f in forms})(mixer, x, mask)
  batch, length, _ = x.shape
  q, k, v, log_decay, x64 = _float64_operands(mixer, x)
  phase = np.asarray(mixer.phase(), np.float64)
  if decay_phase == "s5":
    np.testing.assert_allclose(phase, np.linspace(-2.0, 2.0, theta.size).reshape(theta.shape)
                               * np.log(lam) / -0.5, rtol=1e-4)
  parts = np.split(v, 2, axis=-1) if complex_input else [v]  # [B, L, H, V] each: Re, Im
  log_decay = log_decay[..., :parts[0].shape[-1]]
  halves = [sum(reference_lion(q, k, part * (1.0 - np.exp(log_decay)), log_decay,
                               normalize="none", key_mask=np.asarray(mask), side=side,
                               phase=phase) * unit for part, unit in zip(parts, (1, 1j)))
            for side in ("left", "right")]  # [B, L, H, V] complex each
  read = np.concatenate([np.concatenate([h.real, h.imag], axis=-1).reshape(batch, length, -1)
                         for h in halves], axis=-1)  # [B, L, 2·H·2V]
  kernel = np.asarray(mixer.out_proj.kernel[...], np.float64)
  assert kernel.shape == (2 * 2 * 8, config.d_model)
  expected = (read @ kernel + np.asarray(mixer.out_proj.bias[...])
              + np.asarray(mixer.feedthrough[...]) * x64)
  real = np.asarray(mask)
  for form, out in outputs.items():
    np.testing.assert_allclose(np.asarray(out)[real], expected[real], rtol=2e-5, atol=2e-5,
                               err_msg=form)
  if feature_map == "constant":  # and the same gradients in every form
    weights = jax.random.normal(jax.random.key(9), outputs["attention"].shape) * mask[..., None]
    grads = nnx.jit(lambda m, x: {f: jax.grad(lambda x: jnp.sum(m(x, mask, form=f) * weights))(x)
                                  for f in forms})(mixer, x)
    for form in forms[1:]:
      np.testing.assert_allclose(grads[form], grads["attention"], rtol=1e-4, atol=1e-5,
                                 err_msg=form)


def test_out_proj_init_scale_multiplies_the_lecun_normal_read_out():
  """1 draws nnx.Linear's own W_o, bit for bit; 3 draws it three times as large."""
  plain = LionMixer(small(), rngs=nnx.Rngs(6)).out_proj.kernel[...]
  default = nnx.Linear(16, 16, rngs=nnx.Rngs(0)).kernel[...]  # fan-in 16: std 1/4
  assert np.std(np.asarray(plain)) == pytest.approx(np.std(np.asarray(default)), rel=0.3)
  same = LionMixer(small(out_proj_init_scale=1.0), rngs=nnx.Rngs(6)).out_proj.kernel[...]
  np.testing.assert_array_equal(plain, same)
  large = LionMixer(small(out_proj_init_scale=3.0), rngs=nnx.Rngs(6)).out_proj.kernel[...]
  assert np.std(np.asarray(large)) == pytest.approx(3 * np.std(np.asarray(plain)), rel=0.3)
  with pytest.raises(ConfigError, match="out_proj_init_scale=0.0 must be positive"):
    small(out_proj_init_scale=0.0)


def test_complex_decays_name_what_they_need():
  with pytest.raises(ConfigError, match=r"complex_input=True .* needs decay_phase='hippo' or 's5' and "
                     r"v_init='lecun' \(got decay_phase='none'"):
    small(complex_input=True, v_init="lecun")
  with pytest.raises(ConfigError, match=r"decay_phase='hippo' turns each decay into λ e\^\{iθ\}: it "
                     r"needs .*normalize='none' .*got decay='selective', normalize='after'"):
    small(decay_phase="hippo")


def test_a_state_narrower_than_the_stream_needs_a_rectangular_value_init():
  with pytest.raises(ConfigError, match="v_init='identity' starts W_v square .* set v_init='lecun'"):
    small(attention_dim=8)
  with pytest.raises(ConfigError, match="attention_dim=5 must be None or a positive multiple"):
    small(attention_dim=5, v_init="lecun")
  with pytest.raises(ConfigError, match="attention_dim=8 is an option of mixer='lion' or "
                     "'softmax'; mixer='s5' does not use it"):
    small(mixer="s5", attention_dim=8, chunk_size=64)


def test_directional_readout_names_what_it_needs():
  with pytest.raises(ConfigError, match="directional_readout=True .* needs output_proj=True"):
    small(directional_readout=True, output_proj=False)


def test_value_gain_keeps_a_plain_sum_at_a_gain_below_two_whatever_the_memory():
  """With λ fixed, (1 − λ) Σ_j λ^|i−j| ≤ 1 + λ, reached far from the ends: long memories do not
  blow a plain sum up (without the gain it would reach 2/(1 − λ) = 4000 at Δ = 0.001)."""
  for dt in (1e-3, 1.0):
    config = small(decay="fixed", fixed_gate=False, normalize="none", value_gain="one_minus_decay",
                   feature_map="constant", output_proj=False, dt_min=dt, dt_max=dt)
    mixer = LionMixer(config, rngs=nnx.Rngs(0))
    x = jnp.ones((1, 1024, config.d_model))
    out = np.asarray(nnx.jit(lambda m, x: m(x, form="chunk_scan"))(mixer, x))  # W_v = I: values 1
    lam = np.exp(-dt / 2)
    distances = np.abs(np.arange(1024) - 512)
    np.testing.assert_allclose(out[0, 512], (1 - lam) * np.sum(lam ** distances), rtol=1e-4)
    assert out.max() <= 1.0 + lam + 1e-5


def test_value_gain_needs_a_decay_and_raster_order():
  with pytest.raises(ValueError, match=r"value_gain='one_minus_decay' .* needs decay='fixed' or "
                                       r"'selective' .*decay='lit'"):
    small(decay="lit", value_gain="one_minus_decay")


def test_constant_features_make_the_mixing_weights_the_mask_alone():
  """feature_map="constant": q·k = 1, so LION-S's output is Σ_j M_ij v_j / Σ_j M_ij."""
  from tests.reference import reference_lion  # pylint: disable=import-outside-toplevel
  mixer = LionMixer(small(feature_map="constant", output_proj=False), rngs=nnx.Rngs(0))
  x, _ = mixer_inputs(batch=1, length=9)
  out = np.asarray(mixer(x, form="rnn"))
  ones = np.ones((1, 9, 2, 8))
  expected = reference_lion(ones, ones / 8, np.asarray(x, np.float64).reshape(1, 9, 2, 8),
                            np.asarray(mixer.log_decay(x), np.float64))
  np.testing.assert_allclose(out, expected.reshape(1, 9, 16), rtol=1e-5, atol=1e-6)


def test_constant_features_need_no_query_or_key_weights_and_leave_the_rest_as_drawn():
  """Without W_q and W_k the mixer keeps every other parameter of the same seed's draw, so the
  runs recorded while the unused projections still existed are runs of this model."""
  config = small(feature_map="constant", decay_phase="s5", complex_input=True, v_init="lecun",
                 directional_readout=True, normalize="none", value_gain="one_minus_decay")
  blind = LionMixer(config, rngs=nnx.Rngs(3))
  learnt = LionMixer(config.replace(feature_map="silu_norm"), rngs=nnx.Rngs(3))
  assert blind.q_proj is None and blind.k_proj is None
  blind_params = dict(nnx.to_flat_state(nnx.state(blind, nnx.Param)))
  learnt_params = dict(nnx.to_flat_state(nnx.state(learnt, nnx.Param)))
  assert set(blind_params) == set(learnt_params) - {("q_proj", "kernel"), ("k_proj", "kernel")}
  for path, value in blind_params.items():
    np.testing.assert_array_equal(value[...], learnt_params[path][...], err_msg=str(path))
