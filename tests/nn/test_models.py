"""LraClassifier: every preset in every form, padding invariance (BatchNorm included), the
retrieval two-tower head, gradients to every parameter, train/eval under jit, remat, counts,
and which models can tell a sequence from its reverse (and so get positions)."""

import jax
import jax.test_util
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from bench.probes import arithmetic, param_counts
from lion_jax import LionEncoder, LionMixer, LraClassifier, count_params, masked_mean, preset
from lion_jax.ops import barrier
from lion_jax.nn import models
from lion_jax.nn import mixer as mixer_module
from lion_jax.config import ModelConfig

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")
# (num_classes, vocab_size, dual_input) per task, as in lra/data.
TASKS = {task: (io.num_classes, io.vocab_size, io.dual_input)
         for task, io in param_counts.TASK_IO.items()}


def build(task, seed=0, **overrides):
  fields = dict(d_model=32, num_heads=2, num_layers=1, chunk_size=8)
  fields.update(overrides)
  num_classes, vocab, dual = TASKS[task]
  return LraClassifier(preset(task, **fields), num_classes=num_classes, vocab_size=vocab,
                       dual_input=dual, rngs=nnx.Rngs(seed))


def batch_for(task, length=24, seed=1):
  """Random inputs and lengths (with padding) in the layout of `task`; pads hold 0."""
  _, vocab, dual = TASKS[task]
  shape = (3, 2) if dual else (3,)
  key_x, key_l = jax.random.split(jax.random.key(seed))
  x = jax.random.randint(key_x, shape + (length,), 1, vocab)
  lengths = jax.random.randint(key_l, shape, 3, length + 1).at[0].set(length)
  return jnp.where(jnp.arange(length) < lengths[..., None], x, 0), lengths


def repad(x, lengths, length, seed):
  """The same examples padded to `length` with random garbage instead of zeros."""
  garbage = jax.random.randint(jax.random.key(seed), x.shape[:-1] + (length,), 0, 16)
  widened = jnp.concatenate([x, garbage[..., x.shape[-1]:]], axis=-1)
  return jnp.where(jnp.arange(length) < lengths[..., None], widened, garbage)


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
  jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=rtol, atol=atol), a, b)


# Shared by several tests, so that a model of the same config and batch compiles once per worker.
forward = nnx.jit(lambda m, x, n: (m(x, n), nnx.state(m, nnx.BatchStat)))  # logits, statistics


def _cross_entropy(model, x, lengths, labels):
  return optax.softmax_cross_entropy_with_integer_labels(model(x, lengths), labels).mean()


loss_and_grads = nnx.jit(nnx.value_and_grad(_cross_entropy))


# make test: ListOps; make test-all adds the other five tasks (the two-document head: below).
@pytest.mark.parametrize("task", [
    task if task == "listops" else pytest.param(task, marks=pytest.mark.slow) for task in TASKS])
def test_every_preset_gives_the_same_logits_in_every_form(task):
  # lecun W_v makes the mixers matter (their ZOH-initialised output is only ~Δ in size).
  model = build(task, v_init="lecun")
  model.eval()
  x, lengths = batch_for(task)
  logits = nnx.jit(lambda m, x, n: {f: m(x, n, form=f) for f in FORMS})(model, x, lengths)
  assert logits["attention"].shape == (3, TASKS[task][0])
  for form in FORMS[1:]:
    np.testing.assert_allclose(logits[form], logits["attention"], rtol=1e-5, atol=1e-6, err_msg=form)


@pytest.mark.parametrize("task,overrides", [
    ("listops", dict()),
    pytest.param("retrieval", dict(block="transformer", activation="full_glu"),
                 marks=pytest.mark.slow),
])
def test_padding_a_batch_differently_changes_neither_logits_nor_batchnorm_statistics(task, overrides):
  model = build(task, v_init="lecun", **overrides)
  x, lengths = batch_for(task, length=24)
  x_long = repad(x, lengths, 37, seed=5)
  results = []
  for inputs in (x, x_long):
    copy = nnx.clone(model)
    copy.train()  # batch statistics, running averages updated
    train_logits, _ = forward(copy, inputs, lengths)
    copy.eval()
    results.append((train_logits, forward(copy, inputs, lengths)[0],
                    nnx.state(copy, nnx.BatchStat)))
  assert_trees_close(results[0], results[1])
  before = nnx.state(model, nnx.BatchStat)
  assert not np.allclose(jax.tree.leaves(before)[0], jax.tree.leaves(results[0][2])[0])


