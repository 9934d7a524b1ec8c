"""Generate the opcode tables (optables_gfx11.py, optables_gfx12.py) by asking LLVM's disassembler.

Development tool, not imported at run time. For every encoding format and every opcode value we build one probe
instruction whose register fields hold distinct, recognisable registers, disassemble all probes with
`llvm-mc-19 -disassemble -show-encoding`, and record the mnemonic and which fields it prints, with their register
counts. The facts are LLVM's; the tables are generated, never edited by hand.
Run: python -m rawgpu.drivers.emu.shader.gen_optables [gfx9|gfx11|gfx12 ...]   (default: all three)
"""
from __future__ import annotations
import os, re, subprocess

# register numbers the probes put in each field, so the printed text says which field is which operand
V_SRC0, V_SRC1, V_SRC2, V_DST, V_DSTY, V_SRC0Y, V_SRC1Y = 10, 20, 30, 40, 41, 11, 21
S_DST, S_SRC0, S_SRC1, S_BASE = 16, 24, 8, 4

def _short(z) -> dict[str, tuple[int, callable, list[set[str]]]]:
  """The 32-bit scalar and VOP1/VOP2/VOPC encodings, laid out alike on every family."""
  return {
    "sop2": (128, lambda op, o: [(0b10 << 30) | (op << 23) | (z(S_DST, "sdst", o) << 16) | (S_SRC1 << 8) | S_SRC0], [set(), {"sdst"}]),
    "sopk": (32, lambda op, o: [(0b1011 << 28) | (op << 23) | (z(S_DST, "sdst", o) << 16) | 0x1234], [set(), {"sdst"}]),
    "sop1": (256, lambda op, o: [(0b101111101 << 23) | (z(S_DST, "sdst", o) << 16) | (op << 8) | z(S_SRC0, "src0", o)],
             [set(), {"sdst"}, {"src0"}, {"sdst", "src0"}]),
    "sopc": (128, lambda op, o: [(0b101111110 << 23) | (op << 16) | (S_SRC1 << 8) | S_SRC0], [set()]),
    "sopp": (128, lambda op, o: [(0b101111111 << 23) | (op << 16)], [set()]),
    "vop1": (256, lambda op, o: [(0b0111111 << 25) | (z(V_DST, "vdst", o) << 17) | (op << 9) | z(V_SRC0 + 256, "src0", o)],
             [set(), {"vdst"}, {"src0"}, {"vdst", "src0"}]),
    "vop2": (64, lambda op, o: [(op << 25) | (V_DST << 17) | (V_SRC1 << 9) | (V_SRC0 + 256)], [set()]),
    "vopc": (256, lambda op, o: [(0b0111110 << 25) | (op << 17) | (V_SRC1 << 9) | (V_SRC0 + 256)], [set()]),
  }

