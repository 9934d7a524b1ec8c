"""Private memory on the emulated compute units: each wave's scratch lives in its slot of the scratch ring the
driver programs (COMPUTE_DISPATCH_SCRATCH_BASE, COMPUTE_TMPRING_SIZE), swizzled by dword across the wave's lanes,
and waves wait for free slots. Runs the committed scratch kernels (kernels/scratch.cl) through
test_emu_rdna_common.launch, which plays the command processor."""
from __future__ import annotations
import struct
import numpy as np
import pytest

from rawgpu import kernels as K
from rawgpu.hcq.amd.elf import load_code_object
from test_emu_rdna_common import Kernel, launch

BASE = 0x1000_0000   # launch() places the code at BASE
ARCHS = ["gfx1100", "gfx1201", "gfx942"]
u32 = np.uint32


def kernel(arch: str, name: str = "scratch_u32") -> Kernel:
  co = load_code_object(K.path(arch, "scratch").read_bytes(), arch)
  k = co.kernels[name]
  image = co.image_at(BASE)
  return Kernel(name, image, 0, k.code_offset, image[k.descriptor_offset:k.descriptor_offset + 64])


def expected(n: int, k: int, entries: int = 64) -> np.ndarray:
  j = (np.arange(n) * 7 + k) & (entries - 1)
  return (j * j + k).astype(u32)


def lanes_of(arch: str) -> int: return 64 if arch == "gfx942" else 32


@pytest.mark.parametrize("arch", ARCHS)
def test_private_memory_lies_in_the_wave_s_slot_swizzled_by_dword(arch):
  """scratch_u32 writes buf[j] = j*j + k (a volatile private array at offset 0). In memory, dword j of lane l of the
  wave in slot s sits at scratch base + s * WAVESIZE + (j * lanes + l) * 4: the swizzle MI300's and RDNA's
  guides give private memory (element size 4, index stride the wave size; gem5 checked it against MI300 output)."""
  kern, L, k = kernel(arch), lanes_of(arch), 5
  res, (out,), mem = launch(kern, arch, [np.zeros(128, u32), u32(k), u32(128)], (2, 1, 1), (64, 1, 1))
  assert res.ok, res.fault
  assert np.array_equal(out, expected(128, k))
  waves = 2 * 64 // L
  ring = np.frombuffer(mem.read(mem.scratch_base, mem.base + mem.size - mem.scratch_base), u32)
  slots = ring.reshape(waves, -1)                      # one row per slot, WAVESIZE bytes each
  j = np.arange(64)
  for s in range(waves):
    assert np.array_equal(slots[s, :64 * L].reshape(64, L), np.repeat((j * j + k).astype(u32)[:, None], L, 1)), s


@pytest.mark.parametrize("arch", ARCHS)
def test_waves_beyond_the_slots_wait_for_them(arch):
  """TMPRING_SIZE.WAVES slots for one workgroup at a time, and a ring of just that: eight workgroups run one after
  another in the same slots, and give the same answer."""
  kern, L = kernel(arch), lanes_of(arch)
  wpg = 128 // L
  res, (out,), _ = launch(kern, arch, [np.zeros(1024, u32), u32(9), u32(1000)], (8, 1, 1), (128, 1, 1), scratch_waves=wpg)
  assert res.ok, res.fault
  assert np.array_equal(out[:1000], expected(1000, 9)) and not out[1000:].any()


@pytest.mark.parametrize("arch", ARCHS)
def test_a_workgroup_that_cannot_get_its_slots_never_starts(arch):
  """Fewer slots than one workgroup's waves: no workgroup can start. On a board the dispatch hangs; the direct run
  says why, and nothing was written."""
  kern, L = kernel(arch), lanes_of(arch)
  res, (out,), _ = launch(kern, arch, [np.zeros(256, u32), u32(1), u32(256)], (1, 1, 1), (256, 1, 1), scratch_waves=256 // L - 1)
  assert not res.ok and "no workgroup can start" in res.fault and f"gives {256 // L - 1}" in res.fault
  assert not out.any()


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_gfx11_slots_count_per_shader_engine(arch):
  """On gfx11+ WAVES counts each shader engine's slots and workgroups go to the engines in turn: a ring sized for
  WAVES slots in all (not WAVES per engine) is too small, and the second workgroup's waves fault past its end."""
  kern, L = kernel(arch), lanes_of(arch)
  wpg = 64 // L
  args = lambda: [np.zeros(256, u32), u32(2), u32(256)]
  res, (out,), _ = launch(kern, arch, args(), (4, 1, 1), (64, 1, 1), scratch_waves=4 * wpg, shader_engines=6)
  assert res.ok and np.array_equal(out, expected(256, 2))
  res, _, mem = launch(kern, arch, args(), (4, 1, 1), (64, 1, 1), scratch_waves=4 * wpg, shader_engines=6, ring_slots=4 * wpg)
  assert not res.ok and res.fault == "page fault" and res.fault_addr >= mem.base + mem.size


def _short_wavesize(arch: str) -> Kernel:
  """scratch_u32 with a descriptor that asks for 128 bytes of private memory a lane, not its 260: launch() sizes
  WAVESIZE by it, so the kernel's last private dwords fall past its wave's share."""
  kern = kernel(arch)
  kd = bytearray(kern.kd)
  struct.pack_into("<I", kd, 4, 128)
  return Kernel(kern.name, kern.code, 0, kern.entry, bytes(kd))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_private_offset_past_the_wave_size_lands_in_the_next_slot(arch):
  """Flat scratch has a base and no size since gfx9 (AMDGPUUsage): an offset past the wave's share of WAVESIZE is
  not checked, and reaches the next slot with the same swizzle (dword d of lane l at base + (d x lanes + l) x 4)."""
  L, k = lanes_of(arch), 4
  res, (out,), mem = launch(_short_wavesize(arch), arch, [np.zeros(L, u32), u32(k), u32(L)], (1, 1, 1), (L, 1, 1), ring_slots=2)
  assert res.ok, res.fault
  assert np.array_equal(out, expected(L, k))
  ring = np.frombuffer(mem.read(mem.scratch_base, 2 * 128 * L), u32).reshape(-1, L)   # one row per dword index
  j = np.arange(64)
  assert np.array_equal(ring[:64], np.repeat((j * j + k).astype(u32)[:, None], L, 1))   # 32 in slot 0, 32 in slot 1


@pytest.mark.parametrize("arch", ARCHS)
def test_a_private_offset_past_the_scratch_ring_faults_where_nothing_is_mapped(arch):
  """The same kernel with a ring of one slot that ends where the memory does: its last dwords fault there."""
  L = lanes_of(arch)
  res, _, mem = launch(_short_wavesize(arch), arch, [np.zeros(L, u32), u32(1), u32(L)], (1, 1, 1), (L, 1, 1), ring_slots=1)
  assert not res.ok and res.fault == "page fault" and res.fault_addr >= mem.base + mem.size


@pytest.mark.parametrize("arch", ARCHS)
def test_large_private_arrays(arch):
  """scratch_big_u32: 4 KiB of private memory a lane (a 1024-entry array indexed at run time)."""
  res, (out,), _ = launch(kernel(arch, "scratch_big_u32"), arch, [np.zeros(300, u32), u32(3), u32(300)], (3, 1, 1), (128, 1, 1))
  assert res.ok, res.fault
  assert np.array_equal(out, expected(300, 3, 1024))
