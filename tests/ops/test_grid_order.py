"""The specification of `grid_lion_attention` (LION♮, LION paper §C.11, Figure 9).

Every form equals the float64 definition in `tests/reference.py`, which places each token in the
row and column snake by closed formulas and builds both masks entry by entry at raster rows and
columns (it shares no code with `lion_jax`, the permutations included).
"""

import functools

import jax
import jax.numpy as jnp
import jax.test_util
import numpy as np
import pytest

from lion_jax.ops import grid_order
from lion_jax.ops.grid_order import grid_lion_attention
from tests.reference import (reference_grid_lion, reference_grid_mask, reference_lion,
                             reference_mask)

FORMS = ("attention", "rnn", "scan", "chunk", "chunk_scan")
DECAY_KINDS = ("lit", "fixed_head", "fixed_channel", "selective", "selective_vector")
GRID = (3, 5)  # odd sides and H ≠ W: both snakes end in the corner opposite the start
CHUNK = 4  # L = 15 spans four chunks, the last one partial
B, H, K, V = 2, 2, 3, 4
OPTIONS = [(c, n) for c in ("symmetric", "code") for n in ("after", "before", "none")]


def make_inputs(grid, decay_kind, seed=0, low=0.5, high=0.99, batch=B):
  """Non-negative q, k, any v, one independent decay per snake, and a key mask (row 1 only)."""
  length = grid[0] * grid[1]
  rng = np.random.default_rng(seed)
  q = rng.uniform(0.05, 1.0, (batch, length, H, K))
  k = rng.uniform(0.05, 1.0, (batch, length, H, K))
  v = rng.normal(size=(batch, length, H, V))
  shapes = {"lit": None, "fixed_head": (H,), "fixed_channel": (H, V),
            "selective": (batch, length, H), "selective_vector": (batch, length, H, V)}
  shape = shapes[decay_kind]
  log_decays = tuple(None if shape is None else np.log(rng.uniform(low, high, shape))
                     for _ in range(2))
  key_mask = rng.uniform(size=(batch, length)) > 0.3
  key_mask[0] = True  # row 0 keeps every key, row 1 drops some
  key_mask[:, 0] = True
  return q, k, v, log_decays, key_mask


def scans_of(scan_order, log_decays):
  return log_decays[:1] if scan_order == "raster" else log_decays


@functools.lru_cache(maxsize=None)
def every_option(form, scan_order, grid):
  """All conventions × normalisations of one form and order in one jitted function."""
  def run(q, k, v, log_decays, key_mask):
    return [grid_lion_attention(q, k, v, log_decays, grid=grid, scan_order=scan_order, form=form,
                                convention=convention, normalize=normalize, key_mask=key_mask,
                                chunk_size=CHUNK)
            for convention, normalize in OPTIONS]
  return jax.jit(run)



def fast_first(cases, fast, unpack=False):
  """`cases` as pytest params, those not in `fast` marked `slow` (`make test-all` runs them):
  `make test` keeps one representative per test, on the LRA setting (vector decays).
  `unpack`: each case is a tuple of several parametrized arguments."""
  return [pytest.param(*(case if unpack else (case,)),
                       marks=() if case in fast else pytest.mark.slow)
          for case in cases]

@functools.lru_cache(maxsize=None)
def definition_outputs(decay_kind, scan_order, grid):
  q, k, v, log_decays, key_mask = make_inputs(grid, decay_kind)
  log_decays = scans_of(scan_order, log_decays)
  expected = [reference_grid_lion(q, k, v, log_decays, grid, scan_order, convention=convention,
                                  normalize=normalize, key_mask=key_mask)
              for convention, normalize in OPTIONS]
  return (q, k, v, log_decays, key_mask), expected


def test_orders_visit_the_grid_as_drawn():
  """3×4 grid, raster indices 0..11 row by row."""
  np.testing.assert_array_equal(grid_order.row_snake_order(3, 4),
                                [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11])
  np.testing.assert_array_equal(grid_order.column_snake_order(3, 4),
                                [0, 4, 8, 9, 5, 1, 2, 6, 10, 11, 7, 3])
  np.testing.assert_array_equal(grid_order.raster_order(3, 4), np.arange(12))


