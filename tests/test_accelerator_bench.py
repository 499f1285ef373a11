"""The one-command accelerator report (`bench/accelerator.py`) and the benchmark harness.

An accelerator is lent only now and then, so the script must not rot in between: here it runs
end to end on the CPU at `--quick` sizes, and every stage must pass and show in the report.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "probes"))  # state_pass, gradient_barrier

import accelerator  # noqa: E402  (bench/ is no package: its scripts import each other by name)
import harness  # noqa: E402

STAGES = ["env", "correctness", "forms", "train_step", "memory", "train"]


def _source_tree_environment():
  """The checkout first on the path, as on an accelerator where the project is not installed."""
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                     else []))
  return env


# 40 s on 2 cores: in `make test-all` (run it before lending a session an accelerator).
@pytest.mark.slow
def test_quick_run_passes_every_stage_and_writes_the_report(tmp_path):
  result = subprocess.run([sys.executable, "bench/accelerator.py", "--quick", "--out",
                           str(tmp_path)], cwd=REPO, env=_source_tree_environment(),
                          capture_output=True, text=True, timeout=900)
  log = (tmp_path / accelerator.LOG).read_text() if (tmp_path / accelerator.LOG).exists() else ""
  assert result.returncode == 0, result.stdout + result.stderr + log[-4000:]

  report = json.loads((tmp_path / accelerator.REPORT_JSON).read_text())
  assert list(report["stages"]) == STAGES
  for name, stage in report["stages"].items():
    assert stage["passed"] and stage["status"] == "passed", (name, stage.get("error"), log[-4000:])
  stages = report["stages"]
  assert stages["env"]["environment"]["backend"] == "cpu"
  checks = stages["correctness"]["checks"]
  assert {c["form"] for c in checks} == set(accelerator.FORMS)
  assert {c["dtype"] for c in checks} == {"float32", "bfloat16"}
  assert all(c["ok"] and c["output_error"] < 1e-3 for c in checks if c["dtype"] == "float32")
  assert all(c["ok"] for c in stages["correctness"]["reference_checks"])
  timed = [r for r in stages["forms"]["results"] if "median_s" in r]
  assert {r["form"] for r in timed} == {"attention", "rnn", "scan", "chunk_scan"}
  assert {r["state_pass"] for r in timed if r["form"] == "chunk_scan"} >= {"scan", "associative"}
  assert all(r["temp_plus_output_bytes"] > 0 for r in timed)
  assert all(r["examples_per_s"] > 0 for r in stages["train_step"]["results"])
  assert ([(r["variant"], r["residuals"]) for r in stages["train_step"]["results"]]
          == [("lion_s", "auto"), ("s5", None), ("transformer", None), ("lion_s", "stored")])
  plans = {(r["variant"], r["residuals"], r["remat"]): r["temp_plus_output_bytes"]
           for r in stages["memory"]["results"]}
  assert len(plans) == len(accelerator.MEMORY_CASES) and all(b > 0 for b in plans.values())
  assert [r["step"] for r in stages["train"]["curve"] if "eval_accuracy" in r] == [3, 6]
  assert 0.0 <= stages["train"]["results"]["test_accuracy"] <= 1.0

  markdown = (tmp_path / accelerator.REPORT_MD).read_text()
  for heading in ("# Accelerator report", "## Correctness", "## lion_attention forms",
                  "## One LRA training step", "## Short ListOps training run"):
    assert heading in markdown
  assert "FAILED" not in markdown
  assert (tmp_path / accelerator.CURVES_PNG).stat().st_size > 0


def test_a_stage_cut_short_by_its_budget_is_incomplete_not_failed():
  # What each stage saves decides its status; "incomplete" still counts as passed.
  assert accelerator.stage_status(0, {"passed": True}) == "passed"
  assert accelerator.stage_status(0, {"passed": True, "incomplete": True}) == "passed (incomplete)"
  assert accelerator.stage_status(0, {"passed": False, "incomplete": True}) == "failed"
  assert accelerator.stage_status(0, {}) == "failed"
  assert accelerator.stage_status(3, {"passed": True}) == "failed (exit code 3)"
  assert accelerator.stage_status(None, {"passed": True}) == "timed out"


class _BudgetOfChecks(accelerator.StageRun):
  """A stage run whose time is left for exactly `checks` more calls of `left()`."""

  def __init__(self, checks, **kwargs):
    super().__init__(**kwargs)
    self.calls_left = checks

  def left(self) -> float:
    self.calls_left -= 1
    return 1.0 if self.calls_left >= 0 else 0.0


@pytest.mark.slow  # a budget that cuts a stage short: the test above, in make test
def test_correctness_cut_short_covers_every_shape_in_float32_first(tmp_path, monkeypatch):
  shape = accelerator.QUICK_CORRECTNESS_SHAPES[0]
  shapes = (shape, dataclasses.replace(shape, name="second shape, L=24, C=8"))
  monkeypatch.setattr(accelerator, "QUICK_CORRECTNESS_SHAPES", shapes)
  run = _BudgetOfChecks(len(accelerator.FORMS) * len(shapes), name="correctness", quick=True,
                        deadline=0.0, path=tmp_path / "c.json", scratch=tmp_path)
  accelerator.stage_correctness(run)
  done = [c for c in run.payload["checks"] if "ok" in c]
  skipped = [c for c in run.payload["checks"] if "skipped" in c]
  assert {(c["shape"], c["dtype"]) for c in done} == {(s.name, "float32") for s in shapes}
  assert len(done) == len(accelerator.FORMS) * len(shapes) and all(c["ok"] for c in done)
  assert skipped and {c["dtype"] for c in skipped} == {"bfloat16"}
  assert run.payload["passed"] and run.payload["incomplete"]
  assert accelerator.stage_status(0, run.payload) == "passed (incomplete)"


def test_a_stage_over_its_budget_is_killed_and_reported_not_fatal(tmp_path):
  args = argparse.Namespace(quick=True)
  with open(tmp_path / "log", "w") as log:
    stage = accelerator.run_stage("train", 1.0, args, tmp_path, _source_tree_environment(), log)
  assert stage["status"] == "timed out" and not stage["passed"]
  assert 1.0 <= stage["seconds"] < 10.0


def test_unknown_stage_is_an_error_naming_the_stages(capsys):
  with pytest.raises(SystemExit):
    accelerator.main(["--out", "unused", "--stages", "env,warp"])
  error = capsys.readouterr().err
  assert "unknown stage(s) warp" in error and "env, correctness, forms, train_step, memory, train" in error


def test_benchmarks_write_to_the_ignored_results_folder_unless_published():
  parser = argparse.ArgumentParser()
  harness.add_common_args(parser)
  folder, name = harness.output_path(parser.parse_args(["--quick"]), "forms")
  assert (folder, name) == (harness.RESULTS, "forms_quick")
  assert "bench/results/" in (REPO / ".gitignore").read_text().split()
  folder, name = harness.output_path(parser.parse_args(["--publish"]), "forms")
  assert (folder, name) == (REPO / "docs" / "bench", "forms")
  with pytest.raises(SystemExit, match="--out and --publish"):
    harness.output_path(parser.parse_args(["--publish", "--out", "x"]), "forms")


def test_stateful_case_threads_the_donated_state_through_every_call():
  def step(state, increment):
    return state + increment, state.sum()

  case = harness.Case("counter", jax.jit(step, donate_argnums=0), (jnp.zeros(3), jnp.ones(3)),
                      threads_state=True)
  harness.compile_case(case)
  harness.time_cases([case], repeats=3, verbose=False)
  calls = 1 + 2 * 3  # one warm-up, then each timed call preceded by an untimed one
  assert float(case.args[0][0]) == calls


def test_correctness_errors_count_nan_as_failure_and_scale_by_the_reference():
  assert accelerator._relative_error([float("nan"), 1.0], [1.0, 1.0]) == float("inf")
  assert accelerator._relative_error([2.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
  assert accelerator._relative_error([1.001, 0.0], [1.0, 0.0]) <= accelerator.TOLERANCE["float32"]


def test_layer_bench_preset_sizes_lion_and_s5_as_their_task_configs_train_them(capsys):
  import layers  # noqa: E402  pylint: disable=import-outside-toplevel
  from configs import listops  # pylint: disable=import-outside-toplevel
  args = argparse.Namespace(preset="listops")
  layers.apply_preset(args)
  lion, s5 = listops.get_config("lion_s").model, listops.get_config("s5").model
  assert (args.d_model, args.heads, args.chunk) == (lion.d_model, lion.num_heads, lion.chunk_size)
  assert (args.ssm_size, args.ssm_blocks) == (s5.ssm_size, s5.ssm_blocks) == (16, 8)
  assert not args.with_softmax
  with pytest.raises(SystemExit):
    layers.main(["--preset", "listops", "--d-model", "64"])
  assert "--preset listops sets --d-model" in capsys.readouterr().err


def test_compiled_cases_carry_xla_flop_and_byte_counts():
  n = 64
  case = harness.compile_case(harness.Case("matmul", jax.jit(lambda a: a @ a),
                                           (jnp.ones((n, n)),)))
  assert case.result["xla_flops"] == 2 * n ** 3
  assert case.result["xla_bytes_accessed"] >= 2 * 4 * n * n  # reads a, writes a @ a


def test_the_segments_bench_forces_a_segment_length_while_tracing_and_restores_the_rule(
    monkeypatch, tmp_path):
  """`bench/segments.py` compares segment lengths on one device: each forced length must reach
  the kernel's rule on every backend (the CPU's and the accelerators' targets differ), and
  the rule must come back after each case."""
  import segments  # pylint: disable=import-outside-toplevel
  from lion_jax.ops import recomputed  # pylint: disable=import-outside-toplevel
  for backend in ("cpu", "gpu"):
    monkeypatch.setattr(jax, "default_backend", lambda backend=backend: backend)
    rule = recomputed.segment_length(50, 2048, 32)
    with segments.segment_tokens("512"):
      assert recomputed.segment_length(50, 2048, 32) == 512
    with segments.segment_tokens("max"):
      assert recomputed.segment_length(50, 2048, 32) == 2048
    with segments.segment_tokens("auto"):
      assert recomputed.segment_length(50, 2048, 32) == rule
    assert recomputed.segment_length(50, 2048, 32) == rule
  array_ops = dict(fused=False, channel_block=None, num_warps=None)
  assert segments.parse_case("s5::packed") == dict(variant="s5", residuals="", segment="auto",
                                                   layout="packed", chunk_size=None, **array_ops)
  assert segments.parse_case("lion_s@64:recomputed:max:packed") == dict(
      variant="lion_s", residuals="recomputed", segment="max", layout="packed", chunk_size=64,
      **array_ops)
  assert segments.parse_case("lion_s@64+fused/32/4:stored:packed") == dict(
      variant="lion_s", residuals="stored", segment="auto", layout="packed", chunk_size=64,
      fused=True, channel_block=32, num_warps=4)
  for wrong in ("lion_s:stored:512:padded", "s5@64::padded", "lion_s@x:stored:packed",
                "lion_s@0:stored:packed", "lion_s:stored", "s5+fused::padded",
                "lion_s+fast:stored:packed", "lion_s+fused/32:stored:packed"):
    with pytest.raises(SystemExit, match="only for residuals=recomputed"):
      segments.parse_case(wrong)
  assert segments.parse_kernel_settings("") == {}
  assert segments.parse_kernel_settings('{"chunk_grads": [16, 4], "outputs": [null, 8]}') == {
      "chunk_grads": (16, 4), "outputs": (None, 8)}
  for wrong, message in (("[1", "expected JSON"), ("[16, 4]", "expected JSON"),
                         ('{"chunk_grad": [16, 4]}', "unknown kernels .'chunk_grad'.*chunk_grads"),
                         ('{"outputs": [16]}', "--kernel-settings outputs: .16."),
                         ('{"outputs": ["16", 4]}', "--kernel-settings outputs"),
                         ('{"outputs": [0, 4]}', "positive integers or null")):
    with pytest.raises(SystemExit, match=message):
      segments.parse_kernel_settings(wrong)
  with pytest.raises(SystemExit, match="'image'.*token tasks"):  # images are never padded
    segments.main(["--task", "image", "--quick"])
  with pytest.raises(FileNotFoundError, match=str(tmp_path)):  # --data-dir reaches the loader
    segments.main(["--task", "retrieval", "--quick", "--data-dir", str(tmp_path)])


def test_the_segments_bench_builds_lion_at_the_chunk_length_it_names(monkeypatch):
  """`lion_s@C` must reach the model that is compiled, not only the case's label: a first
  version passed C where it was ignored, and an H100 call timed C = 32 four times."""
  import packing as packing_bench  # pylint: disable=import-outside-toplevel
  import train_step  # pylint: disable=import-outside-toplevel
  from lra.train import check_config  # pylint: disable=import-outside-toplevel
  built = []
  real = train_step.make_setup
  monkeypatch.setattr(train_step, "make_setup", lambda config, *args, **kwargs: (
      built.append(check_config(config).chunk_size), real(config, *args, **kwargs))[1])
  base, info, seq_len = train_step.task_config("listops", "lion_s,runlocal")
  split = packing_bench.split_of(packing_bench.sample_lengths("listops", base, seq_len)[:64],
                                 info, seq_len)
  padded, packed = packing_bench.cases_for("listops", "lion_s", 4, "runlocal", split,
                                           "stored", chunk=16)
  assert built == [16, 16] and padded.info["chunk_size"] == packed.info["chunk_size"] == 16
  built.clear()
  packing_bench.cases_for("listops", "lion_s", 4, "runlocal", split, "stored")
  assert built == [base.model.chunk_size] * 2 != [16, 16]


def _skip_without_op_lines(profile):
  """Skips where this jaxlib's profiler trace shows no line of ops (a CPU trace whose XLA
  threads have names other than `segments.XLA_CPU_THREADS`: JAX 0.10 and 0.12 have them)."""
  import segments  # pylint: disable=import-outside-toplevel
  if not profile["device_lines"]:
    pytest.skip(f"not available here: the profiler trace of jaxlib {jax.__version__} has no "
                f"device line and no CPU thread named {', '.join(segments.XLA_CPU_THREADS)}*")


def test_the_segments_bench_profile_sums_each_trace_line_in_self_time():
  """`--profile-steps`: the compiled step runs under the profiler with its state threaded, and
  each line's ops add up to the line's time (a wrapper event keeps only its own time)."""
  import segments  # pylint: disable=import-outside-toplevel
  step = jax.jit(lambda state, x: (state + 1, jnp.sin(x @ x).sum()))
  case = harness.compile_case(harness.Case("tiny", step, (jnp.zeros(()), jnp.ones((128, 128))),
                                           threads_state=True))
  profile = segments.device_op_times(case, steps=2, top=1000)
  assert float(case.args[0]) == 2.0  # each profiled step got the previous one's state
  _skip_without_op_lines(profile)
  assert profile["profile_steps"] == 2 and profile["device_lines"]
  for line in profile["device_lines"].values():
    assert line["ms_per_step"] > 0
    assert sum(op["ms_per_step"] for op in line["ops"]) == pytest.approx(line["ms_per_step"])
    assert all(op["ms_per_step"] >= 0 for op in line["ops"])
    assert 0 < line["busy_ms_per_step"] and line["events_per_step"] >= 1


def test_self_times_nest_only_contained_events_and_busy_time_is_the_union():
  """A module holding two kernels keeps the rest as its own; consecutive kernels on a GPU
  stream that overlap by a tick (no nesting) each keep their whole time, as on the H100."""
  import segments  # pylint: disable=import-outside-toplevel
  events = [dict(name="module", ts=0.0, dur=10.0), dict(name="a", ts=1.0, dur=3.0),
            dict(name="b", ts=3.5, dur=2.0),  # overlaps a, both inside the module
            dict(name="k1", ts=20.0, dur=5.0), dict(name="k2", ts=24.5, dur=5.0),
            dict(name="k1", ts=40.0, dur=1.0)]
  own, calls, busy = segments.self_times(events)
  assert own == {"module": 5.0, "a": 3.0, "b": 2.0, "k1": 6.0, "k2": 5.0}
  assert calls == {"module": 1, "a": 1, "b": 1, "k1": 2, "k2": 1}
  assert busy == pytest.approx(10.0 + 9.5 + 1.0)
  kinds = {name: segments.op_kind(name) for name in (
      "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x64>", "gemm_fusion_dot_604",
      "loop_dynamic_update_slice_fusion_48", "loop_reverse_slice_fusion_15", "memcpy128",
      "input_multiply_reduce_fusion_39", "loop_multiply_fusion_54", "triton_softmax_31")}
  assert list(kinds.values()) == ["matmul", "matmul", "data movement", "data movement",
                                  "data movement", "reduction", "elementwise", "other"]


def _projected(x):
  return x @ x


def _squashed(y):
  # Two elementwise ops: XLA:CPU fuses them with either fusion emitter (one op alone is a fusion
  # of its own only with the MLIR emitters, which the tests switch off on jaxlib 0.10).
  return (jnp.sin(y) * 2.0 + 1.0).sum(axis=0)


def test_the_segments_bench_profile_names_the_functions_that_wrote_each_op():
  """`--profile-steps` also sums each line's time by the Python function that emitted each op
  (the compiled HLO's stack frames): here two helpers of this file, and the sums add up to the
  line's time. A fusion's kernel is found by its own name, also where the trace's `hlo_op`
  names something else (on an H100 every kernel of the step went unattributed by `hlo_op`
  alone)."""
  import re  # pylint: disable=import-outside-toplevel
  import segments  # pylint: disable=import-outside-toplevel
  step = jax.jit(lambda state, x: (state + 1, _squashed(_projected(x))))
  case = harness.compile_case(harness.Case("tiny", step, (jnp.zeros(()), jnp.ones((1024, 1024))),
                                           threads_state=True))
  hlo_text = case.compiled.as_text()
  if "\nStackFrames\n" not in hlo_text:
    pytest.skip(f"not available here: the compiled HLO of jaxlib {jax.__version__} names no "
                "stack frames")
  profile = segments.device_op_times(case, steps=2, top=1000, hlo_text=hlo_text)
  _skip_without_op_lines(profile)
  sources = {}
  for line in profile["device_lines"].values():  # XLA:CPU's threads share the work
    assert sum(line["ms_per_step_by_source"].values()) == pytest.approx(line["ms_per_step"])
    sources.update(line["ms_per_step_by_source"])
  here = "tests/test_accelerator_bench.py:"
  assert {f"{here}_projected", f"{here}_squashed"} & set(sources), sources
  fusion = re.search(r"\n\s+(?:ROOT )?%([\w.\-]+) = \S+ fusion\(", hlo_text)[1]
  unattributed = re.search(r"\n\s+%([\w.\-]+) = [^\n]* parameter\(0\)(?![^\n]*stack_frame_id)",
                           hlo_text)[1]  # an instruction no function wrote
  for hlo_op in ("command_buffer.7", unattributed):
    by_name = segments.source_times(hlo_text, {(hlo_op, fusion.replace(".", "_")): 2.0})
    assert "?" not in by_name and sum(by_name.values()) == pytest.approx(2.0)
    assert all(name.startswith(here) for name in by_name), by_name
  assert segments.source_times(hlo_text, {("nothing", "unknown_kernel"): 1.0}) == {"?": 1.0}


def test_the_profile_tells_the_chunk_kernels_backward_stages_apart():
  """The factored kernel's backward pass (a custom VJP, whose ops carry the forward call's
  frames) is split by its stages' name scopes in the time by source, and the recomputing
  kernel's backward pass is named too: here every op of the compiled gradient counts one
  millisecond."""
  import re  # pylint: disable=import-outside-toplevel
  import segments  # pylint: disable=import-outside-toplevel
  from lion_jax import lion_attention  # pylint: disable=import-outside-toplevel
  from lion_jax.ops import chunkwise  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  q, k = (jnp.asarray(rng.normal(size=(1, 64, 2, 8)), jnp.float32) for _ in range(2))
  u = jnp.asarray(rng.normal(size=(1, 64, 2, 8)), jnp.float32)
  gates = jnp.asarray(-rng.uniform(0.01, 0.3, size=(1, 64, 2, 8)), jnp.float32)
  stored = lambda q, k, u, gates: jnp.sum(chunkwise.bidirectional_chunk_scan(
      q, k, u, gates, gates, chunk_size=16)[0] ** 2)
  recomputed = lambda q, k, u, gates: jnp.sum(lion_attention(
      q, k, u, gates, form="chunk_scan", chunk_size=16, residuals="recomputed") ** 2)
  for loss, stages in ((stored, ("output_grads", "leaving_grads", "state_pass_backward")),
                       (recomputed, ("recomputed_backward",))):
    hlo_text = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(q, k, u, gates).compile(
        ).as_text()
    ops = re.findall(r"\n\s+(?:ROOT )?%([\w.\-]+) = ", hlo_text.split("\nENTRY")[1])
    sources = segments.source_times(hlo_text, {("", op): 1.0 for op in ops})
    assert sum(sources.values()) == pytest.approx(len(ops))
    for stage in stages:
      assert any(name.endswith(f"[{stage}]") for name in sources), (stage, sources)


@pytest.mark.slow  # a probe's own check; the kernels it compares: tests/ops/test_state_pass.py
def test_the_state_pass_bench_traces_each_two_way_form_and_restores_the_loop(monkeypatch,
                                                                             capsys):
  """`bench/probes/state_pass.py --two-way` compares the vector kernel's two ways of running the
  "scan" pass: each form must be the one traced inside its context (the same values), and the
  default loop must come back afterwards, also after an error."""
  import forms  # pylint: disable=import-outside-toplevel
  import state_pass  # pylint: disable=import-outside-toplevel
  from lion_jax.ops import chunkwise  # pylint: disable=import-outside-toplevel
  loop = chunkwise.TWO_WAY_PASSES["scan"]
  assert state_pass.TWO_WAY_FORMS["loop"] is loop
  used = []
  for name, form in list(state_pass.TWO_WAY_FORMS.items()):
    monkeypatch.setitem(state_pass.TWO_WAY_FORMS, name,
                        lambda *a, _n=name, _f=form: used.append(_n) or _f(*a))
  q, k, v, log_decay, cotangent = forms.make_inputs(1, 40, 2, 8, "vector")
  gradients = {}
  for name in ("loop", "stacked"):
    used.clear()
    with state_pass.two_way_form(name):
      gradients[name] = forms.grad_fn("chunk_scan", 8, "scan")(q, k, v, log_decay, cotangent)
    assert set(used) == {name}  # the forward pass and its gradient
    assert chunkwise.TWO_WAY_PASSES["scan"] is loop
  for got, want in zip(gradients["stacked"], gradients["loop"]):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(RuntimeError), state_pass.two_way_form("stacked"):
    raise RuntimeError
  assert chunkwise.TWO_WAY_PASSES["scan"] is loop
  with pytest.raises(SystemExit):  # a flag of the step mode, without it: named, not ignored
    state_pass.main(["--task", "text"])
  assert "--task and --preset choose the training step that --two-way times" in (
      capsys.readouterr().err)
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  with pytest.raises(SystemExit, match="--two-way: the scan pass runs on the CPU"):
    state_pass.main(["--two-way", "--quick"])


def test_the_gradient_barrier_bench_replaces_the_barrier_each_place_calls(capsys):
  """`--where` swaps a module's `gradient_barrier` while a step is traced: each place must
  call the barrier through that module's name, or the 'without' case would run it anyway."""
  import gradient_barrier as bench  # pylint: disable=import-outside-toplevel
  from lion_jax.ops import barrier  # pylint: disable=import-outside-toplevel
  from lion_jax.nn import mixer, models  # pylint: disable=import-outside-toplevel
  # The modules whose barriers tests/nn/test_models.py shows in the compiled gradient.
  assert bench.PLACES == {"blocks": models, "projections": mixer}
  for place in bench.PLACES.values():
    assert place.gradient_barrier is barrier.gradient_barrier
  with pytest.raises(SystemExit):
    bench.main(["--where", "projections", "--variants", "lion_s,s5"])
  assert "--where projections: s5 has no LION mixer" in capsys.readouterr().err


# About 60 s on 2 cores: in `make test-all`.
@pytest.mark.slow
def test_the_two_way_and_barrier_benches_run_through_at_runlocal_sizes(tmp_path):
  import gradient_barrier as bench  # pylint: disable=import-outside-toplevel
  import state_pass  # pylint: disable=import-outside-toplevel
  state_pass.main(["--two-way", "--quick", "--batch", "4", "--repeats", "3", "--out",
                   str(tmp_path)])
  records = json.loads((tmp_path / "state_pass_two_way_quick.json").read_text())["results"]
  assert [(r["residuals"], r["two_way"]) for r in records] == [
      ("stored", "loop"), ("stored", "stacked"), ("recomputed", "loop"),
      ("recomputed", "stacked")]
  assert all(r["median_s"] > 0 for r in records)
  bench.main(["--quick", "--where", "projections", "--variants", "lion_s", "--layouts",
              "packed", "--out", str(tmp_path)])
  records = json.loads((tmp_path / "gradient_barrier_quick.json").read_text())["results"]
  assert sorted(r["barrier"] for r in records) == ["barrier", "without"]
  assert all(r["where"] == "projections" and r["median_s"] > 0 for r in records)
