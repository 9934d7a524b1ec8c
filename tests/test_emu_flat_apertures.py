"""Generic (flat) pointers on the emulated compute units: src_shared_base / src_private_base and the routing of flat
accesses follow SH_MEM_BASES of the queue's VMID (SHARED_BASE and PRIVATE_BASE are address bits 63:48). Runs the
committed kernels/generic.cl through test_emu_rdna_common.launch."""
from __future__ import annotations
import numpy as np
import pytest

from rawgpu import kernels as K
from rawgpu.hcq.amd.elf import load_code_object
from test_emu_rdna_common import Kernel, launch

BASE = 0x1000_0000
ARCHS = ["gfx1100", "gfx1201", "gfx942"]


def kernel(arch: str, name: str) -> Kernel:
  co = load_code_object(K.path(arch, "generic").read_bytes(), arch)
  k = co.kernels[name]
  image = co.image_at(BASE)
  return Kernel(name, image, 0, k.code_offset, image[k.descriptor_offset:k.descriptor_offset + 64])


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("shared,private", [(0x1, 0x2), (0x2000, 0x1000), (0x6000, 0x7fff)])
def test_generic_addresses_follow_sh_mem_bases(arch, shared, private):
  res, (out,), _ = launch(kernel(arch, "apertures"), arch, [np.zeros(2, np.uint64)], (1, 1, 1), (64, 1, 1),
                          sh_mem_bases=shared << 16 | private)
  assert res.ok, res.fault
  assert [int(x) >> 48 for x in out] == [shared, private]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("from_lds", [1, 0])
def test_flat_loads_reach_lds_and_private_memory_wherever_the_apertures_are(arch, from_lds):
  n = 200
  want = np.arange(n) * 3 + 1 if from_lds else np.arange(n) + 5 + (n & 3)
  for bases in (0x0001_0002, 0x2000_1000):
    res, (out,), _ = launch(kernel(arch, "generic_u32"), arch, [np.zeros(n, np.uint32), np.uint32(from_lds), np.uint32(n)],
                            (1, 1, 1), (256, 1, 1), sh_mem_bases=bases)
    assert res.ok, res.fault
    assert np.array_equal(out, want.astype(np.uint32)), hex(bases)
