"""A CPU load fence, for reads of write-combined memory (VRAM through a `resource0_wc` or KFD mapping).

Loads from write-combined memory are weakly ordered: the CPU may perform one before an older load (Intel SDM vol. 3A,
table "Memory Types and Their Properties"; AMD APM vol. 2, "Memory Types"), so data read from VRAM after the flag that says it is ready (a signal, the
IH write pointer, a PSP fence, an SMU response register) can predate the flag. amdgpu puts rmb() (LFENCE on x86)
between the two. Python has no fence instruction, so this module places LFENCE; RET in an executable page of its own
and calls it through ctypes, keeping the GIL (about 0.2 us a call). Only x86-64 has one here; elsewhere load_fence()
says why there is none, and a driver then maps VRAM uncached.
"""
from __future__ import annotations
import ctypes, functools, mmap, os, platform
from typing import Callable
from rawgpu.drivers.system import _c, _libc_mmap
from rawgpu.errors import RawGPUError

# LFENCE (NP 0F AE E8) then RET (C3), as the SDM vol. 2 encodes them; tests/test_foundation_cpufence.py checks them with llvm-mc
CODE = {"x86_64": bytes.fromhex("0faee8c3")}


class NoFence(RawGPUError):
  """This machine offers no load fence to Python (another architecture, or the OS refuses executable memory)."""


def machine() -> str:
  m = platform.machine().lower()
  return "x86_64" if m in ("x86_64", "amd64") else m


def load_fence() -> Callable[[], None]:
  """The load fence as a function (made once per process). NoFence says why there is none."""
  fence, why = fence_or_none()
  if fence is None: raise NoFence(why)
  return fence


@functools.cache
def fence_or_none() -> tuple[Callable[[], None] | None, str | None]:
  """(the load fence, None), or (None, why there is none); tried once per process."""
  try: return _make(), None
  except NoFence as e: return None, str(e)


def _make() -> Callable[[], None]:
  code = CODE.get(machine())
  if code is None: raise NoFence(f"no CPU load fence is known for {machine()} (only x86-64 has one here)")
  try: page = _libc_mmap(None, mmap.PAGESIZE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  except OSError as e: raise NoFence(f"no page for the load fence: {e}") from e
  libc = _c()
  libc.mprotect.restype, libc.mprotect.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
  ctypes.memmove(page, code, len(code))
  # written first, then made executable and read-only (W^X); the page stays mapped for the process's life
  if libc.mprotect(page, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC) != 0:
    raise NoFence(f"the OS refuses an executable page for the load fence (mprotect: {os.strerror(ctypes.get_errno())}; "
                  "SELinux deny_execmem or a hardened kernel)")
  return ctypes.PYFUNCTYPE(None)(page)   # PYFUNCTYPE: the GIL stays held (a release could hand the CPU to another thread)

