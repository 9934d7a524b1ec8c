"""Generate the register databases in this folder from the kernel's asic_reg headers (dev-time only).

  python autogen/regs/gen.py [--out DIR] [ip_major_minor_rev ...]

Headers come from `rawgpu.autogen.fetch.header_root("linux")` when that exists, else from a kernel source tree named
by RAWGPU_LINUX_SRC. Every value is evaluated from the headers; nothing is typed in by hand. Output: one
zlib-compressed text file per IP version (<ip>_<maj>_<min>_<rev>.bin), byte-identical across runs.
"""
from __future__ import annotations
import argparse, hashlib, json, os, re, sys, zlib
from pathlib import Path

ASIC_REG = "drivers/gpu/drm/amd/include/asic_reg"
FORMAT = 3
# (ip, folder under asic_reg, header stem without _offset.h/_sh_mask.h, version)
TARGETS: list[tuple[str, str, str, tuple[int, int, int]]] = [
  ("gc", "gc", "gc_9_0", (9, 0, 0)), ("gc", "gc", "gc_9_4_3", (9, 4, 3)),
  ("gc", "gc", "gc_11_0_0", (11, 0, 0)), ("gc", "gc", "gc_11_0_3", (11, 0, 3)), ("gc", "gc", "gc_11_5_0", (11, 5, 0)),
  ("gc", "gc", "gc_12_0_0", (12, 0, 0)),
  ("mmhub", "mmhub", "mmhub_1_8_0", (1, 8, 0)), ("mmhub", "mmhub", "mmhub_3_0_0", (3, 0, 0)),
  ("mmhub", "mmhub", "mmhub_3_0_1", (3, 0, 1)), ("mmhub", "mmhub", "mmhub_3_0_2", (3, 0, 2)),
  ("mmhub", "mmhub", "mmhub_3_3_0", (3, 3, 0)), ("mmhub", "mmhub", "mmhub_4_1_0", (4, 1, 0)),
  ("nbio", "nbio", "nbio_4_3_0", (4, 3, 0)), ("nbio", "nbio", "nbio_7_9_0", (7, 9, 0)),
  ("nbio", "nbio", "nbio_7_11_0", (7, 11, 0)),
  ("nbif", "nbif", "nbif_6_3_1", (6, 3, 1)),
  ("osssys", "oss", "osssys_4_4_2", (4, 4, 2)), ("osssys", "oss", "osssys_6_0_0", (6, 0, 0)),
  ("osssys", "oss", "osssys_6_1_0", (6, 1, 0)), ("osssys", "oss", "osssys_7_0_0", (7, 0, 0)),
  ("mp", "mp", "mp_13_0_0", (13, 0, 0)), ("mp", "mp", "mp_13_0_6", (13, 0, 6)), ("mp", "mp", "mp_14_0_2", (14, 0, 2)),
  ("hdp", "hdp", "hdp_4_4_2", (4, 4, 2)), ("hdp", "hdp", "hdp_6_0_0", (6, 0, 0)), ("hdp", "hdp", "hdp_7_0_0", (7, 0, 0)),
  ("athub", "athub", "athub_1_8_0", (1, 8, 0)), ("athub", "athub", "athub_3_0_0", (3, 0, 0)),
  ("athub", "athub", "athub_4_1_0", (4, 1, 0)),
  ("smuio", "smuio", "smuio_13_0_6", (13, 0, 6)), ("smuio", "smuio", "smuio_14_0_2", (14, 0, 2)),
  ("sdma", "sdma", "sdma_4_4_2", (4, 4, 2)),
]
# Register-name prefixes in *_offset.h: MMIO (reg, older mm), indirect index space (ix), PCI config space (cfg).
PREFIXES = ("reg", "mm", "ix", "cfg")
# One pass over a header: `//NAME` comments and `#define NAME VALUE` lines.
LINE = re.compile(r"^(?://([^\n]*)|[ \t]*#define[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*([^\n]*))$", re.M)
INT = re.compile(r"^\(?[ \t]*(0[xX][0-9a-fA-F]+|[0-9]+)[uUlL]*[ \t]*\)?$")


def find_root(source: str, env: str, marker: str) -> Path | None:
  """A header tree containing MARKER: the fetched one (rawgpu.autogen.fetch), else the tree named by $ENV."""
  try:
    from rawgpu.autogen.fetch import header_root
    root = Path(header_root(source))
    if (root / marker).exists(): return root
  except Exception:  # fetch not available or headers not fetched: fall through to the env var
    pass
  src = os.environ.get(env)
  if src and (Path(src) / marker).exists(): return Path(src)
  return None


def find_linux_root() -> Path | None: return find_root("linux", "RAWGPU_LINUX_SRC", ASIC_REG)
def find_mesa_root() -> Path | None: return find_root("mesa", "RAWGPU_MESA_SRC", "src/amd/registers/gfx11.json")


def linux_root() -> Path:
  root = find_linux_root()
  if root is None:
    raise SystemExit(f"no kernel headers: run `python -m rawgpu.autogen fetch` or set RAWGPU_LINUX_SRC to a Linux 6.12 "
                     f"source tree containing {ASIC_REG}")
  return root


