"""Run metrics: `metrics.jsonl`, TensorBoard event files (no TensorFlow) and `curves.png`.

Steps return *sums* plus a denominator (`count`, the number of real examples), so
padded evaluation batches and uneven last batches average correctly; `averages` turns
a sum dict into the logged means. One JSON line is written per log step with
`train_` / `eval_` / `test_` prefixes.

The TensorBoard writer emits the TFRecord framing (length, masked CRC-32C, payload,
masked CRC-32C) around hand-encoded `Event{wall_time, step, summary{value{tag,
simple_value}}}` protobufs, which is all TensorBoard needs for scalars.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"


def averages(sums: Mapping[str, float], prefix: str) -> dict[str, float]:
  """{"loss_sum", "correct_sum", "count", ...} -> {"<prefix>loss", "<prefix>accuracy", ...}.

  Keys ending in "_sum" are divided by "count"; other keys (norms, rates) are kept.
  """
  count = float(sums["count"])
  out = {f"{prefix}examples": int(count)}
  for key, value in sums.items():
    if key == "count":
      continue
    if key.endswith("_sum"):
      name = {"correct": "accuracy"}.get(key[:-4], key[:-4])
      out[prefix + name] = float(value) / max(count, 1.0)
    else:
      out[prefix + key] = float(value)
  return out


# --- CRC-32C (Castagnoli), the checksum of TFRecord framing -----------------------------

def _crc32c_table() -> list[int]:
  table = []
  for byte in range(256):
    crc = byte
    for _ in range(8):
      crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    table.append(crc)
  return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
  """CRC-32C of `data` (crc32c(b"123456789") == 0xE3069283)."""
  crc = 0xFFFFFFFF
  for byte in data:
    crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
  crc = crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
  out = bytearray()
  while True:
    bits, value = value & 0x7F, value >> 7
    out.append(bits | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:  # wire type 2: length-delimited
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_event(step: int, wall_time: float, scalars: Mapping[str, float] | None = None,
                 file_version: str | None = None) -> bytes:
  """Serialises one `tensorflow.Event` protobuf holding scalar summaries."""
  out = _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step)
  if file_version is not None:
    out += _field_bytes(3, file_version.encode())
  if scalars:
    values = b"".join(
        _field_bytes(1, _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value))
        for tag, value in scalars.items())
    out += _field_bytes(5, values)
  return out


def frame_record(data: bytes) -> bytes:
  """TFRecord framing of one payload."""
  header = struct.pack("<Q", len(data))
  return header + struct.pack("<I", _masked_crc(header)) + data + struct.pack("<I", _masked_crc(data))


class EventWriter:
  """Appends scalar summaries to a fresh `events.out.tfevents.*` file in `logdir`."""

  def __init__(self, logdir: str | os.PathLike):
    Path(logdir).mkdir(parents=True, exist_ok=True)
    # A new file per process start: TensorBoard reads every events file in the folder.
    name = f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}.{os.getpid()}"
    self._file = open(Path(logdir) / name, "ab")
    self._file.write(frame_record(encode_event(0, time.time(), file_version="brain.Event:2")))

  def scalars(self, step: int, values: Mapping[str, float]) -> None:
    self._file.write(frame_record(encode_event(step, time.time(), values)))
    self._file.flush()

  def close(self) -> None:
    self._file.close()


class MetricWriter:
  """One JSON line per log step in `metrics.jsonl`, mirrored to TensorBoard.

  Args:
    workdir: the run's folder.
    resume_step: on resume, lines after this step (written after the checkpoint we
      resume from, then recomputed) are dropped so the file reads as one clean run.
    enabled: False on non-zero processes of a multi-host run.
  """

  def __init__(self, workdir: str | os.PathLike, resume_step: int = 0, enabled: bool = True):
    self.path = Path(workdir) / METRICS_FILE
    self.enabled = enabled
    if not enabled:
      return
    if self.path.exists():
      kept = [line for line in self.path.read_text().splitlines()
              if line.strip() and json.loads(line)["step"] <= resume_step]
      self.path.write_text("".join(line + "\n" for line in kept))
    self._tb = EventWriter(Path(workdir) / "tensorboard")

  def write(self, step: int, values: Mapping[str, float]) -> None:
    if not self.enabled:
      return
    values = {k: float(v) if isinstance(v, (float, np.floating)) else v for k, v in values.items()}
    with open(self.path, "a") as f:
      f.write(json.dumps({"step": int(step), **values}) + "\n")
    self._tb.scalars(step, {k: v for k, v in values.items() if isinstance(v, (int, float))})

  def close(self) -> None:
    if self.enabled:
      self._tb.close()


def read_metrics(workdir: str | os.PathLike) -> list[dict]:
  """All lines of `metrics.jsonl`."""
  path = Path(workdir) / METRICS_FILE
  return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot_curves(workdir: str | os.PathLike) -> Path:
  """Draws loss and accuracy against step (train and eval) into `curves.png`."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  rows = read_metrics(workdir)
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for ax, metric in zip(axes, ("loss", "accuracy")):
    for prefix, style in (("train_", "-"), ("eval_", "o-")):
      points = [(r["step"], r[prefix + metric]) for r in rows if prefix + metric in r]
      if points:
        ax.plot(*zip(*points), style, label=prefix.rstrip("_"), markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend()
  fig.suptitle(Path(workdir).name)
  fig.tight_layout()
  out = Path(workdir) / CURVES_FILE
  fig.savefig(out, dpi=100)
  plt.close(fig)
  return out
