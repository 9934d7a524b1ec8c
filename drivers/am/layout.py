"""Little-endian packed records: a named list of fields read out of a bytes-like object.

The firmware and discovery formats are flat sequences of u8/u16/u32/u64; a record declares its fields in header
order and offsets follow from the sizes (tests check every offset against a C compiler on the kernel header).
"""
from __future__ import annotations
import struct
from dataclasses import dataclass
from rawgpu.errors import RawGPUError

_SIZES = {"B": 1, "H": 2, "I": 4, "Q": 8}


def _leaf(t):
  import ctypes
  while issubclass(t, ctypes.Array): t = t._type_
  return t


@dataclass(frozen=True)
class Layout:
  name: str
  fields: tuple[tuple[str, str], ...]   # (name, struct code) in order; code "4I" is an array of 4 u32

  @staticmethod
  def of(name: str, spec: str, base: "Layout | None" = None) -> "Layout":
    """spec: "u32 size_bytes, u16 major, ..." (u8/u16/u32/u64, optional [n] for arrays); base is embedded first."""
    codes = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}
    fields = list(base.fields) if base else []
    for item in spec.split(","):
      if not (item := item.strip()): continue
      ty, fname = item.split()
      n = 1
      if "[" in fname: fname, n = fname[:fname.index("[")], int(fname[fname.index("[") + 1:-1])
      fields.append((fname, f"{n}{codes[ty]}" if n > 1 else codes[ty]))
    return Layout(name, tuple(fields))

  @staticmethod
  def from_ctypes(cls, name: str | None = None) -> "Layout":
    """The flat field list of a generated (rawgpu.autogen) packed struct: nested structs inline their fields, arrays
    become tuples, unions and bitfield storage stay as raw bytes/integers under their storage name."""
    import ctypes
    codes = {1: "B", 2: "H", 4: "I", 8: "Q"}
    out: list[tuple[str, str]] = []
    def scalar(t) -> int:
      while issubclass(t, ctypes.Array): t = t._type_
      return ctypes.sizeof(t)
    def walk(c) -> None:
      pos = 0
      for fname, ftype, *_ in c._fields_:
        off = getattr(c, fname).offset
        if off > pos: out.append((f"_gap{len(out)}", f"{off - pos}B"))
        size = ctypes.sizeof(ftype)
        if issubclass(ftype, ctypes.Structure): walk(ftype)
        elif issubclass(ftype, ctypes.Union) or (issubclass(ftype, ctypes.Array) and not issubclass(_leaf(ftype), (ctypes._SimpleCData,))):
          if issubclass(ftype, ctypes.Array) and issubclass(_leaf(ftype), ctypes.Structure) and all(
              ctypes.sizeof(t) == scalar(_leaf(ftype)._fields_[0][1]) for _, t, *_ in _leaf(ftype)._fields_):
            w = scalar(_leaf(ftype)._fields_[0][1])
            out.append((fname, f"{size // w}{codes[w]}"))      # array of uniform structs: flat scalars
          elif size: out.append((fname, f"{size}B"))
        elif issubclass(ftype, ctypes.Array):
          if size: out.append((fname, f"{size // scalar(ftype)}{codes[scalar(ftype)]}"))
        else: out.append((fname, codes[size]))
        pos = off + size
      if ctypes.sizeof(c) > pos: out.append((f"_gap{len(out)}", f"{ctypes.sizeof(c) - pos}B"))
    walk(cls)
    return Layout(name or cls.__name__, tuple(out))

  @property
  def fmt(self) -> str: return "<" + "".join(c for _, c in self.fields)
  @property
  def size(self) -> int: return struct.calcsize(self.fmt)

  def offset(self, field: str) -> int:
    off = 0
    for n, c in self.fields:
      if n == field: return off
      off += struct.calcsize("<" + c)
    raise KeyError(field)

  def parse(self, data, off: int = 0, what: str = "") -> dict[str, int | tuple[int, ...]]:
    if off < 0 or off + self.size > len(data):
      raise RawGPUError(f"{what or self.name}: {self.name} at {off:#x} needs {self.size} bytes, only {max(0, len(data) - off)} there (truncated)")
    vals = struct.unpack_from(self.fmt, data, off)
    out: dict[str, int | tuple[int, ...]] = {}
    i = 0
    for n, c in self.fields:
      cnt = int(c[:-1]) if len(c) > 1 else 1
      out[n] = vals[i] if cnt == 1 and len(c) == 1 else tuple(vals[i:i + cnt])
      i += cnt
    return out

  def pack(self, **values) -> bytes:
    flat: list[int] = []
    for n, c in self.fields:
      v = values.get(n, 0)
      if len(c) > 1: flat.extend(v if isinstance(v, (tuple, list)) else [v] * int(c[:-1]))
      else: flat.append(v)
    return struct.pack(self.fmt, *flat)
