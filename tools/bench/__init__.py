"""`rawgpu bench`: a registry of benchmarks measured the same way every time (see core.py), with a table for people
and a JSON list of records (one per figure) for machines.

    from rawgpu.tools.bench import run, table
    figures = run(["import"], dev_spec=None, quick=True)
"""
from __future__ import annotations
import json, math, os, sys
from rawgpu.errors import RawGPUError
from rawgpu.tools.bench.core import BENCHMARKS, INTERRUPTED, ORDER, Bench, Ctx, Figure, Skip, benchmark, environment, run, samples, table

__all__ = ["BENCHMARKS", "ORDER", "Bench", "Ctx", "Figure", "Skip", "benchmark", "environment", "run", "samples", "table", "bench_main"]


def bench_main(dev: str | None, json_path: str | None, only: list[str] | None, quick: bool) -> int:
  """The `rawgpu bench` command: 0 when every figure was measured or skipped with its reason, 1 when one failed, 130
  when Ctrl-C stopped it (what was measured by then is still printed and written). Progress goes to stderr, and so
  does the table when the JSON goes to stdout."""
  if json_path and json_path != "-": _check_writable(json_path)   # before minutes of measuring, not after
  figures = run(only, dev, quick, progress=lambda what: print(f"rawgpu bench: {what}", file=sys.stderr, flush=True))
  print(table(figures), file=sys.stderr if json_path == "-" else sys.stdout)
  if json_path:
    records = [f.record() for f in figures]
    text = json.dumps(records, indent=2, allow_nan=False)
    if json_path == "-": print(text)
    else:
      try:
        with open(json_path, "w") as fh: fh.write(text + "\n")
      except OSError as e: raise RawGPUError(f"cannot write {json_path}: {e.strerror}") from e
  if any(f.error == f"failed: {INTERRUPTED}" for f in figures): return 130
  bad = [f for f in figures if f.error or (f.median is not None and not all(math.isfinite(v) for v in (f.median, f.min, f.max)))]
  for f in bad: print(f"rawgpu bench: {f.bench} {f.case}: {f.error or 'a figure is not finite'}", file=sys.stderr)
  return 1 if bad else 0


def _check_writable(path: str) -> None:
  """The --json file can be written: a file in an existing folder, or one that is there already and writable."""
  folder = os.path.dirname(os.path.abspath(path))
  if os.path.isdir(path): raise RawGPUError(f"cannot write {path}: it is a folder")
  if not os.path.isdir(folder): raise RawGPUError(f"cannot write {path}: no folder {folder}")
  if not os.access(path if os.path.exists(path) else folder, os.W_OK): raise RawGPUError(f"cannot write {path}: permission denied")
