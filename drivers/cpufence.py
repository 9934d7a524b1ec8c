"""CPU fences for write-combined memory (VRAM through a `resource0_wc` or KFD mapping).

Accesses to write-combined memory are weakly ordered (Intel SDM vol. 3A, table "Memory Types and Their Properties";
AMD APM vol. 2, "Memory Types"):
- a load from it may be performed before an older load, so data read from VRAM after the flag that says it is ready
  (a signal, the IH write pointer, a PSP fence, an SMU response register) can predate the flag: amdgpu puts rmb()
  (LFENCE on x86) between the two;
- stores to it may sit in the CPU's write-combining buffers after a later store to ordinary memory is visible, so
  the GPU can see a signal the CPU set in host memory before the VRAM data the CPU wrote first: SFENCE drains them
  (an uncached access, such as a doorbell or HDP flush register write, drains them too: SDM vol. 3A, "Buffering of
  Write Combining Memory Locations").
Python has no fence instructions, so this module places LFENCE; RET and SFENCE; RET in an executable page of its own
and calls them through ctypes, keeping the GIL (about 0.1-0.2 us a call). Only x86-64 has them here; elsewhere
fences() says why there are none, and a driver then maps VRAM uncached (AM) or gives the CPU no VRAM view (KFD).
"""
from __future__ import annotations
import ctypes, functools, mmap, os, platform
from dataclasses import dataclass
from typing import Callable
from rawgpu.drivers.system import _c, _libc_mmap
from rawgpu.errors import RawGPUError

# LFENCE (NP 0F AE E8), SFENCE (NP 0F AE F8), RET (C3), as the SDM vol. 2 encodes them; tests/test_foundation_cpufence.py
# checks them with llvm-mc
CODE = {"x86_64": {"load": bytes.fromhex("0faee8c3"), "store": bytes.fromhex("0faef8c3")}}
SLOT = 16   # bytes between the functions in the page


class NoFence(RawGPUError):
  """This machine offers no CPU fences to Python (another architecture, or the OS refuses executable memory)."""


@dataclass(frozen=True)
class Fences:
  load: Callable[[], None]    # later loads are performed after earlier ones (reads of write-combined memory)
  store: Callable[[], None]   # earlier stores (write-combined ones too) are visible before later ones


def machine() -> str:
  m = platform.machine().lower()
  return "x86_64" if m in ("x86_64", "amd64") else m


def fences() -> Fences:
  """The fences (made once per process). NoFence says why there are none."""
  f, why = fences_or_none()
  if f is None: raise NoFence(why)
  return f


@functools.cache
def fences_or_none() -> tuple[Fences | None, str | None]:
  """(the fences, None), or (None, why there are none); tried once per process."""
  try: return _make(), None
  except NoFence as e: return None, str(e)


def _make() -> Fences:
  code = CODE.get(machine())
  if code is None: raise NoFence(f"no CPU fences are known for {machine()} (only x86-64 has them here)")
  try: page = _libc_mmap(None, mmap.PAGESIZE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  except OSError as e: raise NoFence(f"no page for the CPU fences: {e}") from e
  libc = _c()
  libc.mprotect.restype, libc.mprotect.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
  for i, kind in enumerate(("load", "store")): ctypes.memmove(page + i * SLOT, code[kind], len(code[kind]))
  # written first, then made executable and read-only (W^X); the page stays mapped for the process's life
  if libc.mprotect(page, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
    raise NoFence(f"the OS refuses an executable page for the CPU fences (mprotect: {os.strerror(ctypes.get_errno())}; "
                  "SELinux deny_execmem or a hardened kernel)")
  fn = ctypes.PYFUNCTYPE(None)   # PYFUNCTYPE: the GIL stays held (a release could hand the CPU to another thread)
  return Fences(load=fn(page), store=fn(page + SLOT))