def _probes(arch: str) -> dict[str, tuple[int, callable, list[set[str]]]]:
  """format -> (opcode count, build(op, omitted fields) -> dwords, the sets of fields to omit, tried in order).

  LLVM rejects encodings whose unused operand fields are not zero, so each opcode is probed with fewer fields until
  one is accepted."""
  def z(val: int, name: str, omit: set[str]) -> int: return 0 if name in omit else val
  def vop3(op, o, s1=V_SRC1 + 256, s2=V_SRC2 + 256, s0=V_SRC0 + 256):
    return [(0b110101 << 26) | (op << 16) | z(V_DST, "vdst", o), (z(s2, "src2", o) << 18) | (z(s1, "src1", o) << 9) | z(s0, "src0", o)]
  def vopd(opx, opy, o):
    return [(0b110010 << 26) | (opx << 22) | (opy << 17) | (z(V_SRC1, "src1x", o) << 9) | (V_SRC0 + 256),
            (V_DST << 24) | ((V_DSTY >> 1) << 17) | (z(V_SRC1Y, "src1y", o) << 9) | (V_SRC0Y + 256)]
  src = [set(), {"src2"}, {"src1", "src2"}, {"src0", "src1", "src2"}, {"vdst", "src1", "src2"}, {"vdst", "src2"},
         {"vdst", "src0", "src1", "src2"}]
  if arch == "gfx9": return _probes_gfx9(z, src)
  p: dict[str, tuple[int, callable, list[set[str]]]] = {
    **_short(z),
    "vop3": (1024, vop3, src),
    "vop3.s": (1024, lambda op, o: vop3(op, o, S_SRC1, 28), src),
    "vop3.w": (1024, lambda op, o: vop3(op, o, S_SRC1, V_SRC2 + 256, S_SRC0), src),
    "vop3p": (128, lambda op, o: [(0b11001100 << 24) | (op << 16) | (1 << 14) | V_DST,  # op_sel_hi[2] = 1, the default (gfx12 WMMA requires it)
                                  (3 << 27) | (z(V_SRC2 + 256, "src2", o) << 18) | (z(V_SRC1 + 256, "src1", o) << 9) | (V_SRC0 + 256)],
              src[:3]),
    "vopdx": (16, lambda op, o: vopd(op, 4, o), [set(), {"src1x"}]),
    "vopdy": (32, lambda op, o: vopd(0, op, o), [set(), {"src1y"}]),
    "ds": (256, lambda op, o: [(0b110110 << 26) | (op << 18), (z(V_DST, "vdst", o) << 24) | (z(V_SRC2, "data1", o) << 16)
                               | (z(V_SRC1, "data0", o) << 8) | V_SRC0],
           [set(), {"data1"}, {"data0", "data1"}, {"vdst"}, {"vdst", "data1"}, {"vdst", "data0", "data1"}]),
  }
  if arch == "gfx11":
    p["smem"] = (256, lambda op, o: [(0b111101 << 26) | (op << 18) | (z(S_DST, "sdata", o) << 6) | (S_BASE >> 1), (124 << 25) | 0x10],
                 [set(), {"sdata"}])
    for seg, name in enumerate(("flat", "scratch", "global")):
      p[name] = (128, lambda op, o, seg=seg: [(0b110111 << 26) | (op << 18) | (seg << 16),
                 (z(V_DST, "vdst", o) << 24) | (1 << 23) * (seg == 1) | (124 << 16) | (z(V_SRC1, "data", o) << 8) | V_SRC0],
                 [set(), {"vdst"}, {"data"}])
    p["mubuf"] = (256, lambda op, o: [(0b111000 << 26) | (op << 18), (124 << 24) | (S_BASE >> 2 << 16) | (V_SRC1 << 8) | V_SRC0],
                  [set()])
  else:
    p["smem"] = (256, lambda op, o: [(0b111101 << 26) | (op << 13) | (z(S_DST, "sdata", o) << 6) | (S_BASE >> 1), (124 << 25) | 0x10],
                 [set(), {"sdata"}])
    for seg, name in enumerate(("flat", "scratch", "global")):
      p[name] = (128, lambda op, o, seg=seg: [(0b111011 << 26) | (seg << 24) | (op << 14) | 124,
                 (z(V_SRC1, "data", o) << 23) | (1 << 17) * (seg == 1) | z(V_DST, "vdst", o), V_SRC0],
                 [set(), {"vdst"}, {"data"}])
    # VBUFFER (gfx12's MUBUF): SOFFSET null, VDATA, SRSRC (an SGPR number), FORMAT 1 (what LLVM gives untyped ones)
    p["mubuf"] = (256, lambda op, o: [(0b110001 << 26) | (op << 14) | 124, (1 << 23) | (S_BASE << 9) | V_SRC1, V_SRC0], [set()])
  return p

