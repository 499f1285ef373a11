"""End-to-end training on tiny `runlocal` configs: outputs, resume, best checkpoint, errors.

Every run here is a few steps of a 1-layer, 16-wide model on length-32 sequences, so the
whole file takes well under a minute of compute on two cores.
"""

import json
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from configs import listops as listops_config
from lion_jax.nn.blocks import MIXERS, takes_segments
from lion_jax.nn.models import masked_mean
from lion_jax.options import CHOICES, ConfigError
from configs import workdir as workdir_config
from lra import checkpoint, metrics, resume, steps, train
from lra.data.errors import GeneratedDataMismatchError, MissingDataError

# A 1-layer, 16-wide LION-S on length-32 ListOps: seconds per run.
TINY = {"model.d_model": 16, "model.num_layers": 1, "model.chunk_size": 8, "seq_len": 32,
        "batch_size": 4, "num_train_steps": 6, "eval_every_steps": 3, "log_every_steps": 2,
        "max_examples": 16}
TINY_LISTOPS = dict(num_train=32, num_val=16, num_test=16, min_length=5, max_length=30, seed=0,
                    workers=1)


def tiny_config(data_dir, arg="lion_s,runlocal", **overrides):
  config = listops_config.get_config(arg)
  config.data_dir = str(data_dir)
  config.generate = TINY_LISTOPS
  for dotted, value in {**TINY, **overrides}.items():
    *parents, leaf = dotted.split(".")
    node = config
    for name in parents:
      node = node[name]
    node[leaf] = value
  return config


@pytest.fixture(scope="module")
def finished_run(data_dir, tmp_path_factory):
  """One complete tiny run, shared by the tests that only read its outputs."""
  workdir = tmp_path_factory.mktemp("run")
  config = tiny_config(data_dir)
  return config, workdir, train.train_and_evaluate(config, str(workdir), progress=False)


def params_of(workdir, config):
  """The final parameters of a finished run, as numpy (from its latest checkpoint)."""
  ckpt = checkpoint.Checkpointer(workdir)
  target = train._setup(config, *_info(config), 1, 1).state  # pylint: disable=protected-access
  state, _ = ckpt.restore(ckpt.latest_step(), target)
  ckpt.close()
  # Every leaf, the dropout RNG key included.
  return [np.asarray(jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
                     else x) for x in jax.tree.leaves(state)]


def _info(config):
  _, info = train.load_data(config)
  return info, train.check_config(config)


def test_a_run_writes_every_output_of_the_workdir(finished_run, data_dir):
  config, workdir, results = finished_run
  assert (data_dir / "listops-1000" / "basic_train.tsv").exists()  # generated when missing
  for name in ("config.json", "metrics.jsonl", "curves.png", "results.json"):
    assert (workdir / name).is_file(), name
  saved = json.loads((workdir / "results.json").read_text())
  assert saved == json.loads(json.dumps(results))
  for key in ("best_val_accuracy", "test_accuracy", "best_step", "num_params", "train_examples_per_sec"):
    assert saved[key] is not None, key
  assert 0 <= saved["test_accuracy"] <= 1 and saved["test_examples"] == 16
  # The chance level beside it: always answering the test split's most frequent label.
  labels = np.asarray(train.load_data(config)[0]["test"].labels)
  assert saved["majority_test_accuracy"] == np.bincount(labels).max() / len(labels)
  assert json.loads((workdir / "config.json").read_text())["model"]["d_model"] == 16
  rows = metrics.read_metrics(workdir)
  assert [r["step"] for r in rows if "train_loss" in r] == [2, 4, 6]
  assert [r["step"] for r in rows if "eval_accuracy" in r] == [3, 6]
  assert all(r["train_examples"] == 8 for r in rows if "train_loss" in r)  # 2 steps × 4
  assert all(r["eval_examples"] == 16 for r in rows if "eval_loss" in r)
  # Training time at each evaluation, apart from the reproducible metrics (lra.metrics.TimingLog).
  timing = metrics.read_timing(workdir)
  assert [(t["step"], t["eval_accuracy"]) for t in timing] == [
      (r["step"], r["eval_accuracy"]) for r in rows if "eval_accuracy" in r]
  assert 0 < timing[0]["train_seconds"] < timing[1]["train_seconds"]
  assert [t["timed_steps"] for t in timing] == [2, 5]  # step 1 compiles
  assert saved["peak_host_memory_bytes"] > 2**20
  assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["3", "6"]


