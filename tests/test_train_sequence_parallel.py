"""Training with the sequence split over devices (`config.mesh = (data, seq)`).

`run.py` on 4 forced CPU devices as 2 × 2 (data × seq), and as 2 processes × 2 devices with the
sequence axis spanning the processes, must write the results and metric rows of one device:
BatchNorm statistics, masked pooling, padding and dropout see the same global batch. The
checkpoint of the 2 × 2 run then resumes on one device.
"""

import re
import shutil

import pytest

from configs import common, listops
from lra import steps, train
from tests.test_multihost import RESULT_KEYS, Job, metric_rows, results, train_args

MESH_2X2 = "--config.mesh=(2,2)"


def assert_same_run(got_dir, expected_dir):
  got, expected = results(got_dir), results(expected_dir)
  for key in RESULT_KEYS:
    assert got[key] == expected[key], key
  assert got["test_loss"] == pytest.approx(expected["test_loss"], rel=1e-5)
  rows, expected_rows = metric_rows(got_dir), metric_rows(expected_dir)
  assert [sorted(r) for r in rows] == [sorted(r) for r in expected_rows]
  for row, expected_row in zip(rows, expected_rows):
    # Throughput differs by nature; everything else is the same numbers.
    row, expected_row = ({k: v for k, v in r.items() if "per_sec" not in k and "seconds" not in k}
                         for r in (row, expected_row))
    assert row == pytest.approx(expected_row, rel=1e-5, abs=1e-6)


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
  """The 6-step run on one device both tests compare with: (its workdir, its data folder)."""
  root = tmp_path_factory.mktemp("one_device")
  with Job(root / "logs", train_args(root / "one", root / "data", 6), num_processes=1,
           devices=1) as job:
    assert job.wait() == [0], job.tail()
  return root / "one", root / "data"


@pytest.mark.slow  # 30 s; `make test` keeps the two-process case below, which trains on the same mesh
def test_data_by_sequence_mesh_trains_as_one_device_and_resumes_on_another_mesh(tmp_path,
                                                                                 one_device):
  one_dir, data_dir = one_device
  shutil.copytree(one_dir, tmp_path / "one")
  with Job(tmp_path / "logs4", [*train_args(tmp_path / "mesh", data_dir, 6), MESH_2X2],
           num_processes=1, devices=4) as job:
    assert job.wait() == [0], job.tail()
  assert "mesh {'data': 2, 'seq': 2}" in job.log(0), job.tail()
  assert_same_run(tmp_path / "mesh", tmp_path / "one")

  # A checkpoint written under the 2 × 2 mesh restores on one device: 3 more steps from step 6
  # give the 9-step run of one device... provided a 1-device 9-step run resumed the same way.
  for name in ("mesh", "one"):
    shutil.copytree(tmp_path / name, tmp_path / f"{name}_resumed")
    with Job(tmp_path / f"logs_{name}_resumed",
             train_args(tmp_path / f"{name}_resumed", data_dir, 9), num_processes=1,
             devices=1) as job:
      assert job.wait() == [0], job.tail()
    assert "resumed from step 6" in job.log(0), job.tail()
  assert_same_run(tmp_path / "mesh_resumed", tmp_path / "one_resumed")


@pytest.mark.slow  # 36 s with its fixture; `make test` keeps tests/test_multihost.py's processes
def test_sequence_axis_spanning_two_processes_trains_as_one_device(tmp_path, one_device):
  # Two processes of two devices; `seq` is the process-major axis of the mesh.
  with Job(tmp_path / "logs2", [*train_args(tmp_path / "two", tmp_path / "data2", 6), MESH_2X2],
           num_processes=2, devices=2) as job:
    assert job.wait() == [0, 0], job.tail()
  assert "process 1 of 2" in job.log(1) and "mesh {'data': 2, 'seq': 2}" in job.log(0)
  assert_same_run(tmp_path / "two", one_device[0])

  # --mode eval reads config.json, mesh included, and splits the sequence again.
  with Job(tmp_path / "logs_eval", [f"--workdir={tmp_path / 'two'}", "--mode=eval"],
           num_processes=2, devices=2) as job:
    assert job.wait() == [0, 0], job.tail()
  expected = results(one_device[0])
  match = re.search(r"step (\d+) \(chunk_scan form\), test accuracy ([\d.]+)%", job.log(0))
  assert match, job.tail()
  assert int(match.group(1)) == expected["best_step"]
  assert float(match.group(2)) == pytest.approx(100 * expected["test_accuracy"], abs=0.005)


@pytest.mark.parametrize("shape", [(2,), (0, 1), (1, 0), (-2, 2), ("a", 1)])
def test_a_malformed_mesh_is_named(shape):
  with pytest.raises(ValueError, match=r"config\.mesh=.*\(data, seq\)"):
    steps.check_mesh_shape(shape)


def test_a_mesh_that_does_not_use_the_devices_is_named():
  with pytest.raises(ValueError, match=r"config\.mesh=\(1, 2\) needs data × seq = 2 devices "
                                       r"\(there are 1\)"):
    steps.make_mesh((1, 2))
  with pytest.raises(ValueError, match=r"config\.mesh=\(-1, 2\): seq=2 does not divide the 1 "):
    steps.make_mesh((-1, 2))
  assert dict(steps.make_mesh((-1, 1)).shape) == {"data": 1, "seq": 1}


@pytest.mark.parametrize("field, value, message", [
    ("model.form", "rnn", r"config\.model\.form='rnn'"),
    ("eval_form", "attention", r"config\.eval_form='attention'"),
    ("model.scan_order", "snake", r"config\.model\.scan_order='snake'"),
    # packed rows (the token tasks' default) cannot be split in the code convention
    ("model.convention", "code", r"config\.packing=True .*config\.model\.convention='symmetric'")])
def test_a_sequence_split_the_model_cannot_run_is_named(field, value, message):
  config = listops.get_config("lion_s,runlocal")
  config.mesh = (-1, 2)
  if field == "model.scan_order":
    config.model.grid = (4, 8)
  common.set_fields(config, {field: value}, "test")
  with pytest.raises(ValueError, match=r"config\.mesh=\(-1, 2\).*" + message):
    train.check_config(config)
  config.mesh = (-1, 1)
  assert train.check_config(config).sequence_axis is None


@pytest.mark.parametrize("variant", ["s5", "transformer"])
def test_a_sequence_split_of_a_baseline_mixer_is_named(variant):
  config = listops.get_config(f"{variant},runlocal")
  config.mesh = (-1, 2)
  with pytest.raises(ValueError, match=r"config\.mesh=\(-1, 2\).*config\.model\.mixer="):
    train.check_config(config)
  config.mesh = (-1, 1)
  assert train.check_config(config).mixer == config.model.mixer
