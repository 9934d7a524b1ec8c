"""A read-only tree of text files served at a mount point (the KFD topology, the render node's ip_discovery)."""
from __future__ import annotations
from typing import Callable
from rawgpu.drivers.mmio import MMIO


class TextFile:
  def __init__(self, text: str): self.text = text.encode()
  def read(self, n: int, offset: int) -> bytes: return self.text[offset:offset + n]
  def write(self, data: bytes, offset: int) -> int: raise PermissionError(13, "read-only sysfs attribute")
  def ioctl(self, request: int, buf) -> int: raise OSError(25, "Inappropriate ioctl for device")
  def mmap(self, size: int, offset: int) -> MMIO: raise OSError(19, "not mappable")
  def close(self) -> None: pass


class MemFile:
  """A writable in-memory file (the emulated boards' owner-lock files: private to this process, like the boards)."""
  def __init__(self, store: bytearray): self.store = store
  def read(self, n: int, offset: int) -> bytes: return bytes(self.store[offset:offset + n])
  def write(self, data: bytes, offset: int) -> int:
    if not data: del self.store[offset:]; return 0
    self.store[offset:offset + len(data)] = data
    return len(data)
  def ioctl(self, request: int, buf) -> int: raise OSError(25, "Inappropriate ioctl for device")
  def mmap(self, size: int, offset: int) -> MMIO: raise OSError(19, "not mappable")
  def close(self) -> None: pass


class Tree:
  """Files given as {relative path: text or callable giving text}; directories are implied by the paths."""
  def __init__(self, files: dict[str, str | Callable[[], str]] | None = None, nodes: dict[str, Callable[[int], object]] | None = None):
    self.files = dict(files or {})
    self.nodes = dict(nodes or {})     # device nodes: rel path -> open(flags) -> VFile

  def _dirs(self) -> set[str]:
    out = {""}
    for p in list(self.files) + list(self.nodes):
      parts = p.split("/")
      out.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return out

  def open(self, rel: str, flags: int):
    if rel in self.nodes: return self.nodes[rel](flags)
    if rel not in self.files: raise FileNotFoundError(2, f"No such file: {rel}")
    t = self.files[rel]
    return TextFile(t() if callable(t) else t)

  def listdir(self, rel: str) -> list[str]:
    if rel not in self._dirs(): raise FileNotFoundError(2, f"No such directory: {rel}")
    pre = rel + "/" if rel else ""
    return sorted({p[len(pre):].split("/")[0] for p in list(self.files) + list(self.nodes) if p.startswith(pre)})

  def readlink(self, rel: str) -> str: raise OSError(22, "not a link")
  def exists(self, rel: str) -> bool: return rel in self.files or rel in self.nodes or rel in self._dirs()
