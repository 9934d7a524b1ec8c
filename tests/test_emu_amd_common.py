"""Shared helpers for the emulated AMD board tests (imported by the other test_emu_amd_* files), plus config-space tests.

Register addresses in these tests come from the generated register tables and the base addresses the test reads
out of the board's own IP discovery table (parsed here independently of the model, and checked against a C program
built on the kernel's discovery.h).
"""
from __future__ import annotations
import os, pathlib, shutil, struct, subprocess, tempfile
import pytest
from rawgpu.autogen.regs import ip_regs
from rawgpu.drivers.emu.amd import AMDBoard
from rawgpu.drivers.emu.pcibus import VirtualBus, HostRAM
from rawgpu.drivers.pci import PCIDevice

HWIDS = {"gc": 11, "mmhub": 34, "athub": 35, "osssys": 40, "hdp": 41, "nbio": 108, "mp0": 255, "mp1": 1}


def linux_root() -> pathlib.Path:
  """The kernel tree with the amdgpu headers (fetched cache, or RAWGPU_LINUX_SRC); skips when absent."""
  try:
    from rawgpu.autogen.fetch import header_root
    return header_root("linux")
  except Exception: pass
  env = os.environ.get("RAWGPU_LINUX_SRC")
  if env and (pathlib.Path(env) / "drivers/gpu/drm/amd/include/discovery.h").exists(): return pathlib.Path(env)
  pytest.skip("kernel headers missing: run python -m rawgpu.autogen fetch (or set RAWGPU_LINUX_SRC)")


def compile_c(src: str, includes: list[pathlib.Path]) -> pathlib.Path:
  cc = shutil.which("clang-19") or shutil.which("cc") or shutil.which("gcc")
  if cc is None: pytest.skip("no host C compiler (clang-19 or cc) installed")
  d = pathlib.Path(tempfile.mkdtemp(prefix="emu_amd_cc_"))
  (d / "t.c").write_text(src)
  args = [cc, "-O0", "-w", "-o", str(d / "t"), str(d / "t.c")] + [f"-I{p}" for p in includes]
  r = subprocess.run(args, capture_output=True, text=True)
  if r.returncode: raise AssertionError(f"C oracle failed to build:\n{r.stderr}")
  return d / "t"


# The start of a C program that reads a discovery binary (argv[1]) with the kernel's discovery.h, checks the binary's
# checksum and leaves `b` (the bytes), `t` and `ih` (the IP table) for the rest of the program
C_DISCOVERY_MAIN = r"""#include <stdio.h>
#include <stdint.h>
#include <stddef.h>
#define DECLARE_FLEX_ARRAY(T, N) T N[0]
#define __packed __attribute__((packed))
#define LITTLEENDIAN_CPU 1
#include "discovery.h"
static uint16_t sum(uint8_t *p, unsigned n) { uint16_t s = 0; while (n--) s += *p++; return s; }
int main(int argc, char **argv) {
  static uint8_t b[16384]; FILE *f = fopen(argv[1], "rb"); size_t n = fread(b, 1, sizeof b, f); (void)n;
  struct binary_header *bh = (void *)b;
  size_t off = offsetof(struct binary_header, binary_checksum) + sizeof(bh->binary_checksum);
  printf("sig %x ok %d\n", bh->binary_signature, sum(b + off, bh->binary_size - off) == bh->binary_checksum);
  struct table_info *t = &bh->table_list[IP_DISCOVERY];
  struct ip_discovery_header *ih = (void *)(b + t->offset);
"""


def parse_discovery(blob: bytes) -> dict:
  """Independent reader of the discovery binary: {hw_id: (version, bases)} for instance 0, plus gc_info words."""
  sig, vmaj, vmin, csum, size = struct.unpack_from("<IHHHH", blob, 0)
  tables = [struct.unpack_from("<HHHH", blob, 12 + 8 * i) for i in range(6)]
  ihdr = tables[0][0]
  isig, iver, isize, _id, ndies = struct.unpack_from("<IHHIH", blob, ihdr)
  ips: dict[int, tuple[tuple[int, int, int], tuple[int, ...]]] = {}
  for d in range(ndies):
    _die_id, die_off = struct.unpack_from("<HH", blob, ihdr + 14 + 4 * d)
    _, nips = struct.unpack_from("<HH", blob, die_off)
    p = die_off + 4
    for _ in range(nips):
      hw, inst, nb, ma, mi, rev, _x = struct.unpack_from("<HBBBBBB", blob, p)
      bases = struct.unpack_from(f"<{nb}I", blob, p + 8)
      if inst == 0: ips[hw] = ((ma, mi, rev), bases)
      p += 8 + 4 * nb
  gc_off = tables[1][0]
  gc = struct.unpack_from("<30I", blob, gc_off + 12)
  return {"sig": sig, "size": size, "ips": ips, "gc_info": gc, "tables": tables}