@pytest.mark.parametrize("grid", [(3, 5), (4, 4), (1, 6), (6, 1), (5, 2)])
@pytest.mark.parametrize("scan", [grid_order.ROW_SNAKE, grid_order.COLUMN_SNAKE],
                         ids=["row_snake", "column_snake"])
def test_moving_tokens_into_an_order_is_indexing_by_it(grid, scan):
  """`into` is x[:, order] and `out_of` undoes it, for trailing axes of any rank."""
  height, width = grid
  x = np.random.default_rng(0).normal(size=(2, height * width, 3, 2))  # [B, L, H, V]
  x = x.astype(np.float32)  # compared bit for bit: no dtype change on the way in
  into = scan.into(jnp.asarray(x), height, width)
  np.testing.assert_array_equal(into, x[:, scan.order(height, width)])
  np.testing.assert_array_equal(scan.out_of(into, height, width), x)


def test_reference_masks_are_the_products_along_each_snake():
  """Guards the reference: 2×2 grid, one λ per token; the row snake visits 0 1 3 2 and the
  column snake 0 2 3 1, so e.g. M_row[0, 2] = λ₁λ₃λ₂ but M_col[0, 2] = λ₂ (symmetric)."""
  lam = np.array([[0.9], [0.8], [0.7], [0.6]])  # [L, 1] at raster positions 0..3
  l0, l1, l2, l3 = lam[:, 0]
  row = np.array([[1, l1, l1 * l3 * l2, l1 * l3],
                  [l1, 1, l3 * l2, l3],
                  [l1 * l3 * l2, l3 * l2, 1, l2],
                  [l1 * l3, l3, l2, 1]])
  col = np.array([[1, l2 * l3 * l1, l2, l2 * l3],
                  [l2 * l3 * l1, 1, l3 * l1, l1],
                  [l2, l3 * l1, 1, l3],
                  [l2 * l3, l1, l3, 1]])
  np.testing.assert_allclose(reference_grid_mask(lam, (2, 2), "row_snake", "symmetric")[..., 0], row)
  np.testing.assert_allclose(reference_grid_mask(lam, (2, 2), "column_snake", "symmetric")[..., 0],
                             col)
  # code convention, below the diagonal of the order: Π_{t=s}^{p-1}, e.g. M_row[2, 0]: places
  # 3 and 0, the tokens at places 0, 1, 2 are 0, 1, 3.
  assert reference_grid_mask(lam, (2, 2), "row_snake", "code")[2, 0, 0] == pytest.approx(l0 * l1 * l3)
  # Raster order is the plain LION mask.
  np.testing.assert_allclose(reference_grid_mask(lam, (2, 2), "raster", "code"),
                             reference_mask(lam, "code"))


# make test: the LRA's vector decays through chunk_scan (the training form) in both orders; every
# decay shape, order and form in make test-all (tests/ops/test_lion_attention.py checks every
# form against the definition in make test).
@pytest.mark.parametrize("decay_kind, scan_order, form", fast_first(
    [(kind, order, form) for kind in DECAY_KINDS for order in ("snake", "snake_outputs")
     for form in FORMS],
    fast=[("selective_vector", order, "chunk_scan") for order in ("snake", "snake_outputs")],
    unpack=True))
def test_every_form_equals_float64_definition(decay_kind, scan_order, form):
  """3×5 grid: every decay shape × convention × normalisation, with and without padded keys."""
  inputs, expected = definition_outputs(decay_kind, scan_order, GRID)
  with jax.enable_x64(True):
    outputs = every_option(form, scan_order, GRID)(*inputs)
  for (convention, normalize), got, want in zip(OPTIONS, outputs, expected):
    assert got.dtype == jnp.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10,
                               err_msg=f"convention={convention} normalize={normalize}")


