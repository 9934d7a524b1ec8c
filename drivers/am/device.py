"""AMDevice: one AMD board over PCI, booted by rawgpu's own driver. Reading __init__ and boot() is reading the
boot sequence: map the BARs, read IP discovery, pick register tables, then run the IP blocks in order.

Boot kinds. Cold: PSP loads everything. Warm: the board was left by a clean rawgpu fini (marker in SCRATCH_REG7,
PSP alive, MEC halted): only GFX and SDMA are re-initialized. A board that another driver (amdgpu) or a crashed
process left running is reset through the SMU (mode 1) and booted cold.
"""
from __future__ import annotations
import os, time
from typing import Callable
from rawgpu.drivers.am import discovery, facts as F, firmware, mm
from rawgpu.drivers.am.boards import AMD_VENDOR, BOARDS, IN_PROGRESS, arch_of, board_list
from rawgpu.drivers.am.gfx import GFX
from rawgpu.drivers.am.gmc import GMC
from rawgpu.drivers.am.ih import IH
from rawgpu.drivers.am.psp import PSP
from rawgpu.drivers.am.regs import Regs
from rawgpu.drivers.am.sdma import SDMA
from rawgpu.drivers.am.smu import SMU
from rawgpu.drivers.am.soc import SOC
from rawgpu.drivers.cpufence import fences_or_none
from rawgpu.drivers.mmio import MMIO
from rawgpu.drivers.pci import PCIDevice
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceNotFound, DeviceTimeout, FirmwareError, RawGPUError, debug_level

BOOT_MARKER = 0x72670001        # "rg" + version: written to GC SCRATCH_REG7 by a clean fini
RESERVED_TOP = 16 << 20         # top of VRAM left alone: discovery and the firmware's own reservations
BOOT_SIZE = 48 << 20            # boot memory below it: same addresses on every boot, so a warm boot finds it

SUPPORTED_GC = {(11, 0, 0), (11, 0, 2), (11, 0, 3), (12, 0, 0), (12, 0, 1)}
VRAM_BAR, DOORBELL_BAR, MMIO_BAR = 0, 2, 5


def _ordered() -> None:
  """The fences of uncached VRAM: uncached accesses are performed in program order, there is nothing to fence."""


