"""The functional NNX training loop's pieces: state, pure step functions, sharding.

    model, optimizer -> nnx.split((model, optimizer)) once -> (graphdef, state)
    train_step(state, batch) -> (state, sums)    jax.jit, state donated
    eval_step(model_state, batch) -> sums        jax.jit, one per evaluation form

The model's mode lives in its graphdef (dropout and BatchNorm flags are static), so
train and eval each get their own graphdef, split once; both share the same weights.
Batches are sharded over a (`data`, `seq`) mesh of every device of every process, the
batch axis over `data` and the sequence axis over `seq` (context parallelism, used by
the LION layers through `lion_attention(sequence_axis="seq")`), and the state is
replicated, so the same code runs on one CPU, many devices or many hosts (docs/multi_device.md). The steps are traced with
the mesh as the current mesh; everything outside the attention keeps its global meaning
and XLA partitions it, so BatchNorm statistics, pooling and the loss do not depend on
the mesh.
Notation: B batch, L length, C classes.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lion_jax.config import ModelConfig
from lion_jax.nn.models import LraClassifier, count_params
from lion_jax.options import ConfigError


# How often each step function has been traced. A new input shape or dtype makes
# `jax.jit` trace and compile again, so with the loop's fixed shardings this counts the
# step's compilations (results.json reports them) using public behaviour only: the
# increment is a Python side effect, which runs while tracing, never in the compiled program.
trace_counts: collections.Counter[str] = collections.Counter()


@dataclasses.dataclass
class TrainSetup:
  """What the loop needs: the graphdefs, the initial state, shardings and counts.

  Attributes:
    train_graphdef: (model, optimizer) in train mode.
    eval_graphdef: the model alone in eval mode.
    state: the split (model, optimizer) state; `state[0]` is the model's.
    mesh: the `data` mesh.
    num_params: trainable scalars.
  """

  train_graphdef: Any
  eval_graphdef: Any
  state: Any
  mesh: Mesh
  num_params: int


DATA_AXIS, SEQUENCE_AXIS = "data", "seq"


def check_mesh_shape(shape) -> tuple[int, int]:
  """(data, seq) from `config.mesh`; data may be -1 (the devices `seq` leaves).

  Raises:
    ValueError: not two integers with seq >= 1 and data >= 1 or -1, naming config.mesh.
  """
  try:
    data, seq = (int(n) for n in shape)
  except (TypeError, ValueError):
    data = seq = 0
  if seq < 1 or not (data >= 1 or data == -1):
    raise ConfigError(f"config.mesh={shape!r} must be (data, seq): seq >= 1 devices per sequence "
                     "and data >= 1 (or -1: all other devices), e.g. --config.mesh='(-1, 2)'.")
  return data, seq


def make_mesh(shape=(-1, 1)) -> Mesh:
  """A (`data`, `seq`) mesh over every device of every process.

  `seq` is the slower-varying axis of `jax.devices()` (process-major), so a sequence is
  split across processes before a batch is: context parallelism sends a few K×E states
  per layer, data parallelism all-reduces every gradient, which is better kept within a host.

  Raises:
    ValueError: `shape` (config.mesh) does not use exactly the available devices.
  """
  data, seq = check_mesh_shape(shape)
  devices = np.asarray(jax.devices())
  hint = f"e.g. --config.mesh='(-1, s)' with s dividing {devices.size}."
  if data == -1 and devices.size % seq:
    raise ConfigError(f"config.mesh={tuple(shape)!r}: seq={seq} does not divide the "
                      f"{devices.size} devices; {hint}")
  if data == -1:
    data = devices.size // seq
  if data * seq != devices.size:
    raise ConfigError(f"config.mesh={tuple(shape)!r} needs data × seq = {data * seq} devices "
                      f"(there are {devices.size}); {hint}")
  return Mesh(devices.reshape(seq, data).T, (DATA_AXIS, SEQUENCE_AXIS))


def _under_mesh(fn, mesh: Mesh):
  """`fn` traced with `mesh` as the current mesh (where `lion_attention` finds `seq`)."""
  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)
  return traced


def create_train_setup(model_config: ModelConfig, *, num_classes: int, vocab_size: int,
                       dual_input: bool, tx: optax.GradientTransformation, seed: int,
                       mesh: Mesh) -> TrainSetup:
  """Builds the model and optimizer, splits them once and replicates the state on `mesh`.

  The state is initialised inside `jax.jit` with a replicated output sharding, so every
  process computes its own devices' copies from the seed: nothing is transferred from a
  host, which `jax.device_put` cannot do onto devices of other processes.
  """
  def build():
    model = LraClassifier(model_config, num_classes=num_classes, vocab_size=vocab_size,
                          dual_input=dual_input, rngs=nnx.Rngs(seed))
    return model, nnx.Optimizer(model, tx, wrt=nnx.Param)

  model, optimizer = nnx.eval_shape(build)  # shapes only: the graphdefs and the count
  model.eval()
  eval_graphdef, _ = nnx.split(model)
  model.train()
  train_graphdef, _ = nnx.split((model, optimizer))
  replicated = NamedSharding(mesh, PartitionSpec())
  state = jax.jit(lambda: nnx.split(build())[1], out_shardings=replicated)()
  return TrainSetup(train_graphdef, eval_graphdef, state, mesh, count_params(model))


def _sums(logits, labels, mask) -> dict[str, jax.Array]:
  """Summed loss and correct predictions over real examples, and their count."""
  losses = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)  # [B]
  weights = mask.astype(jnp.float32)  # [B]
  correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32)  # [B]
  return {"loss_sum": jnp.sum(losses * weights), "correct_sum": jnp.sum(correct * weights),
          "count": jnp.sum(weights)}


def classify(model, batch: dict[str, jax.Array], form: str | None = None):
  """[B, C] logits of a padded batch ("lengths") or a packed one ("segment_ids")."""
  if "segment_ids" in batch:
    return model.packed(batch["inputs"], batch["segment_ids"], batch["positions"],
                        batch["example_rows"], batch["example_ids"], form=form)
  return model(batch["inputs"], batch["lengths"], form=form)


def train_step(graphdef, state, batch: dict[str, jax.Array]):
  """One AdamW step; pure, so `jax.jit` with `donate_argnums=0` can reuse the buffers.

  Args:
    graphdef: the train-mode graphdef of (model, optimizer) (bound with functools.partial).
    state: the split state; the dropout RNG counter inside advances every step.
    batch: "inputs" [B, L] or [B, 2, L], "lengths", "labels" [B], "example_mask" [B]; or a
      packed batch (`lra.data.packing`): "inputs", "segment_ids", "positions" [R, L'],
      "example_rows", "example_ids", "labels", "example_mask" [B].

  Returns:
    (new state, {"loss_sum", "correct_sum", "count", "grad_norm", "param_norm"}).
  """
  trace_counts["train_step"] += 1
  model, optimizer = nnx.merge(graphdef, state)

  def loss_fn(model):
    logits = classify(model, batch)  # [B, C]
    sums = _sums(logits, batch["labels"], batch["example_mask"])
    return sums["loss_sum"] / jnp.maximum(sums["count"], 1.0), sums

  grads, sums = nnx.grad(loss_fn, has_aux=True)(model)
  optimizer.update(model, grads)
  params = nnx.state(model, nnx.Param)
  sums = {**sums, "grad_norm": optax.tree.norm(grads), "param_norm": optax.tree.norm(params)}
  return nnx.state((model, optimizer)), sums


def eval_step(graphdef, model_state, batch: dict[str, jax.Array], *, form: str):
  """Summed loss/accuracy of the eval-mode model in `form` (padded rows masked out)."""
  trace_counts["eval_step"] += 1
  model = nnx.merge(graphdef, model_state)
  logits = model(batch["inputs"], batch["lengths"], form=form)  # [B, C]
  return _sums(logits, batch["labels"], batch["example_mask"])


def jit_train_step(setup: TrainSetup):
  """The jitted train step: state donated, replicated in and out; compiled once per shape."""
  replicated = NamedSharding(setup.mesh, PartitionSpec())
  return jax.jit(_under_mesh(functools.partial(train_step, setup.train_graphdef), setup.mesh),
                 donate_argnums=0, out_shardings=(replicated, replicated))


def jit_eval_step(setup: TrainSetup, form: str):
  """The jitted eval step for one form of the model (the weights are not touched)."""
  replicated = NamedSharding(setup.mesh, PartitionSpec())
  return jax.jit(_under_mesh(functools.partial(eval_step, setup.eval_graphdef, form=form),
                             setup.mesh), out_shardings=replicated)


def shard_batch(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Puts a host batch on the mesh, split along the batch axis and the sequence axis.

  Every process holds the same global batch (the loaders are built and seeded
  identically), and each process copies only its own devices' pieces to them, so the
  same call is correct on one device, many devices or many processes. "inputs" ([B, L] or
  [B, 2, L]) has its last axis split over `seq` when `seq` divides L; otherwise it is only
  split over the batch, and each LION layer pads its sequence to a multiple of `seq`.
  """
  size, seq = mesh.shape[DATA_AXIS], mesh.shape.get(SEQUENCE_AXIS, 1)
  out = {}
  for key, value in batch.items():
    if value.shape[0] % size:
      raise ConfigError(f"batch size {value.shape[0]} is not divisible by the {size} data-parallel "
                       "devices; set --config.batch_size (and eval_batch_size) to a multiple of it")
    spec = [DATA_AXIS] + [None] * (value.ndim - 1)
    if key == "inputs" and seq > 1 and value.shape[-1] % seq == 0:
      spec[-1] = SEQUENCE_AXIS
    sharding = NamedSharding(mesh, PartitionSpec(*spec))
    out[key] = jax.make_array_from_callback(value.shape, sharding, lambda index, v=value: v[index])
  return out


def model_state(state):
  """The model's part of the split (model, optimizer) state."""
  return state[0]
