"""`rawgpu bench`: a registry of benchmarks measured the same way every time (see core.py), with a table for people
and a JSON list of records (one per figure) for machines.

    from rawgpu.tools.bench import run, table
    figures = run(["import"], dev_spec=None, quick=True)
"""
from __future__ import annotations
import json, math, sys
from rawgpu.errors import RawGPUError
from rawgpu.tools.bench.core import BENCHMARKS, ORDER, Bench, Ctx, Figure, Skip, benchmark, environment, run, samples, table

__all__ = ["BENCHMARKS", "ORDER", "Bench", "Ctx", "Figure", "Skip", "benchmark", "environment", "run", "samples", "table", "bench_main"]


def bench_main(dev: str | None, json_path: str | None, only: list[str] | None, quick: bool) -> int:
  """The `rawgpu bench` command: 0 when every figure was measured or skipped with its reason, 1 when one failed."""
  figures = run(only, dev, quick)
  print(table(figures))
  if json_path:
    records = [f.record() for f in figures]
    text = json.dumps(records, indent=2, allow_nan=False)
    if json_path == "-": print(text)
    else:
      try:
        with open(json_path, "w") as fh: fh.write(text + "\n")
      except OSError as e: raise RawGPUError(f"cannot write {json_path}: {e.strerror}") from e
  bad = [f for f in figures if f.error or (f.median is not None and not all(math.isfinite(v) for v in (f.median, f.min, f.max)))]
  for f in bad: print(f"rawgpu bench: {f.bench} {f.case}: {f.error or 'a figure is not finite'}", file=sys.stderr)
  return 1 if bad else 0
