"""Runtime helpers the generated modules use: struct bases, bitfield accessors, typed ioctl calls.

Kept tiny and dependency-free: every generated module imports it, so `import rawgpu.autogen.kfd` stays cheap.
"""
from __future__ import annotations

import ctypes
from typing import Any

from rawgpu.errors import IoctlError


class _Init:
  def __init__(self, *args: Any, **fields: Any):
    super().__init__(*args)
    for k, v in fields.items():
      if not hasattr(type(self), k): raise TypeError(f"{type(self).__name__} has no field {k!r}")
      setattr(self, k, v)

  def __repr__(self) -> str:
    return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._names_())})"

  @classmethod
  def _names_(cls) -> list[str]:
    return [n for n, *_ in cls._fields_ if not n.startswith("_")] + list(getattr(cls, "_bitfields_", ()))

  @classmethod
  def from_bytes(cls, data: bytes | bytearray | memoryview, offset: int = 0):
    """A copy of the struct found at data[offset:] (short data raises ValueError)."""
    return cls.from_buffer_copy(data, offset)

  def to_bytes(self) -> bytes:
    return bytes(self)


class CStruct(_Init, ctypes.Structure):
  """Base of generated structs: keyword construction sets bitfields too; layout is explicit (_pack_ = 1 + padding)."""


class CUnion(_Init, ctypes.Union):
  """Base of generated unions."""


def bitfield(storage: str, shift: int, width: int, signed: bool = False) -> property:
  """A C bitfield as an accessor over an explicit integer storage field (value `width` bits at bit `shift`)."""
  mask, top = (1 << width) - 1, 1 << (width - 1)

  def get(self) -> int:
    v = (getattr(self, storage) >> shift) & mask
    return v - (v & top) * 2 if signed else v

  def set_(self, v: int) -> None:
    v = int(v)
    if v < 0 and (not signed or v >= -top): v &= mask  # store two's complement
    if not 0 <= v <= mask: raise ValueError(f"{v:#x} does not fit a {width}-bit field")
    setattr(self, storage, (getattr(self, storage) & ~(mask << shift)) | (v << shift))

  return property(get, set_, doc=f"bits {shift}..{shift + width - 1} of {storage}")


def bytes_bitfield(storage: str, shift: int, width: int, signed: bool = False) -> property:
  """A bitfield inside a byte-array storage (used where C packs a bitfield across storage units)."""
  mask, top = (1 << width) - 1, 1 << (width - 1)

  def get(self) -> int:
    v = (int.from_bytes(bytes(getattr(self, storage)), "little") >> shift) & mask
    return v - (v & top) * 2 if signed else v

  def set_(self, v: int) -> None:
    v = int(v)
    if v < 0 and (not signed or v >= -top): v &= mask
    if not 0 <= v <= mask: raise ValueError(f"{v:#x} does not fit a {width}-bit field")
    arr = getattr(self, storage)
    cur = (int.from_bytes(bytes(arr), "little") & ~(mask << shift)) | (v << shift)
    arr[:] = list(cur.to_bytes(len(arr), "little"))

  return property(get, set_, doc=f"bits {shift}..{shift + width - 1} of {storage}")


def cdiv(a: int, b: int) -> int:
  """C integer division (truncates toward zero)."""
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q


def cmod(a: int, b: int) -> int:
  return a - cdiv(a, b) * b


class Ioctl(int):
  """An ioctl request number that can also be called: NAME(system, fd, **fields) -> the filled argument struct.

  `system` is the OS seam (rawgpu.drivers.system): anything with .ioctl(fd, request, buf) raising OSError.
  """
  name: str
  struct: type | None

  def __new__(cls, request: int, name: str, struct: type | None = None):
    self = super().__new__(cls, request)
    self.name, self.struct = name, struct
    return self

  @property
  def request(self) -> int:
    return int(self)

  def __call__(self, system: Any, fd: int, arg: Any = None, **fields: Any) -> Any:
    if self.struct is not None and arg is None:
      # VFIO-style arguments start with their own size; fill it unless the caller sized it on purpose
      if "argsz" not in fields and hasattr(self.struct, "argsz"): fields["argsz"] = ctypes.sizeof(self.struct)
      arg = self.struct(**fields)
    elif fields: raise TypeError(f"{self.name}: pass either a buffer or keyword fields")
    try:
      ret = system.ioctl(fd, int(self), arg if arg is not None else 0)
    except OSError as e:
      raise IoctlError(self.name, e.errno or 0, f"fd {fd}") from e
    return arg if arg is not None else ret

  def __repr__(self) -> str:
    return f"Ioctl({int(self):#x}, {self.name!r}{', ' + self.struct.__name__ if self.struct else ''})"

  def __reduce__(self):
    return (Ioctl, (int(self), self.name, self.struct))


def forward(member: str, name: str) -> property:
  """A bitfield of an anonymous struct/union member, reachable from the parent like in C."""
  return property(lambda self: getattr(getattr(self, member), name),
                  lambda self, v: setattr(getattr(self, member), name, v))


def sx(v: int, bits: int) -> int:
  """C conversion to a signed integer type of `bits` bits."""
  v &= (1 << bits) - 1
  return v - (1 << bits) if v >> (bits - 1) else v
