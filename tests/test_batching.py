"""What batching guarantees: fixed shapes, eval padding with a mask, seeded per-epoch shuffling,
and exact resume from `get_state` / `set_state`."""

import json

import numpy as np
import pytest

from lra.data.batching import make_loader
from lra.tasks import Split

N, L = 23, 5


def make_split(n: int = N, dual: bool = False) -> Split:
  """Example i has label i and inputs filled with i, so batches reveal which rows they hold."""
  shape = (n, 2, L) if dual else (n, L)
  inputs = np.broadcast_to(np.arange(n).reshape((n,) + (1,) * (len(shape) - 1)), shape)
  lengths = np.tile([[L, L - 1]], (n, 1)) if dual else np.full(n, L)
  return Split(inputs.astype(np.int16), lengths.astype(np.int32), np.arange(n, dtype=np.int32))


def take(loader, k: int) -> list[dict[str, np.ndarray]]:
  return [next(loader) for _ in range(k)]


def labels_of(batches) -> list[list[int]]:
  return [b["labels"].tolist() for b in batches]


def test_eval_batches_cover_each_example_once_in_order_with_a_padded_last_batch():
  loader = make_loader(make_split(), batch_size=10, seed=0, shuffle=False, drop_remainder=False, num_epochs=1)
  batches = list(loader)
  assert len(batches) == len(loader) == 3
  for b in batches:
    assert b["inputs"].shape == (10, L) and b["inputs"].dtype == np.int32
    assert b["lengths"].shape == (10,) and b["lengths"].dtype == np.int32
    assert b["labels"].dtype == np.int32 and b["example_mask"].dtype == bool
  last = batches[-1]
  np.testing.assert_array_equal(last["example_mask"], [True] * 3 + [False] * 7)
  # Filler rows repeat the batch's first example: never an empty sequence for the model.
  assert (last["labels"][3:] == 20).all() and (last["lengths"][3:] == L).all()
  real = np.concatenate([b["labels"][b["example_mask"]] for b in batches])
  np.testing.assert_array_equal(real, np.arange(N))
  np.testing.assert_array_equal(last["inputs"][:3, 0], [20, 21, 22])  # rows stay aligned


def test_retrieval_batches_keep_both_documents():
  loader = make_loader(make_split(dual=True), batch_size=4, seed=0, shuffle=True, drop_remainder=True)
  b = next(loader)
  assert b["inputs"].shape == (4, 2, L) and b["lengths"].shape == (4, 2)
  np.testing.assert_array_equal(b["inputs"][:, 1, 0], b["labels"])
  assert (b["lengths"][:, 1] == L - 1).all()


def test_training_epochs_are_fresh_permutations_and_drop_the_remainder():
  loader = make_loader(make_split(), batch_size=5, seed=7, shuffle=True, drop_remainder=True)
  epochs = [np.concatenate(labels_of(take(loader, 4))) for _ in range(3)]  # 23 // 5 = 4 batches/epoch
  for epoch in epochs:
    assert len(set(epoch.tolist())) == 20  # 20 distinct examples, the other 3 dropped this epoch
  assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
  assert all(next(loader)["example_mask"].all() for _ in range(5))


def test_shuffling_is_determined_by_the_seed():
  def first_batches(seed):
    return labels_of(take(make_loader(make_split(), batch_size=4, seed=seed, shuffle=True,
                                      drop_remainder=True), 12))

  assert first_batches(3) == first_batches(3)
  assert first_batches(3) != first_batches(4)


@pytest.mark.parametrize("consumed", [0, 2, 5, 11])  # 5 batches per epoch: resumes mid- and across epochs
def test_resume_from_state_sees_exactly_the_uninterrupted_batches(consumed):
  def fresh():
    return make_loader(make_split(), batch_size=4, seed=11, shuffle=True, drop_remainder=True)

  reference = labels_of(take(fresh(), consumed + 8))
  interrupted = fresh()
  take(interrupted, consumed)
  state = json.loads(json.dumps(interrupted.get_state()))  # as stored next to a checkpoint
  resumed = fresh()
  resumed.set_state(state)
  assert labels_of(take(resumed, 8)) == reference[consumed:]


def test_resume_an_eval_pass():
  def fresh():
    return make_loader(make_split(), batch_size=10, seed=0, shuffle=False, drop_remainder=False, num_epochs=1)

  loader = fresh()
  next(loader)
  resumed = fresh()
  resumed.set_state(loader.get_state())
  assert labels_of(resumed) == labels_of(loader)


def test_finite_epochs_and_lengths():
  loader = make_loader(make_split(), batch_size=5, seed=0, shuffle=True, drop_remainder=True, num_epochs=2)
  assert len(loader) == 8 and len(list(loader)) == 8
  endless = make_loader(make_split(), batch_size=5, seed=0, shuffle=True, drop_remainder=True)
  with pytest.raises(TypeError, match="endless"):
    len(endless)


def test_a_split_smaller_than_one_training_batch_is_an_error():
  with pytest.raises(ValueError, match="3 examples < batch_size 4 yields no batches"):
    make_loader(make_split(3), batch_size=4, seed=0, shuffle=True, drop_remainder=True)
  # ...but evaluation still works: one padded batch.
  (b,) = make_loader(make_split(3), batch_size=4, seed=0, shuffle=False, drop_remainder=False, num_epochs=1)
  assert b["example_mask"].tolist() == [True, True, True, False]


def test_memory_mapped_inputs_batch_like_in_memory_ones(tmp_path):
  split = make_split()
  np.save(tmp_path / "x.npy", split.inputs)
  mapped = Split(np.load(tmp_path / "x.npy", mmap_mode="r"), split.lengths, split.labels)
  a = take(make_loader(split, batch_size=6, seed=1, shuffle=True, drop_remainder=True), 6)
  b = take(make_loader(mapped, batch_size=6, seed=1, shuffle=True, drop_remainder=True), 6)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x["inputs"], y["inputs"])


def test_worker_processes_yield_the_same_batches():
  def first(worker_count):
    with make_loader(make_split(), batch_size=4, seed=5, shuffle=True, drop_remainder=True,
                     worker_count=worker_count) as loader:
      return labels_of(take(loader, 7))

  assert first(1) == first(0)
