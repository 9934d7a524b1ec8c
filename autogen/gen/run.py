"""python -m rawgpu.autogen gen [modules...] [--out DIR]: regenerate modules and their gcc layout manifests."""
from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

from rawgpu.autogen.gen.recipes import RECIPES, Recipe

AUTOGEN = pathlib.Path(__file__).resolve().parent.parent


def generate(r: Recipe, out: pathlib.Path = AUTOGEN, verify: bool = True,
             root: pathlib.Path | None = None) -> tuple[pathlib.Path, list[str]]:
  """Write <out>/<module>.py (and <module>.layout.json); returns the module path and the checks gcc rejected.
  `root` overrides the fetched header folder of r.source (tests use it for their own headers)."""
  from rawgpu.autogen.fetch import header_root
  from rawgpu.autogen.gen import emit, model, verify as ver
  root = root or header_root(r.source)
  dest = out.joinpath(*r.module.split(".")).with_suffix(".py")
  dest.parent.mkdir(parents=True, exist_ok=True)
  for d in dest.relative_to(out).parents:  # package markers for subpackages (amd/, nv/)
    if str(d) != "." and not (out / d / "__init__.py").exists():
      (out / d / "__init__.py").write_text(f'"""Generated bindings: rawgpu.autogen.{str(d).replace("/", ".")}."""\n')
  with tempfile.TemporaryDirectory() as td:
    prelude = pathlib.Path(td) / "rawgpu_prelude.h"
    prelude.write_text(r.prelude)
    for rel, text in r.stubs:
      (pathlib.Path(td) / rel).parent.mkdir(parents=True, exist_ok=True)
      (pathlib.Path(td) / rel).write_text(text)
    m = model.Builder(r, root, prelude).build()
    dest.write_text(emit.module_src(m))
    dropped: list[str] = []
    if verify:
      man, dropped = ver.run_checks(m, root, prelude)
      dest.with_suffix(".layout.json").write_text(ver.dump_manifest(man))
  return dest, dropped


def main(argv: list[str]) -> int:
  ap = argparse.ArgumentParser(prog="python -m rawgpu.autogen gen")
  ap.add_argument("modules", nargs="*", help="recipe modules (default: all), e.g. amd.pm4 kfd")
  ap.add_argument("--out", type=pathlib.Path, default=AUTOGEN, help="output root (default: the autogen package)")
  ap.add_argument("--no-verify", action="store_true", help="skip the gcc layout manifest")
  a = ap.parse_args(argv)
  known = {r.module: r for r in RECIPES}
  bad = [m for m in a.modules if m not in known]
  if bad:
    print(f"unknown modules {bad}; known: {' '.join(known)}", file=sys.stderr)
    return 2
  for r in [known[m] for m in a.modules] or RECIPES:
    t = time.monotonic()
    dest, dropped = generate(r, a.out, not a.no_verify)
    print(f"{r.module}: {dest} ({dest.stat().st_size >> 10} KiB) in {time.monotonic() - t:.1f} s", flush=True)
    for d in dropped: print(f"  gcc rejected: {d}", flush=True)
  return 0
