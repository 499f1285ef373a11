"""The probes in bench/probes/: the init-time probes' command-line grammar, the other orders of
the recurrence that token_loop_alternatives.py times, which must compute the same sum, and the
parts of a layer that mixer_parts.py times."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "probes"))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import mixer_parts  # noqa: E402  (bench/probes/)
import token_loop_alternatives  # noqa: E402  (bench/probes/)
from init_diagnostics import parse_variant  # noqa: E402  (bench/probes/)
from lion_jax.ops import recurrent  # noqa: E402


def test_variant_overrides_are_typed_as_the_config_fields_they_set():
  """`variant@field=value`: numbers become numbers, true/false booleans (a bool field refuses
  the int 1), anything else stays a string; a leading `model.` is optional."""
  name, overrides = parse_variant(
      "lion_s_s5_form@complex_input=true@model.feedthrough=False@key_dim=4@dt_max=0.1"
      "@v_init=lecun")
  assert name == "lion_s_s5_form"
  assert overrides == {"complex_input": True, "feedthrough": False, "key_dim": 4,
                       "dt_max": 0.1, "v_init": "lecun"}
  assert type(overrides["complex_input"]) is bool and type(overrides["key_dim"]) is int


def test_an_override_without_a_value_names_the_entry():
  with pytest.raises(SystemExit, match="lion_s@v_init.*is not FIELD=VALUE"):
    parse_variant("lion_s@v_init")


def test_the_timed_alternatives_to_the_token_loop_compute_its_sum():
  """The blocked and doubling scans, in float64, with complex decays, two key features, a length
  that is no multiple of the block and decays down to e^-30 a token: equal to `causal_rnn`
  (itself tested against the float64 definition), values and gradients."""
  rng = np.random.default_rng(3)
  shape = (2, 37, 1)
  q, k = rng.normal(size=shape + (2,)), rng.normal(size=shape + (2,))
  u = rng.normal(size=shape + (6,))
  gate = -np.exp(rng.uniform(np.log(1e-3), np.log(30.0), size=shape + (3,)))
  phase = rng.uniform(0.0, 3.0, size=(1, 3))
  weights = rng.normal(size=shape + (6,))
  with jax.enable_x64(True):
    def value_and_grads(kernel):
      loss = lambda q, k, u, gate: (weights * kernel(q, k, u, gate, phase)).sum()
      return jax.value_and_grad(loss, argnums=(0, 1, 2, 3))(q, k, u, gate)
    expected = value_and_grads(recurrent.causal_rnn)
    for name, kernel in token_loop_alternatives.kernels([1, 4, 8]).items():
      got = value_and_grads(kernel)
      np.testing.assert_allclose(got[0], expected[0], rtol=1e-12, err_msg=name)
      for arg, g, e in zip(("q", "k", "u", "gate"), got[1], expected[1]):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12, err_msg=f"{name}: d{arg}")


def test_mixer_parts_times_the_layer_each_change_and_the_kernel(capsys):
  """At `runlocal` size: every changed layer builds and passes `check_config`, and the kernel
  case runs on the layer's shapes, form and options (the probe would stop otherwise)."""
  mixer_parts.main(["--variant", "lion,runlocal", "--batch", "2", "--repeats", "1"])
  printed = capsys.readouterr().out
  for field, value in mixer_parts.CHANGES:
    assert f"mixer, {field}={value}" in printed
  assert "of which the kernel" in printed and "L = 128" in printed


def test_mixer_parts_refuses_a_variant_its_kernel_case_does_not_describe():
  with pytest.raises(SystemExit, match="lion_s,runlocal: the kernel case needs q·k = 1"):
    mixer_parts.main(["--variant", "lion_s,runlocal", "--repeats", "1"])
