"""Hostile input to the loader and its MessagePack decoder: only CodeObjectError/MsgpackError, never anything else."""
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from rawgpu import kernels
from rawgpu.errors import CodeObjectError
from rawgpu.hcq.amd.elf import load_code_object
from rawgpu.hcq.amd.msgpack import MsgpackError, unpackb

SAMPLES = [kernels.path(t, n).read_bytes() for t, n in (("gfx1100", "lut"), ("gfx1201", "matmul"), ("gfx942", "store_ids"))]
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_reject(data: bytes) -> None:
  try:
    co = load_code_object(data)
  except CodeObjectError as e:
    assert str(e)
    return
  co.image_at(0x10000000)  # whatever parsed must also load


@pytest.mark.parametrize("i", range(len(SAMPLES)))
def test_every_truncation_is_rejected(i):
  data = SAMPLES[i]
  for n in sorted({*range(0, 128), *range(128, len(data), 37)}):
    with pytest.raises(CodeObjectError): load_code_object(data[:n])


@FUZZ
@given(st.sampled_from(range(len(SAMPLES))), st.lists(st.integers(0, 1 << 20), min_size=1, max_size=8))
def test_bit_flips(i, flips):
  data = bytearray(SAMPLES[i])
  for f in flips: data[(f >> 3) % len(data)] ^= 1 << (f & 7)
  parse_or_reject(bytes(data))


@FUZZ
@given(st.sampled_from(range(len(SAMPLES))), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16))
def test_overwrites(i, at, junk):
  data = bytearray(SAMPLES[i])
  at %= len(data)
  data[at:at + len(junk)] = junk
  parse_or_reject(bytes(data[:len(SAMPLES[i])]))


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes(data):
  parse_or_reject(data)
  parse_or_reject(b"\x7fELF\x02\x01\x01\x40\x03" + data)  # past the magic, into the header fields


def test_header_fields_that_lie():
  data = SAMPLES[0]
  e_phoff, e_phnum = struct.unpack_from("<Q", data, 32)[0], struct.unpack_from("<H", data, 56)[0]
  load = next(e_phoff + 56 * i for i in range(e_phnum) if struct.unpack_from("<I", data, e_phoff + 56 * i)[0] == 1)
  for patch in ([(load + 32, "<Q", 1 << 62)],  # first PT_LOAD's file size
                [(load + 40, "<Q", 1 << 62)],  # its memory size
                [(load + 32, "<Q", len(data))],  # a file size that runs past the end of the file
                [(load + 16, "<Q", 1 << 40)],  # its vaddr
                [(40, "<Q", 1 << 40)],  # e_shoff
                [(60, "<H", 0xffff)],  # e_shnum
                [(62, "<H", 0xfff0)]):  # e_shstrndx
    d = bytearray(data)
    for off, fmt, v in patch: struct.pack_into(fmt, d, off, v)
    with pytest.raises(CodeObjectError): load_code_object(bytes(d))