class Dev:
  """A board on a virtual bus, reached only the way a driver reaches it: sysfs, config space, BARs."""
  def __init__(self, arch: str = "gfx1100", deterministic: bool = True, **kw):
    self.vbus = VirtualBus(host=HostRAM(64 << 20))
    self.board = AMDBoard(arch=arch, host=self.vbus.host, deterministic=deterministic, **kw)
    self.bus = self.vbus.plug(self.board)
    self.pci = PCIDevice(self.bus, system=self.vbus.system)
    self.mmio = self.pci.map_bar(5)
    self.vram = self.pci.map_bar(0)
    self.db = self.pci.map_bar(2)
    memsize = self.mmio.read32(0xde3 * 4)    # RCC_CONFIG_MEMSIZE sits at a fixed offset for discovery
    self.vram_size = memsize << 20
    off = self.vram_size - (64 << 10)
    if self.vram.size >= self.vram_size: blob = self.vram.readbytes(off, 10 << 10)
    else: blob = b"".join(self._mm_read(off + i).to_bytes(4, "little") for i in range(0, 10 << 10, 4))
    self.disc = parse_discovery(blob)
    v = {k: self.disc["ips"][h][0] for k, h in HWIDS.items()}
    self.bases = {k: self.disc["ips"][h][1] for k, h in HWIDS.items()}
    self.tables = {"gc": ip_regs("gc", *v["gc"]), "mmhub": ip_regs("mmhub", *v["mmhub"]), "osssys": ip_regs("osssys", *v["osssys"]),
                   "hdp": ip_regs("hdp", *v["hdp"]), "nbio": ip_regs("nbio" if v["gc"][0] < 12 else "nbif", *v["nbio"]),
                   "mp0": ip_regs("mp", *v["mp0"]), "mp1": ip_regs("mp", *v["mp1"])}

  def _mm_read(self, addr: int) -> int:
    self.mmio.write32(0x6 * 4, addr >> 31)                     # MM_INDEX_HI
    self.mmio.write32(0x0, (addr & 0x7fffffff) | 0x80000000)   # MM_INDEX, memory space
    return self.mmio.read32(0x4)                               # MM_DATA

  def addr(self, ip: str, name: str) -> int: return self.tables[ip][name].addr(self.bases[ip])
  def rd(self, ip: str, name: str) -> int: return self.mmio.read32(self.addr(ip, name) * 4)
  def wr(self, ip: str, name: str, v: int = 0, **fields) -> None:
    self.mmio.write32(self.addr(ip, name) * 4, v | self.tables[ip][name].encode(**fields) if fields else v)
  def f(self, ip: str, name: str, v: int, fld: str) -> int: return self.tables[ip][name].decode(v)[fld]
  def close(self) -> None: self.board.close()


@pytest.fixture(params=["gfx1100", "gfx1201"])
def dev(request):
  d = Dev(request.param)
  yield d
  d.close()


# shared by the block tests (imported by name: `from test_emu_amd_common import d, P`)
@pytest.fixture(params=["gfx1100", "gfx1201"])
def d(request):
  """A board of each RDNA generation with its firmware in place, as the PSP leaves it."""
  dev = Dev(request.param, firmware="loaded")
  yield dev
  dev.close()


@pytest.fixture(scope="module")
def P(): return nvd()


