"""The generated GC tables against Mesa's register database (src/amd/registers/gfx11.json, gfx115.json, gfx12.json).

Mesa's "at" is a byte address in one flat space: at == 4 * (GC_BASE[base_idx] + offset) for MMIO registers, where
GC_BASE is the navi-family GC base of instance 0 (the kernel's sienna_cichlid_ip_offset.h: 0x1260, 0xA000, ...), and
at == 4 * index for the indirect ixSQ_WAVE_* registers. The test derives one constant per segment from the data,
requires it to explain every shared register, and (with kernel headers) requires it to equal the kernel's GC_BASE.
Every field present in both must have the same bit range. gfx940.json (gc 9.4.3, GC_BASE of aldebaran_ip_offset.h:
0x2000, 0xA000) is checked too except for its segment-1 offsets: Mesa places 18 SQ_THREAD_TRACE_*/SPI_CONFIG_CNTL
registers at 4 * offset there, unlike the 6.12 header, so segment 1 has no single base in that file.
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
# (Mesa file, gc version, kernel IP offset header holding the GC_BASE Mesa uses, segments whose offsets are checked)
CASES = [("gfx11", (11, 0, 0), "sienna_cichlid", None), ("gfx115", (11, 5, 0), "sienna_cichlid", None),
         ("gfx12", (12, 0, 0), "sienna_cichlid", None), ("gfx940", (9, 4, 3), "aldebaran", {0, "ix"})]


def _kernel_gc_base(chip: str) -> list[int] | None:
  """Instance 0 of GC_BASE in the kernel's <chip>_ip_offset.h."""
  if LINUX is None: return None
  p = LINUX / f"drivers/gpu/drm/amd/include/{chip}_ip_offset.h"
  if not p.is_file(): return None
  m = re.search(r"IP_BASE\s+GC_BASE\s*=\s*\{\s*\{\s*\{\s*\{([^}]*)\}", p.read_text())
  assert m, f"no GC_BASE in {p}"
  return [int(x.strip(), 0) for x in m.group(1).split(",")]


@pytest.mark.parametrize("chip,ver,base_chip,segments", CASES, ids=[c[0] for c in CASES])
def test_mesa_registers_agree(chip, ver, base_chip, segments):
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
    if segments is None or seg in segments: deltas[seg].add(m["map"]["at"] // 4 - r.offset)
  assert deltas and (segments is None or set(deltas) == segments)
  assert all(len(v) == 1 for v in deltas.values()), {k: sorted(map(hex, v))[:5] for k, v in deltas.items()}
  base = {k: v.pop() for k, v in deltas.items()}
  if "ix" in base: assert base.pop("ix") == 0
  kbase = _kernel_gc_base(base_chip)
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