def _probes_gfx9(z, src) -> dict[str, tuple[int, callable, list[set[str]]]]:
  """CDNA3 (gfx940-942) encodings (the GCN/Vega layout): the scalar and VOP1/2/C words as on gfx11, VOP3 behind
  110100, SMEM 110000 (IMM set, an immediate offset), DS with its opcode at bit 17, FLAT with the segment at bit 14
  (scratch with SVE, w0 bit 13, so its VGPR address prints; SADDR 0x7f is off, flat leaves it 0), MUBUF 111000 with a 7-bit opcode."""
  def vop3(op, o, s1=V_SRC1 + 256, s2=V_SRC2 + 256, s0=V_SRC0 + 256):
    return [(0b110100 << 26) | (op << 16) | z(V_DST, "vdst", o), (z(s2, "src2", o) << 18) | (z(s1, "src1", o) << 9) | z(s0, "src0", o)]
  p = {
    **_short(z),
    "vop3": (1024, vop3, src),
    "vop3.s": (1024, lambda op, o: vop3(op, o, S_SRC1, 28), src),
    "vop3.w": (1024, lambda op, o: vop3(op, o, S_SRC1, V_SRC2 + 256, S_SRC0), src),
    "vop3p": (128, lambda op, o: [(0b110100111 << 23) | (op << 16) | (1 << 14) | V_DST,
                                  (3 << 27) | (z(V_SRC2 + 256, "src2", o) << 18) | (z(V_SRC1 + 256, "src1", o) << 9) | (V_SRC0 + 256)],
              src[:3]),
    "ds": (256, lambda op, o: [(0b110110 << 26) | (op << 17), (z(V_DST, "vdst", o) << 24) | (z(V_SRC2, "data1", o) << 16)
                               | (z(V_SRC1, "data0", o) << 8) | V_SRC0],
           [set(), {"data1"}, {"data0", "data1"}, {"vdst"}, {"vdst", "data1"}, {"vdst", "data0", "data1"}]),
    "smem": (256, lambda op, o: [(0b110000 << 26) | (op << 18) | (1 << 17) | (z(S_DST, "sdata", o) << 6) | (S_BASE >> 1), 0x10],
             [set(), {"sdata"}]),
    "mubuf": (128, lambda op, o: [(0b111000 << 26) | (op << 18), (S_BASE >> 2 << 16) | (V_SRC1 << 8) | V_SRC0], [set()]),
  }
  for seg, name in enumerate(("flat", "scratch", "global")):
    p[name] = (128, lambda op, o, seg=seg: [(0b110111 << 26) | (op << 18) | (seg << 14) | (1 << 13) * (seg == 1),
               (z(V_DST, "vdst", o) << 24) | (0x7f << 16) * (seg > 0) | (z(V_SRC1, "data", o) << 8) | V_SRC0],
               [set(), {"vdst"}, {"data"}])
  return p

REG = re.compile(r"^(v|s|ttmp|a)(?:(\d+)|\[(\d+):(\d+)\])$")   # a: CDNA's AGPRs, recorded as vector operands

def _fields(fmt: str) -> dict[tuple[str, int], str]:
  """(register file, first register) -> the field the probe put it in."""
  v = {V_SRC0: "src0", V_SRC1: "src1", V_SRC2: "src2", V_DST: "vdst"}
  if fmt == "vopdx" or fmt == "vopdy":
    v = {V_SRC0: "src0x", V_SRC1: "src1x", V_DST: "vdstx", V_SRC0Y: "src0y", V_SRC1Y: "src1y", V_DSTY: "vdsty"}
  if fmt == "ds": v = {V_SRC0: "addr", V_SRC1: "data0", V_SRC2: "data1", V_DST: "vdst"}
  if fmt in ("flat", "scratch", "global", "mubuf"): v = {V_SRC0: "addr", V_SRC1: "data", V_DST: "vdst"}
  s = {S_DST: "sdst", S_SRC0: "src0", S_SRC1: "src1", 0: "sdst", 28: "src2", V_DST: "vdst"}
  if fmt == "smem": s = {S_DST: "sdata", S_BASE: "sbase"}
  if fmt == "mubuf": s = {S_BASE: "srsrc"}
  return {**{("v", k): f for k, f in v.items()}, **{("s", k): f for k, f in s.items()}}

