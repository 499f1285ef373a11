"""Joining a multi-process (multi-host) JAX job, with bounded waits and clear failures.

    cluster = distributed.ClusterSpec.from_env(os.environ)   # None: a one-process run
    distributed.initialize(cluster, init_timeout_s=300, heartbeat_timeout_s=100)
    with distributed.stop_job_on_error(on_error=record):
      ...                                                  # the training

A job is described either by JAX's own variables (`JAX_COORDINATOR_ADDRESS`,
`JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`) or by an Open MPI / SLURM launch of more than
one process, whose variables `jax.distributed.initialize()` reads by itself. docs/multi_device.md
has the commands.

JAX reports an unreachable coordinator by aborting the process after its timeout, with
a gRPC status as the only message; a process that is not the coordinator therefore
first waits, for at most the timeout, until the coordinator's port accepts connections,
and otherwise raises `ClusterError` naming the address and what to check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping

import jax

from lra import preemption

# Launchers whose environment jax.distributed.initialize() reads by itself: variable -> world size.
LAUNCHER_SIZE_VARIABLES = {"OMPI_COMM_WORLD_SIZE": "Open MPI", "SLURM_NTASKS": "SLURM"}
JAX_VARIABLES = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


class ClusterError(RuntimeError):
  """The job's environment is inconsistent or its coordinator cannot be reached."""


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
  """Where this process stands in a job.

  Attributes:
    coordinator: "host:port" of process 0's coordination service; None when a launcher
      (Open MPI, SLURM) supplies it to JAX.
    num_processes: processes in the job (None: from the launcher).
    process_id: this process, 0 <= process_id < num_processes (None: from the launcher).
    launcher: "JAX_* variables", "Open MPI" or "SLURM".
  """

  coordinator: str | None
  num_processes: int | None
  process_id: int | None
  launcher: str

  @classmethod
  def from_env(cls, env: Mapping[str, str]) -> ClusterSpec | None:
    """The job described by `env`, or None for a one-process run.

    Raises:
      ClusterError: naming the variable that is missing or malformed.
    """
    if env.get("JAX_COORDINATOR_ADDRESS"):
      missing = [name for name in JAX_VARIABLES if not env.get(name)]
      if missing:
        raise ClusterError(f"JAX_COORDINATOR_ADDRESS is set but {', '.join(missing)} is not; "
                           "set all three on every process (docs/multi_device.md)")
      address = env["JAX_COORDINATOR_ADDRESS"]
      host, _, port = address.rpartition(":")
      try:
        num_processes, process_id = int(env["JAX_NUM_PROCESSES"]), int(env["JAX_PROCESS_ID"])
        int(port)
      except ValueError as error:
        raise ClusterError(f"JAX_COORDINATOR_ADDRESS={address!r}, JAX_NUM_PROCESSES and "
                           "JAX_PROCESS_ID must be host:port and integers") from error
      if not host or not 0 <= process_id < num_processes:
        raise ClusterError(f"need JAX_COORDINATOR_ADDRESS=host:port and 0 <= JAX_PROCESS_ID < "
                           f"JAX_NUM_PROCESSES, got {address!r}, {process_id}, {num_processes}")
      return cls(address, num_processes, process_id, "JAX_* variables")
    for variable, launcher in LAUNCHER_SIZE_VARIABLES.items():
      if int(env.get(variable, "1")) > 1:
        return cls(None, None, None, launcher)
    return None


def wait_for_coordinator(address: str, timeout_s: float) -> None:
  """Returns once `address` ("host:port") accepts TCP connections.

  Raises:
    ClusterError: not reachable within `timeout_s` seconds.
  """
  host, _, port = address.rpartition(":")
  deadline = time.monotonic() + timeout_s
  while True:
    try:
      with socket.create_connection((host.strip("[]"), int(port)), timeout=2.0):
        return
    except OSError as error:
      if time.monotonic() >= deadline:
        raise ClusterError(
            f"cannot reach the coordinator at {address} (JAX_COORDINATOR_ADDRESS) within "
            f"{timeout_s:g} s: {error}. Start process 0 (JAX_PROCESS_ID=0) on that host, check "
            "that every process has the same address and that the port is open, or raise "
            "--distributed_init_timeout.") from error
      time.sleep(0.5)


def initialize(cluster: ClusterSpec | None, *, init_timeout_s: int, heartbeat_timeout_s: int) -> None:
  """Joins the job (nothing for a one-process run); call before any other use of JAX.

  Args:
    cluster: from `ClusterSpec.from_env`.
    init_timeout_s: how long to wait for the coordinator and every process to join.
    heartbeat_timeout_s: a process silent this long is declared dead and the job stops.

  Raises:
    ClusterError: the coordinator cannot be reached (not for launcher-supplied jobs,
      where JAX itself aborts after `init_timeout_s` with DEADLINE_EXCEEDED).
  """
  if cluster is None:
    return
  logging.info("joining a multi-process job (from %s; coordinator %s, process %s of %s); "
               "waiting up to %d s for all processes", cluster.launcher, cluster.coordinator or "from the launcher",
               cluster.process_id, cluster.num_processes, init_timeout_s)
  start = time.monotonic()
  if cluster.coordinator is not None and cluster.process_id != 0:
    wait_for_coordinator(cluster.coordinator, init_timeout_s)
  remaining = max(int(init_timeout_s - (time.monotonic() - start)), 1)
  jax.distributed.initialize(cluster.coordinator, cluster.num_processes, cluster.process_id,
                             initialization_timeout=remaining,
                             heartbeat_timeout_seconds=heartbeat_timeout_s)
  logging.info("process %d of %d, devices: %s", jax.process_index(), jax.process_count(),
               jax.devices())


@contextlib.contextmanager
def stop_job_on_error(on_error: Callable[[BaseException, int], None] | None = None
                      ) -> Iterator[None]:
  """In a multi-process run, turns an exception into an immediate exit with status 1.

  A normal exit waits at JAX's shutdown barrier for every other process, which after a
  peer died lasts until the heartbeat timeout. Exiting at once instead also stops the
  others without delay: their next collective with this process fails. A stop on a signal
  (`lra.preemption.Preempted`) is no error: every process saved the same step and raises it
  at the same point, so it ends the job normally.

  Args:
    on_error: called with the exception and this process's index before the exit (to leave a
      failure record; it must not raise).
  """
  try:
    yield
  except BaseException as error:  # pylint: disable=broad-exception-caught
    # One process (asked without starting a backend for an error that came before any use of
    # JAX), a clean exit, or a stop that every process makes together: nothing to stop.
    if (not jax.distributed.is_initialized() or jax.process_count() == 1
        or isinstance(error, SystemExit) and not error.code
        or isinstance(error, preemption.Preempted)):
      raise
    traceback.print_exc()
    if on_error is not None:
      on_error(error, jax.process_index())
    print(f"process {jax.process_index()} of {jax.process_count()} failed: "
          f"{type(error).__name__}: {error}\nstopping this process now; the others stop when "
          "their next step fails or after --distributed_heartbeat_timeout seconds. Rerun all "
          "processes with the same command to resume from the last checkpoint.",
          file=sys.stderr, flush=True)
    logging.shutdown()
    os._exit(1)  # pylint: disable=protected-access  (skips the shutdown barrier, see above)
