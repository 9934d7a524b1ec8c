"""Emulated boards are the process's own: a forked child has a copy of the parent's emulated hardware without the
emulator threads that run it. The child's DEV opens get boards of their own; the parent's copies are a clear error
in the child, never a hang or a lock blamed on "this process"."""
import os
import numpy as np
import pytest


@pytest.fixture(autouse=True)
def firmware():
  from conftest import need_firmware
  need_firmware()


def in_child(work) -> str:
  """Run work() in a forked child and return what it returned (or its error's class and message)."""
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:   # leave without the parent's atexit work (its boards' lock folders are not the child's)
    try:
      try: out = work()
      except Exception as e: out = f"{type(e).__name__}: {e}"
      os.write(w, out.encode())
    finally: os._exit(0)
  os.close(w)
  os.waitpid(pid, 0)
  with os.fdopen(r, "rb") as f: return f.read().decode()


def copy_round_trip(dev_spec: str) -> str:
  from rawgpu.hcq import Device
  d = Device(dev_spec)
  try:
    x = np.arange(4096, dtype=np.uint32)
    return "ok" if np.array_equal(d.alloc(x.nbytes).copyin(x).numpy(np.uint32), x) else "wrong data"
  finally: d.close()


@pytest.mark.parametrize("iface", ["MOCKPCI", "MOCKKFD"])
def test_a_forked_child_gets_emulated_boards_of_its_own(iface):
  """The parent holds board 0 open; the child opens the same DEV and gets a board of its own that works. Before, the
  child was refused: MOCKPCI said the board was "already open in this process", MOCKKFD blamed "another runtime"."""
  from rawgpu.hcq import Device
  parent = Device(f"{iface}+AMD")
  try:
    assert in_child(lambda: copy_round_trip(f"{iface}+AMD")) == "ok"
    x = np.arange(1024, dtype=np.uint32)
    assert np.array_equal(parent.alloc(x.nbytes).copyin(x).numpy(np.uint32), x)   # the parent's board goes on
  finally: parent.close()


def test_the_parents_emulated_hardware_is_a_clear_error_in_the_child(tmp_path):
  """A child that opens the parent's own bus or machine objects is told they are a copy without an emulator, and
  its exit leaves the parent's lock folder in place."""
  from rawgpu.drivers.am.iface import AMIface
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.emu.mockpci import virtual_boards
  from rawgpu.drivers.kfd import KFDIface
  vbus, buses = virtual_boards("gfx1100", 1)
  m = MockMachine("gfx1100", 1)
  try:
    for open_copy in (lambda: AMIface(buses[0], vbus.system), lambda: KFDIface(0, m.system)):
      said = in_child(lambda: repr(open_copy()))
      assert said.startswith("DeviceNotFound") and "forked child" in said and str(os.getpid()) in said, said
    from rawgpu.drivers.emu import pcibus
    in_child(lambda: str(pcibus._remove_lock_dir(vbus.system.lock_dir, os.getppid())))   # what the child's atexit runs
    assert os.path.isdir(vbus.system.lock_dir)
  finally:
    for p in list(m.kernel.processes): p.exit()
    for g in m.gpus: g.dev.fini()