def scan(path: Path) -> tuple[dict[str, int], dict[str, str]]:
  """Integer #defines in file order (a redefinition replaces the earlier value, as in C), and for each define the
  `//NAME` comment above it: sh_mask.h heads each register's fields with one, which settles names containing "__"."""
  text = path.read_text(errors="replace")
  defs: dict[str, int] = {}
  heading: dict[str, str] = {}
  current, seen = "", 0
  for m in LINE.finditer(text):
    comment, name, value = m.groups()
    if comment is not None:
      if not comment.startswith(" "): current = comment.strip()
      continue
    seen += 1
    value = value.split("//")[0].split("/*")[0].strip()
    if not value: continue  # include guards have no value
    v = INT.match(value)
    if not v: raise ValueError(f"{path.name}: cannot evaluate #define {name} {value!r}")
    defs.pop(name, None)
    defs[name] = int(v.group(1), 0)
    if current: heading[name] = current
  if seen != text.count("#define"): raise ValueError(f"{path.name}: {text.count('#define') - seen} #define lines not understood")
  return defs, heading


def split_prefix(name: str) -> tuple[str, str] | None:
  for p in PREFIXES:
    if name.startswith(p) and len(name) > len(p) and (name[len(p)].isupper() or name[len(p)].isdigit()):
      return p, name[len(p):]
  return None


def parse_offsets(path: Path) -> dict[str, tuple[int, int | None]]:
  """Register name (with prefix) -> (dword offset, base index or None for spaces without segments)."""
  defs, _ = scan(path)
  regs: dict[str, tuple[int, int | None]] = {}
  orphans = 0
  for name, value in defs.items():
    if name.endswith("_BASE_IDX") and (name + "_BASE_IDX") not in defs:
      # the segment of register X; a few headers carry one for an X they never define (mp 14.0.2): no register
      orphans += name[:-len("_BASE_IDX")] not in defs
      continue
    if split_prefix(name) is None: raise ValueError(f"{path.name}: unexpected register name {name}")
    regs[name] = (value, defs.get(name + "_BASE_IDX"))
  if orphans: print(f"{path.name}: skipped {orphans} _BASE_IDX defines without a register", file=sys.stderr)
  return regs


def parse_fields(path: Path, bare_names: set[str]) -> dict[str, list[tuple[str, int, int]]]:
  """Bare register name -> [(field, shift, shifted mask)] in header order, from FOO__FIELD__SHIFT / FOO__FIELD_MASK."""
  defs, heading = scan(path)
  fields: dict[str, list[tuple[str, int, int]]] = {}
  stray = 0
  for name, shift in defs.items():
    if not name.endswith("__SHIFT"): continue
    key = name[:-len("__SHIFT")]
    mask = defs.get(key + "_MASK")
    if mask is None:  # a few headers have a stray SHIFT (e.g. gc 11.0.0 SQ_CONFIG__DISABLE_SGPR_RD_KILL): no field
      stray += 1
      continue
    h = heading.get(name)
    reg = h if h and key.startswith(h + "__") else _guess_owner(key, bare_names)
    if reg is None: raise ValueError(f"{path.name}: cannot tell the register of {name}")
    fields.setdefault(reg, []).append((key[len(reg) + 2:], shift, mask))
  if stray: print(f"{path.name}: skipped {stray} __SHIFT defines without a _MASK", file=sys.stderr)
  return fields


def _guess_owner(key: str, bare_names: set[str]) -> str | None:
  """Longest known register name that prefixes KEY at a '__' boundary; else the part before the first '__'."""
  parts = key.split("__")
  for n in range(len(parts) - 1, 0, -1):
    if "__".join(parts[:n]) in bare_names: return "__".join(parts[:n])
  return parts[0] if len(parts) > 1 else None


def build(root: Path, folder: str, stem: str, ip: str, version: tuple[int, int, int]) -> bytes:
  d = root / ASIC_REG / folder
  off_h, sh_h = d / f"{stem}_offset.h", d / f"{stem}_sh_mask.h"
  regs = parse_offsets(off_h)
  bare = {split_prefix(n)[1] for n in regs}  # type: ignore[index]
  fields = parse_fields(sh_h, bare)
  meta = {"ip": ip, "version": list(version),
          "sources": [{"path": f"{ASIC_REG}/{folder}/{p.name}", "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                      for p in (off_h, sh_h)]}
  # Line format (see README.md), laid out so the loader builds its dicts with zip() and no per-line Python work:
  #   #rawgpu-regs FORMAT {json meta}
  #   N_REGS N_FIELD_REGS
  #   register names with prefix, space-separated                     (1 line)
  #   "offset_hex base_idx" per register, base_idx "-" if none       (N_REGS lines)
  #   bare names of registers with fields, space-separated            (1 line)
  #   "field shift mask_hex ..." per such register, header order      (N_FIELD_REGS lines)
  lines = [f"#rawgpu-regs {FORMAT} " + json.dumps(meta, separators=(",", ":"), sort_keys=True), f"{len(regs)} {len(fields)}"]
  lines.append(" ".join(regs))
  lines += [f"{o:x} {'-' if b is None else b}" for o, b in regs.values()]
  lines.append(" ".join(fields))
  lines += [" ".join(f"{f} {s} {m:x}" for f, s, m in fl) for fl in fields.values()]
  text = ("\n".join(lines) + "\n").encode("ascii")
  return zlib.compress(text, 9)


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
  ap.add_argument("only", nargs="*", help="stems like gc_11_0_0 (default: all)")
  a = ap.parse_args(argv)
  root = linux_root()
  a.out.mkdir(parents=True, exist_ok=True)
  for ip, folder, stem, ver in TARGETS:
    fname = f"{ip}_{ver[0]}_{ver[1]}_{ver[2]}.bin"
    if a.only and stem not in a.only and fname[:-4] not in a.only: continue
    data = build(root, folder, stem, ip, ver)
    (a.out / fname).write_bytes(data)
    print(f"{fname}: {len(data)} bytes", file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