def test_results_name_the_form_the_model_really_runs():
  # LION in its evaluation form; a baseline in its one form, never LION's default chunk_scan.
  forms = {variant: train.form_name(listops_config.get_config(f"{variant},runlocal"))
           for variant in ("lion_s", "s5", "transformer")}
  assert forms == {"lion_s": "chunk_scan", "s5": "s5 associative scan",
                   "transformer": "softmax attention"}


def test_one_compile_per_shape(finished_run):
  assert finished_run[2]["compiles"] == {"train_step": 1, "eval_step": 1}


def tensorboard_scalars(workdir):
  """{tag: [(step, value), ...]} as TensorBoard itself reads the run's `tensorboard/` folder."""
  events = EventAccumulator(str(Path(workdir) / "tensorboard"))
  events.Reload()
  return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def jsonl_scalars(workdir):
  """The same {tag: [(step, value), ...]} from `metrics.jsonl`, values rounded to float32."""
  scalars = {}
  for row in metrics.read_metrics(workdir):
    for tag, value in row.items():
      if tag != "step" and isinstance(value, (int, float)):
        scalars.setdefault(tag, []).append((row["step"], float(np.float32(value))))
  return scalars


def test_tensorboard_reads_back_every_logged_scalar(finished_run):
  workdir = finished_run[1]
  assert len(list((workdir / "tensorboard").glob("events.out.tfevents.*"))) == 1
  scalars = tensorboard_scalars(workdir)
  assert [step for step, _ in scalars["train_loss"]] == [2, 4, 6]
  assert [step for step, _ in scalars["eval_accuracy"]] == [3, 6]
  assert scalars == jsonl_scalars(workdir)


def test_eval_mode_in_three_forms_reproduces_test_accuracy(finished_run):
  config, workdir, results = finished_run
  for form in ("chunk_scan", "rnn", "attention"):
    config_copy = config.copy_and_resolve_references()
    config_copy.eval_form = form
    report = train.evaluate(config_copy, str(workdir), progress=False)
    assert report["form"] == form and report["step"] == results["best_step"]
    assert report["accuracy"] == results["test_accuracy"]
    np.testing.assert_allclose(report["loss"], results["test_loss"], rtol=1e-4)
    assert report["peak_memory_bytes"] > 0 and report["seconds"] > 0


def killed_in_step_5(config, workdir, monkeypatch):
  """Runs a tiny config until it dies in step 5, after step 3's evaluation and checkpoint."""
  calls = {"n": 0}
  real_shard = steps.shard_batch

  class Killed(Exception):
    pass

  def dying_shard(batch, mesh):
    # Steps 1-3 train, step 3 evaluates (4 val batches) and checkpoints; die in step 5.
    calls["n"] += 1
    if calls["n"] == 3 + 4 + 2:
      raise Killed()
    return real_shard(batch, mesh)

  monkeypatch.setattr(steps, "shard_batch", dying_shard)
  with pytest.raises(Killed):
    train.train_and_evaluate(config, str(workdir), progress=False)
  assert checkpoint.Checkpointer(workdir).latest_step() == 3
  monkeypatch.setattr(steps, "shard_batch", real_shard)