# make test-all: make test's grid is 3×5 (GRID, above).
@pytest.mark.parametrize("grid, scan_order", fast_first(
    [(grid, order) for grid in [(5, 3), (4, 4), (1, 6), (6, 1)]
     for order in ("snake", "snake_outputs", "raster")], fast=[], unpack=True))
def test_other_grids_equal_the_definition(grid, scan_order):
  """Tall, square and one-row/one-column grids (there one snake is the raster order)."""
  inputs, expected = definition_outputs("selective_vector", scan_order, grid)
  with jax.enable_x64(True):
    outputs = every_option("chunk_scan", scan_order, grid)(*inputs)
  for (convention, normalize), got, want in zip(OPTIONS, outputs, expected):
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10,
                               err_msg=f"{scan_order} {convention} {normalize}")


def test_raster_order_is_lion_attention_and_the_reference_agrees():
  q, k, v, log_decays, key_mask = make_inputs(GRID, "selective")
  expected = reference_lion(q, k, v, log_decays[0], key_mask=key_mask)
  np.testing.assert_allclose(reference_grid_lion(q, k, v, log_decays[:1], GRID, "raster",
                                                 key_mask=key_mask), expected, rtol=1e-12)


def test_the_three_orders_are_different_models():
  """Mask averaging is not output averaging, and neither is the raster mask."""
  _, snake = definition_outputs("selective", "snake", GRID)
  _, outputs = definition_outputs("selective", "snake_outputs", GRID)
  _, raster = definition_outputs("selective", "raster", GRID)
  after = OPTIONS.index(("symmetric", "after"))
  assert np.abs(snake[after] - outputs[after]).max() > 1e-3
  assert np.abs(snake[after] - raster[after]).max() > 1e-2
  # Without a decayed normaliser the two averages coincide (module docstring).
  none = OPTIONS.index(("symmetric", "none"))
  np.testing.assert_allclose(snake[none], outputs[none], rtol=1e-12)


def test_each_snake_uses_its_own_decays():
  """Swapping the two decay sets changes the output: the row snake takes the first."""
  q, k, v, (a_row, a_col), _ = make_inputs(GRID, "fixed_head", low=0.3, high=0.95)
  with jax.enable_x64(True):
    run = jax.jit(lambda decays: grid_lion_attention(q, k, v, decays, grid=GRID, form="attention"))
    assert np.abs(run((a_row, a_col)) - run((a_col, a_row))).max() > 1e-3


# make test: chunk_scan (the training form) in the snake order with the LRA's vector decays; the
# other forms, orders and selective scalar decays in make test-all.
@pytest.mark.parametrize("decay_kind, scan_order, form", fast_first(
    [(kind, order, form) for kind in ("selective_vector", "selective")
     for order in ("snake", "snake_outputs") for form in FORMS[1:]],
    fast=[("selective_vector", "snake", "chunk_scan")], unpack=True))
def test_gradients_match_finite_differences_and_agree_between_forms(decay_kind, scan_order, form):
  """The full form's float64 gradients equal finite differences, and `form`'s equal them."""
  q, k, v, log_decays, key_mask = make_inputs(GRID, decay_kind, seed=3)
  weights = np.random.default_rng(4).normal(size=v.shape)

  def loss(form, q, k, v, a_row, a_col):
    out = grid_lion_attention(q, k, v, (a_row, a_col), grid=GRID, scan_order=scan_order,
                              form=form, key_mask=key_mask, chunk_size=CHUNK)
    return jnp.sum(out * weights)

  with jax.enable_x64(True):
    args = tuple(jnp.asarray(x) for x in (q, k, v, *log_decays))
    jax.test_util.check_grads(jax.jit(functools.partial(loss, "attention")), args, order=1,
                              modes=["rev"])
    expected = jax.jit(jax.grad(functools.partial(loss, "attention"), argnums=range(5)))(*args)
    got = jax.jit(jax.grad(functools.partial(loss, form), argnums=range(5)))(*args)
  for name, g, e in zip("q k v a_row a_col".split(), got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-10, err_msg=f"{form} d/d{name}")


