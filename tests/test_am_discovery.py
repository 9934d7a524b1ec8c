"""IP discovery: AM's parser against the binary the emulated board publishes (drivers/emu/amd/discovery.py builds it
from discovery.h independently), and the checks on damaged tables."""
from __future__ import annotations
import pytest
from rawgpu.drivers.am import discovery
from rawgpu.errors import RawGPUError


def _board(arch):
  from rawgpu.drivers.emu.amd.board import AMDBoard
  return AMDBoard(arch=arch, vram_size=256 << 20, deterministic=True)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_parse_board_table(arch):
  b = _board(arch)
  d = discovery.parse(bytes(b.discovery_blob))
  got = {(ip.hw_id, ip.instance): (ip.version, ip.bases) for ip in d.ips}
  for e in b.asic.ips:
    assert got[(e.hw_id, e.instance)] == (e.version, tuple(e.bases)), e
  assert len(got) == len(b.asic.ips)
  assert discovery.compute_units(d.gc_info) == b.cus
  assert d.find("gc").version == b.asic.version(11) and d.count("sdma") == b.asic.sdma_engines
  assert d.find("sdma", 1).hw_id in discovery.SDMA_HWIDS
  b.close()


def test_damaged_tables():
  blob = bytearray(_board("gfx1100").discovery_blob)
  bad = bytearray(blob); bad[0] ^= 1
  with pytest.raises(RawGPUError, match="signature"): discovery.parse(bytes(bad))
  bad = bytearray(blob); bad[100] ^= 0x10
  with pytest.raises(RawGPUError, match="checksum"): discovery.parse(bytes(bad))
  with pytest.raises(RawGPUError): discovery.parse(bytes(blob[:40]))
  with pytest.raises(RawGPUError): discovery.parse(bytes(blob)).find("umc", 7)