def test_resume_after_interruption_matches_an_uninterrupted_run(finished_run, data_dir, tmp_path,
                                                                 monkeypatch):
  config, full_dir, full = finished_run
  killed_in_step_5(config, tmp_path, monkeypatch)
  resumed = train.train_and_evaluate(config, str(tmp_path), progress=False)
  for key in ("best_val_accuracy", "test_accuracy", "test_loss", "best_step", "num_params"):
    assert resumed[key] == full[key], key
  assert metrics.read_metrics(tmp_path) == metrics.read_metrics(full_dir)
  # Two event files; the second tells TensorBoard to drop the first's steps after 3.
  assert tensorboard_scalars(tmp_path) == tensorboard_scalars(full_dir)
  for a, b in zip(params_of(tmp_path, config), params_of(full_dir, config)):
    np.testing.assert_array_equal(a, b)
  # A finished run resumed again only re-tests the best checkpoint.
  again = train.train_and_evaluate(config, str(tmp_path), progress=False)
  assert again["test_accuracy"] == full["test_accuracy"] and again["compiles"]["train_step"] == 0


@pytest.mark.slow  # the kernel's own tests run in make test (tests/ops/test_recomputed.py)
def test_the_recomputing_kernel_trains_the_same_run(finished_run, data_dir, tmp_path,
                                                    monkeypatch):
  """`model.residuals="recomputed"` (here in segments of one chunk) changes what the backward
  pass keeps, not what it computes: the same run to float32 rounding."""
  config, full_dir, full = finished_run
  from lion_jax.ops import recomputed
  monkeypatch.setattr(recomputed, "SEGMENT_MAX", 8)
  recomputing = tiny_config(data_dir, **{"model.residuals": "recomputed"})
  got = train.train_and_evaluate(recomputing, str(tmp_path), progress=False)
  for key in ("best_val_accuracy", "test_accuracy", "best_step", "num_params"):
    assert got[key] == full[key], key
  np.testing.assert_allclose(got["test_loss"], full["test_loss"], rtol=1e-4)
  for a, b in zip(params_of(tmp_path, recomputing), params_of(full_dir, config)):
    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)


def test_the_demo_over_a_run_of_another_config_says_how_to_start_it_over(finished_run, capsys):
  """`make demo` on a runs/demo left by an earlier demo (LION-S) names the fields that differ and
  the command that starts over, and touches nothing (the check comes before any data or write)."""
  from lra import demo
  _, workdir, _ = finished_run
  before = sorted(p.name for p in workdir.iterdir())
  assert demo.main(["--workdir", str(workdir)]) == 2
  message = capsys.readouterr().err
  assert re.search(r"holds a run of another demo config \(.*model\.d_model: \d+ in .*config\.json, "
                   r"64 now", message), message
  assert f"lion-demo --fresh --workdir {workdir}" in message and "--config." not in message
  assert sorted(p.name for p in workdir.iterdir()) == before


def test_a_run_with_checkpoints_resumes_only_with_the_config_it_was_trained_with(finished_run):
  # A default that changed since the run started (here: positions), or a field changed by hand
  # (the learning rate, the number of steps), must not slip silently into the run a checkpoint is
  # restored into; the error names each field with both values and the fix, and config.json
  # keeps what the checkpoints were trained with.
  config, workdir, _ = finished_run
  before = (workdir / "config.json").read_text()
  changed = tiny_config(config.data_dir, **{"model.positional": "sinusoidal"})
  with pytest.raises(resume.ResumeMismatchError,
                     match=r"model\.positional: 'auto' in .*config\.json, 'sinusoidal' now.*"
                           r"--config\.model\.positional=auto"):
    train.train_and_evaluate(changed, str(workdir), progress=False)
  changed = tiny_config(config.data_dir, learning_rate=0.1, num_train_steps=4, seed=3)
  with pytest.raises(resume.ResumeMismatchError,
                     match=r"learning_rate: 0\.002 in .*, 0\.1 now, num_train_steps: 6 in .*, 4 "
                           r"now, seed: 0 in .*, 3 now\). Resume it as trained with "
                           r"`--config\.learning_rate=0\.002 --config\.num_train_steps=6 "
                           r"--config\.seed=0`"):
    train.train_and_evaluate(changed, str(workdir), progress=False)
  assert (workdir / "config.json").read_text() == before
  # How the same parameters are evaluated may change, and a run may be made longer (its cosine
  # schedule is rebuilt for the new total); the run's own config always fits.
  assert resume.check_resumable(tiny_config(config.data_dir, **{"model.form": "rnn"}),
                                workdir) == {"model.form": ("chunk_scan", "rnn")}
  assert resume.check_resumable(tiny_config(config.data_dir, num_train_steps=9),
                                workdir) == {"num_train_steps": (6, 9)}
  assert resume.check_resumable(workdir_config.get_config(str(workdir)), workdir) == {}


