"""Compare a generated module with its gcc layout manifest; returns the disagreements (empty list: all agree).

Used by tests/test_autogen_layout.py (every committed module) and tests/test_autogen_generator.py (synthetic
headers). Needs nothing but the module and the manifest: no headers, no compiler.
"""
from __future__ import annotations

import ctypes
import pathlib
from types import ModuleType

from rawgpu.autogen.support import CStruct, CUnion


def records(mod: ModuleType) -> dict[str, type]:
  return {n: v for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, (CStruct, CUnion))
          and v not in (CStruct, CUnion) and v.__module__ == mod.__name__ and v.__name__ == n}


def structs(mod: ModuleType, man: dict) -> list[str]:
  bad = []
  recs = records(mod)
  # every struct gcc saw is in the module, and every named one in the module was checked by gcc
  # (records of anonymous members are checked through their parents, whose members they are in C)
  bad += [f"{n}: in the manifest, not in the module" for n in sorted(set(man["structs"]) - set(recs))]
  bad += [f"{n}: no gcc check" for n in sorted(recs) if n not in man["structs"] and "_anon" not in n]
  for name, want in sorted(man["structs"].items()):
    cls = recs.get(name)
    if cls is None: continue
    if ctypes.sizeof(cls) != want["size"]: bad.append(f"{name}: size {ctypes.sizeof(cls)} != gcc {want['size']}")
    for fname, (off, size) in want["fields"].items():
      f = getattr(cls, fname, None)
      if f is None or (f.offset, f.size) != (off, size):
        bad.append(f"{name}.{fname}: ctypes {(f.offset, f.size) if f else None} != gcc ({off}, {size})")
    for fname, (lo, width, back) in want["bits"].items():
      # set the field to all ones in a zeroed struct, look where the bits land, read it back (-1 when signed):
      # the experiment the gcc program ran
      s = cls()
      setattr(s, fname, (1 << width) - 1)
      raw = int.from_bytes(bytes(s), "little")
      if raw != ((1 << width) - 1) << lo: bad.append(f"{name}.{fname}: bits {raw:#x} != gcc lo={lo} width={width}")
      if getattr(s, fname) != back: bad.append(f"{name}.{fname}: reads {getattr(s, fname)}, gcc {back}")
  return bad


def _call(mod: ModuleType, expr: str):
  fn, args = expr[:-1].split("(", 1)
  return getattr(mod, fn)(*[int(a) for a in args.split(",") if a])


def values(mod: ModuleType, man: dict) -> list[str]:
  """Constants and macro functions: equal modulo 2**bits of the C expression's type (C wraps, Python does not)."""
  bad = []
  for name, (bits, want) in man["consts"].items():
    if name.endswith((".hi", ".lo")):  # an NVIDIA hi:lo bit range, a (hi, lo) tuple in Python
      base = name[:-3]
      got = (_call(mod, base) if base.endswith(")") else getattr(mod, base))[0 if name.endswith(".hi") else 1]
    else:
      got = _call(mod, name) if name.endswith(")") else getattr(mod, name if hasattr(mod, name) else name + "_")
    if (int(got) - want) % (1 << bits): bad.append(f"{name}: python {int(got):#x} != gcc {want:#x} ({bits} bits)")
  return bad


def coverage(mod: ModuleType, man: dict) -> list[str]:
  """Every value the module defines has a gcc check."""
  src = pathlib.Path(mod.__file__).read_text()
  consts = [ln.split(" = ", 1)[0] for ln in src.splitlines() if " = " in ln and ln[:1].isalpha()
            and ln.split(" = ", 1)[1][:1] in "-0123456789I("]
  checked = set(man["consts"]) | {n[:-3] for n in man["consts"] if n.endswith((".hi", ".lo"))}
  return [f"{c}: no gcc check" for c in consts if c not in checked and c.rstrip("_") not in checked]
