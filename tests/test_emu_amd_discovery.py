"""IP discovery, VRAM size strap, MM_INDEX/MM_DATA window, small-BAR boards, resizable BAR, register decode."""
from __future__ import annotations
import subprocess
from test_emu_amd_common import C_DISCOVERY_MAIN, Dev, compile_c, linux_root, dev  # noqa: F401  (dev is a fixture)

C_WALK = C_DISCOVERY_MAIN + r"""
  printf("ihdr %x ok %d dies %d\n", ih->signature, sum(b + t->offset, ih->size) == t->checksum, ih->num_dies);
  struct die_header *dh = (void *)(b + ih->die_info[0].die_offset);
  uint8_t *p = (uint8_t *)dh + sizeof(*dh);
  for (int i = 0; i < dh->num_ips; i++) {
    struct ip_v4 *ip = (void *)p;
    printf("ip %d %d %d.%d.%d", ip->hw_id, ip->instance_number, ip->major, ip->minor, ip->revision);
    for (int j = 0; j < ip->num_base_address; j++) printf(" %x", ip->base_address[j]);
    printf("\n"); p += offsetof(struct ip_v4, base_address) + 4 * ip->num_base_address;
  }
  t = &bh->table_list[GC];
  struct gc_info_v1_2 *gc = (void *)(b + t->offset);
  printf("gc %x %d.%d ok %d se %u wgp %u sa %u\n", gc->header.table_id, gc->header.version_major, gc->header.version_minor,
         sum(b + t->offset, gc->header.size) == t->checksum, gc->gc_num_se, gc->gc_num_wgp0_per_sa, gc->gc_num_sa_per_se);
  t = &bh->table_list[HARVEST_INFO];
  struct harvest_table *ht = (void *)(b + t->offset);
  printf("harvest %x ok %d\n", ht->header.signature, sum(b + t->offset, sizeof(struct harvest_table)) == t->checksum);
  return 0;
}
"""


def test_discovery_against_kernel_header(dev, tmp_path):
  """A C program walking the table with the kernel's own discovery.h structs agrees with it and its checksums."""
  inc = linux_root() / "drivers/gpu/drm/amd/include"
  exe = compile_c(C_WALK, [inc])
  off = dev.vram_size - (64 << 10)
  blob = dev.vram.readbytes(off, 10 << 10)
  (tmp_path / "d.bin").write_bytes(blob)
  out = subprocess.run([str(exe), str(tmp_path / "d.bin")], capture_output=True, text=True, check=True).stdout.splitlines()
  assert out[0] == "sig 28211407 ok 1"
  assert out[1].startswith("ihdr 53445049 ok 1")
  ips = {}
  for ln in out:
    if ln.startswith("ip "):
      _, hw, inst, ver, *bases = ln.split()
      if inst == "0": ips[int(hw)] = (tuple(map(int, ver.split("."))), tuple(int(x, 16) for x in bases))
  assert ips == dev.disc["ips"]                                   # the test's own reader agrees with the C walk
  gc_line = next(ln for ln in out if ln.startswith("gc "))
  assert " ok 1 " in gc_line and gc_line.startswith("gc 4347 1.")
  assert next(ln for ln in out if ln.startswith("harvest")) == "harvest 56524148 ok 1"


def test_ip_versions_are_the_boards(dev):
  want = {"gfx1100": {11: (11, 0, 0), 42: (6, 0, 0), 34: (3, 0, 0), 108: (4, 3, 0), 255: (13, 0, 0), 1: (13, 0, 0), 41: (6, 0, 0), 40: (6, 0, 0)},
          "gfx1201": {11: (12, 0, 1), 42: (7, 0, 1), 34: (4, 1, 0), 108: (6, 3, 1), 255: (14, 0, 3), 1: (14, 0, 3), 41: (7, 0, 0), 40: (7, 0, 0)}}
  for hw, ver in want[dev.board.arch].items(): assert dev.disc["ips"][hw][0] == ver, hw


def test_registers_decode_at_published_bases(dev):
  """A scratch register written at (discovery base + header offset) reads back there and nowhere nearby."""
  a = dev.addr("gc", "regSCRATCH_REG3")
  dev.mmio.write32(a * 4, 0x1234abcd)
  assert dev.mmio.read32(a * 4) == 0x1234abcd
  assert dev.mmio.read32((a + 1) * 4) != 0x1234abcd


def test_mm_index_window_reads_vram(dev):
  dev.vram.write32(0x1230, 0xcafef00d)
  assert dev._mm_read(0x1230) == 0xcafef00d
  dev.mmio.write32(0x6 * 4, 0); dev.mmio.write32(0, 0x80000000 | 0x2000); dev.mmio.write32(4, 0x5a5a5a5a)
  assert dev.vram.read32(0x2000) == 0x5a5a5a5a


def test_small_bar_board_discovery_through_window():
  d = Dev("gfx1100", vram_size=512 << 20, bar0_size=256 << 20)
  try:
    assert d.pci.bar_size(0) == 256 << 20 and d.vram_size == 512 << 20
    assert d.disc["sig"] == 0x28211407 and 11 in d.disc["ips"]        # read entirely through MM_INDEX/MM_DATA
  finally: d.close()


def test_resizable_bar_grows_bar0():
  d = Dev("gfx1100", vram_size=1 << 30, bar0_size=256 << 20)
  try:
    p = d.pci
    ext = 0x100
    while (p.config_read(ext, 4) & 0xffff) != 0x15: ext = p.config_read(ext, 4) >> 20
    sizes = p.config_read(ext + 4, 4) >> 4
    assert sizes & (1 << 10)                                       # 1 GiB supported
    ctl = p.config_read(ext + 8, 4)
    p.config_write(ext + 8, (ctl & ~0x3f00) | (10 << 8), 4)
    assert p.bar_size(0) == 1 << 30
  finally: d.close()


def test_two_boards_are_independent():
  a, b = Dev("gfx1100"), Dev("gfx1201")
  try:
    ra, rb = a.addr("gc", "regSCRATCH_REG0"), b.addr("gc", "regSCRATCH_REG0")
    a.mmio.write32(ra * 4, 1); b.mmio.write32(rb * 4, 2)
    assert a.mmio.read32(ra * 4) == 1 and b.mmio.read32(rb * 4) == 2
    a.vram.write32(0, 7); assert b.vram.read32(0) == 0
  finally: a.close(); b.close()
