"""lion-pictures: the mixing matrices are the models' own maps, and the command draws a run."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs import listops
from lion_jax import ModelConfig
from lion_jax.nn.s5 import S5Mixer
from lra import pictures, resume
from tests.reference import reference_lion


# value_gain: the factor c of c(1 − λ_j) that `LionMixer.value_gain` names (0: none; 4: "s5_zoh").
@pytest.mark.parametrize("normalize,value_gain", [("after", 0.0), ("none", 1.0), ("none", 4.0)])
def test_lion_mixing_weights_applied_to_values_give_the_float64_definition(normalize, value_gain):
  rng = np.random.default_rng(0)
  length, heads, key_dim, value_dim = 7, 2, 3, 4
  q = np.abs(rng.normal(size=(length, heads, key_dim)))
  k = np.abs(rng.normal(size=(length, heads, key_dim)))
  v = rng.normal(size=(length, heads, value_dim))
  log_decay = -np.abs(rng.normal(size=(length, heads, value_dim)))
  weights = pictures.lion_mixing(q, k, log_decay, normalize=normalize, value_gain=value_gain)
  mixed = np.einsum("hcij,jhc->ihc", weights, v)
  gained = v * value_gain * -np.expm1(log_decay) if value_gain else v
  expected = reference_lion(q[None], k[None], gained[None], log_decay[None], normalize=normalize,
                            eps=0.0)[0]
  np.testing.assert_allclose(mixed, expected, rtol=1e-12)


@pytest.mark.parametrize("ssm_real", [False, True])
def test_s5_kernel_norms_are_the_norms_of_the_mixers_token_to_token_map(ssm_real):
  """Column m of K_ij is the output at i for a unit input at token j, channel m."""
  length, width = 6, 4
  mixer = S5Mixer(ModelConfig(mixer="s5", d_model=width, ssm_size=4, ssm_blocks=1,
                              ssm_real=ssm_real), rngs=nnx.Rngs(0))
  impulses = jnp.eye(length * width).reshape(length * width, length, width)  # [L·M, L, M]
  responses = np.asarray(jax.vmap(lambda u: mixer(u[None])[0])(impulses), np.float64)
  maps = responses.reshape(length, width, length, width)  # [j, m, i, m']
  expected = np.linalg.norm(maps, axis=(1, 3)).T  # [i, j]
  lambda_bar, b_bar = (np.asarray(a, np.complex128) for a in mixer.discretize())
  c_tilde = np.asarray(mixer.c_re[...]) + 1j * np.asarray(mixer.c_im[...])
  norms = pictures.s5_kernel_norms(lambda_bar, b_bar, c_tilde, np.asarray(mixer.d[...]), length)
  np.testing.assert_allclose(norms, expected, rtol=1e-4)


@pytest.mark.parametrize("variant", ["lion_s", pytest.param("s5", marks=pytest.mark.slow),
                                     pytest.param("lion_s_s5_form_complex",
                                                  marks=pytest.mark.slow)])
def test_the_command_draws_an_untrained_run(variant, tmp_path, capsys):
  config = listops.get_config(f"{variant},runlocal")
  config.data_dir = str(tmp_path / "data")
  config.generate.update(num_train=8, num_val=4, num_test=4, min_length=5, max_length=30)
  config.seq_len = 32
  workdir = tmp_path / "run"
  workdir.mkdir()
  resume.write_config(config, workdir)
  assert pictures.main(["--workdir", str(workdir), "--init", "--out", str(tmp_path / "pics")]) == 0
  for name in ("timescales.png", "mixing.png", "pictures.json"):
    assert (tmp_path / "pics" / name).stat().st_size > 0, name
  stats = json.loads((tmp_path / "pics" / "pictures.json").read_text())
  assert stats["checkpoint"] == "init" and len(stats["layers"]) == config.model.num_layers
  layer = stats["layers"][0]
  if variant.startswith("lion_s"):  # φ = (SiLU + 0.5)/‖·‖: every q·k in (0, 1]
    assert 0 < layer["qk"]["min"] <= layer["qk"]["max"] <= 1 + 1e-6
  if variant != "lion_s":  # S5's eigenvalues, and LION's complex decays, turn
    assert layer["phase_per_token"]["q90"] > 0
  else:
    assert "phase_per_token" not in layer  # real decays
  assert "layer 0:" in capsys.readouterr().out


def test_a_folder_without_a_run_is_named(tmp_path):
  with pytest.raises(SystemExit):
    pictures.main(["--workdir", str(tmp_path)])


def _untrained_run(variant, folder, tmp_path):
  config = listops.get_config(f"{variant},runlocal")
  config.data_dir = str(tmp_path / "data")
  config.generate.update(num_train=8, num_val=4, num_test=4, min_length=5, max_length=30)
  config.seq_len = 32
  workdir = tmp_path / folder / "listops" / variant / "seed0"
  workdir.mkdir(parents=True)
  resume.write_config(config, workdir)
  return workdir


def test_runs_side_by_side_draw_every_channels_memory_before_and_after(tmp_path):
  """memories.png and memories.json hold each run's memories per layer, untrained beside
  trained (here untrained twice: no test trains a run)."""
  workdirs = [_untrained_run(variant, "sweep", tmp_path) for variant in ("lion_s", "s5")]
  untrained = [pictures.describe_run(w, init=True) for w in workdirs]
  runs = [(label, d, d) for label, d in zip(pictures.run_labels(workdirs), untrained)]
  assert [label for label, _, _ in runs] == ["lion_s seed0", "s5 seed0"]
  twice = [tmp_path / "a/listops/s5/seed0", tmp_path / "b/listops/s5/seed0"]
  assert pictures.run_labels(twice) == [str(w) for w in twice]  # both kept in memories.json
  png, summary = pictures.draw_memories(runs, tmp_path / "pics")
  assert png.stat().st_size > 0
  summary = json.loads(summary.read_text())
  for label, untrained, _ in runs:
    layers = summary[label]["layers"]
    assert len(layers) == len(untrained["layers"])
    memory = untrained["layers"][-1]["memory"]
    assert layers[-1]["trained"]["q50"] == pytest.approx(float(np.median(memory)))
    assert 0 < layers[-1]["untrained"]["q10"] <= layers[-1]["untrained"]["q90"]
  # LION-S's memories are its HiPPO-initialised decays, S5's its eigenvalues: not the same.
  assert summary["lion_s seed0"]["layers"][0] != summary["s5 seed0"]["layers"][0]
  shallow = dict(runs[1][2], layers=runs[1][2]["layers"][:1])
  with pytest.raises(SystemExit, match="different numbers of layers"):
    pictures.draw_memories([runs[0], (runs[1][0], runs[1][1], shallow)], tmp_path / "x")
  with pytest.raises(SystemExit):  # several runs need --out
    pictures.main(["--workdir", str(workdirs[0]), "--workdir", str(workdirs[1])])
