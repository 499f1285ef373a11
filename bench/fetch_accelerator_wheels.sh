#!/usr/bin/env bash
# Downloads the wheels that an accelerator machine without network lacks, into a git-ignored
# folder (default .whl/ at the repository root), and checks that nothing they need is missing.
#
#   bash bench/fetch_accelerator_wheels.sh [DEST]
#
# The target image (CPython 3.12, manylinux x86-64) has its own JAX 0.11 with the CUDA plugin,
# flax, optax, orbax-checkpoint, absl-py, numpy, matplotlib, tqdm, pillow, pytest and the other
# packages listed in IMAGE_HAS below, but not ml-collections, grain, tensorboardX or
# tensorflow-datasets.
# tensorflow-datasets is needed only to read TFDS-prepared data (lra/data/tfds_source.py), which
# an accelerator run does not do, so it is not fetched. There, run from the source tree:
#
#   python3 bench/accelerator.py --wheels .whl --out DIR
#
# which installs these wheels (--no-deps --no-index) into a scratch folder that only that run
# sees; nothing is installed over the machine's packages, and `pip install -e .` (whose
# `jax<0.11` pin the image does not meet) is never needed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$REPO/.whl}"
PYTHON="${PYTHON:-python3}"

# What the project needs that the image lacks, at versions inside pyproject.toml's ranges, and
# what those need in turn (each one's Requires-Dist, read from its METADATA by the check below).
WHEELS=(
  "ml-collections==1.1.0"   # configs/ (needs absl-py, PyYAML: in the image)
  "grain==0.2.18"           # lra/data/batching.py
  "array-record==0.8.6"     # grain (needs absl-py, etils[epath]: in the image)
  "portpicker==1.6.0"       # grain (needs psutil: in the image)
  "tensorboardX==2.6.5"     # lra/metrics.py (needs numpy, packaging, protobuf: in the image)
)
# Packages of the image that these wheels require (normalised names; the image's full list
# is longer). etils' epath/epy extras need fsspec, typing-extensions and zipp: listed too.
IMAGE_HAS="absl-py cloudpickle etils fsspec numpy packaging protobuf psutil pyyaml typing-extensions zipp"

rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -d "$DEST" "${WHEELS[@]}"

# Every requirement of every wheel (extras not asked for and markers that do not hold on
# Linux/CPython 3.12 left out) must be one of the wheels or a package of the image.
"$PYTHON" - "$DEST" "$IMAGE_HAS" <<'EOF'
import pathlib, re, sys, zipfile

dest, image = pathlib.Path(sys.argv[1]), set(sys.argv[2].split())
try:
  from packaging.requirements import Requirement
except ImportError:  # pip always carries a copy
  from pip._vendor.packaging.requirements import Requirement

def norm(name):
  return re.sub(r"[-_.]+", "-", name).lower()

environment = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython",
               "extra": ""}
wheels = {}
for path in sorted(dest.glob("*.whl")):
  with zipfile.ZipFile(path) as archive:
    metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    lines = archive.read(metadata).decode().splitlines()
  name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Name:"))
  wheels[norm(name)] = [line.split(":", 1)[1].strip() for line in lines
                        if line.startswith("Requires-Dist:")]
missing = []
for name, requires in wheels.items():
  for text in requires:
    requirement = Requirement(text)
    if requirement.marker and not requirement.marker.evaluate(environment):
      continue
    if norm(requirement.name) not in wheels and norm(requirement.name) not in image:
      missing.append(f"{name} needs {text}")
if missing:
  sys.exit("missing (add a wheel for each to WHEELS):\n  " + "\n  ".join(missing))
size = sum(p.stat().st_size for p in dest.glob("*.whl"))
print(f"{len(wheels)} wheels, {size / 2**20:.1f} MiB, in {dest}; every requirement is a wheel "
      f"there or in the image: {', '.join(sorted(wheels))}")
EOF
