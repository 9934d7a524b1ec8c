"""The generated GC tables against Mesa's register database (src/amd/registers/gfx11.json, gfx115.json, gfx12.json).

Mesa's "at" is a byte address in one flat space: at == 4 * (GC_BASE[base_idx] + offset) for MMIO registers, where
GC_BASE is the navi-family GC base of instance 0 (the kernel's sienna_cichlid_ip_offset.h: 0x1260, 0xA000, ...), and
at == 4 * index for the indirect ixSQ_WAVE_* registers. The test derives one constant per segment from the data,
requires it to explain every shared register, and (with kernel headers) requires it to equal the kernel's GC_BASE.
Every field present in both must have the same bit range.
"""
import importlib.util
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from rawgpu.autogen.regs import ip_regs

GEN = Path(__file__).resolve().parents[1] / "autogen" / "regs" / "gen.py"
_spec = importlib.util.spec_from_file_location("rawgpu_regs_gen", GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

MESA = gen.find_mesa_root()
LINUX = gen.find_linux_root()
pytestmark = pytest.mark.skipif(MESA is None, reason="Mesa register JSON not found: run `python -m rawgpu.autogen fetch` "
                                                     "or set RAWGPU_MESA_SRC to a mesa 25.0.7 source tree")
CASES = [("gfx11", (11, 0, 0)), ("gfx115", (11, 5, 0)), ("gfx12", (12, 0, 0))]


def _kernel_gc_base() -> list[int] | None:
  """Instance 0 of GC_BASE in the kernel's navi2x IP offset header."""
  if LINUX is None: return None
  p = LINUX / "drivers/gpu/drm/amd/include/sienna_cichlid_ip_offset.h"
  if not p.is_file(): return None
  m = re.search(r"IP_BASE\s+GC_BASE\s*=\s*\{\s*\{\s*\{\s*\{([^}]*)\}", p.read_text())
  return [int(x.strip(), 0) for x in m.group(1).split(",")] if m else None


@pytest.mark.parametrize("chip,ver", CASES, ids=[c[0] for c in CASES])
def test_mesa_registers_agree(chip, ver):
  path = MESA / "src/amd/registers" / f"{chip}.json"
  if not path.is_file(): pytest.skip(f"{path} missing")
  db = json.loads(path.read_text())
  t = ip_regs("gc", *ver)
  assert t.version == ver
  maps = db["register_mappings"]
  assert maps
  missing = [m["name"] for m in maps if m["name"] not in t]
  assert missing == [], f"Mesa {chip} registers the kernel {ver} headers lack: {missing[:10]}"

  # one constant per segment (ix registers form their own space) must explain every register
  deltas: dict[object, set[int]] = defaultdict(set)
  for m in maps:
    assert m["map"]["to"] == "mm" and m["map"]["at"] % 4 == 0, m
    r = t[m["name"]]
    seg = "ix" if r.name.startswith("ix") else r.base_idx
    assert seg is not None, r.name
    deltas[seg].add(m["map"]["at"] // 4 - r.offset)
  assert all(len(v) == 1 for v in deltas.values()), {k: sorted(map(hex, v))[:5] for k, v in deltas.items()}
  base = {k: v.pop() for k, v in deltas.items()}
  if "ix" in base: assert base.pop("ix") == 0
  kbase = _kernel_gc_base()
  if kbase is not None:
    assert base == {k: kbase[k] for k in base}, (base, kbase)

  # fields: every field in both has the same bit range
  compared = mesa_total = 0
  for m in maps:
    if "type_ref" not in m: continue
    r = t[m["name"]]
    for f in db["register_types"][m["type_ref"]]["fields"]:
      mesa_total += 1
      if f["name"] not in r.fields: continue
      lo, hi = f["bits"]
      assert r.fields[f["name"]] == (lo, ((1 << (hi - lo + 1)) - 1) << lo), (m["name"], f)
      compared += 1
  # nearly all of Mesa's fields must be found by name, so a naming slip cannot silently skip the check
  # (gfx11.json has 25 fields newer than the kernel's gc 11.0.0 header, e.g. CB_COLOR0_FDCC_CONTROL.MAX_COMP_FRAGS)
  assert compared >= 0.98 * mesa_total, (compared, mesa_total)