# make test: the snake order; snake_outputs in make test-all.
@pytest.mark.parametrize("scan_order", fast_first(["snake", "snake_outputs"], fast=["snake"]))
def test_padded_keys_stay_out_of_both_orders(scan_order):
  """Whatever sits at a masked key (values, keys, decays aside) changes no output."""
  q, k, v, log_decays, key_mask = make_inputs(GRID, "selective_vector", seed=5)
  rng = np.random.default_rng(6)
  dropped = ~key_mask[..., None, None]
  run = jax.jit(functools.partial(grid_lion_attention, grid=GRID, scan_order=scan_order,
                                  form="chunk_scan", key_mask=key_mask, chunk_size=CHUNK))
  f32 = lambda x: np.asarray(x, np.float32)
  clean = run(f32(q), f32(k), f32(v), tuple(map(f32, log_decays)))
  noisy = run(f32(q), f32(np.where(dropped, rng.uniform(0, 100, k.shape), k)),
              f32(np.where(dropped, rng.normal(0, 100, v.shape), v)), tuple(map(f32, log_decays)))
  np.testing.assert_allclose(noisy, clean, rtol=1e-5, atol=1e-5)


def test_bfloat16_inputs_keep_float32_sums():
  q, k, v, log_decays, key_mask = make_inputs((4, 4), "selective_vector", seed=7)
  bf16 = lambda x: jnp.asarray(x, jnp.bfloat16)
  rounded = [np.asarray(bf16(x), np.float64) for x in (q, k, v)]
  expected = reference_grid_lion(*rounded, log_decays, (4, 4), "snake", key_mask=key_mask)
  got = jax.jit(functools.partial(grid_lion_attention, grid=(4, 4), form="chunk_scan",
                                  key_mask=key_mask, chunk_size=CHUNK))(
      bf16(q), bf16(k), bf16(v), tuple(np.float32(a) for a in log_decays))
  assert got.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=8e-3, atol=8e-3)


