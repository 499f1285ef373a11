"""Stopping a training run cleanly when a scheduler asks: finish the step, save it, exit 75.

    with preemption.Watch() as watch:
      for step in ...:
        ...                                  # one training step, waited for
        if watch.should_stop():
          ...                                # save this step, write preempted.json
          raise preemption.Preempted(record)

A cluster stops a job by a signal some seconds before it kills it: SIGTERM (SLURM's time limit,
`scancel`, a cloud's preemption notice), SIGUSR1 where a scheduler warns first (SLURM's
`--signal=USR1@<seconds>`), SIGINT from a terminal. While a `Watch` is installed, the first of
these signals asks the run to stop; the training loop asks `should_stop` after every step (and
between evaluation batches), saves the step it reached and raises `Preempted`, which the command
line turns into exit status `EXIT_STATUS`. Later signals are logged and ignored: the save they
would interrupt is what makes the stop lose nothing, and the grace period ends with a SIGKILL
anyway, after which the previous checkpoint is the one a rerun resumes from.

One process: a Python handler sets a flag that `should_stop` reads. Several processes (a
`jax.distributed` job): every process must save the same step, whichever of them got the
signal, so `should_stop` is JAX's preemption sync point
(`jax.experimental.multihost_utils.reached_preemption_sync_point`). JAX's distributed runtime
installs its own SIGTERM handler when the job is joined; the process that receives SIGTERM tells
the coordination service, which sets the sync point to the step after the furthest process's
(so the processes stop together, at most a step later). SIGINT and SIGUSR1 enter the same
protocol by re-sending SIGTERM to this process. It needs JAX's preemption service, on by default
(`jax_enable_preemption_service`); tested with two CPU processes on jaxlib 0.10.2 and 0.12
(tests/test_preemption.py).

Exit status 75 is sysexits.h's EX_TEMPFAIL ("a temporary failure; the user is invited to retry
later"): one value that a scheduler rule can requeue on (SLURM's `RequeueExit=75`, a batch
script's `[ $? -eq 75 ] && scontrol requeue`), apart from the trainer's other endings: 0 done,
1 crashed, 2 a user error, 128 + N killed by signal N before it could save
(docs/usage.md, "Stopping and requeueing").
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from lra.run_records import PREEMPTED_STATUS as EXIT_STATUS  # EX_TEMPFAIL

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class Preempted(Exception):
  """The run stopped on a signal after saving the step it reached; rerun it to resume.

  Attributes:
    record: what `preempted.json` holds (`lra.run_records.write_preempted`).
  """

  def __init__(self, record: dict[str, Any]):
    super().__init__(record["message"])
    self.record = record


def timestamp(seconds: float) -> str:
  """`seconds` since the epoch as local ISO 8601 with the offset, to the millisecond."""
  return (time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seconds))
          + f".{int(seconds % 1 * 1000):03d}" + time.strftime("%z", time.localtime(seconds)))


class Watch:
  """The signal handlers of one training session (a context manager; nothing outside the main
  thread, where Python cannot install handlers).

  Attributes:
    signum: the first signal this process received (None: none yet, or SIGTERM under JAX's
      handler in a multi-process job, which Python never sees).
    received: `time.time()` at that signal.
  """

  def __init__(self):
    self.signum: int | None = None
    self.received: float | None = None
    self._checks = 0
    self._previous: dict[int, Any] = {}
    self._multiprocess = False

  def __enter__(self) -> Watch:
    if threading.current_thread() is not threading.main_thread():
      logging.info("not in the main thread: signals stop this run at once, without a save")
      return self
    self._multiprocess = jax.process_count() > 1
    # In a multi-process job JAX's own handler owns SIGTERM: replacing it would cut the other
    # processes out of the stop.
    for signum in SIGNALS if not self._multiprocess else (signal.SIGINT, signal.SIGUSR1):
      self._previous[signum] = signal.signal(signum, self._handle)
    return self

  def __exit__(self, *exc) -> None:
    for signum, handler in self._previous.items():
      signal.signal(signum, handler)
    self._previous.clear()

  def _handle(self, signum: int, frame: FrameType | None) -> None:
    del frame
    name = signal.Signals(signum).name
    if self.signum is not None:
      logging.warning("%s received while stopping on %s; ignored, so that the save finishes "
                      "(SIGKILL stops at once; the run then resumes from its previous "
                      "checkpoint)", name, signal.Signals(self.signum).name)
      return
    self.signum, self.received = signum, time.time()
    logging.warning("%s received: finishing this step, saving it, then exiting with status %d",
                    name, EXIT_STATUS)
    if self._multiprocess:
      os.kill(os.getpid(), signal.SIGTERM)  # into JAX's handler: every process stops with this one

  def should_stop(self) -> bool:
    """Whether the run stops here. Every process of a job calls it at the same points (after
    each training step, before each evaluation batch), and all of them get the same answer."""
    self._checks += 1
    if self._multiprocess:
      # Numbered by call, not by training step: evaluation batches are stopping points too, and
      # a count from 1 lets a notice that came before the first call stop at the first one.
      return multihost_utils.reached_preemption_sync_point(self._checks)
    return self.signum is not None

  def cause(self) -> tuple[str, float | None]:
    """The signal that stopped the job and `time.time()` when it came (None where unknown).

    In a multi-process job every process must call it at the same point: it gathers what each
    process saw. A stop that no process saw in Python came from SIGTERM, through JAX's handler.
    """
    if not self._multiprocess:
      return signal.Signals(self.signum).name, self.received
    age = -1.0 if self.received is None else time.time() - self.received
    seen = np.asarray(multihost_utils.process_allgather(
        np.asarray([self.signum or 0, age], np.float32))).reshape(-1, 2)
    signalled = [(int(signum), float(ago)) for signum, ago in seen if signum]
    if not signalled:
      return "SIGTERM", None
    signum, ago = signalled[0]
    return signal.Signals(signum).name, time.time() - ago