class AMDevice:
  def __init__(self, bus: str, system: System = SYSTEM, *, timeout_scale: float = 1.0, reset_wait_s: float | None = None,
               force_cold: bool | None = None, probe: bool = False):
    """probe=True: map and lay out memory exactly as a boot would, without the owner lock and without touching the
    hardware state (for readers such as am-smi next to the owning process)."""
    self.bus, self.system, self.pid = bus, system, os.getpid()   # the process whose driver this is (not a forked child's)
    self.partitions: set[int] = set()   # the XCCs open devices run on (AMIface; one on RDNA boards)
    self.timeout_scale, self.reset_wait_s = timeout_scale, reset_wait_s
    self.debug = debug_level()
    self.t0 = time.perf_counter()
    self.pci = PCIDevice(bus, system, lock_prefix=None if probe else "am")   # DeviceBusy when another process owns it
    try: self._open(force_cold if force_cold is not None else os.environ.get("RAWGPU_AM_RESET") == "1", probe)
    except BaseException:
      self.pci.close()
      raise

  # ---- bring-up
  def _open(self, force_cold: bool, probe: bool = False) -> None:
    p = self.pci
    in_progress = p.vendor == AMD_VENDOR and p.device in IN_PROGRESS and os.environ.get("RAWGPU_AM_IN_PROGRESS") == "1"
    if not in_progress and (p.vendor != AMD_VENDOR or p.device not in BOARDS):
      later = (f"; AM's {IN_PROGRESS[p.device].name} support is being written: RAWGPU_AM_IN_PROGRESS=1 opens it as far as it goes"
               if p.vendor == AMD_VENDOR and p.device in IN_PROGRESS else "")
      raise DeviceNotFound(f"{self.bus}: PCI {p.vendor:04x}:{p.device:04x} is not a board AM supports "
                           f"(supported: {board_list()}){later}; use KFD+AMD instead")
    self.board = IN_PROGRESS[p.device] if in_progress else BOARDS[p.device]
    if p.info.driver is not None and not probe:
      raise DeviceBusy(f"{self.bus} is bound to the kernel driver {p.info.driver}; unbind it first "
                       f"(echo {self.bus} > /sys/bus/pci/drivers/{p.info.driver}/unbind, or `hcq-smi amd rmmod`) or use DEV=KFD+AMD")
    if not probe: p.enable_bus_master()
    self.bar_size = p.bar_size(VRAM_BAR)
    # VRAM write-combined where Linux offers it (as amdgpu maps it): CPU copies stream; an uncached view stores a word per bus
    # write. The uncached register and doorbell writes that follow drain the CPU's WC buffers (Intel SDM vol. 3A 11.3.1);
    # a read after the flag that says the data is there needs a load fence, a host-memory flag set after VRAM writes a
    # store fence (read_fence, write_fence; cpufence): without them VRAM maps uncached
    fences, no_fences = fences_or_none()
    self.vram_wc = p.can_write_combine(VRAM_BAR) and fences is not None
    self.vram_uncached_why = "" if self.vram_wc else (
      f"{p.path}/resource{VRAM_BAR}_wc is not offered (VFIO, a BAR that is not prefetchable, or no WC on this architecture)"
      if not p.can_write_combine(VRAM_BAR) else f"write-combined VRAM needs CPU fences: {no_fences}")
    self.read_fence, self.write_fence = (fences.load, fences.store) if fences is not None and self.vram_wc else (_ordered, _ordered)
    self.vram_bar = p.map_bar(VRAM_BAR, write_combine=self.vram_wc)
    self._map_vram = p.bar_mapper(VRAM_BAR, write_combine=self.vram_wc)
    self.doorbells, self.mmio = p.map_bar(DOORBELL_BAR), p.map_bar(MMIO_BAR)
    self.vram_size = self.mmio.read(F.RCC_CONFIG_MEMSIZE * 4) << 20
    if self.vram_size == 0 or self.vram_size == 0xffffffff << 20:
      raise RawGPUError(f"{self.bus}: the board reports no VRAM (RCC_CONFIG_MEMSIZE = 0): it did not post; reset or power-cycle it")
    self.disc = discovery.parse(self.read_vram(self.vram_size - F.DISCOVERY_TMR_OFFSET, F.DISCOVERY_TMR_SIZE))
    self.ips = self.disc.versions()
    self.ips["mp0"], self.ips["mp1"] = self.disc.find("mp0").version, self.disc.find("mp1").version
    self.gc9 = self.ips["gc"][0] == 9   # MI300 (GC 9.4.3): SOC15 blocks, per-XCC/per-AID instances, its own boot
    if self.ips["gc"] not in SUPPORTED_GC and not in_progress:
      raise DeviceNotFound(f"{self.bus}: GC {'.'.join(map(str, self.ips['gc']))} ({self.board.chip}) is not supported by AM yet; "
                           "use KFD+AMD")
    self.arch = arch_of(self.ips["gc"])
    self.regs = Regs(self.mmio, self.disc, self._trace if self.debug >= 4 else None)
    self.step("discovery", lambda: None)
    self._layout_memory()
    self.soc, self.gmc, self.ih, self.psp, self.smu = SOC(self), GMC(self), IH(self), PSP(self), SMU(self)
    self.gfx, self.sdma = GFX(self), SDMA(self)
    self.blocks = [self.soc, self.gmc, self.ih, self.psp, self.smu, self.gfx, self.sdma]
    if probe:
      for b in self.blocks: b.init_sw()
      return
    self.boot(force_cold)

  def _layout_memory(self) -> None:
    visible_top = min(self.vram_size, self.bar_size)
    boot_top = visible_top - RESERVED_TOP
    self.boot_base = boot_top - BOOT_SIZE
    if self.boot_base < (64 << 20): raise RawGPUError(f"{self.bus}: BAR0 shows only {self.bar_size >> 20} MiB of VRAM; AM needs at least 128 MiB")
    self.boot_mem = mm.RangeAllocator(BOOT_SIZE, self.boot_base, f"{self.bus} boot memory")
    self.visible = mm.RangeAllocator(self.boot_base, 0, f"{self.bus} CPU-visible VRAM")
    hidden = self.vram_size - RESERVED_TOP - visible_top
    self.hidden = mm.RangeAllocator(hidden, visible_top, f"{self.bus} VRAM beyond the BAR") if hidden > 0 and self.bar_size < self.vram_size else None
    self.pt = mm.PageTables(self.vram, lambda: self.visible.alloc(mm.PAGE), self.visible.free, mm.PTEFlags(gfx12=self.ips["gc"][0] >= 12, gfx9=self.gc9),
                            root=self.boot_alloc(mm.PAGE))

  def boot(self, force_cold: bool = False) -> None:
    for b in self.blocks: b.init_sw()
    marker = self.regs.reg("gc", "regSCRATCH_REG7").read()
    sos = self.psp.sos_alive()
    self.warm = not force_cold and marker == BOOT_MARKER and sos and not self.gfx.mec_running()
    if self.gc9: return self._boot_gc9()
    self.vram(self.pt.root, mm.PAGE)[:] = bytes(mm.PAGE)   # a fresh VA space, on either kind of boot
    if not self.warm:
      if sos:  # another driver or a crashed owner left it running: start over from a reset
        self.step("mode1 reset", self.smu.mode1_reset)
      self.fw = self.step("firmware", lambda: firmware.load(self.ips, self.system))
      self.regs.reg("gc", "regSCRATCH_REG7").write(0)
      for b in (self.soc, self.gmc, self.ih, self.psp):
        self.step(b.name, b.init_hw)
      self.step("psp: firmware + rlc autoload", self.psp.load_non_psp_firmware)
      self.step("smu", self.smu.init_hw)   # amdgpu starts the SMU after the PSP has loaded every firmware
    else: self._resume_warm()
    for b in (self.gfx, self.sdma): self.step(b.name, b.init_hw)
    self.step(f"boot done ({'warm' if self.warm else 'cold'})", lambda: None)

  def _resume_warm(self) -> None:
    """A warm boot keeps what the last clean fini left: firmware, SMU, hubs and IH programmed at the same boot-memory
    addresses; the hubs forget the old VA space, the IH skips what is left in its ring."""
    self.gmc.hub_ready = {"MM": True, "GC": True}
    self.ih.sync()
    self.gmc.flush_tlb()

  def _boot_gc9(self) -> None:
    """MI300 (GC 9.4.3), as far as AM has got (drivers/emu/amd/MI300.md). The IFWI has started the PSP's secure OS
    and the SMU's PMFW: no bootloader stages (psp_v13_0_is_sos_alive), no mode-1 reset for a running sOS; the PSP
    keeps its boot-time TMR (SETUP_TMR without a buffer) and loads the P2S table, SDMA, MEC and RLC images; the SMU
    gets the driver table and enables its features; every XCC's gfxhub and every AID's mmhub get VMID 0 on mm's page
    tables (translating further); the IH ring (vega20_ih: the same registers as ih_v6) takes interrupts; every XCC's
    MEC runs, each XCC a partition of its own: a compute queue runs on the XCC it names (AMIface(xcc=)), a copy ring
    on one of that partition's two SDMA 4.4.2 engines. Not written: partitions of several XCCs (drivers/emu/amd/MI300.md)."""
    if not self.psp.sos_alive():
      raise DeviceTimeout(f"{self.bus}: the PSP's secure OS is not running (MP0 C2PMSG_81 is 0); on MI300 the IFWI starts it: "
                          "power-cycle the board")
    self.vram(self.pt.root, mm.PAGE)[:] = bytes(mm.PAGE)   # a fresh VA space
    if self.warm:   # left by a clean fini (the marker, every MEC halted): only GFX starts again
      self._resume_warm()
      self.step("gfx", self.gfx.init_hw)
      return self.step("boot done (warm)", lambda: None)
    self.regs.reg("gc", "regSCRATCH_REG7").write(0)
    self.fw = self.step("firmware", lambda: firmware.load(self.ips, self.system))
    self.step("soc", self.soc.init_hw)
    self.step("soc: sdma doorbells", self.soc.sdma_doorbell_ranges)
    self.step("psp: ring", self.psp.ring_create)
    self.step("psp: tmr", self.psp.tmr_load)   # the boot-time TMR (no buffer)
    self.step("psp: firmware", self.psp.load_non_psp_firmware)
    self.step("smu", self.smu.init_hw)
    self.step("gmc", self.gmc.init_hw)
    self.step("gmc: tlb", self.gmc.flush_tlb)
    self.step("ih", self.ih.init_hw)
    self.step("gfx", self.gfx.init_hw)
    self.step("sdma", self.sdma.init_hw)   # every engine's settings (sdma_v4_4_2_inst_start); a warm boot keeps them
    self.step("boot done (cold)", lambda: None)

  def fini(self) -> None:
    for b in (self.gfx, self.sdma):
      try: b.fini()
      except RawGPUError: pass
    self.regs.reg("gc", "regSCRATCH_REG7").write(BOOT_MARKER)   # the next open may boot warm
    self.pci.close()

  # ---- helpers the blocks share
  def step(self, what: str, fn: Callable):
    t = time.perf_counter()
    r = fn()
    if self.debug >= 1: print(f"am {self.bus}: {what} {1e3 * (time.perf_counter() - t):.1f} ms (at {1e3 * (time.perf_counter() - self.t0):.1f} ms)")
    return r

  def _trace(self, kind: str, addr: int, value: int) -> None: print(f"am {self.bus}: {kind} {addr:#07x} {value:#010x}")

  def wait(self, cond: Callable[[], object], what: str, timeout: float = 2.0) -> None:
    deadline = time.perf_counter() + timeout * self.timeout_scale
    spins = 0
    while not cond():
      if time.perf_counter() > deadline:
        if self.pci.config_read(0, 2) == 0xffff:
          raise DeviceNotFound(f"{self.bus}: the board no longer answers (config space reads all ones) while waiting for {what}: "
                               "it was removed or fell off the bus")
        if hasattr(self, "psp") and (rejected := self.psp.rejected):
          raise FirmwareError(f"{self.bus}: timed out waiting for {what}, after the PSP rejected {'; '.join(rejected)}: the firmware "
                              f"does not match this board ({self.fw_hint()})")
        raise DeviceTimeout(f"{self.bus}: timed out waiting for {what}; the board may be hung: rawgpu resets it on the next open "
                            "(RAWGPU_AM_RESET=1 forces it)")
      spins += 1
      time.sleep(0 if spins < 100 else 1e-4)   # yield: the device (or its model) runs beside us

  def fw_hint(self) -> str: return firmware.PACKAGE_HINT

  def boot_alloc(self, size: int, align: int = mm.PAGE) -> int: return self.boot_mem.alloc(size, align)

  def valloc_phys(self, size: int, align: int = mm.PAGE, cpu: bool = True) -> int:
    if not cpu and self.hidden is not None:
      try: return self.hidden.alloc(size, align)
      except MemoryError: pass
    return self.visible.alloc(size, align)

  def pfree(self, paddr: int) -> None:
    (self.hidden if self.hidden is not None and paddr >= self.hidden.base else self.visible).free(paddr)

  def vram(self, paddr: int, size: int) -> memoryview:
    """CPU view of VRAM through BAR0."""
    if paddr + size > self.bar_size: raise RawGPUError(f"{self.bus}: VRAM {paddr:#x}+{size:#x} lies beyond the {self.bar_size >> 20} MiB BAR")
    return self.vram_bar.view(paddr, size).cast("B")

  def map_vram(self, paddr: int, size: int) -> MMIO:
    """A CPU mapping of its own of VRAM [paddr, paddr + size) through BAR0 (page-aligned), mapped as vram_bar is; an
    allocation's view, which System.munmap takes away when it is freed."""
    return self._map_vram(paddr, size)

  def read_vram(self, paddr: int, size: int) -> bytes:
    """Bytes of VRAM anywhere: through BAR0 when it reaches, else the MM_INDEX/MM_DATA window (amdgpu_device_mm_access)."""
    if paddr + size <= self.bar_size: return bytes(self.vram(paddr, size))
    out = bytearray()
    for a in range(paddr, paddr + size, 4):
      self.mmio.write(F.MM_INDEX * 4, (a & 0x7fffffff) | 0x80000000)
      self.mmio.write(F.MM_INDEX_HI * 4, a >> 31)
      out += self.mmio.read(F.MM_DATA * 4).to_bytes(4, "little")
    return bytes(out)