# ---- config space (PCI spec semantics, read through the sysfs config file)
def test_config_header_and_capabilities(dev):
  p = dev.pci
  assert p.config_read(0, 2) == 0x1002 and p.config_read(2, 2) == dev.board.device
  assert p.config_read(0x0a, 2) == 0x0300   # display controller, VGA-compatible
  assert p.config_read(0x06, 2) & 0x10      # capability list
  seen, cap = [], p.config_read(0x34, 1)
  while cap and len(seen) < 16:
    seen.append(p.config_read(cap, 1)); cap = p.config_read(cap + 1, 1) & 0xfc
  assert 0x10 in seen and 0x01 in seen      # PCIe and PM
  ext, ids = 0x100, []
  while ext and len(ids) < 16:
    h = p.config_read(ext, 4); ids.append(h & 0xffff); ext = h >> 20
  assert 0x15 in ids                        # resizable BAR


def test_bar_sizing_protocol(dev):
  p = dev.pci
  for reg, size in ((0x10, p.bar_size(0)), (0x24, p.bar_size(5))):
    old = p.config_read(reg, 4)
    p.config_write(reg, 0xffffffff, 4)
    got = p.config_read(reg, 4)
    p.config_write(reg, old, 4)
    assert (~(got & 0xfffffff0) + 1) & 0xffffffff == size & 0xffffffff or size >= 1 << 32
  assert p.config_read(0x10, 4) & 0xc == 0xc        # 64-bit prefetchable VRAM BAR


def test_bus_master_gates_host_dma(dev):
  from rawgpu.drivers.emu.pcibus import BusError
  mem = dev.pci.alloc_host(4096)
  with pytest.raises(BusError): dev.board.host_dma(mem.bus_addrs[0], 4)
  dev.pci.enable_bus_master()
  dev.board.host_dma(mem.bus_addrs[0], 4)[:] = b"\x01\x02\x03\x04"
  assert mem.view.readbytes(0, 4) == b"\x01\x02\x03\x04"


def test_surprise_removal_reads_all_ones(dev):
  dev.board.inject("surprise_removal")
  assert dev.mmio.read32(dev.addr("gc", "regSCRATCH_REG0") * 4) == 0xffffffff
  assert dev.pci.config_read(0, 4) == 0xffffffff


# ---- packet constants straight from the kernel headers (not from the model or the generated modules)
def header_defines(rel: str, prefix: str) -> dict[str, int]:
  import re
  text = (linux_root() / rel).read_text()
  out = {}
  for m in re.finditer(rf"#define\s+({prefix}\w*)\s+(0x[0-9a-fA-F]+|\d+)\b", text): out[m.group(1)] = int(m.group(2), 0)
  return out


def nvd() -> dict[str, int]: return header_defines("drivers/gpu/drm/amd/amdgpu/nvd.h", "PACKET3_")
def sdma_defs() -> dict[str, int]: return header_defines("drivers/gpu/drm/amd/amdgpu/sdma_v6_0_0_pkt_open.h", "SDMA_")


def pkt3(op: int, body: list[int]) -> list[int]:
  """PACKET3(op, n) of soc15d.h/nvd.h: type 3, count = body dwords - 1."""
  return [(3 << 30) | (((len(body) - 1) & 0x3fff) << 16) | ((op & 0xff) << 8)] + [b & 0xffffffff for b in body]


def fb_base(d: Dev) -> int: return (d.rd("gc", "regGCMC_VM_FB_LOCATION_BASE") & 0xffffff) << 24


def gc_system_aperture(d: Dev) -> int:
  """VMID 0 reaches VRAM by MC address through the system aperture (gfxhub_v3_0_init_system_aperture_regs)."""
  fb = fb_base(d)
  d.wr("gc", "regGCMC_VM_SYSTEM_APERTURE_LOW_ADDR", fb >> 18)
  d.wr("gc", "regGCMC_VM_SYSTEM_APERTURE_HIGH_ADDR", (fb + d.vram_size - 1) >> 18)
  d.wr("gc", "regGCMC_VM_MX_L1_TLB_CNTL", ENABLE_L1_TLB=1, SYSTEM_ACCESS_MODE=3)
  return fb