def test_an_allowed_change_on_resume_is_recorded_with_its_step(finished_run, tmp_path):
  config, finished, results = finished_run
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)  # the shared run stays as it is
  before = (workdir / "config.json").read_text()
  again = train.train_and_evaluate(tiny_config(config.data_dir, eval_form="attention",
                                               log_every_steps=3), str(workdir), progress=False)
  assert again["eval_form"] == "attention" and again["test_accuracy"] == results["test_accuracy"]
  assert (workdir / "config.json").read_text() == before
  assert workdir_config.read_changes(workdir) == [
      {"step": 6, "field": "eval_form", "from": "", "to": "attention"},
      {"step": 6, "field": "log_every_steps", "from": 2, "to": 3}]
  # The run's own config is what it now continues with; resuming with it records nothing new.
  own = workdir_config.get_config(str(workdir))
  assert (own.eval_form, own.log_every_steps) == ("attention", 3)
  assert resume.check_resumable(own, workdir) == {}


def test_a_run_stored_before_a_model_field_existed_resumes_as_it_was_trained(finished_run,
                                                                            tmp_path):
  # LION-D runs stored before its gate existed (no `fixed_gate` in config.json) were ungated:
  # their own config rebuilds them so, and today's gated LION-D is refused with the fix named.
  # A model that does not read the field (here LION-S) resumes as before.
  config, finished, _ = finished_run
  workdir = tmp_path / "run"
  shutil.copytree(finished, workdir)  # the shared run stays as it is
  stored = json.loads((workdir / "config.json").read_text())
  stored["model"].pop("fixed_gate")
  (workdir / "config.json").write_text(json.dumps(stored))
  resume.check_resumable(tiny_config(config.data_dir), workdir)
  assert workdir_config.get_config(str(workdir)).model.fixed_gate is False
  stored["model"]["decay"] = "fixed"
  (workdir / "config.json").write_text(json.dumps(stored))
  with pytest.raises(resume.ResumeMismatchError,
                     match=r"model\.fixed_gate: False in .*--config\.model\.fixed_gate=False"):
    resume.check_resumable(tiny_config(config.data_dir, **{"model.decay": "fixed"}), workdir)
  resume.check_resumable(workdir_config.get_config(str(workdir)), workdir)


class MeanMixer(nnx.Module):
  """A toy sequence mixer: every token gets a projection of the mean of the real tokens."""

  def __init__(self, config, *, rngs):
    self.proj = nnx.Linear(config.d_model, config.d_model, rngs=rngs)

  def __call__(self, x, mask=None, *, form=None, chunk_size=None):  # [B, L, M] -> [B, L, M]
    mask = jnp.ones(x.shape[:2], bool) if mask is None else mask
    return jnp.broadcast_to(self.proj(masked_mean(x, mask))[:, None], x.shape)


