"""The generated register tables against the original asic_reg headers, with gcc as the oracle.

For every generated IP version: gcc -dM enumerates the macros the headers define (completeness), and a C program
compiled with the real headers prints every register's offset and *_BASE_IDX and every field's SHIFT and MASK
(values). Both are compared with rawgpu.autogen.regs.
"""
import importlib.util
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rawgpu.autogen.regs import ip_regs

GEN = Path(__file__).resolve().parents[1] / "autogen" / "regs" / "gen.py"
_spec = importlib.util.spec_from_file_location("rawgpu_regs_gen", GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

ROOT = gen.find_linux_root()
CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = [
  pytest.mark.skipif(ROOT is None, reason="kernel asic_reg headers not found: run `python -m rawgpu.autogen fetch` "
                                          "or set RAWGPU_LINUX_SRC"),
  pytest.mark.skipif(CC is None, reason="no C compiler (gcc) on PATH"),
]
# Values are checked for a seeded sample of what gcc enumerates (hundreds per table; all of a small table);
# RAWGPU_REGS_FULL=1 checks every register and field (about 25 s).
FULL = os.environ.get("RAWGPU_REGS_FULL") == "1"
SAMPLE_REGS, SAMPLE_FIELDS = 600, 1500
REG_NAME = re.compile(r"^(reg|mm|ix|cfg)[A-Z0-9]\w*$")


def _macros(header: Path) -> dict[str, str]:
  out = subprocess.run([CC, "-dM", "-E", "-undef", "-x", "c", str(header)], capture_output=True, text=True, check=True)
  defs = {}
  for line in out.stdout.splitlines():
    _, name, *value = line.split(" ", 2)
    defs[name] = value[0] if value else ""
  return defs


def _run_c(tmp: Path, headers: list[Path], rows: list[str]) -> list[list[str]]:
  src = tmp / "dump.c"
  body = "\n".join(rows)
  src.write_text("#include <stdio.h>\n" + "".join(f'#include "{h}"\n' for h in headers) +
                 "struct row { const char *n; unsigned long long a; long long b; };\n"
                 f"static const struct row rows[] = {{\n{body}\n{{0, 0, 0}}}};\n"
                 "int main(void) { for (const struct row *r = rows; r->n; r++) printf(\"%s %llx %lld\\n\", r->n, r->a, r->b);"
                 " return 0; }\n")
  exe = tmp / "dump"
  subprocess.run([CC, "-O0", "-w", str(src), "-o", str(exe)], check=True, capture_output=True)
  return [ln.split(" ") for ln in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()]


@pytest.mark.parametrize("ip,folder,stem,ver", gen.TARGETS, ids=[t[2] for t in gen.TARGETS])
def test_table_matches_compiled_headers(tmp_path, ip, folder, stem, ver):
  d = ROOT / gen.ASIC_REG / folder
  off_h, sh_h = d / f"{stem}_offset.h", d / f"{stem}_sh_mask.h"
  t = ip_regs(ip, *ver)
  assert t.version == ver

  # completeness: the registers gcc sees (a *_BASE_IDX is a register's segment, not a register) are the table's
  odefs = _macros(off_h)
  regs = sorted(n for n in odefs if REG_NAME.match(n) and odefs[n] and not n.endswith("_BASE_IDX"))
  assert sorted(t.names()) == regs

  # every field gcc sees as a SHIFT/MASK pair is in the table, and nothing else is
  sdefs = _macros(sh_h)
  pairs = sorted(n[:-len("__SHIFT")] for n in sdefs if n.endswith("__SHIFT") and n[:-len("__SHIFT")] + "_MASK" in sdefs)
  assert sum(len(t.fields_of(r)) for r in t.field_registers()) == len(pairs)

  # values, evaluated by the C compiler from the real headers
  rng = random.Random(stem)
  regs_v = regs if FULL or len(regs) <= SAMPLE_REGS else sorted(rng.sample(regs, SAMPLE_REGS))
  pairs_v = pairs if FULL or len(pairs) <= SAMPLE_FIELDS else sorted(rng.sample(pairs, SAMPLE_FIELDS))
  # always include the odd cases: MMIO registers without *_BASE_IDX, and ix/cfg registers
  odd = [n for n in regs if f"{n}_BASE_IDX" not in odefs and n not in regs_v]
  regs_v = regs_v + odd[:200]
  rows = []
  for n in regs_v:
    bidx = f"{n}_BASE_IDX" if f"{n}_BASE_IDX" in odefs else "-1"
    rows.append(f'{{"{n}", (unsigned long long)({n}), (long long)({bidx})}},')
  for k in pairs_v:
    rows.append(f'{{"{k}", (unsigned long long)({k}_MASK), (long long)({k}__SHIFT)}},')
  out = _run_c(tmp_path, [off_h, sh_h], rows)
  assert len(out) == len(rows)
  nregs = len(regs_v)
  for name, off, bidx in out[:nregs]:
    r = t[name]
    assert (r.name, r.offset, -1 if r.base_idx is None else r.base_idx) == (name, int(off, 16), int(bidx)), name
  field_regs = set(t.field_registers())
  for key, mask, shift in out[nregs:]:
    # the table must hold the field under one of the register/field splits of KEY at a "__"
    parts = key.split("__")
    found = [(r, f) for i in range(1, len(parts)) for r, f in [("__".join(parts[:i]), "__".join(parts[i:]))]
             if r in field_regs and f in t.fields_of(r)]
    assert found, key
    assert any(t.fields_of(r)[f] == (int(shift), int(mask, 16)) for r, f in found), key


def test_every_target_header_exists():
  for ip, folder, stem, ver in gen.TARGETS:
    d = ROOT / gen.ASIC_REG / folder
    assert (d / f"{stem}_offset.h").is_file() and (d / f"{stem}_sh_mask.h").is_file(), stem
