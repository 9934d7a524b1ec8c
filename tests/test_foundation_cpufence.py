"""The CPU load fence (rawgpu.drivers.cpufence): its machine code against llvm-mc's encoding, that it runs, and the
clear reasons where there is none."""
import ctypes, errno, shutil, subprocess
from types import SimpleNamespace
import pytest
from rawgpu.drivers import cpufence

MC = next((t for t in ("llvm-mc-19", "llvm-mc") if shutil.which(t)), None)


@pytest.fixture
def fresh(monkeypatch):
  """fence_or_none tried anew (it is made once per process), and made again for the tests after."""
  cpufence.fence_or_none.cache_clear()
  yield monkeypatch
  monkeypatch.undo()
  cpufence.fence_or_none.cache_clear()


@pytest.mark.skipif(MC is None, reason="llvm-mc-19 not installed (apt-get install llvm-19)")
def test_the_fence_code_is_what_llvm_mc_encodes_for_lfence_ret():
  out = subprocess.run([MC, "-triple=x86_64", "-show-encoding"], input="lfence\nret\n", capture_output=True, text=True, check=True).stdout
  encoded = bytes(int(b, 16) for line in out.splitlines() if "encoding: [" in line
                  for b in line.split("encoding: [")[1].rstrip("]").split(","))
  assert cpufence.CODE["x86_64"] == encoded


@pytest.mark.skipif(cpufence.machine() != "x86_64", reason="the fence exists on x86-64 only")
def test_the_fence_runs_and_is_made_once():
  f = cpufence.load_fence()
  assert f() is None and cpufence.load_fence() is f
  assert cpufence.fence_or_none() == (f, None)


def test_another_architecture_has_no_fence_and_says_so(fresh):
  fresh.setattr(cpufence.platform, "machine", lambda: "riscv64")
  fence, why = cpufence.fence_or_none()
  assert fence is None and "no CPU load fence is known for riscv64" in why
  with pytest.raises(cpufence.NoFence, match="riscv64"): cpufence.load_fence()


@pytest.mark.skipif(cpufence.machine() != "x86_64", reason="the fence exists on x86-64 only")
def test_an_os_that_refuses_executable_memory_is_a_clear_reason(fresh):
  def refuse(*_args):   # libc's mprotect where W^X policy forbids executable anonymous memory
    ctypes.set_errno(errno.EACCES)
    return -1
  fresh.setattr(cpufence, "_c", lambda: SimpleNamespace(mprotect=refuse))
  fence, why = cpufence.fence_or_none()
  assert fence is None and "refuses an executable page" in why and "Permission denied" in why