def test_metadata_that_lies_is_named():
  """Each check of the metadata and the header flags, on a real object with one field changed (same length, so the
  rest of the file still parses): the error says which field."""
  reduce = kernels.path("gfx1100", "reduce").read_bytes()
  # the note header: namesz 7 ("AMDGPU\0"), descsz, type NT_AMDGPU_METADATA (32); made another type
  at = next(i for i in range(0, len(reduce) - 20, 4) if struct.unpack_from("<I", reduce, i)[0] == 7
            and struct.unpack_from("<I", reduce, i + 8)[0] == 32 and reduce[i + 12:i + 19] == b"AMDGPU\0")
  no_note = reduce[:at + 8] + struct.pack("<I", 33) + reduce[at + 12:]
  with pytest.raises(CodeObjectError, match="has no NT_AMDGPU_METADATA note"): load_code_object(no_note)
  reqd = b"\xb4.reqd_workgroup_size\x93\xcd\x01\x00\x01\x01"          # [256, 1, 1] of reduce_sum_*
  zero = b"\xb4.reqd_workgroup_size\x93\xcd\x00\x00\x01\x01"
  data = reduce.replace(reqd, zero, 1)
  assert data != reduce
  with pytest.raises(CodeObjectError, match=r"reqd_workgroup_size is \[0, 1, 1\]"): load_code_object(data)
  key = b"\xb6.kernarg_segment_align"
  i = reduce.index(key) + len(key)
  assert reduce[i] < 0x80                                   # a positive fixint: one byte
  data = reduce[:i] + b"\xa0" + reduce[i + 1:]              # the empty string instead
  with pytest.raises(CodeObjectError, match=r"\.kernarg_segment_align is str ''"): load_code_object(data)
  flags = struct.unpack_from("<I", reduce, 48)[0]
  generic = bytearray(reduce)
  struct.pack_into("<I", generic, 48, (flags & ~0xff) | 0x054)   # gfx11-generic, with no generic version
  with pytest.raises(CodeObjectError, match="gfx11-generic but has no generic version"): load_code_object(bytes(generic))


# --- MessagePack, with the reference implementation (pip install msgpack) as the oracle

json_like = st.recursive(
  st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats(allow_nan=False, width=32) | st.text(max_size=40)
  | st.binary(max_size=40),
  lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10) | st.integers(-100, 100), inner, max_size=6),
  max_leaves=30)


@FUZZ
@given(json_like, st.booleans())
def test_msgpack_decodes_what_the_reference_encodes(obj, single_float):
  msgpack = pytest.importorskip("msgpack", reason="the reference MessagePack (pip install msgpack) is the oracle")
  packed = msgpack.packb(obj, use_bin_type=True, use_single_float=single_float)
  assert unpackb(packed) == msgpack.unpackb(packed, raw=False, strict_map_key=False)


def test_msgpack_wide_forms():
  msgpack = pytest.importorskip("msgpack", reason="the reference MessagePack (pip install msgpack) is the oracle")
  for obj in (list(range(20)), {str(i): i for i in range(20)}, "x" * 40, "y" * 300, "z" * 70000, b"b" * 300,
              list(range(70000)), {i: None for i in range(70000)}, -33, -129, -40000, -(1 << 40), 255, 65535, 1 << 40):
    packed = msgpack.packb(obj, use_bin_type=True)
    assert unpackb(packed) == msgpack.unpackb(packed, raw=False, strict_map_key=False)


@FUZZ
@given(st.binary(max_size=64))
def test_msgpack_random_bytes_agree_with_the_reference(data):
  msgpack = pytest.importorskip("msgpack", reason="the reference MessagePack (pip install msgpack) is the oracle")
  try:
    mine = unpackb(data)
  except MsgpackError:
    mine = MsgpackError
  try:
    ref = msgpack.unpackb(data, raw=False, strict_map_key=False)
  except Exception:
    ref = MsgpackError
  if isinstance(ref, msgpack.ExtType) or isinstance(ref, msgpack.Timestamp) or "Ext" in repr(ref) or "Timestamp" in repr(ref):
    return  # extension types are represented differently (and never appear in AMDGPU metadata)
  if ref is MsgpackError or mine is MsgpackError:
    assert mine is ref or isinstance(mine, tuple) or mine != mine, (data, mine, ref)
  else:
    assert mine == ref or (mine != mine and ref != ref), (data, mine, ref)


def test_msgpack_rejects_with_offsets():
  for bad, msg in ((b"\xc1", "not a MessagePack type"), (b"\x92\x01", "longer than"), (b"\xa5ab", "truncated"),
                   (b"\x01\x02", "left after"), (b"\xa2\xff\xfe", "not UTF-8"), (b"\x91" * 100 + b"\x01", "nesting"),
                   (b"\x81\x90\x01", "as a key"), (b"\xdd\xff\xff\xff\xff", "longer than")):
    with pytest.raises(MsgpackError, match=msg): unpackb(bad)
