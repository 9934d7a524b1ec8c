"""Behaviour of the runtime helpers the generated modules use: typed ioctl calls, bitfield accessors, C arithmetic."""
import ctypes
import errno
import os
import struct

import pytest

from rawgpu.autogen import amdgpu_drm, kfd
from rawgpu.autogen.amd import discovery, hsa, pm4
from rawgpu.autogen.support import cdiv, cmod, sx
from rawgpu.errors import IoctlError


class FakeSystem:
  """Stands in for the OS seam: records calls and plays a driver that writes its answer into the buffer."""

  def __init__(self, answer=None, fail=0):
    self.calls, self.answer, self.fail = [], answer, fail

  def ioctl(self, fd, request, buf):
    self.calls.append((fd, request, bytes(buf) if not isinstance(buf, int) else buf))
    if self.fail: raise OSError(self.fail, os.strerror(self.fail))
    if self.answer: ctypes.memmove(ctypes.addressof(buf), self.answer, len(self.answer))
    return 0


def _ioc(direction, typ, nr, size):
  # the asm-generic encoding, written out independently of the generated numbers
  return direction << 30 | size << 16 | typ << 8 | nr


def test_ioctl_call_builds_struct_and_returns_filled():
  sysm = FakeSystem(answer=struct.pack("<II", 1, 17))
  got = kfd.AMDKFD_IOC_GET_VERSION(sysm, 7)
  assert (got.major_version, got.minor_version) == (1, 17)
  assert sysm.calls[0][:2] == (7, int(kfd.AMDKFD_IOC_GET_VERSION))
  assert int(kfd.AMDKFD_IOC_GET_VERSION) == _ioc(2, ord("K"), 1, 8)


def test_ioctl_keywords_reach_the_buffer():
  sysm = FakeSystem()
  kfd.AMDKFD_IOC_CREATE_QUEUE(sysm, 3, ring_size=0x1000, gpu_id=0xBEEF, queue_type=2)
  raw = sysm.calls[0][2]
  s = kfd.kfd_ioctl_create_queue_args.from_buffer_copy(raw)
  assert (s.ring_size, s.gpu_id, s.queue_type, s.queue_id) == (0x1000, 0xBEEF, 2, 0)
  assert len(raw) == ctypes.sizeof(kfd.kfd_ioctl_create_queue_args) == (int(kfd.AMDKFD_IOC_CREATE_QUEUE) >> 16) & 0x3FFF
  with pytest.raises(TypeError):
    kfd.AMDKFD_IOC_CREATE_QUEUE(sysm, 3, no_such_field=1)


def test_ioctl_errno_becomes_ioctl_error():
  with pytest.raises(IoctlError) as ei:
    amdgpu_drm.DRM_IOCTL_AMDGPU_GEM_CREATE(FakeSystem(fail=errno.ENOMEM), 5)
  assert ei.value.errno_ == errno.ENOMEM and "DRM_IOCTL_AMDGPU_GEM_CREATE" in str(ei.value)


def test_bitfields_are_accessors_over_explicit_storage():
  ip = discovery.ip_v3()
  ip.sub_revision, ip.variant = 0xA, 0x5
  assert (ip.sub_revision, ip.variant) == (0xA, 0x5)
  with pytest.raises(ValueError):
    ip.variant = 16
  # the two nibbles share one byte, low nibble first (checked against gcc by the layout test)
  assert bytes(ip)[discovery.ip_v3._bf0.offset] == 0x5A
  h = discovery.ip_discovery_header(signature=discovery.BINARY_SIGNATURE)
  h.base_addr_64_bit = 1  # a bitfield inside an anonymous union, reached from the parent as in C
  assert h.base_addr_64_bit == 1 and h.reserved == 0
  assert bytes(h)[discovery.ip_discovery_header._anon0.offset] == 1
  assert bytes(h)[:4] == struct.pack("<I", discovery.BINARY_SIGNATURE)


def test_kernel_descriptor_field_masks_are_consistent():
  # each COMPUTE_PGM_RSRC*/KERNEL_CODE_PROPERTY field: NAME == ((1 << WIDTH) - 1) << SHIFT, as a C mask (32 bits)
  n = 0
  for k, v in vars(hsa).items():
    if k.endswith("_SHIFT") and k[:-6] in vars(hsa) and k[:-6] + "_WIDTH" in vars(hsa):
      width = getattr(hsa, k[:-6] + "_WIDTH")
      assert (getattr(hsa, k[:-6]) - (((1 << width) - 1) << v)) % (1 << 32) == 0, k
      n += 1
  assert n > 50


def test_pm4_header_matches_documented_encoding():
  # type 3 header: bits 31:30 = 3, 29:16 = count, 15:8 = opcode (AMD's PM4 documentation)
  assert pm4.PACKET3(pm4.PACKET3_NOP, 0x3FFF) == 3 << 30 | 0x3FFF << 16 | pm4.PACKET3_NOP << 8
  assert pm4.CP_PACKET3_GET_OPCODE(pm4.PACKET3(0x49, 6)) == 0x49


def test_c_arithmetic_helpers():
  assert (cdiv(-7, 2), cmod(-7, 2), cdiv(7, -2), cmod(7, -2)) == (-3, -1, -3, 1)
  assert sx(0xFFFFFFFF, 32) == -1 and sx(0x7F, 8) == 127


def test_vfio_argsz_is_filled_unless_given():
  from rawgpu.autogen import vfio
  sysm = FakeSystem()
  info = vfio.VFIO_DEVICE_GET_REGION_INFO(sysm, 9, index=2)
  assert info.argsz == ctypes.sizeof(vfio.vfio_region_info) and info.index == 2
  assert vfio.VFIO_DEVICE_GET_REGION_INFO(sysm, 9, argsz=8).argsz == 8
  assert int(vfio.VFIO_DEVICE_GET_REGION_INFO) == _ioc(0, ord(";"), 100 + 8, 0)  # _IO(VFIO_TYPE, VFIO_BASE + 8)
