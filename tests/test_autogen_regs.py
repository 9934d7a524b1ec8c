"""rawgpu.autogen.regs API behaviour: lookups, prefixes, version fallback, encode/decode, errors."""
import random

import pytest

from rawgpu.autogen import regs
from rawgpu.autogen.regs import Reg, RegTable, UnknownRegister, available, ip_regs
from rawgpu.errors import RawGPUError

# The versions others code against; each must have a generated table.
REQUIRED = {"gc": [(11, 0, 0), (11, 0, 3), (12, 0, 0), (9, 4, 3)], "mmhub": [(3, 0, 0), (4, 1, 0), (1, 8, 0)],
            "nbio": [(4, 3, 0), (7, 9, 0), (7, 11, 0)], "nbif": [(6, 3, 1)],
            "osssys": [(6, 0, 0), (7, 0, 0), (4, 4, 2)], "mp": [(13, 0, 0), (13, 0, 6), (14, 0, 2)],
            "hdp": [(6, 0, 0), (7, 0, 0), (4, 4, 2)], "athub": [(3, 0, 0), (4, 1, 0)],
            "smuio": [(13, 0, 6), (14, 0, 2)]}


@pytest.mark.parametrize("ip,ver", [(ip, v) for ip, vs in REQUIRED.items() for v in vs])
def test_required_tables_load(ip, ver):
  t = ip_regs(ip, *ver)
  assert isinstance(t, RegTable) and t.version == ver and t.ip == ip
  assert len(t) > 0 and len(t.names()) == len(t)
  # every register resolves and has a non-negative offset; ix/cfg ones have no segment index (a handful of MMIO
  # registers lack *_BASE_IDX in the headers too; test_autogen_regs_headers checks those against the C compiler)
  mmio = 0
  for n in t.names():
    r = t[n]
    assert r.name == n and r.offset >= 0
    if n.startswith(("ix", "cfg")): assert r.base_idx is None, n
    else: mmio += r.base_idx is not None
  assert mmio > 0


def test_prefix_and_bare_names_are_the_same_register():
  gc = ip_regs("gc", 11, 0, 0)
  assert gc["CP_HQD_ACTIVE"] is gc["regCP_HQD_ACTIVE"]
  assert "regCP_HQD_ACTIVE" in gc and "CP_HQD_ACTIVE" in gc and "regCP_HQD_ACTIVE_NOPE" not in gc
  assert 42 not in gc
  assert gc["CP_HQD_ACTIVE"].bare == "CP_HQD_ACTIVE"
  assert gc.get("NOPE") is None and gc.get("CP_HQD_ACTIVE") is gc["CP_HQD_ACTIVE"]
  for n in random.Random(1).sample(gc.names(), 200):
    assert gc[gc[n].bare].name == n or not n.startswith(("reg", "mm"))


def test_older_mm_prefix():
  gc9 = ip_regs("gc", 9, 0, 0)
  names = gc9.names()
  assert any(n.startswith("mm") for n in names) and not any(n.startswith("reg") for n in names)
  r = gc9["CP_HQD_ACTIVE"]
  assert r.name == "mmCP_HQD_ACTIVE" and gc9["mmCP_HQD_ACTIVE"] is r and r.fields


def test_indirect_registers_have_no_segment():
  gc = ip_regs("gc", 11, 0, 0)
  ix = [n for n in gc.names() if n.startswith("ix")]
  assert ix, "gc 11 headers define ix registers"
  r = gc[ix[0]]
  assert r.base_idx is None
  with pytest.raises(RawGPUError): r.addr([0, 0, 0])


def test_addr_uses_base_segment():
  gc = ip_regs("gc", 11, 0, 0)
  r = gc["regCP_HQD_ACTIVE"]
  bases = [0x1000 * (i + 1) for i in range(8)]
  assert r.addr(bases) == bases[r.base_idx] + r.offset


def test_version_fallback_is_nearest_lower_same_major():
  have = available()
  rng = random.Random(2)
  for ip, vers in have.items():
    for v in vers:
      assert ip_regs(ip, *v).version == v
      # a version just above v that is not generated falls back to the highest generated version <= it
      up = (v[0], v[1], v[2] + 1 + rng.randrange(3))
      expect = max(x for x in vers if x[0] == v[0] and x <= up)
      assert ip_regs(ip, *up).version == expect
    majors = {v[0] for v in vers}
    lowest = min(vers)
    below = (lowest[0], lowest[1], lowest[2] - 1) if lowest[2] else (lowest[0], lowest[1] - 1, 99) if lowest[1] else None
    if below and below[1] >= 0 and not any(x[0] == below[0] and x <= below for x in vers):
      with pytest.raises(RawGPUError): ip_regs(ip, *below)
    missing = next(m for m in range(1, 100) if m not in majors)
    with pytest.raises(RawGPUError, match="available"): ip_regs(ip, missing, 0, 0)
  with pytest.raises(RawGPUError, match="available"): ip_regs("nosuchip", 1, 0, 0)
  assert ip_regs("GC", 11, 0, 0) is ip_regs("gc", 11, 0, 0)


