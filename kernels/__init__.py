"""Kernel sources and prebuilt code objects (kernels/<target>/<name>.hsaco).

`path(target, name)` finds a prebuilt code object, `names(target)` lists them, `kernels(target, name)` lists the
kernels inside one. Rebuild with `python -m rawgpu.kernels.build` (clang-19, llvm-mc-19, ld.lld-19); the commands,
tool versions and sha256s are in BUILD.json.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

from rawgpu.errors import CodeObjectError

KERNELS_DIR = Path(__file__).resolve().parent
TARGETS = ("gfx1100", "gfx1201", "gfx942")


def targets() -> list[str]:
  """Targets that have prebuilt code objects here."""
  return [t for t in TARGETS if (KERNELS_DIR / t).is_dir()]


def names(target: str) -> list[str]:
  """Names of the prebuilt code objects for target (file stems: 'vadd', 'matmul', ...)."""
  if target not in TARGETS:
    raise CodeObjectError(f"no prebuilt kernels for target {target!r}; prebuilt targets: {', '.join(TARGETS)}")
  return sorted(p.stem for p in (KERNELS_DIR / target).glob("*.hsaco"))


def path(target: str, name: str) -> Path:
  """The prebuilt code object kernels/<target>/<name>.hsaco."""
  p = KERNELS_DIR / target / f"{name}.hsaco"
  if not p.is_file():
    raise CodeObjectError(f"no prebuilt code object {name!r} for {target}; available: {', '.join(names(target))}")
  return p


@functools.cache
def manifest() -> dict:
  """BUILD.json: {'tools': {...}, 'objects': {'<target>/<name>.hsaco': {'sha256', 'kernels', 'commands', ...}}}."""
  return json.loads((KERNELS_DIR / "BUILD.json").read_text())


def kernels(target: str, name: str) -> list[str]:
  """Kernel (function) names inside a prebuilt code object, e.g. kernels('gfx1100', 'matmul')."""
  path(target, name)
  return list(manifest()["objects"][f"{target}/{name}.hsaco"]["kernels"])
