"""The specification of packed training batches (`lra.data.packing`, `config.packing`).

Every step holds exactly the configured number of examples in a fixed number of rows; every
example of the split is trained on, each epoch once; the layout is the one the documented rule
chooses; the iterator resumes where it stopped; a packed train step equals the padded step over
the same examples; a packed run resumes after a kill to the same results.
"""

import jax
import numpy as np
import pytest

from lion_jax.options import ConfigError
from lra import metrics, steps, train
from lra.data import packing
from lra.data.split import Split
from tests.test_train import killed_in_step_5, params_of, tiny_config

L = 64


def split_of(lengths, seed=0, docs=1):
  rng = np.random.default_rng(seed)
  lengths = np.asarray(lengths, np.int32).reshape(len(lengths), *([docs] if docs > 1 else []))
  shape = lengths.shape + (L,)
  inputs = rng.integers(1, 20, shape) * (np.arange(L) < lengths[..., None])
  return Split(inputs.astype(np.int16), lengths, rng.integers(0, 10, len(lengths)).astype(np.int32))


def lengths_like_listops(n, seed=0):
  """Lengths between a quarter and all of a row, median below half (ListOps' shape, scaled)."""
  rng = np.random.default_rng(seed)
  return np.clip(rng.lognormal(np.log(0.47 * L), 0.35, n).astype(int), L // 4, L - 1)


def check_batch(batch, split, batch_size, rows, row_length):
  """Every placed example's tokens sit in one run of its own id, positions counting from 0."""
  assert batch["inputs"].shape == batch["segment_ids"].shape == (rows, row_length)
  assert batch["example_mask"].all() and len(batch["labels"]) == batch_size
  seen = []
  for slot in range(batch_size):
    row, ident = batch["example_rows"][slot], batch["example_ids"][slot]
    where = np.flatnonzero(batch["segment_ids"][row] == ident)
    assert (np.diff(where) == 1).all()  # one contiguous run
    np.testing.assert_array_equal(batch["positions"][row, where], np.arange(len(where)))
    tokens = batch["inputs"][row, where]
    matches = [i for i in range(len(split)) if split.lengths[i] == len(where)
               and (split.inputs[i, :len(where)] == tokens).all()]
    assert matches and split.labels[matches[0]] == batch["labels"][slot]
    seen.append(matches[0])
  return seen


def test_every_step_holds_the_batch_and_every_epoch_every_example():
  split = split_of(lengths_like_listops(96))
  rows, row_length = packing.choose_rows(split.lengths, batch_size=8, length=L, seed=3)
  assert rows * row_length < 8 * L  # packing saves token slots
  iterator = packing.PackedBatchIterator(split, batch_size=8, rows=rows, row_length=row_length,
                                         seed=3)
  seen = []
  for _ in range(3 * 12):  # three epochs of 12 steps
    seen += check_batch(next(iterator), split, 8, rows, row_length)
  counts = np.bincount(seen, minlength=96)
  # Each epoch draws every example once; a few may still wait for the next step at the end.
  assert counts.sum() == 3 * 96 and counts.max() <= 4 and (counts >= 2).all()


@pytest.mark.parametrize("multiple", [1, 2, 4])  # the data-parallel device count
def test_the_chosen_layout_is_the_smallest_that_packs(multiple):
  lengths = lengths_like_listops(200).reshape(-1, 1)
  rows, row_length = packing.choose_rows(lengths, batch_size=16, length=L, seed=0,
                                         multiple=multiple)
  assert rows % multiple == 0 and row_length % (L // 4) == 0 and L <= row_length <= 4 * L
  assert packing.packs(lengths, batch_size=16, rows=rows, length=row_length, seed=0)
  assert rows * row_length < 16 * L  # these lengths leave half of the padded slots empty
  for quarters in range(4, 17):  # no layout with fewer token slots packs (the most such rows)
    other = quarters * L // 4
    fewer = [r for r in range(multiple, 17, multiple) if r * other < rows * row_length]
    assert not fewer or not packing.packs(lengths, batch_size=16, rows=fewer[-1], length=other,
                                          seed=0)
  # Softmax attention keeps rows of L.
  assert packing.choose_rows(lengths, batch_size=16, length=L, seed=0, max_factor=1)[1] == L


def test_the_simulation_sees_the_batches_the_run_draws():
  # `choose_rows` keeps the simulated index batches between layouts; they must stay the ones
  # the training iterator reads, over several epochs (each a fresh permutation).
  # pylint: disable=protected-access
  drawn = iter(packing._index_batches(40, 8, 3).to_iter_dataset())
  epochs = [packing._index_batch(40, 8, 3, step) for step in range(15)]
  for simulated in epochs:
    np.testing.assert_array_equal(simulated, next(drawn))
  assert sorted(np.concatenate(epochs[:5])) == list(range(40))
  assert not np.array_equal(np.concatenate(epochs[:5]), np.concatenate(epochs[5:10]))


def test_the_state_resumes_the_same_batches():
  split = split_of(lengths_like_listops(64))
  make = lambda: packing.PackedBatchIterator(split, batch_size=8, rows=5, row_length=L, seed=1)
  first = make()
  for _ in range(5):
    next(first)
  state = first.get_state()
  later = [next(first) for _ in range(6)]
  second = make()
  second.set_state(state)
  for a in later:
    b = next(second)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_retrieval_documents_are_placed_together():
  split = split_of(lengths_like_listops(64).reshape(32, 2), docs=2)
  iterator = packing.PackedBatchIterator(split, batch_size=4, rows=4, row_length=2 * L, seed=0)
  batch = next(iterator)
  assert batch["example_rows"].shape == batch["example_ids"].shape == (4, 2)
  for slot in range(4):
    for doc in range(2):
      row, ident = batch["example_rows"][slot, doc], batch["example_ids"][slot, doc]
      assert (batch["segment_ids"][row] == ident).sum() > 0


def test_an_example_longer_than_a_row_is_named():
  lengths = lengths_like_listops(10)
  lengths[7] = L + 5
  with pytest.raises(ValueError, match=f"example 7 has length {L + 5}, longer than a packed row "
                                       f"of {L} tokens"):
    packing.choose_rows(lengths, batch_size=4, length=L, seed=0)


def test_packing_pays_only_when_the_layout_has_fewer_token_slots():
  """B padded examples of D·L slots against R rows of L': equal slots save nothing."""
  assert packing.saves_slots(rows=3, row_length=2 * L, batch_size=8, example_slots=L)
  assert not packing.saves_slots(rows=4, row_length=2 * L, batch_size=8, example_slots=L)
  assert not packing.saves_slots(rows=16, row_length=L, batch_size=8, example_slots=2 * L)
  assert packing.saves_slots(rows=15, row_length=L, batch_size=8, example_slots=2 * L)


def test_padding_share():
  assert packing.padding_share(np.full(10, 16), 64) == 0.75
  assert packing.padding_share(np.full(10, 16), 64, rows=1, batch_size=4) == 0.0


def test_a_packed_train_step_equals_the_padded_step_over_the_same_examples(data_dir):
  config = tiny_config(data_dir, batch_size=8)
  splits, info = train.load_data(config)
  model_config = train.check_config(config)
  split = splits["train"]
  lengths = np.asarray(split.lengths).reshape(len(split), 1)
  iterator = packing.PackedBatchIterator(split, batch_size=8, rows=4, row_length=32, seed=0)
  placed, starts, _ = packing.fill_step(np.arange(8), lambda: np.arange(8, 16), lengths, 4, 32, 8)
  packed = iterator._gather(placed, starts)  # pylint: disable=protected-access
  padded = {"inputs": np.asarray(split.inputs[placed], np.int32),
            "lengths": np.asarray(split.lengths[placed], np.int32),
            "labels": split.labels[placed], "example_mask": np.ones(8, bool)}
  results = []
  for batch in (packed, padded):
    setup = train._setup(config, info, model_config, 10, 2)  # pylint: disable=protected-access
    state, sums = steps.jit_train_step(setup)(setup.state, steps.shard_batch(batch, setup.mesh))
    results.append((jax.device_get(sums), jax.tree.leaves(steps.model_state(state))))
  (packed_sums, packed_state), (padded_sums, padded_state) = results
  for key in padded_sums:
    np.testing.assert_allclose(packed_sums[key], padded_sums[key], rtol=1e-5, err_msg=key)
  assert len(packed_state) == len(padded_state) > 5
  for a, b in zip(packed_state, padded_state):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      continue
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # three tiny runs; make test checks the iterator's state and a packed step
def test_a_packed_run_resumes_after_a_kill_to_the_same_results(data_dir, tmp_path, monkeypatch):
  config = tiny_config(data_dir, packing=True)
  full = train.train_and_evaluate(config, str(tmp_path / "full"), progress=False)
  killed_in_step_5(config, tmp_path / "killed", monkeypatch)
  resumed = train.train_and_evaluate(config, str(tmp_path / "killed"), progress=False)
  for key in ("best_val_accuracy", "test_accuracy", "test_loss", "best_step"):
    assert resumed[key] == full[key], key
  assert metrics.read_metrics(tmp_path / "killed") == metrics.read_metrics(tmp_path / "full")
  for a, b in zip(params_of(tmp_path / "killed", config), params_of(tmp_path / "full", config)):
    np.testing.assert_array_equal(a, b)


def test_packing_an_image_task_is_refused(tmp_path):
  from configs import pathfinder  # pylint: disable=import-outside-toplevel
  config = pathfinder.get_config("lion_s,runlocal")
  config.packing = True
  splits_info = train.TaskInfo("pathfinder32", 2, 256, 1024, False, "pixels")
  with pytest.raises(ConfigError, match="config.packing=True .* 'pathfinder"):
    train._train_batches(config, None, splits_info,  # pylint: disable=protected-access
                         train.check_config(config), steps.make_mesh())


def test_a_split_that_packing_cannot_shrink_trains_padded(data_dir):
  config = tiny_config(data_dir, packing=True)
  full = split_of(np.full(32, L))  # every example fills its row
  loader = train._train_batches(config, full, train.TaskInfo(  # pylint: disable=protected-access
      "listops", 10, 20, L, False, "tokens"), train.check_config(config), steps.make_mesh())
  assert "lengths" in next(loader)
  loader.close()
  short = split_of(lengths_like_listops(32))
  packed = train._train_batches(config, short, train.TaskInfo(  # pylint: disable=protected-access
      "listops", 10, 20, L, False, "tokens"), train.check_config(config), steps.make_mesh())
  assert "segment_ids" in next(packed)
  packed.close()


@pytest.mark.slow
def test_baselines_train_on_packed_rows(data_dir, tmp_path):
  """S5 and the Transformer read no LION field: packing must not set one for them."""
  from configs import listops  # pylint: disable=import-outside-toplevel
  from tests.test_train import TINY_LISTOPS  # pylint: disable=import-outside-toplevel
  for variant in ("s5", "transformer"):
    config = listops.get_config(f"{variant},runlocal")
    config.data_dir, config.generate, config.packing = str(data_dir), TINY_LISTOPS, True
    config.seq_len, config.batch_size, config.max_examples = 32, 4, 16
    config.num_train_steps, config.eval_every_steps, config.log_every_steps = 2, 2, 1
    config.model.d_model, config.model.num_layers = 16, 1
    results = train.train_and_evaluate(config, str(tmp_path / variant), progress=False)
    assert 0.0 <= results["test_accuracy"] <= 1.0


def packing_bench(monkeypatch):
  """bench/packing.py as a module (bench/ is not a package)."""
  import importlib.util  # pylint: disable=import-outside-toplevel
  import pathlib  # pylint: disable=import-outside-toplevel
  import sys  # pylint: disable=import-outside-toplevel

  script = pathlib.Path(__file__).resolve().parents[1] / "bench" / "packing.py"
  monkeypatch.syspath_prepend(str(script.parent))
  spec = importlib.util.spec_from_file_location("bench_packing", script)
  bench = importlib.util.module_from_spec(spec)
  monkeypatch.setitem(sys.modules, spec.name, bench)
  spec.loader.exec_module(bench)
  return bench


def test_packing_bench_states_retrieval_lengths_that_leave_nothing_to_pack(monkeypatch):
  """`bench/packing.py --tasks retrieval` samples AAN's documents as full-text papers (log-normal
  bytes, median 20,000): under 3% of them end before the 4000-byte cap, and at batch 8 no packed
  layout holds the step in fewer token slots than the padded rows, so training keeps those.
  With half the documents short (median 4000) the rule finds a smaller layout."""
  bench = packing_bench(monkeypatch)
  seq_len = 4000
  for median, short_share in ((20_000, (0.005, 0.03)), (4_000, (0.45, 0.55))):
    lengths = bench.sample_lengths("retrieval", None, seq_len, retrieval_median=median)
    assert lengths.shape == (bench.SAMPLES, 2) and 10 <= lengths.min()
    assert lengths.max() == seq_len
    assert short_share[0] < np.mean(lengths < seq_len) < short_share[1]
    rows, row_length = packing.choose_rows(lengths, batch_size=8, length=seq_len, seed=0)
    assert packing.saves_slots(rows, row_length, 8, 2 * seq_len) == (median == 4_000)


@pytest.mark.slow  # about 20 s: two training setups
def test_packing_bench_times_retrieval_on_the_lengths_of_real_files(tmp_path, monkeypatch):
  """`bench/packing.py --tasks retrieval --data-dir DIR`: each example's two documents, with the
  lengths the loader reads from DIR, padded as [B, 2, L] and packed as two segments; the padded
  batch holds the very documents the packed batch placed."""
  from tests.lra_fixtures import aan_row, write_aan  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  write_aan(tmp_path / "aan", [aan_row(str(i % 2), "a" * int(rng.integers(5, 120)),
                                       "b" * int(rng.integers(5, 120))) for i in range(24)])
  bench = packing_bench(monkeypatch)
  config, info, seq_len = bench.train_step.task_config("retrieval", "s5,runlocal")
  lengths = bench.sample_lengths("retrieval", config, seq_len, data_dir=str(tmp_path))
  assert lengths.shape == (24, 2) and 5 <= lengths.min() and lengths.max() <= min(120, seq_len)
  padded_case, packed_case = bench.cases_for("retrieval", "s5", 4, "runlocal",
                                             bench.split_of(lengths, info, seq_len))
  padded, packed = (jax.device_get(case.args[1]) for case in (padded_case, packed_case))
  assert padded["inputs"].shape == (4, 2, seq_len) and packed["example_rows"].shape == (4, 2)
  for example in range(4):
    for doc in range(2):
      row, run = packed["example_rows"][example, doc], packed["example_ids"][example, doc]
      tokens = packed["inputs"][row][packed["segment_ids"][row] == run]
      assert len(tokens) == padded["lengths"][example, doc]
      np.testing.assert_array_equal(padded["inputs"][example, doc, :len(tokens)], tokens)