def test_a_new_mixer_is_a_module_and_two_registry_entries(data_dir, tmp_path, monkeypatch):
  # docs/design.md, "A sequence mixer": the module, its name among the valid `mixer` values,
  # and the name -> module entry the blocks build from. Everything else is shared.
  monkeypatch.setitem(CHOICES, "mixer", (*CHOICES["mixer"], "mean"))
  monkeypatch.setitem(MIXERS, "mean", MeanMixer)
  config = tiny_config(data_dir, **{"model.mixer": "mean", "model.chunk_size": 64})  # LION's
  assert config.packing  # ListOps' default: a mixer without segment_ids trains padded rows
  assert not takes_segments("mean") and all(takes_segments(m) for m in ("lion", "s5", "softmax"))
  results = train.train_and_evaluate(config, str(tmp_path), progress=False)
  assert results["eval_form"] == "mean" and 0 <= results["test_accuracy"] <= 1
  assert results["num_params"] > 0 and (tmp_path / "curves.png").is_file()


def test_test_accuracy_comes_from_the_best_validation_checkpoint(data_dir, tmp_path, monkeypatch):
  config = tiny_config(data_dir, num_train_steps=9)
  real_eval = train.run_eval
  fake_val = iter([0.25, 0.75, 0.5])  # evaluations at steps 3, 6, 9: best is step 6

  def eval_with_fake_val(eval_fn, model_state, split, batch_size, mesh, **kwargs):
    sums = real_eval(eval_fn, model_state, split, batch_size, mesh, **kwargs)
    if kwargs.get("desc") == "val":
      sums["correct_sum"] = next(fake_val) * sums["count"]
    return sums

  monkeypatch.setattr(train, "run_eval", eval_with_fake_val)
  results = train.train_and_evaluate(config, str(tmp_path), progress=False)
  assert results["best_step"] == 6 and results["best_val_accuracy"] == 0.75
  assert checkpoint.Checkpointer(tmp_path).best_step() == 6
  monkeypatch.setattr(train, "run_eval", real_eval)
  assert train.evaluate(config, str(tmp_path), progress=False)["accuracy"] == results["test_accuracy"]


def test_non_finite_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(data_dir, tmp_path):
  # Adam moves every weight by ~lr per step, so lr = 1e30 overflows the logits at once.
  config = tiny_config(data_dir, learning_rate=1e30, checkpoint_every_steps=1, log_every_steps=1)
  with pytest.raises(train.NonFiniteError, match=r"at step (\d+) .*last good checkpoint \(step") as error:
    train.train_and_evaluate(config, str(tmp_path), progress=False)
  bad_step = int(error.value.args[0].split("at step ")[1].split()[0])
  assert checkpoint.Checkpointer(tmp_path).latest_step() == bad_step - 1
  assert not (tmp_path / "results.json").exists()


def test_missing_pathfinder_images_are_generated_at_the_difficulty_the_task_loads(tmp_path):
  from configs import pathfinder  # pylint: disable=import-outside-toplevel
  config = pathfinder.get_config("runlocal")
  config.data_dir = str(tmp_path)
  config.generate.num = 20
  config.task_options.difficulty = "easy"
  splits, _ = train.load_data(config)
  assert sum(len(split.labels) for split in splits.values()) == 20
  assert [p.name for p in (tmp_path / "pathfinder32").iterdir()] == ["curv_baseline"]


def test_config_generate_on_a_task_without_a_generator_names_the_tasks_that_have_one(tmp_path):
  from configs import text  # pylint: disable=import-outside-toplevel
  config = text.get_config("runlocal")
  config.data_dir = str(tmp_path)
  config.generate = dict(num_train=10)
  with pytest.raises(ConfigError, match=r"config\.generate is set but task 'text' has no "
                                        r"generator \(tasks with one: listops, pathfinder, "
                                        r"pathx\); drop config\.generate"):
    train.load_data(config)


def _pathfinder_generated(tmp_path, **generate):
  from configs import pathfinder  # pylint: disable=import-outside-toplevel
  config = pathfinder.get_config("runlocal")
  config.data_dir = str(tmp_path)
  config.generate = dict(num=20, seed=0, workers=1, images_per_batch=10, **generate)
  config.task_options.difficulty = "easy"
  return config


def _lit_pixels(splits) -> float:
  return float(np.mean([np.count_nonzero(split.inputs) / len(split.inputs)
                        for split in splits.values()]))


