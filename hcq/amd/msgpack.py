"""A small MessagePack decoder: enough for the NT_AMDGPU_METADATA note, strict about malformed input.

Every malformed input raises MsgpackError (a ValueError) with the offset; nothing else escapes.
"""
from __future__ import annotations

import struct
from typing import Any

MAX_DEPTH = 64  # metadata nests 4 deep; a limit keeps hostile input from exhausting the stack


class MsgpackError(ValueError):
  pass


class _Reader:
  def __init__(self, data: bytes):
    self.data, self.pos = memoryview(data), 0

  def take(self, n: int) -> bytes:
    if n > len(self.data) - self.pos:
      raise MsgpackError(f"truncated at offset {self.pos}: need {n} bytes, {len(self.data) - self.pos} left")
    out = bytes(self.data[self.pos:self.pos + n])
    self.pos += n
    return out

  def unpack(self, fmt: str) -> Any:
    return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

  def count(self, n: int, what: str) -> int:
    # each element takes at least one byte (a map entry two): reject lengths the input cannot hold before looping
    if n > len(self.data) - self.pos:
      raise MsgpackError(f"{what} of {n} elements at offset {self.pos} is longer than the {len(self.data) - self.pos} bytes left")
    return n


_FIXED = {0xc0: None, 0xc2: False, 0xc3: True}
_INTS = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q",
         0xca: ">f", 0xcb: ">d"}
_LEN = {1: ">B", 2: ">H", 4: ">I"}


def _str(r: _Reader, n: int) -> str:
  at = r.pos
  try:
    return r.take(n).decode("utf-8")
  except UnicodeDecodeError as e:
    raise MsgpackError(f"string at offset {at} is not UTF-8: {e.reason}") from None


def _obj(r: _Reader, depth: int) -> Any:
  if depth > MAX_DEPTH: raise MsgpackError(f"nesting deeper than {MAX_DEPTH} at offset {r.pos}")
  at = r.pos
  b = r.take(1)[0]
  if b <= 0x7f: return b
  if b >= 0xe0: return b - 0x100
  if 0xa0 <= b <= 0xbf: return _str(r, b & 0x1f)
  if 0x90 <= b <= 0x9f: return _array(r, b & 0x0f, depth)
  if 0x80 <= b <= 0x8f: return _map(r, b & 0x0f, depth, at)
  if b in _FIXED: return _FIXED[b]
  if b in _INTS: return r.unpack(_INTS[b])
  if 0xd9 <= b <= 0xdb: return _str(r, r.unpack(_LEN[1 << (b - 0xd9)]))
  if 0xc4 <= b <= 0xc6: return r.take(r.unpack(_LEN[1 << (b - 0xc4)]))
  if b in (0xdc, 0xdd): return _array(r, r.unpack(">H" if b == 0xdc else ">I"), depth)
  if b in (0xde, 0xdf): return _map(r, r.unpack(">H" if b == 0xde else ">I"), depth, at)
  if 0xd4 <= b <= 0xd8: return (r.unpack(">b"), r.take(1 << (b - 0xd4)))  # fixext: (type, data)
  if 0xc7 <= b <= 0xc9:
    n = r.unpack(_LEN[1 << (b - 0xc7)])
    return (r.unpack(">b"), r.take(n))
  raise MsgpackError(f"byte 0x{b:02x} at offset {at} is not a MessagePack type")


def _array(r: _Reader, n: int, depth: int) -> list:
  return [_obj(r, depth + 1) for _ in range(r.count(n, "array"))]


def _map(r: _Reader, n: int, depth: int, at: int) -> dict:
  out: dict = {}
  for _ in range(r.count(n, "map")):
    k = _obj(r, depth + 1)
    if isinstance(k, (list, dict)): raise MsgpackError(f"map at offset {at} has an array or map as a key")
    out[k] = _obj(r, depth + 1)
  return out


def unpackb(data: bytes) -> Any:
  """Decode exactly one MessagePack object that fills data."""
  r = _Reader(data)
  obj = _obj(r, 0)
  if r.pos != len(data): raise MsgpackError(f"{len(data) - r.pos} bytes left after the object at offset {r.pos}")
  return obj
