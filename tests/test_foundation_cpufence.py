"""The CPU fences (rawgpu.drivers.cpufence): their machine code against llvm-mc's encoding, that they run, and the
clear reasons where there are none."""
import ctypes, errno, shutil, subprocess
from types import SimpleNamespace
import pytest
from rawgpu.drivers import cpufence

MC = next((t for t in ("llvm-mc-19", "llvm-mc") if shutil.which(t)), None)
X86 = pytest.mark.skipif(cpufence.machine() != "x86_64", reason="the fences exist on x86-64 only")


@pytest.fixture
def fresh(monkeypatch):
  """fences_or_none tried anew (they are made once per process), and made again for the tests after."""
  cpufence.fences_or_none.cache_clear()
  yield monkeypatch
  monkeypatch.undo()
  cpufence.fences_or_none.cache_clear()


@pytest.mark.skipif(MC is None, reason="llvm-mc-19 not installed (apt-get install llvm-19)")
@pytest.mark.parametrize("kind, asm", [("load", "lfence"), ("store", "sfence")])
def test_the_fence_code_is_what_llvm_mc_encodes(kind, asm):
  out = subprocess.run([MC, "-triple=x86_64", "-show-encoding"], input=f"{asm}\nret\n", capture_output=True, text=True, check=True).stdout
  encoded = bytes(int(b, 16) for line in out.splitlines() if "encoding: [" in line
                  for b in line.split("encoding: [")[1].rstrip("]").split(","))
  assert cpufence.CODE["x86_64"][kind] == encoded and len(encoded) <= cpufence.SLOT


@X86
def test_the_fences_run_and_are_made_once():
  f = cpufence.fences()
  assert f.load() is None and f.store() is None and cpufence.fences() is f
  assert cpufence.fences_or_none() == (f, None)


def test_another_architecture_has_no_fences_and_says_so(fresh):
  fresh.setattr(cpufence.platform, "machine", lambda: "riscv64")
  f, why = cpufence.fences_or_none()
  assert f is None and "no CPU fences are known for riscv64" in why
  with pytest.raises(cpufence.NoFence, match="riscv64"): cpufence.fences()


@X86
def test_an_os_that_refuses_executable_memory_is_a_clear_reason(fresh):
  def refuse(*_args):   # libc's mprotect where W^X policy forbids executable anonymous memory
    ctypes.set_errno(errno.EACCES)
    return -1
  fresh.setattr(cpufence, "_c", lambda: SimpleNamespace(mprotect=refuse))
  f, why = cpufence.fences_or_none()
  assert f is None and "refuses an executable page" in why and "Permission denied" in why
