"""The oracle: a C program compiled by gcc against the original headers prints every layout and value we generated.

Its output becomes the module's layout manifest (<module>.layout.json), which tests compare with the Python side.
Each check sits on its own line of the C program; a line gcc rejects is dropped and reported (never silently).
"""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import tempfile

from rawgpu.autogen.gen.model import Model

C_HEAD = r"""
#include <stdio.h>
#include <string.h>
#include <stddef.h>
static void bits(const char *name, const unsigned char *p, size_t n, long long back) {
  int lo = -1, w = 0;
  for (size_t i = 0; i < n * 8; i++) if (p[i / 8] >> (i % 8) & 1) { if (lo < 0) lo = (int)i; w++; }
  printf("B %s %d %d %lld\n", name, lo, w, back);
}
#define S(name, T) printf("S %s %zu\n", name, sizeof(T));
#define F(name, T, f) printf("F %s %zu %zu\n", name, offsetof(T, f), sizeof(((T *)0)->f));
#define FX(name, T, f) printf("F %s %zu 0\n", name, offsetof(T, f));
#define BF(name, T, f) { T s_; memset(&s_, 0, sizeof s_); s_.f = ~0ull; \
  bits(name, (const unsigned char *)&s_, sizeof s_, (long long)s_.f); }
#define C(name, x) printf("C %s %zu %llu\n", name, sizeof(x), (unsigned long long)(x));
"""
CHUNK = 200  # checks per C function: gcc is much slower on one huge function


def checks(m: Model) -> list[str]:
  out = []
  for k in m.order:
    rec = m.records[k]
    if rec.cspell is None: continue
    t = rec.cspell
    out.append(f'S("{rec.name}", {t})')
    for path, kind in rec.members:
      if kind == "field": out.append(f'F("{rec.name}.{path}", {t}, {path})')
      elif kind == "flex": out.append(f'FX("{rec.name}.{path}", {t}, {path})')
      else: out.append(f'BF("{rec.name}.{path}", {t}, {path})')
    # fields of anonymous members are reachable from the parent in C and in ctypes
  for c in sorted(m.consts.values(), key=lambda c: c.name):
    if isinstance(c.value, tuple):  # hi:lo ranges: the ?: trick NVIDIA's DRF macros use
      out.append(f'C("{c.name}.hi", (1 ? {c.name}))')
      out.append(f'C("{c.name}.lo", (0 ? {c.name}))')
    else:
      out.append(f'C("{c.name}", ({c.name}))')
  for n in sorted(m.samples):
    for args in m.samples[n]:
      a = ", ".join(f"{x:#x}u" if x > 0x7FFFFFFF else str(x) for x in args)
      label = f'{n}({",".join(str(x) for x in args)})'
      if m.funcs[n].body.op == "range":
        out.append(f'C("{label}.hi", (1 ? {n}({a})))')
        out.append(f'C("{label}.lo", (0 ? {n}({a})))')
      else:
        out.append(f'C("{label}", ({n}({a})))')
  return out


def run_checks(m: Model, root: pathlib.Path, prelude: pathlib.Path) -> tuple[dict, list[str]]:
  r = m.recipe
  lines = checks(m)
  dropped: list[str] = []
  with tempfile.TemporaryDirectory() as td:
    src = pathlib.Path(td) / ("check.cc" if r.cxx else "check.c")
    exe = pathlib.Path(td) / "check"
    inc = "".join(f'#include "{h}"\n' for h in r.header_paths(root))
    using = "using namespace llvm::amdhsa;\n" if r.cxx else ""
    for _ in range(8):
      head = f'#include "{prelude}"\n{inc}{using}{C_HEAD}'
      body, where = [], {}
      for i, ln in enumerate(lines):
        if i % CHUNK == 0: body.append(f"static void part{i // CHUNK}(void) {{")
        where[head.count("\n") + len(body) + 1] = i
        body.append(ln)
        if i % CHUNK == CHUNK - 1 or i == len(lines) - 1: body.append("}")
      calls = " ".join(f"part{k}();" for k in range((len(lines) + CHUNK - 1) // CHUNK))
      src.write_text(head + "\n".join(body) + f"\nint main(void) {{ {calls} return 0; }}\n")
      cc = ["g++", "-std=gnu++17"] if r.cxx else ["gcc", "-std=gnu11"]
      args = cc + ["-w", "-O0", "-fmax-errors=0"] + r.clang_args(root, prelude.parent) + [str(src), "-o", str(exe)]
      p = subprocess.run(args, capture_output=True, text=True)
      if p.returncode == 0: break
      bad = {where[int(x)] for x in re.findall(rf"{re.escape(str(src))}:(\d+):\d+: error", p.stderr)
             if int(x) in where}
      if not bad: raise RuntimeError(f"{r.module}: gcc failed:\n{p.stderr[-3000:]}")
      dropped += [lines[b] for b in sorted(bad)]
      lines = [ln for i, ln in enumerate(lines) if i not in bad]
    else:
      raise RuntimeError(f"{r.module}: gcc still failing:\n{p.stderr[-3000:]}")
    res = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
  man: dict = {"module": f"rawgpu.autogen.{r.module}", "structs": {}, "consts": {}}
  for ln in res.splitlines():
    kind, name, *vals = ln.split(" ")
    if kind == "S": man["structs"].setdefault(name, {"size": 0, "fields": {}, "bits": {}})["size"] = int(vals[0])
    elif kind in ("F", "B"):
      sname, fname = name.split(".", 1)
      man["structs"][sname]["fields" if kind == "F" else "bits"][fname] = [int(v) for v in vals]
    elif kind == "C":
      size, v = int(vals[0]), int(vals[1])
      man["consts"][name] = [8 * size, v & ((1 << (8 * size)) - 1)]
  return man, dropped


def dump_manifest(man: dict) -> str:
  """One entry per line (diff-friendly), sorted keys: deterministic."""
  parts = ['{', f'"module": {json.dumps(man["module"])},', '"structs": {']
  items = sorted(man["structs"].items())
  for i, (k, v) in enumerate(items):
    parts.append(f'{json.dumps(k)}: {json.dumps(v, sort_keys=True)}{"," if i < len(items) - 1 else ""}')
  parts += ['},', '"consts": {']
  items = sorted(man["consts"].items())
  for i, (k, v) in enumerate(items):
    parts.append(f'{json.dumps(k)}: {json.dumps(v)}{"," if i < len(items) - 1 else ""}')
  parts += ['}', '}']
  return "\n".join(parts) + "\n"