def test_batchnorm_statistics_are_masked_means_over_real_tokens():
  model = build("listops", v_init="lecun")
  x, lengths = batch_for("listops")
  forward(model, x, lengths)
  embedded = np.asarray(model.encoder.inputs(x))  # [B, L, M]
  real = np.arange(x.shape[1]) < np.asarray(lengths)[:, None]
  tokens = embedded[real]  # [real tokens, M]
  norm = model.encoder.blocks[0].norm
  momentum = model.config.bn_momentum
  np.testing.assert_allclose(norm.mean[...], (1 - momentum) * tokens.mean(0), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(norm.var[...], momentum + (1 - momentum) * tokens.var(0), rtol=1e-5)


def test_retrieval_head_runs_both_documents_through_one_shared_tower():
  # The exact form compiles fastest; the forms agree (above), the head is what is checked here.
  model = build("retrieval", v_init="lecun", form="attention")
  model.eval()
  x, lengths = batch_for("retrieval")

  def towers(m, x, lengths):
    mask = jnp.arange(x.shape[-1]) < lengths[..., None]  # [B, 2, L]
    pooled = [masked_mean(m.encoder(x[:, d], mask[:, d]), mask[:, d]) for d in (0, 1)]
    swapped = m(x[:, ::-1], lengths[:, ::-1])  # [u, v, u − v, u ⊙ v] is ordered
    return m(x, lengths), m.head(*pooled), swapped

  logits, separate, swapped = nnx.jit(towers)(model, x, lengths)
  np.testing.assert_allclose(logits, separate, rtol=1e-5, atol=1e-6)
  assert not np.allclose(swapped, logits)
  with pytest.raises(ValueError, match=r"\[B, 2, L\] inputs"):
    model(x[:, 0], lengths[:, 0])


# make test: ListOps' LION-S; make test-all adds the other blocks, decays and activations.
@pytest.mark.parametrize("task,overrides", [
    ("listops", dict()),
    pytest.param("text", dict(decay_shape="scalar", normalize="before"),  # dropout 0.1
                 marks=pytest.mark.slow),
    pytest.param("retrieval", dict(decay="fixed", activation="gelu"), marks=pytest.mark.slow),
    pytest.param("image", dict(block="transformer", norm="layer", selective_mode="log_additive"),
                 marks=pytest.mark.slow),
    pytest.param("pathx", dict(activation="full_glu", v_init="zoh_lecun", prenorm=False,
                               remat=True), marks=pytest.mark.slow),
])
def test_every_parameter_gets_a_nonzero_gradient(task, overrides):
  model = build(task, **overrides)
  x, lengths = batch_for(task)
  labels = jnp.arange(3) % TASKS[task][0]
  _, grads = loss_and_grads(model, x, lengths, labels)
  flat = nnx.to_flat_state(grads)
  assert len(flat) == len(nnx.to_flat_state(nnx.state(model, nnx.Param)))
  dead = ["/".join(map(str, path)) for path, leaf in flat if not float(jnp.abs(leaf[...]).max()) > 0]
  assert not dead


@pytest.mark.parametrize("overrides", [
    dict(),  # S5 block, BatchNorm over real tokens, half-GLU, LION-S with vector decays
    pytest.param(dict(block="transformer", norm="layer", decay="fixed", decay_shape="scalar",
                      key_dim=3), marks=pytest.mark.slow),  # ~10 s more
])
def test_one_layer_gradients_equal_finite_differences_in_float64(overrides):
  """Reverse-mode gradients of every parameter of a one-layer encoder (embedding, norm, mixer with
  its decays, activation block) against central finite differences along random directions."""
  with jax.enable_x64(True):
    config = preset("listops", d_model=8, num_heads=2, num_layers=1, form="attention",
                    v_init="lecun", dtype="float64", **overrides)
    encoder = LionEncoder(config, vocab_size=16, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(encoder, nnx.Param, ...)
    to_f64 = lambda tree: jax.tree.map(
        lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)
    params, rest = to_f64(params), to_f64(rest)
    tokens = jax.random.randint(jax.random.key(1), (2, 11), 1, 16)
    mask = jnp.arange(11) < jnp.array([[11], [7]])
    weights = jax.random.normal(jax.random.key(2), (2, 11, 8), jnp.float64)

    def loss(params):
      # A fresh copy per call: BatchNorm updates its running averages in train mode.
      model = nnx.merge(graphdef, params, jax.tree.map(jnp.copy, rest))
      out = model(tokens, mask)  # [B, L, M], zero at padding
      assert out.dtype == jnp.float64
      return jnp.sum(jnp.sin(3.0 * out) * weights)

    jax.test_util.check_grads(jax.jit(loss), (params,), order=1, modes=["rev"])


def test_train_and_eval_modes_under_jit():
  model = build("text")  # dropout 0.1
  x, lengths = batch_for("text")
  run = nnx.jit(lambda m, x, n: m(x, n))
  first, second = run(model, x, lengths), run(model, x, lengths)
  assert not np.allclose(first, second)  # new dropout masks (and updated running averages)
  stats = nnx.state(model, nnx.BatchStat)
  model.eval()
  assert_trees_close(run(model, x, lengths), run(model, x, lengths), rtol=0, atol=0)
  assert_trees_close(stats, nnx.state(model, nnx.BatchStat), rtol=0, atol=0)


def test_remat_gives_the_same_loss_and_gradients():
  x, lengths = batch_for("listops")
  labels = jnp.arange(3) % TASKS["listops"][0]
  plain, remat = build("listops"), build("listops", remat=True)
  assert_trees_close(nnx.state(plain, nnx.Param), nnx.state(remat, nnx.Param), rtol=0, atol=0)
  assert_trees_close(loss_and_grads(plain, x, lengths, labels),
                     loss_and_grads(remat, x, lengths, labels))


def test_parameter_counts():
  config = preset("listops")
  m, layers = config.d_model, config.num_layers
  mixer = 5 * m * m + 2 * m + m  # q, k, v, gate (+bias), out (+bias); decay_base [H, V]
  layer = mixer + 2 * m + m * m + m  # BatchNorm, one GLU Dense
  expected = 16 * m + layers * layer + m * 10 + 10  # embedding, blocks, head
  io = param_counts.TASK_IO["listops"]
  assert param_counts.lion_param_count(config, io) == expected == 795_914
  assert param_counts.s5_param_count(config, io) == 188_490  # hand-checked from S5's layers
  model = build("listops")
  assert count_params(model) == param_counts.lion_param_count(model.config, io)


def _xla_flops_per_block_and_token(config, length=128):
  """XLA's count for one more block, per token: a 2-block forward less a 1-block forward."""
  def flops(layers):
    model = LraClassifier(config.replace(num_layers=layers), num_classes=10, vocab_size=16,
                          rngs=nnx.Rngs(0))
    model.eval()
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    tokens = jax.random.randint(jax.random.key(0), (1, length), 1, 16)
    forward = lambda p: nnx.merge(graph, p, rest)(tokens, jnp.full((1,), length))
    return jax.jit(forward).lower(params).compile().cost_analysis()["flops"]
  return (flops(2) - flops(1)) / length


# make test: LION-LIT; make test-all adds S5 and LION-S.
@pytest.mark.parametrize("overrides,low,high", [
    # XLA counts a complex product a little lower; chunk_size back at its default (LION's only)
    pytest.param(dict(mixer="s5", ssm_size=16, chunk_size=ModelConfig().chunk_size), 0.93, 1.03,
                 marks=pytest.mark.slow),
    (dict(num_heads=2, chunk_size=16, decay="lit"), 0.97, 1.07),  # products, and a few norms
    # + the steep-chunk slots recomputed on every call, and the fallback planned beside them
    pytest.param(dict(num_heads=2, chunk_size=16, decay="selective"), 1.0, 2.5,
                 marks=pytest.mark.slow),
])
def test_the_arithmetic_count_is_what_xla_counts(overrides, low, high):
  """`bench/probes/arithmetic.py` counts LION's and S5's operations per token from the config
  (docs/benchmarks.md §12 rests on it): XLA's own count of a block agrees where the block is
  only products, and exceeds it where LION plans work beside the products."""
  config = preset("listops", d_model=32, **overrides)
  ratio = _xla_flops_per_block_and_token(config) / arithmetic.block_flops(config).total
  assert low <= ratio <= high


def test_the_arithmetic_table_states_the_listops_ratio_and_names_unknown_presets(capsys):
  arithmetic.main(["--tasks", "listops"])
  assert "| listops | 196,608 | 172,032 | 368,640 | 45,440 | 8.1x |" in capsys.readouterr().out
  with pytest.raises(SystemExit, match="--tasks lisops: no such preset; choose from listops"):
    arithmetic.main(["--tasks", "lisops"])


def test_the_arithmetic_count_refuses_what_it_does_not_count():
  for config, field in ((preset("listops", form="attention"), "model.form"),
                        (preset("image", scan_order="snake"), "model.form"),
                        (preset("listops", mixer="softmax", chunk_size=ModelConfig().chunk_size),
                         "model.mixer")):
    with pytest.raises(ValueError, match=field):
      arithmetic.block_flops(config)


def test_bfloat16_compute_keeps_float32_parameters_and_logits():
  x, lengths = batch_for("listops")
  full, half = build("listops", v_init="lecun"), build("listops", v_init="lecun", dtype="bfloat16")
  assert_trees_close(nnx.state(full, nnx.Param), nnx.state(half, nnx.Param), rtol=0, atol=0)
  (reference, _), (logits, _) = forward(full, x, lengths), forward(half, x, lengths)
  assert logits.dtype == jnp.float32
  np.testing.assert_allclose(logits, reference, atol=0.05 * float(jnp.abs(reference).max()))


def test_empty_rows_are_inert_in_train_mode():
  # A trainer may fill a short final batch with length-0 rows: they must not move BatchNorm
  # statistics or other examples' logits, and their own logits must stay finite.
  model = build("listops", v_init="lecun")
  x, lengths = batch_for("listops")
  filler = jax.random.randint(jax.random.key(9), (2, x.shape[1]), 0, 16)
  reference = forward(nnx.clone(model), x, lengths)
  logits, stats = forward(model, jnp.concatenate([x, filler]),
                          jnp.concatenate([lengths, jnp.zeros(2, int)]))
  assert np.all(np.isfinite(logits))
  assert_trees_close((logits[:3], stats), reference)


# make test: LION-D (blind); make test-all adds LION-LIT, LION-S in either convention and S5.
@pytest.mark.parametrize("fields, blind", [
    pytest.param(dict(decay="lit"), True, marks=pytest.mark.slow),  # LION-D's special case
    (dict(decay="fixed"), True),
    pytest.param(dict(decay="selective", convention="code"), True, marks=pytest.mark.slow),
    pytest.param(dict(decay="selective"), False, marks=pytest.mark.slow),
    # chunk_size back at its default: build() sets 8, a LION field S5 rejects.
    pytest.param(dict(mixer="s5", ssm_size=8, ssm_blocks=2, chunk_size=64), False,
                 marks=pytest.mark.slow),
], ids=["lion_lit", "lion_d", "lion_s_code_convention", "lion_s", "s5"])
def test_without_positions_a_mask_of_distance_alone_cannot_tell_a_sequence_from_its_reverse(
    fields, blind):
  # Reversing the input reverses every layer's outputs when the mask is λ^|i−j| (or any mask
  # that reads the same both ways), and mean pooling then gives identical logits: no token
  # can tell left from right, as ListOps' brackets need. positional="auto" adds positions
  # exactly to those models.
  lion_fields = {} if fields.get("mixer") == "s5" else dict(v_init="lecun")
  model = build("listops", positional="none", **lion_fields, **fields)
  assert model.config.direction_blind == blind
  assert build("listops", **fields).config.position_encoding == (
      "sinusoidal" if blind else "none")
  model.eval()
  x = jax.random.randint(jax.random.key(3), (4, 24), 1, TASKS["listops"][1])
  lengths = jnp.full((4,), 24)
  run = nnx.jit(lambda model, x: model(x, lengths))  # one compile, not one per operation
  logits, reversed_logits = run(model, x), run(model, x[:, ::-1])
  difference = float(jnp.max(jnp.abs(logits - reversed_logits)))
  scale = float(jnp.max(jnp.abs(logits)))
  if blind:
    assert difference <= 1e-5 * scale
  else:
    assert difference > 1e-3 * scale
  with_positions = build("listops", positional="sinusoidal", **lion_fields, **fields)
  with_positions.eval()
  assert float(jnp.max(jnp.abs(run(with_positions, x)
                               - run(with_positions, x[:, ::-1])))) > 1e-3 * scale


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64"])
def test_the_gradient_barrier_passes_values_and_gradients_exactly(dtype):
  """The identity both ways in each compute dtype (its loop counts in the gradient's dtype),
  also when the first entry is NaN (which skips its loop)."""
  with jax.enable_x64(dtype == "float64"):
    x = jax.random.normal(jax.random.key(0), (3, 5, 4), dtype)
    weights = jax.random.normal(jax.random.key(1), x.shape, dtype)
    for cotangent in (weights, weights.at[0, 0, 0].set(jnp.nan)):
      value, pull = jax.vjp(jax.jit(barrier.gradient_barrier), x)
      (gradient,) = pull(cotangent)
      assert value.dtype == gradient.dtype == jnp.dtype(dtype)
      exact = lambda a, b: np.testing.assert_array_equal(np.asarray(a, np.float64),
                                                         np.asarray(b, np.float64))  # NaN == NaN
      exact(value, x)
      exact(gradient, cotangent)


def test_a_gradient_of_a_gradient_passes_the_barrier():
  """Reverse mode over reverse mode (a gradient penalty): the barrier's loop, which JAX cannot
  reverse, declares its tangent linear, so the second gradient is the one without it."""
  x = jax.random.normal(jax.random.key(0), (3, 4))
  def penalty(barrier):
    inner = jax.grad(lambda y: jnp.sum(jnp.sin(barrier(y)) ** 2))
    return jax.jit(jax.grad(lambda y: jnp.sum(inner(y) ** 2)))(x)
  np.testing.assert_array_equal(penalty(barrier.gradient_barrier), penalty(lambda y: y))


@pytest.mark.parametrize("baseline", [
    dict(mixer="s5", ssm_size=16, ssm_blocks=2),
    pytest.param(dict(mixer="softmax", block="transformer", norm="layer"),
                 marks=pytest.mark.slow)], ids=["s5", "transformer"])
def test_the_encoder_keeps_a_gradient_barrier_between_blocks_in_the_compiled_gradient(
    baseline, monkeypatch):
  """One loop more per block after the first in XLA:CPU's compiled gradient than without the
  barrier: the barrier that stops XLA:CPU fusing the residual stream's gradient into every
  earlier layer (3x the S5 step when it did) is not removed as a loop that does nothing, by JAX
  or XLA, as a first version of it was."""
  layers = 3
  config = ModelConfig(d_model=16, num_layers=layers, num_heads=2, **baseline)
  model = LraClassifier(config, num_classes=5, vocab_size=16, rngs=nnx.Rngs(0))
  model.eval()  # BatchNorm's running statistics: nothing to update under jax.grad
  tokens = jax.random.randint(jax.random.key(3), (2, 12), 1, 16)
  graph, params, rest = nnx.split(model, nnx.Param, ...)
  loss = lambda params: jnp.sum(nnx.merge(graph, params, rest)(tokens, jnp.array([12, 7])) ** 2)
  loops = lambda: jax.jit(jax.grad(loss)).lower(params).compile().as_text().count(" while(")
  with_barrier = loops()
  monkeypatch.setattr(models, "gradient_barrier", lambda x: x)
  assert with_barrier - loops() == layers - 1


def test_lions_mixer_keeps_a_gradient_barrier_on_each_projection_in_the_compiled_gradient(
    monkeypatch):
  """Three loops more (q, k, v) in XLA:CPU's compiled gradient of a LION mixer than without its
  barriers, which keep each projection's gradient one array instead of a transposing fusion per
  weight gradient (about 10% of the ListOps preset's step); values and gradients unchanged."""
  config = ModelConfig(d_model=16, num_layers=1, num_heads=2, chunk_size=4, decay="selective")
  graph, params, rest = nnx.split(LionMixer(config, rngs=nnx.Rngs(0)), nnx.Param, ...)
  x = jax.random.normal(jax.random.key(4), (2, 12, 16))
  loss = lambda params: jnp.sum(nnx.merge(graph, params, rest)(x) ** 2)
  gradient = jax.jit(jax.grad(loss))
  loops = lambda: gradient.lower(params).compile().as_text().count(" while(")
  with_barrier, expected = loops(), gradient(params)
  monkeypatch.setattr(mixer_module, "gradient_barrier", lambda x: x)
  gradient = jax.jit(jax.grad(loss))
  assert with_barrier - loops() == 3
  for got, want in zip(jax.tree.leaves(expected), jax.tree.leaves(gradient(params))):
    np.testing.assert_array_equal(got, want)