def reference_rows_128(q, k, v, log_decays, rows, side):
  """Float64 "snake" output rows on a side×side grid, one head, scalar per-token decays.

  Each scan's mask row is exp(−|C(place i) − C(place j)|) with C the cumulative log-decays in
  the scan's order (symmetric convention), places from the same closed formulas as the reference.
  """
  from tests.reference import snake_place
  length = side * side
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  pixel = np.arange(length)
  num, den = np.zeros((len(rows), v.shape[-1])), np.zeros(len(rows))
  for scan, log_decay in zip(("row_snake", "column_snake"), log_decays):
    place = np.array([snake_place(i // side, i % side, side, side, scan) for i in pixel])
    in_order = np.empty(length)
    in_order[place] = np.asarray(log_decay, np.float64)
    cumulative = np.cumsum(in_order)[place]  # Σ_{t ≤ place(i)} a at raster position i
    for n, i in enumerate(rows):
      weights = (k @ q[i]) * np.exp(-np.abs(cumulative[i] - cumulative))
      num[n] += weights @ v
      den[n] += weights.sum()
  return (num / 2) / (den[:, None] / 2 + 1e-6)


# make test: chunk_scan (the training form); the rnn form in make test-all.
@pytest.mark.parametrize("form", fast_first(["chunk_scan", "rnn"], fast=["chunk_scan"]))
def test_float32_is_stable_on_the_path_x_grid(form):
  """128×128 (L = 16384): float32 rows and finite gradients, LION-S with scalar decays (~4 s)."""
  side = 128
  length = side * side
  rng = np.random.default_rng(8)
  q = rng.uniform(0.05, 1.0, (1, length, 1, 8)).astype(np.float32)
  k = rng.uniform(0.05, 1.0, (1, length, 1, 8)).astype(np.float32)
  v = rng.normal(size=(1, length, 1, 8)).astype(np.float32)
  log_decays = tuple(np.log(rng.uniform(0.5, 0.9999, (1, length, 1))).astype(np.float32)
                     for _ in range(2))
  rows = [0, 1, side, 5000, length - side, length - 1]

  def loss(q, k, v, log_decays):
    out = grid_lion_attention(q, k, v, log_decays, grid=(side, side), form=form)
    return jnp.sum(out ** 2), out

  (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
      q, k, v, log_decays)
  for g in jax.tree.leaves(grads):
    assert np.all(np.isfinite(g))
  expected = reference_rows_128(q[0, :, 0], k[0, :, 0], v[0, :, 0],
                                [a[0, :, 0] for a in log_decays], rows, side)
  np.testing.assert_allclose(np.asarray(out)[0, rows, 0], expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(grid=(4, 4)), r"grid=\(4, 4\) has H·W = 16 cells but the sequence has L = 15"),
    (dict(grid=(3, "five")), r"grid=\(3, 'five'\) must be \(H, W\)"),
    (dict(grid=None), r"scan_order='snake' needs grid=\(H, W\)"),
    (dict(scan_order="hilbert"), r"scan_order='hilbert' is not one of 'raster', 'snake', "
                                 r"'snake_outputs'"),
    (dict(log_decays=(None,)), r"takes log_decays as a list or tuple of 2, one per scan "
                               r"\(row_snake_order, column_snake_order\); got 1 of them"),
    (dict(log_decays=np.zeros(2)), "got a ndarray"),
    (dict(normalize="sometimes"), "normalize='sometimes' is not one of"),
    (dict(key_mask=np.ones((2, 5), bool)), r"key_mask has shape \(2, 5\); expected \[B, L\]"),
])
def test_bad_arguments_say_what_is_expected(kwargs, message):
  q, k, v, _, _ = make_inputs(GRID, "lit")
  arguments = dict(log_decays=(None, None), grid=GRID) | kwargs
  with pytest.raises(ValueError, match=message):
    grid_lion_attention(np.float32(q), np.float32(k), np.float32(v), **arguments)


# --- the model: config fields, the mixer's second decay set, task variants ----------------------


def test_config_choices_are_the_scan_orders():
  from lion_jax.config import CHOICES
  assert CHOICES["scan_order"] == tuple(order.value for order in grid_order.ScanOrder)


def test_config_checks_grid_and_order():
  from lion_jax import ModelConfig
  with pytest.raises(ValueError, match=r"ModelConfig\.scan_order='snake' needs ModelConfig\.grid"):
    ModelConfig(scan_order="snake")
  with pytest.raises(ValueError, match=r"ModelConfig\.grid=\(0, 4\) must be None or \(H, W\)"):
    ModelConfig(grid=(0, 4))
  with pytest.raises(ValueError, match=r"ModelConfig\.scan_order='hilbert' is not one of 'raster', "
                                       r"'snake', 'snake_outputs'"):
    ModelConfig(scan_order="hilbert", grid=(2, 2))
  assert ModelConfig(grid=[4, 8], scan_order="snake").grid == (4, 8)  # e.g. read back from JSON


def snake_model(scan_order="snake", decay="selective", grid=(3, 5), **overrides):
  from flax import nnx
  from lion_jax import LraClassifier, preset
  config = preset("pathfinder", d_model=8, num_heads=2, num_layers=1, chunk_size=4, grid=grid,
                  scan_order=scan_order, decay=decay, v_init="lecun", **overrides)
  return LraClassifier(config, num_classes=2, vocab_size=256, rngs=nnx.Rngs(0))


def param_paths(model):
  from flax import nnx
  return {"/".join(map(str, path)) for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.parametrize("decay", ["selective", "fixed"])
def test_snake_mixer_owns_a_second_decay_set_that_the_optimiser_files_under_decay(decay):
  from lra import optim
  raster, snake = param_paths(snake_model("raster", decay)), param_paths(snake_model("snake", decay))
  column = {"encoder/blocks/0/mixer/column_decay_base"} | (
      {"encoder/blocks/0/mixer/column_decay_gate/kernel",
       "encoder/blocks/0/mixer/column_decay_gate/bias"} if decay == "selective" else
      {"encoder/blocks/0/mixer/column_decay_gate"})  # LION-D's gate logits
  assert snake - raster == column and raster <= snake
  groups = (("decay", "decay"), (r"norm|bias|(^|/)scale$", "no_weight_decay"))  # configs/common.py
  assert {optim.group_of(name, groups) for name in column} == {"decay"}


@pytest.mark.parametrize("scan_order, decay", fast_first(
    [("snake", "selective"), ("snake", "fixed"), ("snake_outputs", "selective")],
    fast=[], unpack=True))
def test_snake_model_gives_the_same_logits_in_every_form_and_gradients_reach_both_decay_sets(
    scan_order, decay):
  import optax
  from flax import nnx
  model = snake_model(scan_order, decay)
  model.eval()
  rng = np.random.default_rng(9)
  x = jnp.asarray(rng.integers(0, 256, (3, 15)))
  lengths = jnp.array([15, 15, 11])  # a padded row: its keys are masked in both snakes
  logits = nnx.jit(lambda m, x, n: {f: m(x, n, form=f) for f in FORMS})(model, x, lengths)
  for form in FORMS[1:]:
    np.testing.assert_allclose(logits[form], logits["attention"], rtol=1e-5, atol=1e-6,
                               err_msg=form)
  raster = snake_model("raster", decay)
  raster.eval()
  assert np.abs(raster(x, lengths) - logits["attention"]).max() > 1e-6

  def loss(m):
    return optax.softmax_cross_entropy_with_integer_labels(m(x, lengths), jnp.array([0, 1, 1])).mean()

  model.train()
  grads = nnx.to_flat_state(nnx.jit(nnx.grad(loss))(model))
  decay_grads = {"/".join(map(str, path)): float(jnp.abs(leaf[...]).max()) for path, leaf in grads
                 if "decay" in "/".join(map(str, path))}
  assert any("column_decay_base" in name for name in decay_grads)
  assert all(size > 0 for size in decay_grads.values()), decay_grads


def test_a_sequence_that_is_not_the_grid_is_a_clear_error():
  model = snake_model(grid=(4, 4))
  with pytest.raises(ValueError, match=r"grid=\(4, 4\) has H·W = 16 cells but the sequence has L = 15"):
    model(jnp.zeros((1, 15), jnp.int32), jnp.array([15]))


@pytest.mark.parametrize("task, grid", [("image", (32, 32)), ("pathfinder", (32, 32)),
                                        ("pathx", (128, 128))])
def test_image_tasks_have_snake_variants_that_know_their_grid(task, grid):
  import importlib
  from lra import train
  get_config = importlib.import_module(f"configs.{task}").get_config
  for variant, decay in (("lion_s_snake", "selective"), ("lion_d_snake", "fixed")):
    model = train.check_config(get_config(variant))
    assert (model.grid, model.scan_order, model.decay) == (grid, "snake", decay)
  assert train.check_config(get_config("lion_s")).scan_order == "raster"


def test_sequence_tasks_have_no_snake_variants():
  from configs import listops
  with pytest.raises(ValueError, match="unknown variant 'lion_s_snake'"):
    listops.get_config("lion_s_snake")


def test_snake_config_round_trips_through_config_json(tmp_path):
  import json
  from configs import image
  from configs import workdir as workdir_config
  from lra import train
  config = image.get_config("lion_d_snake,runlocal")
  (tmp_path / "config.json").write_text(config.to_json_best_effort())
  restored = train.check_config(workdir_config.get_config(str(tmp_path)))
  assert (restored.grid, restored.scan_order) == ((32, 32), "snake")
  assert json.loads(config.to_json_best_effort())["model"]["grid"] == [32, 32]


def test_scan_orders_picture_is_drawn(tmp_path):
  """`python -m lra.data scan-orders` (docs/scan_orders.png): three panels of the 8×8 grid."""
  from PIL import Image
  from lra.data.__main__ import main
  main(["scan-orders", "--out", str(tmp_path / "orders.png"), "--size", "4", "--cell", "20"])
  width, height = Image.open(tmp_path / "orders.png").size
  assert width > 3 * 4 * 20 and height > 4 * 20
