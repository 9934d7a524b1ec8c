"""Regenerating every module from the fetched headers gives byte-identical modules and manifests.

Needs the fetched headers (python -m rawgpu.autogen fetch), PyPI libclang and gcc/g++; skips with the reason otherwise.
"""
import hashlib
import importlib.util
import pathlib
import shutil

import pytest

from rawgpu.autogen.gen.recipes import RECIPES
from rawgpu.errors import RawGPUError

AUTOGEN = pathlib.Path(__file__).resolve().parent.parent / "autogen"


def _missing() -> str:
  if importlib.util.find_spec("clang") is None: return "libclang not installed (pip install libclang==18.1.1)"
  for tool in ("gcc", "g++"):
    if shutil.which(tool) is None: return f"{tool} not installed"
  from rawgpu.autogen.fetch import header_root
  for src in sorted({r.source for r in RECIPES} | {h.split(":")[0] for r in RECIPES for h in r.headers if ":" in h}):
    try: header_root(src)
    except RawGPUError as e: return str(e)
  return ""


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def test_headers_match_lock():
  from rawgpu.autogen.fetch import cache_dir, read_lock
  _, files = read_lock()
  assert files, "autogen/headers.lock is empty"
  root = cache_dir() / "headers"
  bad = [f for f, h in files.items() if not (root / f).exists() or hashlib.sha256((root / f).read_bytes()).hexdigest() != h]
  assert not bad, f"fetched headers differ from autogen/headers.lock: {bad[:5]}"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.module for r in RECIPES])
def test_regenerate_identical(recipe, tmp_path):
  from rawgpu.autogen.gen.run import generate
  dest, _ = generate(recipe, tmp_path)
  committed = AUTOGEN / dest.relative_to(tmp_path)
  assert committed.exists(), f"{committed} is not committed"
  assert dest.read_bytes() == committed.read_bytes(), f"{recipe.module}: regenerated module differs"
  man = dest.with_suffix(".layout.json")
  assert man.read_bytes() == committed.with_suffix(".layout.json").read_bytes(), f"{recipe.module}: manifest differs"