class ComputeRing:
  """A MEC1 pipe 0 compute queue programmed through its HQD registers (the path gfx_v11_0_kiq_init_register and
  tinygrad's AM take), ring and report words in VRAM."""
  def __init__(self, d: Dev, ring_off: int = 0x200000, ring_bytes: int = 0x1000, db: int = 8, queue: int = 0, rptr_off: int = 0x1ff000,
               doorbells: bool = True, start_pipe: bool = True):
    self.d, self.ring_off, self.ndw, self.db, self.wptr, self.queue = d, ring_off, ring_bytes // 4, db, 0, queue
    fb = gc_system_aperture(d)
    self.fb, self.rptr_off = fb, rptr_off
    d.wr("nbio", "regRCC_DEV0_EPF0_RCC_DOORBELL_APER_EN", 1)
    d.wr("gc", "regCP_MEC_DOORBELL_RANGE_LOWER", 0)
    d.wr("gc", "regCP_MEC_DOORBELL_RANGE_UPPER", 0x1000)
    if start_pipe:   # gfx_v11_0_config_gfx_rs64: the pipe's firmware start, taken when its reset is released
      d.wr("gc", "regGRBM_GFX_CNTL", MEID=1, PIPEID=0)
      d.wr("gc", "regCP_MEC_RS64_PRGRM_CNTR_START", 0x3000 >> 2)
      d.wr("gc", "regGRBM_GFX_CNTL", 0)
      d.wr("gc", "regCP_MEC_RS64_CNTL", MEC_PIPE0_RESET=1, MEC_HALT=1)
    d.wr("gc", "regCP_MEC_RS64_CNTL", MEC_PIPE0_ACTIVE=1)
    if doorbells: d.wr("gc", "regCP_PQ_STATUS", DOORBELL_ENABLE=1)
    d.wr("gc", "regGRBM_GFX_CNTL", MEID=1, PIPEID=0, QUEUEID=queue)
    ring = fb + ring_off
    d.wr("gc", "regCP_HQD_PQ_BASE", (ring >> 8) & 0xffffffff); d.wr("gc", "regCP_HQD_PQ_BASE_HI", ring >> 40)
    d.wr("gc", "regCP_HQD_PQ_CONTROL", QUEUE_SIZE=self.ndw.bit_length() - 2, RPTR_BLOCK_SIZE=5)
    d.wr("gc", "regCP_HQD_PQ_RPTR_REPORT_ADDR", (fb + rptr_off) & 0xffffffff); d.wr("gc", "regCP_HQD_PQ_RPTR_REPORT_ADDR_HI", (fb + rptr_off) >> 32)
    d.wr("gc", "regCP_HQD_PQ_DOORBELL_CONTROL", DOORBELL_OFFSET=db, DOORBELL_EN=1)
    d.wr("gc", "regCP_HQD_VMID", 0); d.wr("gc", "regCP_HQD_PQ_RPTR", 0)
    d.wr("gc", "regCP_HQD_PQ_WPTR_LO", 0); d.wr("gc", "regCP_HQD_PQ_WPTR_HI", 0)
    d.wr("gc", "regCP_HQD_ACTIVE", 1)
    d.wr("gc", "regGRBM_GFX_CNTL", 0)

  def mc(self, vram_off: int) -> int: return self.fb + vram_off

  def submit(self, dwords: list[int], ring_doorbell: bool = True) -> None:
    for v in dwords:
      self.d.vram.write32(self.ring_off + 4 * (self.wptr % self.ndw), v)
      self.wptr += 1
    if ring_doorbell: self.d.db.write64(self.db * 4, self.wptr)

  def hqd(self, name: str) -> int:
    self.d.wr("gc", "regGRBM_GFX_CNTL", MEID=1, PIPEID=0, QUEUEID=self.queue)
    v = self.d.rd("gc", name)
    self.d.wr("gc", "regGRBM_GFX_CNTL", 0)
    return v

  def run(self) -> None: self.d.board.run_until_idle()


def test_a_model_error_that_recurs_every_pass_is_listed_once(dev):
  """A model bug in an engine's step is caught (the board goes on) and kept in board.errors, once however many passes
  it recurs in."""
  b = dev.board
  b.deterministic = False   # as the concurrent worker's passes are (a deterministic board raises instead)
  class Broken:
    def busy(self): return True
    def step(self): raise RuntimeError("model bug")
  b.engines.append(Broken())
  try:
    for _ in range(5): b._pass()
  finally: b.engines.pop(); b.deterministic = True
  assert b.errors == ["Broken: RuntimeError: model bug"]
