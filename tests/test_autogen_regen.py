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


def _missing_tools() -> str:
  if importlib.util.find_spec("clang") is None: return "libclang not installed (pip install libclang==18.1.1)"
  for tool in ("gcc", "g++"):
    if shutil.which(tool) is None: return f"{tool} not installed"
  return ""


def _sources(r) -> set[str]:
  return {r.source} | {h.split(":")[0] for h in r.headers + r.includes if ":" in h}


def _missing_headers(sources) -> str:
  from rawgpu.autogen.fetch import header_root
  for src in sorted(sources):
    try: header_root(src)
    except RawGPUError as e: return str(e)
  return ""


MISSING = _missing_tools()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)


def test_headers_match_lock():
  from rawgpu.autogen.fetch import LOCAL, PACKAGES, cache_dir, header_root, read_lock
  _, files = read_lock()
  assert files, "autogen/headers.lock is empty"
  root = cache_dir() / "headers"
  present = []
  for src, folder in [(p.source, p.root) for p in PACKAGES] + [(s, v[0]) for s, v in LOCAL.items()]:
    try:
      header_root(src)
      present.append(folder + "/")
    except RawGPUError:
      pass
  if not present: pytest.skip("no headers fetched (python -m rawgpu.autogen fetch)")
  bad = [f for f, h in files.items() if f.startswith(tuple(present))
         and (not (root / f).exists() or hashlib.sha256((root / f).read_bytes()).hexdigest() != h)]
  assert not bad, f"fetched headers differ from autogen/headers.lock: {bad[:5]}"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.module for r in RECIPES])
def test_regenerate_identical(recipe, tmp_path):
  why = _missing_headers(_sources(recipe))
  if why: pytest.skip(why)
  from rawgpu.autogen.gen.run import generate
  dest, _ = generate(recipe, tmp_path)
  committed = AUTOGEN / dest.relative_to(tmp_path)
  assert committed.exists(), f"{committed} is not committed"
  assert dest.read_bytes() == committed.read_bytes(), f"{recipe.module}: regenerated module differs"
  man = dest.with_suffix(".layout.json")
  assert man.read_bytes() == committed.with_suffix(".layout.json").read_bytes(), f"{recipe.module}: manifest differs"