def test_unknown_register_suggests_close_matches():
  gc = ip_regs("gc", 11, 0, 0)
  with pytest.raises(UnknownRegister) as e: gc["CP_HQD_ACTIV"]
  assert isinstance(e.value, KeyError) and isinstance(e.value, RawGPUError)
  assert "regCP_HQD_ACTIVE" in str(e.value) and "gc 11.0.0" in str(e.value)
  with pytest.raises(KeyError): gc["ZZZ_NOT_A_REGISTER"]
  with pytest.raises(UnknownRegister): gc[7]  # type: ignore[index]


def _tables():
  return [ip_regs(ip, *v) for ip, vs in available().items() for v in vs]


def test_encode_decode_round_trip_all_fields():
  rng = random.Random(3)
  for t in _tables():
    names = [n for n in t.names() if t[n].fields]
    for n in rng.sample(names, min(60, len(names))):
      r = t[n]
      vals = {f: rng.randrange((m >> s) + 1) for f, (s, m) in r.fields.items()}
      # fields that overlap (some headers alias bits) cannot all be set independently; keep disjoint ones
      used, pick = 0, {}
      for f, v in vals.items():
        s, m = r.fields[f]
        if m & used: continue
        used |= m; pick[f] = v
      word = r.encode(**pick)
      dec = r.decode(word)
      assert {f: dec[f] for f in pick} == pick, (t, n)
      assert word & ~used == 0
      assert r.decode(r.modify(word, **{f: 0 for f in pick})) == r.decode(0)


def test_field_masks_are_contiguous():
  # shift is kept as the header says even where it disagrees with the mask (gc 11.0.0 GL1C_UTCL0_CNTL1.FORCE_IN_ORDER);
  # the masks themselves are contiguous runs (a few 64-bit registers exist: gc 12 PACKER_CONTROL, mp 13.0.6 MCA)
  for t in _tables():
    for n in t.field_registers():
      for f, (s, m) in t.fields_of(n).items():
        low = m & -m
        assert 0 < m < 1 << 64 and (m + low) & m == 0, (t, n, f)


def test_encode_errors():
  r = ip_regs("gc", 11, 0, 0)["regCP_HQD_PQ_CONTROL"]
  s, m = r.fields["QUEUE_SIZE"]
  top = m >> s
  assert r.decode(r.encode(QUEUE_SIZE=top))["QUEUE_SIZE"] == top
  with pytest.raises(RawGPUError, match="does not fit"): r.encode(QUEUE_SIZE=top + 1)
  with pytest.raises(RawGPUError, match="does not fit"): r.encode(QUEUE_SIZE=-1)
  with pytest.raises(RawGPUError, match="QUEUE_SIZE"): r.encode(QUEUE_SIZ=1)
  assert r.field_names() == list(r.fields)


def test_corrupt_table_is_a_rawgpu_error(tmp_path, monkeypatch):
  import zlib
  good = zlib.decompress((regs.DATA_DIR / "hdp_6_0_0.bin").read_bytes())
  bad = {"gc_11_0_0.bin": b"not zlib", "hdp_6_0_0.bin": zlib.compress(good[:len(good) // 2]),
         "mp_13_0_0.bin": zlib.compress(b"#rawgpu-regs 999 {}\n0 0\n\n\n"), "athub_3_0_0.bin": zlib.compress(b"\xff\xfe")}
  for n, b in bad.items(): (tmp_path / n).write_bytes(b)
  monkeypatch.setattr(regs, "DATA_DIR", tmp_path)
  regs.available.cache_clear(); regs._load.cache_clear()
  try:
    for n in bad:
      ip, *v = n[:-4].split("_")
      with pytest.raises(RawGPUError, match="unreadable"): ip_regs(ip, *map(int, v))
  finally:
    monkeypatch.undo()
    regs.available.cache_clear(); regs._load.cache_clear()


def test_reg_is_hashable_and_frozen():
  r = ip_regs("hdp", 6, 0, 0)[ip_regs("hdp", 6, 0, 0).names()[0]]
  assert isinstance(r, Reg) and r in {r}
  with pytest.raises(Exception): r.offset = 1  # type: ignore[misc]