def test_generate_fields_reach_the_generator_and_its_record(tmp_path):
  config = _pathfinder_generated(tmp_path / "bare", num_distractors=0)
  bare, _ = train.load_data(config)
  recorded = json.loads((tmp_path / "bare/pathfinder32/curv_baseline/generated.json").read_text())
  assert recorded == dict(resolution=32, difficulty="easy", num=20, seed=0, images_per_batch=10,
                          num_distractors=0)
  full, _ = train.load_data(_pathfinder_generated(tmp_path / "full"))
  # Without distractor curves only the two target curves and the discs are lit.
  assert _lit_pixels(bare) < 0.7 * _lit_pixels(full)


def test_a_generated_folder_is_reused_only_by_the_arguments_that_made_it(tmp_path):
  train.load_data(_pathfinder_generated(tmp_path))
  train.load_data(_pathfinder_generated(tmp_path))  # the same arguments: reused
  with pytest.raises(GeneratedDataMismatchError,
                     match=r"curv_baseline holds data generated with other arguments .*"
                           r"generated\.json\): num_distractors is None there, 0 here\. "
                           r"Point the data folder elsewhere \(--config\.data_dir"):
    train.load_data(_pathfinder_generated(tmp_path, num_distractors=0))
  with pytest.raises(ConfigError, match=r"config\.generate: .*unexpected keyword.*num_distractor\b"):
    train.load_data(_pathfinder_generated(tmp_path, num_distractor=0))


def test_a_generation_cut_short_is_finished_not_loaded_half_made(tmp_path):
  config = _pathfinder_generated(tmp_path)
  whole, _ = train.load_data(config)
  folder = tmp_path / "pathfinder32" / "curv_baseline"
  # The state a kill leaves in the second of two batches: its metadata is written last.
  (folder / "metadata" / "1.npy").unlink()
  (folder / "generated.json").rename(folder / "generating.json")
  kept = (folder / "imgs/0/sample_0.png").stat().st_mtime_ns
  again, _ = train.load_data(config)
  assert {k: len(v.labels) for k, v in again.items()} == {k: len(v.labels) for k, v in whole.items()}
  for name in whole:
    np.testing.assert_array_equal(again[name].inputs, whole[name].inputs)
  assert (folder / "generated.json").is_file() and not (folder / "generating.json").exists()
  assert (folder / "imgs/0/sample_0.png").stat().st_mtime_ns == kept  # finished batches are kept


def test_a_folder_without_a_record_is_loaded_as_it_is(tmp_path):
  """The LRA release, or data generated before records were written."""
  config = _pathfinder_generated(tmp_path)
  whole, _ = train.load_data(config)
  (tmp_path / "pathfinder32/curv_baseline/generated.json").unlink()
  config.generate.num = 40  # nothing says what made the folder: it is not regenerated
  again, _ = train.load_data(config)
  assert sum(len(v.labels) for v in again.values()) == sum(len(v.labels) for v in whole.values())


def test_missing_data_folder_says_what_to_supply(tmp_path):
  config = tiny_config(tmp_path / "empty", generate={})
  with pytest.raises(MissingDataError, match=r"python -m lra.data generate listops"):
    train.train_and_evaluate(config, str(tmp_path / "run"), progress=False)
  from configs import text  # pylint: disable=import-outside-toplevel
  config = text.get_config("runlocal")
  config.data_dir = str(tmp_path / "empty")
  with pytest.raises(MissingDataError, match=r"aclImdb_v1\.tar\.gz"):
    train.train_and_evaluate(config, str(tmp_path / "run"), progress=False)


def test_unknown_config_field_is_rejected_before_any_work(data_dir, tmp_path):
  config = tiny_config(data_dir)
  config.unlock()
  config.num_train_step = 5
  with pytest.raises(ValueError, match=r"unknown field\(s\) config\.num_train_step"):
    train.train_and_evaluate(config, str(tmp_path), progress=False)
  assert not list(Path(tmp_path).iterdir())
