"""Every generated binding against its layout manifest: sizes, offsets, bitfield positions and values that gcc
computed from the original headers (autogen/gen/verify.py). Runs anywhere: no headers or compiler needed."""
import ctypes
import importlib
import json
import pathlib

import pytest

from rawgpu.autogen.support import CStruct, CUnion

AUTOGEN = pathlib.Path(__file__).resolve().parent.parent / "autogen"
MANIFESTS = sorted(AUTOGEN.rglob("*.layout.json"))
IDS = [str(p.relative_to(AUTOGEN)) for p in MANIFESTS]


def load(path: pathlib.Path):
  man = json.loads(path.read_text())
  return man, importlib.import_module(man["module"])


def test_manifests_exist():
  assert MANIFESTS, "no layout manifests under autogen/"
  for p in MANIFESTS: assert p.with_name(p.name.replace(".layout.json", ".py")).exists(), p


def records(mod):
  return {n: v for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, (CStruct, CUnion))
          and v not in (CStruct, CUnion) and v.__module__ == mod.__name__ and v.__name__ == n}


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_struct_layouts(path):
  man, mod = load(path)
  recs = records(mod)
  named = {n for n, c in recs.items() if not n.endswith(tuple(f"_anon{i}" for i in range(8))) and "__anon" not in n}
  # every struct gcc saw is in the module, and every named one in the module was checked by gcc
  assert set(man["structs"]) <= set(recs), sorted(set(man["structs"]) - set(recs))[:10]
  missing = sorted(n for n in named if n not in man["structs"] and not _reached_only_anonymously(n, recs))
  assert not missing, f"structs without a gcc check: {missing[:10]}"
  for name, want in man["structs"].items():
    cls = recs[name]
    assert ctypes.sizeof(cls) == want["size"], name
    for fname, (off, size) in want["fields"].items():
      f = getattr(cls, fname)
      assert (f.offset, f.size) == (off, size), f"{name}.{fname}: ctypes ({f.offset}, {f.size}) != gcc ({off}, {size})"
    for fname, (lo, width) in want["bits"].items():
      # set the field to all ones in a zeroed struct and look where the bits land: the same experiment gcc ran
      s = cls()
      setattr(s, fname, (1 << width) - 1)
      raw = int.from_bytes(bytes(s), "little")
      assert raw == ((1 << width) - 1) << lo, f"{name}.{fname}: bits {raw:#x} != gcc lo={lo} width={width}"
      assert getattr(s, fname) == (1 << width) - 1


def _reached_only_anonymously(name, recs):
  return "_anon" in name


def _call(mod, expr: str):
  fn, args = expr[:-1].split("(", 1)
  return getattr(mod, fn)(*[int(a) for a in args.split(",") if a])


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_constants_and_macros(path):
  man, mod = load(path)
  bad = []
  for name, (bits, want) in man["consts"].items():
    if name.endswith((".hi", ".lo")):  # an NVIDIA hi:lo bit range, a (hi, lo) tuple in Python
      base = name[:-3]
      got = (_call(mod, base) if base.endswith(")") else getattr(mod, base))[0 if name.endswith(".hi") else 1]
    else:
      got = _call(mod, name) if name.endswith(")") else getattr(mod, name if hasattr(mod, name) else name + "_")
    if (int(got) - want) % (1 << bits): bad.append(f"{name}: python {int(got):#x} != gcc {want:#x} ({bits} bits)")
  assert not bad, "\n".join(bad[:20])


@pytest.mark.parametrize("path", MANIFESTS, ids=IDS)
def test_every_constant_checked(path):
  man, mod = load(path)
  src = pathlib.Path(mod.__file__).read_text()
  consts = [ln.split(" = ", 1)[0] for ln in src.splitlines() if " = " in ln and ln[:1].isalpha()
            and ln.split(" = ", 1)[1][:1] in "-0123456789I("]
  checked = set(man["consts"]) | {n[:-3] for n in man["consts"] if n.endswith((".hi", ".lo"))}
  unchecked = [c for c in consts if c not in checked and c.rstrip("_") not in checked]
  assert not unchecked, f"values without a gcc check: {unchecked[:10]}"