def _parse(fmt: str, text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
  name, _, rest = text.strip().partition(" ")
  fields, ops = _fields(fmt), []
  for tok in [t.strip() for t in rest.split(",")] if rest else []:
    tok = tok.split(" ")[0]
    if fmt in ("vopdx", "vopdy") and tok == "::": continue
    m = REG.match(tok)
    if m:
      lo = int(m.group(2) if m.group(2) is not None else m.group(3))
      n = 1 if m.group(2) is not None else int(m.group(4)) - lo + 1
      rf = "v" if m.group(1) == "a" else m.group(1)   # an AGPR field is a VGPR field the instruction reads as AGPR
      f = fields.get((rf, lo))
      if f: ops.append((f, n, rf))
    elif tok in ("vcc_lo", "vcc"): ops.append(("vcc", 1 if tok == "vcc_lo" else 2, "s"))
  return name, tuple(ops)

def disassemble(mcpu: str, probes: list[list[int]]) -> list[str | None]:
  """Disassemble each probe; None where LLVM calls it an invalid encoding.

  LLVM prints the canonical encoding (unused fields cleared), so probes are told apart by a marker instruction
  (s_movk_i32 s99, index) on the line before each, and invalid ones by the input line its warning names."""
  lines = []
  for i, ws in enumerate(probes):
    marker = (0b1011 << 28) | (99 << 16) | i
    # the trailing s_nop is what an instruction wanting a literal swallows, so the next marker survives
    lines += [",".join(f"0x{b:02x}" for b in marker.to_bytes(4, "little")),
              ",".join(f"0x{b:02x}" for w in ws + [0xbf800000] for b in w.to_bytes(4, "little"))]
  r = subprocess.run(["llvm-mc-19", "-disassemble", "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}"],
                     input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
  bad = {(int(m.group(1)) - 2) // 2 for m in re.finditer(r"<stdin>:(\d+):\d+: warning: invalid instruction", r.stderr)}
  out: list[str | None] = [None] * len(probes)
  cur = None
  for ln in r.stdout.splitlines():
    m = re.match(r"\s*s_movk_i32 s99, (0x[0-9a-f]+|\d+)$", ln)
    if m: cur = int(m.group(1), 0); continue
    if "Invalid register" in ln: bad.add(cur)  # LLVM prints these, but the probe put a wrong register kind there
    if cur is not None and cur not in bad and out[cur] is None and ln.strip() and not ln.strip().startswith("."):
      out[cur] = ln.strip()
  return out

def generate(arch: str) -> dict[str, dict[int, tuple[str, tuple]]]:
  mcpu = {"gfx9": "gfx942", "gfx11": "gfx1100", "gfx12": "gfx1201"}[arch]
  tables: dict[str, dict[int, tuple[str, tuple]]] = {}
  probes = _probes(arch)
  for i in range(max(len(v[2]) for v in probes.values())):  # fewest omitted fields first, over all probe kinds
    for pfmt, (nops, mk, variants) in probes.items():
      if i >= len(variants): continue
      omit, fmt = variants[i], pfmt.split(".")[0]  # "vop3.s": vop3 again with SGPR sources, for opcodes that need them
      tab = tables.setdefault(fmt, {})
      todo = [op for op in range(nops) if op not in tab]
      for op, t in zip(todo, disassemble(mcpu, [mk(op, omit) for op in todo])):
        if t is None: continue
        if fmt in ("vopdx", "vopdy"): t = t.split("::")[0 if fmt == "vopdx" else 1]
        name, ops = _parse(fmt, t)
        tab[op] = (re.sub(r"_e(32|64)$", "", name), ops)
  return {k: dict(sorted(v.items())) for k, v in tables.items()}

def main(archs: list[str]) -> None:
  here = os.path.dirname(os.path.abspath(__file__))
  for arch in archs or ("gfx9", "gfx11", "gfx12"):
    t = generate(arch)
    with open(os.path.join(here, f"optables_{arch}.py"), "w") as f:
      f.write(f'"""Opcode tables for {arch}, generated by gen_optables.py from llvm-mc-19. Do not edit."""\n')
      f.write("# format -> opcode -> (mnemonic, ((field, register count), ...) in printed operand order)\n")
      f.write("TABLES = {\n")
      for fmt, tab in t.items():
        f.write(f"  {fmt!r}: {{\n")
        for op, v in sorted(tab.items()): f.write(f"    {op}: {v!r},\n")
        f.write("  },\n")
      f.write("}\n")
    print(arch, {k: len(v) for k, v in t.items()})

if __name__ == "__main__":
  import sys
  main(sys.argv[1:])
