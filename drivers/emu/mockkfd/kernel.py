"""MOCKKFD's kernel: amdkfd + amdgpu as the emulated board's host driver. It answers the ioctls, mmaps and sysfs
reads of /dev/kfd, /dev/dri/renderD* and the KFD topology, validating arguments as kfd_chardev.c does (same errno
for the same mistake), and uses rawgpu's AM driver as "the kernel's amdgpu" to boot the board, write page tables and
program hardware queues. User code sees only files, ioctls and mappings.
"""
from __future__ import annotations
import ctypes, errno, itertools, os, threading, time, zlib
from dataclasses import dataclass, field
from rawgpu.autogen import kfd as K
from rawgpu.autogen.amd import ih as IH
from rawgpu.drivers.am import facts as F, mm
from rawgpu.drivers.am.boards import xccs_of
from rawgpu.drivers.kfd.sizes import PAGE, align, queue_sizes
from rawgpu.drivers.system import zero_pages
from rawgpu.drivers.emu.mockkfd import hw

MMAP_TYPE_SHIFT, GPU_ID_SHIFT = 62, 46
MMAP_DOORBELL, MMAP_EVENTS, MMAP_MMIO = 3, 2, 0
DOORBELL_SLICE = 2 * PAGE
MAX_QUEUE_PERCENTAGE, MAX_QUEUE_PRIORITY, MIN_RING = 100, 15, 1024
SIGNAL_EVENT_LIMIT, FIRST_NONSIGNAL_EVENT_ID = 4096, (0x7fffffff >> 1) + 1
UNSIGNALED = (1 << 64) - 1
DOMAIN_FLAGS = K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | K.KFD_IOC_ALLOC_MEM_FLAGS_GTT | K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | \
               K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP
SRC_CP_EOP, SRC_SDMA_TRAP, SRC_SDMA_TRAP_SOC15 = 181, 49, 224   # ivsrcids: CP end of pipe (gfx 11), SDMA trap (soc15_int.h)
# end of pipe (CP), and SDMA traps: SOC21's in the GFX client, SOC15's (MI300) per engine (kfd_int_process_v11/v9.c)
SIGNAL_SOURCES = {(F.SOC21_IH_CLIENTID_GRBM_CP, SRC_CP_EOP), (IH.SOC21_IH_CLIENTID_GFX, SRC_SDMA_TRAP),
                  *((c, SRC_SDMA_TRAP_SOC15) for c in (IH.SOC15_IH_CLIENTID_SDMA0, IH.SOC15_IH_CLIENTID_SDMA1, IH.SOC15_IH_CLIENTID_SDMA2, IH.SOC15_IH_CLIENTID_SDMA3))}
FAULT_CLIENTS = (IH.SOC21_IH_CLIENTID_VMC, IH.SOC21_IH_CLIENTID_GFX, IH.SOC15_IH_CLIENTID_UTCL2)   # MM hub, GC hub (either id)
TASK_SIZE = (1 << 47) - PAGE   # x86-64 user addresses end here (access_ok)
USER_VA_END = 1 << 48   # a process VM's end: max_pfn pages (48-bit VAs)
GPUVM_BASE, GPUVM_SIZE = 1 << 16, 1 << 47   # the aperture amdkfd reports: above AMDGPU_VA_RESERVED_BOTTOM, below the GMC hole
FIRST_KFD_VMID, FIRST_KFD_VMID_GC943, VMIDS = 8, 3, 16   # amdgpu's vm_manager.first_kfd_vmid (gmc_v9_0.c, gmc_v11/12_0.c)


def fail(code: int, why: str) -> OSError: return OSError(code, f"{errno.errorcode.get(code, code)}: {why}")


@dataclass
class BO:
  gpu: "GPU"
  va: int
  size: int
  flags: int
  backing: object = None      # VRAM paddr, HostMem, or a list of bus addresses (userptr)
  mmap_offset: int = 0
  tables: dict = field(default_factory=dict)  # node (GPU) -> its mapping in the process's VM there
  queue_refs: dict = field(default_factory=dict)   # node (GPU) -> queues there using it (amdgpu's bo_va->queue_refcount: per VM)
  cpu_maps: int = 0          # live CPU mappings through the render node: each holds the BO, as a GEM VMA does
  freed: bool = False        # its handle is gone (FREE_MEMORY_OF_GPU); the memory goes with the last CPU mapping

  @property
  def domain(self) -> int: return self.flags & DOMAIN_FLAGS

  def mapped_on(self, g: "GPU") -> bool: return g in self.tables


@dataclass
class Event:
  id: int
  type: int
  auto_reset: bool
  signaled: bool = False
  mem: dict = field(default_factory=dict)   # memory exception data, once one happened
  age: int = 1                              # counts sets (0 means "no age" to a waiter, so it never wraps to 0 or 1)

  def set(self) -> None:
    self.signaled, self.age = True, self.age + 1 if self.age + 1 < 1 << 64 else 2


@dataclass
class VM:
  """A process's GPU address space on a node (amdgpu_vm, made at ACQUIRE_VM with the node's render-node file: each
  of MI300's XCC partitions has its own): its page tables, and the VMID whose context on the node's hubs points at
  them."""
  vmid: int
  pt: mm.PageTables


@dataclass
class UserQueue:
  gpu: "GPU"
  hwq: hw.HWQueue
  bos: list[BO]


class GPU:
  """One emulated board as amdgpu+amdkfd see it: the AM device, its topology node and its hardware queue slots. On
  MI300 a node is one XCC of the board (a CPX partition, as amdkfd lists them): its MEC, its two copy engines."""
  def __init__(self, dev, node: int, render_minor: int, xcc: int = 0, ecc: bool = False):
    self.dev, self.node, self.render_minor, self.xcc = dev, node, render_minor, xcc
    # the node's KFD VMIDs (kfd_device.c kgd2kfd_device_init): amdgpu's first_kfd_vmid on; on GC 9.4.3 in CPX mode with
    # several nodes the range is split, 4-9 for the first XCD of an AID and 10-15 for the second
    per_board = xccs_of(dev.pci.device) if dev.gc9 else 1
    self.vmid_range = ((4, 9) if xcc % 2 == 0 else (10, 15)) if dev.gc9 and per_board > 1 else \
                      (FIRST_KFD_VMID_GC943 if dev.gc9 else FIRST_KFD_VMID, VMIDS - 1)
    # the hubs its VMs live in: its XCC's GC hub and its AID's MM hub (two XCCs share an AID); one of each elsewhere
    self.hubs = {"GC": (xcc,), "MM": (xcc // 2,)} if dev.gc9 else None
    self.apu = False   # amdgpu's AMD_IS_APU (AMDGPU_INFO's FUSION flag); the emulated boards are discrete unless a test says so
    self.gpu_id = (zlib.crc32(dev.bus.encode() + (f"/{xcc}".encode() if xcc else b"")) & 0xfffe) | 1
    self.lock = threading.RLock()
    self.compute_slots: dict[int, UserQueue] = {}
    self.sdma_slots: dict[tuple[int, int], UserQueue] = {}   # by (engine, sdma_queue_id)
    self.sdma_engines = dev.sdma.engines
    self.mmaps: dict[int, BO] = {}
    self.cpu_views: dict[int, tuple[object, BO]] = {}   # id(view) -> (the view, its BO), for munmap
    self._offsets = itertools.count(1)
    gc = dev.disc.gc_info
    from rawgpu.drivers.am.discovery import compute_units
    cu = dev.gfx.active_cus(xcc)   # kfd_crat.c: SIMDs from cu_info's count (harvested CUs left out), CUs per array physical
    se, sa = gc.get("gc_num_se", 1), gc.get("gc_num_sa_per_se", gc.get("gc_num_sh_per_se", 1))
    ver = dev.ips["gc"]
    # kfd_device.c: GC 9.4.3 with rev_id >= 1 is gfx942 (the emulated MI300X); elsewhere the version's digits
    self.gfxv = (90402 if dev.soc.rev_id() >= 1 else 90401) if ver == (9, 4, 3) else ver[0] * 10000 + ver[1] * 100 + ver[2]
    # a node is one XCC's partition on MI300 (no partition of several XCCs is modelled); gfx9 CUs have 4 SIMDs, RDNA's 2. Waves per
    # SIMD come from the discovery table, as amdgpu's cu_info takes them (amdgpu_discovery.c)
    simds = 4 if ver[0] == 9 else 2
    self.props = {"cpu_cores_count": 0, "simd_count": cu * simds, "mem_banks_count": 1, "caches_count": 0, "io_links_count": 1,
                  "max_waves_per_simd": gc["gc_max_waves_per_simd"], "lds_size_in_kb": 64, "gds_size_in_kb": 0, "num_gws": 64,
                  "wave_front_size": 64 if ver[0] == 9 else gc.get("gc_wave_size", 32) or 32,
                  "array_count": se * sa, "simd_arrays_per_engine": sa, "cu_per_simd_array": compute_units(gc) // max(1, se * sa), "simd_per_cu": simds,
                  "max_slots_scratch_cu": 32, "gfx_target_version": self.gfxv, "vendor_id": dev.pci.vendor, "device_id": dev.pci.device,
                  "location_id": self._location(dev.bus) | (xcc if per_board > 1 else 0), "domain": int(dev.bus.split(":")[0], 16), "drm_render_minor": render_minor,
                  "num_sdma_engines": self.sdma_engines, "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": len(hw.sdma_queue_ids(dev)),
                  "num_cp_queues": hw.MAX_COMPUTE, "local_mem_size": 0, "num_xcc": 1, "gpu_id": self.gpu_id,
                  # of the capability bits only RAS's (kfd_topology.c: SRAM ECC from RAS on GFX, memory ECC from UMC's)
                  "capability": (K.HSA_CAP_SRAM_EDCSUPPORTED | K.HSA_CAP_MEM_EDCSUPPORTED) if ecc else 0}
    # (location_id: a board of several nodes has the node's id ORed in, as kfd_topology_add_device does;
    # kfd_topology.c node_show writes local_mem_size 0: the VRAM size is in mem_banks, as topology_files publishes)
    s = queue_sizes(self.gfxv, cu * simds, simds, se * sa, sa)
    self.sizes = s
    self.props["cwsr_size"], self.props["ctl_stack_size"] = s.cwsr, s.ctl_stack
    # amdgpu enables the SDMA trap interrupt (sdma_v*_set_trap_irq_state): a user queue's TRAP reaches the IH
    for e in dev.sdma.all_engines(): dev.sdma.r(e, "regSDMA0_CNTL").update(TRAP_ENABLE=1)

  def set_pasid(self, vmid: int, pasid: int) -> None:
    """set_pasid_vmid_mapping's IH half: IH_VMID_n_LUT (gfx11/12, amdgpu_amdkfd_gfx_v11.c); on GC 9.4.3 the LUT of
    the node's XCD and the _LUT_MM of its AID, chosen with IH_VMID_LUT_INDEX (amdgpu_amdkfd_gc_9_4_3.c)."""
    reg = lambda n: self.dev.regs.reg("osssys", n)
    if not self.dev.gc9:
      reg(f"regIH_VMID_{vmid}_LUT").write(PASID=pasid)
      return
    index, aid = reg("regIH_VMID_LUT_INDEX"), self.xcc // 2
    saved = index.read()
    index.write(aid * 4 + self.xcc % 2 + 1)
    reg(f"regIH_VMID_{vmid}_LUT").write(PASID=pasid)
    index.write(aid * 4)
    reg(f"regIH_VMID_{vmid}_LUT_MM").write(PASID=pasid)
    index.write(saved)

  @staticmethod
  def _location(bus: str) -> int:
    _, b, df = bus.split(":")
    d, f = df.split(".")
    return (int(b, 16) << 8) | (int(d, 16) << 3) | int(f)

  def mmap_offset(self, bo: BO) -> int:
    off = next(self._offsets) << 32   # a DRM fake offset per BO (page aligned, unique on this render node)
    self.mmaps[off] = bo
    return off

  def put(self, bo: BO) -> None:
    """The BO's memory goes back unless a CPU mapping still holds it (drm_gem_object_put: the last reference frees)."""
    if bo.cpu_maps: return
    if bo.domain == K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM: self.dev.pfree(bo.backing)
    elif bo.domain == K.KFD_IOC_ALLOC_MEM_FLAGS_GTT: self.dev.system.free_host(bo.backing.view)
    bo.backing = None

  # ---- sysfs
  def topology_files(self, prefix: str) -> dict[str, str]:
    props = "".join(f"{k} {v}\n" for k, v in self.props.items() if k != "gpu_id")
    heap = 1 if self.dev.bar_size >= self.dev.vram_size else 2   # FB public (large BAR) or private
    return {f"{prefix}/gpu_id": f"{self.gpu_id}\n", f"{prefix}/name": "gfx\n", f"{prefix}/properties": props,
            f"{prefix}/mem_banks/0/properties": f"heap_type {heap}\nsize_in_bytes {self.dev.vram_size}\nflags 0\nwidth 0\nmem_clk_max 0\n"}

  def ip_files(self, prefix: str) -> dict[str, str]:
    out = {}
    for dirname, name in (("GC", "gc"), ("SDMA0", "sdma"), ("MMHUB", "mmhub"), ("ATHUB", "athub"), ("OSSSYS", "osssys"), ("HDP", "hdp"),
                          ("NBIF", "nbif"), ("MP0", "mp0"), ("MP1", "mp1"), ("SMUIO", "smuio")):
      if not self.dev.disc.has(name): continue
      b = self.dev.disc.find(name)
      p = f"{prefix}/{dirname}/0"
      out.update({f"{p}/major": f"{b.version[0]}\n", f"{p}/minor": f"{b.version[1]}\n", f"{p}/revision": f"{b.version[2]}\n",
                  f"{p}/hw_id": f"{b.hw_id}\n", f"{p}/num_instance": f"{b.instance}\n", f"{p}/harvest": "0x0\n",
                  f"{p}/num_base_addresses": f"{len(b.bases)}\n", f"{p}/base_addr": "".join(f"0x{a:08X}\n" for a in b.bases)})
    return out

  # ---- interrupts (the kernel's IH handler, run when a process waits)
  def service(self, kernel: "Kernel") -> None:
    """The board's IH ring (shared by the nodes of one board): an end of pipe signals events; a VM fault goes to the
    node it belongs to (MI300: by the entry's node id and the faulting client, as kfd_node_by_irq_ids picks the node
    by its interrupt bitmap), or to every node of the board when no node owns it."""
    dev = self.dev
    for iv in dev.ih.poll():
      # kfd_signal_event_interrupt: the IV's PASID (the VMID's, from IH_VMID_n_LUT) names the process
      if (iv["client_id"], iv["src_id"]) in SIGNAL_SOURCES:
        for p in kernel.processes:
          if p.pasid == iv["pasid"]: p.signal_from_interrupt(iv["src_data"][0])
      elif iv["client_id"] in FAULT_CLIENTS and iv["src_id"] == F.UTCL2_1_0__SRCID__FAULT:
        sd = iv["src_data"]
        addr = (sd[0] << 12) | ((sd[1] & 0xf) << 44)
        hub = "MM" if iv["client_id"] in (IH.SOC21_IH_CLIENTID_VMC, IH.SOC15_IH_CLIENTID_VMC) else "GC"
        inst = dev.ih.hub_instance(hub, iv["node_id"]) or 0
        st = dev.gmc.fault_status(hub, inst)
        owner = dev.ih.fault_owner(hub, inst, st.get("CID", 0))
        for g in kernel.gpus:
          if g.dev is dev and owner in (None, g.xcc):
            for p in kernel.processes: p.vm_fault(g, iv["pasid"], addr, iv["ring_id"])


class Kernel:
  """The machine's amdkfd: GPUs and the processes (one per open /dev/kfd) using them."""
  def __init__(self, gpus: list[GPU], host_memory, system=None):
    self.gpus, self.host_memory, self.system = gpus, host_memory, system
    for g in gpus: g.kernel = self
    self.processes: list[Process] = []
    self.pasids = itertools.count(1)   # amdgpu_pasid_alloc: 16-bit, from 1
    self.version = (K.KFD_IOCTL_MAJOR_VERSION, K.KFD_IOCTL_MINOR_VERSION)

  def gpu_by_id(self, gpu_id: int) -> GPU | None: return next((g for g in self.gpus if g.gpu_id == gpu_id), None)

  def translate(self, g: GPU, va: int) -> int | None:
    """Where the page tables of the (first) process with a VM on node g send va (None: unmapped or no process)."""
    return next((p.translate(g, va) for p in self.processes if g in p.vms), None)


class Process:
  def __init__(self, kernel: Kernel):
    self.k = kernel
    self.lock = threading.RLock()
    self.drm: dict[int, object] = {}       # gpu_id -> acquired render-node file
    self.runtime_enabled = False
    self.bos: dict[int, BO] = {}           # handle -> BO
    self.queues: dict[int, UserQueue] = {}
    self.xnack = False   # kfd_process_xnack_mode(p, false): off where amdgpu runs without retry faults
    self.events: dict[int, Event] = {}
    self.signal_bo: BO | None = None
    self.signal_handle = 0
    self.vms: dict = {}                    # node (GPU) -> this process's VM on it
    self.evicted: set[GPU] = set()         # nodes where a fault stopped this process's queues for its life
    self.pasid = next(kernel.pasids)
    kernel.processes.append(self)

  # ---- helpers
  def pdd(self, gpu_id: int) -> GPU:
    g = self.k.gpu_by_id(gpu_id)
    if g is None: raise fail(errno.EINVAL, f"no GPU with gpu_id {gpu_id}")
    return g

  def bound(self, gpu_id: int) -> GPU:
    g = self.pdd(gpu_id)
    if gpu_id not in self.drm: raise fail(errno.ENODEV, "ACQUIRE_VM was not called for this GPU")   # kfd_bind_process_to_device
    return g

  def lookup_mapping(self, gpu: GPU, va: int) -> BO | None:
    """The BO mapped at va in gpu's VM: its own, a peer's, or (MI300) a sibling node's."""
    page = va >> 12
    for bo in self.bos.values():
      if bo.mapped_on(gpu) and bo.va >> 12 <= page < (bo.va + bo.size) >> 12: return bo
    return None

  def queue_buffer(self, gpu: GPU, va: int, expected: int) -> BO:
    """kfd_queue_buffer_get: a mapping starting at va's page, exactly `expected` bytes long; under a page (a ring of
    1 or 2 KiB) counts as 0 pages there, any length."""
    bo, pages = self.lookup_mapping(gpu, va), expected >> 12
    if bo is None or va >> 12 != bo.va >> 12 or (pages and -(-bo.size // PAGE) != pages):
      raise fail(errno.EINVAL, f"queue buffer at {va:#x}: no GPU mapping of exactly {expected:#x} bytes starts there")
    return bo

  # ---- ioctls
  def ioctl(self, request: int, buf) -> int:
    h = HANDLERS.get(request)
    if h is None: raise fail(errno.ENOTTY, f"ioctl {request:#x} is not implemented by MOCKKFD")
    with self.lock: h(self, buf)
    return 0

  def get_version(self, a) -> None: a.major_version, a.minor_version = self.k.version

  def acquire_vm(self, a) -> None:
    f = self.k.system.vfds.get(a.drm_fd) if self.k.system is not None else None
    if f is None: raise fail(errno.EINVAL, f"drm_fd {a.drm_fd} is not an open file")   # (fget)
    g = self.pdd(a.gpu_id)
    if a.gpu_id in self.drm:   # kfd_ioctl_acquire_vm: an acquired VM is checked before what the new file is
      if self.drm[a.gpu_id] is not f: raise fail(errno.EBUSY, "the VM was acquired with another file")
      return
    if not isinstance(f, RenderFile) or f.gpu is not g: raise fail(errno.EINVAL, f"drm_fd {a.drm_fd} is not a render node of gpu {a.gpu_id}")
    self._vm_for(g)
    self.drm[a.gpu_id] = f

  def _vm_for(self, g: GPU) -> VM:
    """The process's VM on node g, made with its ACQUIRE_VM: page tables of its own, a VMID from the node's range
    on the node's hubs (its XCC's GC hub, its AID's MM hub on MI300)."""
    d = g.dev
    if (vm := self.vms.get(g)) is None:
      used = {p.vms[g].vmid for p in self.k.processes if g in p.vms}
      first, last = g.vmid_range
      vmid = next((v for v in range(first, last + 1) if v not in used), None)
      if vmid is None: raise fail(errno.ENOSPC, f"{d.bus}: every KFD VMID of node {g.node} is taken (this model keeps one per process for its life)")
      pt = mm.PageTables(d.vram, lambda: d.visible.alloc(mm.PAGE), d.visible.free, d.pt.flags, base=0, phys_offset=d.pt.phys_offset)
      d.gmc.set_context(vmid, pt.root, 0, USER_VA_END, hubs=g.hubs)   # amdgpu's user VM: 0 .. max_pfn
      g.set_pasid(vmid, self.pasid)   # its IVs name the process
      vm = self.vms[g] = VM(vmid, pt)
    hw.program_apertures(d, g.xcc, vm.vmid)
    return vm

  def translate(self, g: GPU, va: int) -> int | None:
    """Where this process's page tables on node g send va (None: unmapped)."""
    vm = self.vms.get(g)
    return vm.pt.translate(va) if vm is not None else None

  def set_xnack_mode(self, a) -> None:
    """kfd_ioctl_set_xnack_mode: -1 asks for the process's mode, a change needs a process without queues. The mode
    starts off (amdgpu's noretry default for GC 9.4.3 and 10.3+); turning it on is refused (EPERM, as amdkfd does from
    GC 10.1.1 on): the emulated boards model no retry faults, which amdkfd would allow per process on GC 9.4.x."""
    if a.xnack_enabled < 0:
      a.xnack_enabled = int(self.xnack)
      return
    if self.queues: raise fail(errno.EBUSY, "the process has user queues")
    if bool(a.xnack_enabled) != self.xnack: raise fail(errno.EPERM, "XNACK on (retry faults) is not modelled")

  def runtime_enable(self, a) -> None:
    if not a.mode_mask & K.KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK:   # runtime_disable
      self.runtime_enabled = False; return
    if self.runtime_enabled: raise fail(errno.EBUSY, "runtime already enabled")
    if self.queues: raise fail(errno.EEXIST, "the process has queues already")
    self.runtime_enabled = True

  def apertures_new(self, a) -> None:
    if a.num_of_nodes == 0:   # how many to ask for: the process's GPUs
      a.num_of_nodes = len(self.k.gpus); return
    # more than the topology's devices (CPU included) is EINVAL since "drm/amdkfd: Add upper bound check for
    # num_of_nodes" (2026); older kernels fill as many as they have
    if a.num_of_nodes > len(self.k.gpus) + 1: raise fail(errno.EINVAL, "more nodes asked for than the topology has (CPU included)")
    n = min(a.num_of_nodes, len(self.k.gpus))
    if not a.kfd_process_device_apertures_ptr: raise fail(errno.EFAULT, "no apertures array")
    arr = (K.kfd_process_device_apertures * n).from_address(a.kfd_process_device_apertures_ptr)
    for i, g in enumerate(self.k.gpus[:n]):
      arr[i].gpu_id, arr[i].gpuvm_base, arr[i].gpuvm_limit = g.gpu_id, GPUVM_BASE, GPUVM_SIZE - 1   # kfd_init_apertures_v9
      arr[i].lds_base, arr[i].lds_limit = hw.LDS_APERTURE, hw.LDS_APERTURE + (1 << 32) - 1
      arr[i].scratch_base, arr[i].scratch_limit = hw.SCRATCH_APERTURE, hw.SCRATCH_APERTURE + (1 << 32) - 1
    a.num_of_nodes = n

  def alloc_memory(self, a) -> None:
    if a.size == 0: raise fail(errno.EINVAL, "size 0")
    g = self.pdd(a.gpu_id)
    flags, dev = a.flags, g.dev
    if flags & K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC and flags & K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM and dev.bar_size < dev.vram_size:
      raise fail(errno.EINVAL, "host-visible VRAM on a small-BAR board")
    self.bound(a.gpu_id)
    # kfd_ioctl_alloc_memory_of_gpu checks these by their flag, whichever domain the allocation then takes
    if flags & K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL:
      if a.size != DOORBELL_SLICE: raise fail(errno.EINVAL, f"doorbell BO must be {DOORBELL_SLICE} bytes")
    elif flags & K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP:
      if a.size != PAGE: raise fail(errno.EINVAL, "MMIO_REMAP BO must be one page")
    # the first domain named, in amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu's order; the VA is checked when mapped
    dom = next((d for d in (K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM, K.KFD_IOC_ALLOC_MEM_FLAGS_GTT, K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR,
                            K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) if flags & d), None)
    if dom is None: raise fail(errno.EINVAL, f"flags {flags:#x} name no memory domain")
    flags = flags & ~DOMAIN_FLAGS | dom
    bo = BO(g, a.va_addr, align(a.size, PAGE), flags)   # PAGE_ALIGN
    if dom == K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM:
      try: bo.backing = dev.valloc_phys(bo.size, align=1 << 21 if bo.size >= 1 << 21 else PAGE, cpu=bool(flags & K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC))
      except MemoryError as e: raise fail(errno.ENOMEM, str(e)) from None
      # amdgpu clears it (AMDGPU_GEM_CREATE_VRAM_CLEARED, by SDMA); the model clears what its BAR reaches, not beyond
      if bo.backing + bo.size <= dev.bar_size: dev.vram(bo.backing, bo.size)[:] = bytes(bo.size)
      bo.mmap_offset = g.mmap_offset(bo)
    elif dom == K.KFD_IOC_ALLOC_MEM_FLAGS_GTT:
      try: bo.backing = dev.pci.alloc_host(bo.size)
      except MemoryError as e: raise fail(errno.ENOMEM, str(e)) from None
      bo.mmap_offset = g.mmap_offset(bo)
    elif dom == K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR:
      if not a.mmap_offset: raise fail(errno.EINVAL, "userptr address 0")   # amdgpu_amdkfd_gpuvm_alloc_memory_of_gpu
      if a.mmap_offset % PAGE: raise fail(errno.EINVAL, "userptr address not page aligned")
      pages = [self.k.host_memory.phys(a.mmap_offset + i) for i in range(0, bo.size, PAGE)] if self.k.host_memory else [None]
      if None in pages: raise fail(errno.EFAULT, f"userptr {a.mmap_offset:#x}+{a.size:#x} is not (emulated) host memory")
      bo.backing, bo.mmap_offset = pages, g.mmap_offset(bo)   # the BO's DRM offset, as for every BO (not the user address)
    elif dom == K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL:
      bo.mmap_offset = g.mmap_offset(bo)
    else:
      bo.mmap_offset = (MMAP_MMIO << MMAP_TYPE_SHIFT) | (g.gpu_id << GPU_ID_SHIFT)
    # MAKE_HANDLE(gpu_id, the lowest free id of that device's idr, from 0)
    handle = (g.gpu_id << 32) | next(i for i in itertools.count() if (g.gpu_id << 32) | i not in self.bos)
    self.bos[handle] = bo
    a.handle, a.mmap_offset = handle, bo.mmap_offset

  def _bo(self, handle: int, unknown: int = errno.EINVAL) -> BO:
    """The BO of a handle: its GPU must exist (EINVAL); an unknown handle is `unknown` (FREE: EINVAL, MAP and
    UNMAP: ENOMEM, as kfd_chardev.c answers a failed kfd_process_device_translate_handle)."""
    self.pdd(handle >> 32)
    bo = self.bos.get(handle)
    if bo is None: raise fail(unknown, f"unknown handle {handle:#x}")
    return bo

  def free_memory(self, a) -> None:
    if self.signal_handle and a.handle == self.signal_handle: raise fail(errno.EPERM, "the signal-event BO cannot be freed")
    bo = self._bo(a.handle)
    if bo.tables: raise fail(errno.EBUSY, "BO is still mapped")
    self._release(bo)
    del self.bos[a.handle]

  def _release(self, bo: BO) -> None:
    for g in list(bo.tables): self._unmap(bo, g)
    bo.gpu.mmaps.pop(bo.mmap_offset, None)   # drm_vma_node_revoke: no new CPU mapping; the ones made keep the BO
    bo.freed = True
    bo.gpu.put(bo)

  def _device_ids(self, a) -> list[int]:
    if not a.n_devices: raise fail(errno.EINVAL, "n_devices is 0")
    if a.n_success > a.n_devices: raise fail(errno.EINVAL, "n_success exceeds n_devices")
    if not a.device_ids_array_ptr: raise fail(errno.EFAULT, "no device array")
    return list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr))

  def map_memory(self, a) -> None:
    ids = self._device_ids(a)
    self.bound(a.handle >> 32)
    bo = self._bo(a.handle, errno.ENOMEM)
    for i in range(a.n_success, a.n_devices):
      g = self.k.gpu_by_id(ids[i])
      if g is None: raise fail(errno.EINVAL, f"no GPU with gpu_id {ids[i]}")
      if ids[i] not in self.drm: raise fail(errno.ENODEV, f"device {ids[i]}: ACQUIRE_VM was not called for it")
      if not bo.mapped_on(g): self._map(bo, g)
      a.n_success = i + 1

  def _map(self, bo: BO, g: GPU) -> None:
    """The BO in g's page tables at its VA. Another GPU (kfd_mem_attach on a peer-accessible device) reaches VRAM
    through the owner's BAR0 as system pages, so only a large-BAR owner's VRAM is peer accessible (as amdgpu has it),
    and host pages at their bus addresses. Each node has page tables of its own: a sibling XCC partition of the same
    board reaches the BO only once it is mapped there too (its own VRAM, at the same address). A BO mapped on g
    already stays as it is."""
    d, dom, own = g.dev, bo.domain, g is bo.gpu
    if dom not in (K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM, K.KFD_IOC_ALLOC_MEM_FLAGS_GTT, K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR) and not own:
      raise fail(errno.EINVAL, "doorbell and MMIO-remap BOs cannot be mapped on another GPU")
    if g in bo.tables: return
    self._check_va(bo, g)
    uncached, vm = bool(bo.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED), self.vms[g]
    # amdgpu's PTE flags from the BO's (get_pte_flags): always readable, writeable and executable if asked
    access = dict(writeable=bool(bo.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE), executable=bool(bo.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE))
    if dom == K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM and d is bo.gpu.dev: m = vm.pt.map(bo.va, [(bo.backing + d.gmc.vram_base_offset, bo.size)], uncached=uncached, **access)
    elif dom == K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM:
      owner = bo.gpu.dev
      # amdgpu_device_is_peer_accessible: only a large-BAR owner (all of VRAM CPU-visible) lends VRAM over PCIe P2P,
      # and kfd_mem_attach is EINVAL for any VRAM BO of another
      if owner.bar_size < owner.vram_size: raise fail(errno.EINVAL, f"{owner.bus} has a small BAR: its VRAM is not peer accessible")
      m = vm.pt.map(bo.va, [(owner.pci.resources()[0][0] + bo.backing, bo.size)], system=True, snooped=False, uncached=True, **access)
    elif dom in (K.KFD_IOC_ALLOC_MEM_FLAGS_GTT, K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR):
      addrs = bo.backing.bus_addrs if dom == K.KFD_IOC_ALLOC_MEM_FLAGS_GTT else bo.backing
      chunks: list[tuple[int, int]] = []
      for x in addrs:
        if chunks and chunks[-1][0] + chunks[-1][1] == x: chunks[-1] = (chunks[-1][0], chunks[-1][1] + PAGE)
        else: chunks.append((x, PAGE))
      m = vm.pt.map(bo.va, chunks, system=True, snooped=True, uncached=uncached, **access)
    else: m = ("io", bo.va)   # doorbell / MMIO pages: not backed by memory the emulated walker reads
    bo.tables[g] = m
    d.gmc.flush_tlb(vm.vmid, g.hubs)

  def _check_va(self, bo: BO, g: GPU) -> None:
    """What mapping a BO at its VA needs (kfd_mem_attach, amdgpu_vm_verify_parameters, amdgpu_vm_bo_map): a VA, page
    aligned, below max_pfn, and no other mapping of this VM there."""
    if not bo.va: raise fail(errno.EINVAL, "the BO has no VA")
    if bo.va % PAGE or bo.va + bo.size > USER_VA_END: raise fail(errno.EINVAL, f"va {bo.va:#x}+{bo.size:#x} is not a page-aligned VA below {USER_VA_END:#x}")
    for o in self.bos.values():
      if o is not bo and g in o.tables and o.va < bo.va + bo.size and bo.va < o.va + o.size:
        raise fail(errno.EINVAL, f"va {bo.va:#x}+{bo.size:#x} conflicts with a mapping at {o.va:#x}+{o.size:#x}")

  def _unmap(self, bo: BO, g: GPU) -> None:
    """Unmap the BO from node g's VM."""
    m = bo.tables.pop(g)
    vm = self.vms[g]
    if not isinstance(m, tuple): vm.pt.unmap(m)
    g.dev.gmc.flush_tlb(vm.vmid, g.hubs)

  def unmap_memory(self, a) -> None:
    ids = self._device_ids(a)
    bo = self._bo(a.handle, errno.ENOMEM)
    for i in range(a.n_success, a.n_devices):
      g = self.k.gpu_by_id(ids[i])
      if g is None: raise fail(errno.EINVAL, f"unknown device {ids[i]}")
      if not bo.mapped_on(g): raise fail(errno.EINVAL, f"BO {a.handle:#x} is not mapped on {ids[i]}")   # no VM reserved for it
      if bo.queue_refs.get(g): raise fail(errno.EBUSY, "BO is in use by a queue in this VM")
      self._unmap(bo, g)
      a.n_success = i + 1

  def create_queue(self, a) -> None:
    # set_queue_properties_from_user
    if (a.queue_percentage & 0xff) > MAX_QUEUE_PERCENTAGE: raise fail(errno.EINVAL, "queue percentage above 100")
    if a.queue_priority > MAX_QUEUE_PRIORITY: raise fail(errno.EINVAL, "queue priority above 15")
    user = lambda addr, n: addr + n <= TASK_SIZE   # access_ok
    if a.ring_base_address and not user(a.ring_base_address, 8): raise fail(errno.EFAULT, "ring_base_address is not a user address")
    if a.ring_size and a.ring_size & (a.ring_size - 1): raise fail(errno.EINVAL, "ring size must be a power of 2 or 0")
    a.ring_size = ring_size = max(a.ring_size, MIN_RING)   # clamped, and the caller sees it
    for name in ("read_pointer_address", "write_pointer_address"):
      if not user(getattr(a, name), 4): raise fail(errno.EFAULT, f"{name} is not a user address")
    for name in ("eop_buffer_address", "ctx_save_restore_address"):
      if getattr(a, name) and not user(getattr(a, name), 4): raise fail(errno.EFAULT, f"{name} is not a user address")
    if a.queue_type not in (K.KFD_IOC_QUEUE_TYPE_COMPUTE, K.KFD_IOC_QUEUE_TYPE_SDMA, K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
                            K.KFD_IOC_QUEUE_TYPE_SDMA_XGMI, K.KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID):
      raise fail(524, "unknown queue type")   # ENOTSUPP (kernel-internal 524)
    if a.queue_type in (K.KFD_IOC_QUEUE_TYPE_COMPUTE_AQL, K.KFD_IOC_QUEUE_TYPE_SDMA_XGMI):
      raise fail(errno.EINVAL, "AQL and XGMI SDMA queues are not emulated")
    g = self.pdd(a.gpu_id)
    if a.gpu_id not in self.drm: raise fail(errno.ESRCH, "process not bound to the device")
    compute = a.queue_type == K.KFD_IOC_QUEUE_TYPE_COMPUTE
    if a.queue_type == K.KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID and a.sdma_engine_id > g.sdma_engines - 1:
      raise fail(errno.EINVAL, f"sdma_engine_id {a.sdma_engine_id} exceeds {g.sdma_engines - 1}")
    # kfd_queue_acquire_buffers
    bos = [self.queue_buffer(g, a.write_pointer_address, PAGE), self.queue_buffer(g, a.read_pointer_address, PAGE),
           self.queue_buffer(g, a.ring_base_address, ring_size)]
    eop_size = 0
    if compute:
      s = g.sizes
      if a.eop_buffer_address:
        if a.eop_buffer_size < s.eop: raise fail(errno.EINVAL, f"EOP buffer {a.eop_buffer_size:#x} smaller than {s.eop:#x}")
        bos.append(self.queue_buffer(g, a.eop_buffer_address, align(a.eop_buffer_size, PAGE)))
        eop_size = a.eop_buffer_size
      if a.ctl_stack_size != s.ctl_stack: raise fail(errno.EINVAL, f"ctl stack size {a.ctl_stack_size:#x} != node's {s.ctl_stack:#x}")
      if a.ctx_save_restore_size < s.cwsr: raise fail(errno.EINVAL, f"CWSR size {a.ctx_save_restore_size:#x} < node's {s.cwsr:#x}")
      bos.append(self.queue_buffer(g, a.ctx_save_restore_address, align(a.ctx_save_restore_size + s.debug_memory, PAGE)))
    dev = g.dev
    with g.lock:
      if compute:
        free = [i for i in range(hw.MAX_COMPUTE) if i not in g.compute_slots]
        if not free: raise fail(errno.EBUSY, "no free hardware compute queue")   # allocate_hqd
        eop_log = eop_size if eop_size & (eop_size - 1) == 0 and eop_size else F.GFX11_MEC_HPD_SIZE
        hwq = hw.compute_start(dev, free[0], a.ring_base_address, ring_size, a.read_pointer_address, a.write_pointer_address,
                               a.eop_buffer_address, eop_log, g.xcc, self.vms[g].vmid)
        slots = g.compute_slots
      else:
        mine = dev.sdma.partition_engines(g.xcc)   # the node's own engines (MI300: its partition's), by the node's numbering
        want = [mine[a.sdma_engine_id]] if a.queue_type == K.KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID else mine
        # allocate_sdma_queue: the first free bit of the bitmap, which counts engines first, then queues
        free = [(e, k) for k in hw.sdma_queue_ids(dev) for e in want if (e, k) not in g.sdma_slots]
        if not free: raise fail(errno.ENOMEM, "no more SDMA queues")
        hwq = hw.sdma_start(dev, *free[0], a.ring_base_address, ring_size, a.read_pointer_address, a.write_pointer_address, self.vms[g].vmid)
        slots = g.sdma_slots
      uq = UserQueue(g, hwq, bos)
      slots[hwq.slot] = uq
      if g in self.evicted: hw.evict(dev, hwq)   # made evicted (q->properties.is_evicted = !!qpd->evicted): it never runs
    for bo in bos: bo.queue_refs[g] = bo.queue_refs.get(g, 0) + 1
    qid = next(q for q in itertools.count() if q not in self.queues)   # the lowest free id (find_available_queue_slot)
    self.queues[qid] = uq
    a.queue_id = qid
    a.doorbell_offset = (MMAP_DOORBELL << MMAP_TYPE_SHIFT) | (g.gpu_id << GPU_ID_SHIFT) | (hwq.doorbell * 4)

  def destroy_queue(self, a) -> None:
    uq = self.queues.pop(a.queue_id, None)
    if uq is None: raise fail(errno.EINVAL, f"queue id {a.queue_id} does not match any known queue")
    self._stop(uq)

  def _stop(self, uq: UserQueue) -> None:
    g = uq.gpu
    with g.lock:
      if uq.hwq.kind == "compute": hw.compute_stop(g.dev, uq.hwq); g.compute_slots.pop(uq.hwq.slot, None)
      else: hw.sdma_stop(g.dev, uq.hwq); g.sdma_slots.pop(uq.hwq.slot, None)
    for bo in uq.bos: bo.queue_refs[g] -= 1

  # ---- events
  def create_event(self, a) -> None:
    if a.event_page_offset:   # kfd_kmap_event_page, kfd_event_page_set
      if self.signal_bo is not None: raise fail(errno.EINVAL, "event page is already set")
      self.bound(a.event_page_offset >> 32)   # kfd_kmap_event_page binds the handle's GPU first (ENODEV without a VM)
      bo = self.bos.get(a.event_page_offset)
      if bo is None or bo.domain != K.KFD_IOC_ALLOC_MEM_FLAGS_GTT: raise fail(errno.EINVAL, "event page handle is not a GTT BO")
      if bo.size < SIGNAL_EVENT_LIMIT * 8: raise fail(errno.EINVAL, f"event page of {bo.size:#x} bytes: it needs {SIGNAL_EVENT_LIMIT * 8:#x}")
      self.signal_bo, self.signal_handle = bo, a.event_page_offset
      slots = bo.backing.view.cast("Q")
      for i in range(len(slots)): slots[i] = UNSIGNALED
    a.event_page_offset = 0   # kfd_event_create: every type
    if a.event_type in (K.KFD_IOC_EVENT_SIGNAL, K.KFD_IOC_EVENT_DEBUG_EVENT):
      if self.signal_bo is None: raise fail(errno.ENOMEM, "no event page (dGPUs need one from user mode; the kernel's own page is not emulated)")
      # id 0 is reserved (CP interrupts without a context id), so a page of n slots holds n - 1 events
      if sum(e.type in (K.KFD_IOC_EVENT_SIGNAL, K.KFD_IOC_EVENT_DEBUG_EVENT) for e in self.events.values()) + 1 == self.signal_bo.size // 8:
        raise fail(errno.ENOSPC, "signal event slots exhausted")
      eid = next((i for i in range(1, SIGNAL_EVENT_LIMIT) if i not in self.events), None)
      if eid is None: raise fail(errno.ENOSPC, "signal event ids exhausted")
      self.signal_bo.backing.view.cast("Q")[eid] = UNSIGNALED
      a.event_page_offset, a.event_slot_index = (MMAP_EVENTS << MMAP_TYPE_SHIFT) >> 12 << 12, eid
    else:   # any other type, known or not (kfd_event_create's default case)
      eid = next(i for i in itertools.count(FIRST_NONSIGNAL_EVENT_ID) if i not in self.events)
    self.events[eid] = Event(eid, a.event_type, bool(a.auto_reset))
    a.event_id, a.event_trigger_data = eid, eid

  def destroy_event(self, a) -> None:
    if self.events.pop(a.event_id, None) is None: raise fail(errno.EINVAL, f"unknown event {a.event_id}")

  def set_event(self, a) -> None:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != K.KFD_IOC_EVENT_SIGNAL: raise fail(errno.EINVAL, f"event {a.event_id} cannot be set from the CPU")
    ev.set()

  def reset_event(self, a) -> None:
    ev = self.events.get(a.event_id)
    if ev is None or ev.type != K.KFD_IOC_EVENT_SIGNAL: raise fail(errno.EINVAL, f"event {a.event_id} cannot be reset from the CPU")
    ev.signaled = False

  def signal_from_interrupt(self, ctx: int) -> None:
    """kfd_signal_event_interrupt with the IV's context id (28 or more valid bits: one lookup): the event it names
    where its slot is signaled, else the exhaustive search of signaled slots; each found is acknowledged and set."""
    if self.signal_bo is None: return
    slots = self.signal_bo.backing.view.cast("Q")
    gpu_signaled = lambda ev: ev.type in (K.KFD_IOC_EVENT_SIGNAL, K.KFD_IOC_EVENT_DEBUG_EVENT)
    eid = ctx & 0xfffffff
    if eid < SIGNAL_EVENT_LIMIT and slots[eid] != UNSIGNALED and (ev := self.events.get(eid)) is not None:
      found = [ev] if gpu_signaled(ev) else []
    else: found = [ev for ev in self.events.values() if gpu_signaled(ev) and slots[ev.id] != UNSIGNALED]
    for ev in found:
      slots[ev.id] = UNSIGNALED
      ev.set()

  def vm_fault(self, gpu: GPU, pasid: int, addr: int, ring_id: int) -> None:
    """A fault in this process's VM (the IV's PASID names it) on a node it runs queues on: every
    memory event gets the fault, its kinds from the IV's ring_id bits (kfd_int_process_v11.c), and the process's
    queues on that node stop for good, and so do those it makes there later (kfd_set_dbg_ev_from_interrupt evicts
    them, qpd->evicted stays raised: nothing restores them before the process exits)."""
    if pasid != self.pasid or gpu not in self.vms or not any(q.gpu is gpu for q in self.queues.values()): return
    self.evicted.add(gpu)
    with gpu.lock:
      for uq in self.queues.values():
        if uq.gpu is gpu: hw.evict(gpu.dev, uq.hwq)
    for ev in self.events.values():
      if ev.type == K.KFD_IOC_EVENT_MEMORY:
        ev.set()
        # NoExecute stays 0: the kernel's info.prot_exec is never set from the IV (kfd_int_process_v11/v9.c)
        ev.mem = {"gpu_id": gpu.gpu_id, "va": addr, "NotPresent": int(bool(ring_id & 0x08)), "ReadOnly": int(bool(ring_id & 0x20)),
                  "NoExecute": 0, "imprecise": 0}

  def wait_events(self, a) -> None:
    a.wait_result = K.KFD_IOC_WAIT_RESULT_FAIL   # what an error leaves (kfd_ioctl_wait_events copies it back)
    if a.num_events and not a.events_ptr: raise fail(errno.EFAULT, "no events")
    data = (K.kfd_event_data * a.num_events).from_address(a.events_ptr) if a.num_events else []
    evs = []
    for d in data:
      ev = self.events.get(d.event_id)
      if ev is None: raise fail(errno.EINVAL, f"unknown event {d.event_id}")
      evs.append(ev)
    deadline = time.monotonic() + (a.timeout if a.timeout != 0xffffffff else 1 << 30) / 1000
    fired = [False] * len(evs)   # a waiter, once activated, stays so (kfd_event_waiter.activated)
    # a signal event waited on with the age the caller last saw fires at once if it was set since (init_event_waiter)
    aged = [e.type == K.KFD_IOC_EVENT_SIGNAL and d.signal_event_data.last_event_age != 0 for d, e in zip(data, evs)]
    for i, (d, e) in enumerate(zip(data, evs)):
      if e.signaled: fired[i], e.signaled = True, not e.auto_reset
      if aged[i] and e.age != d.signal_event_data.last_event_age: fired[i] = True
    while True:
      for g in self.k.gpus: g.service(self.k)
      for i, e in enumerate(evs):
        if e.signaled and not fired[i]:
          fired[i] = True
          if e.auto_reset: e.signaled = False   # the first waiter takes it
      done = all(fired) if a.wait_for_all else any(fired) or not evs
      if done or time.monotonic() >= deadline: break
      if any(self.events.get(e.id) is not e for e in evs): raise fail(errno.EIO, "an event was destroyed during the wait")
      self.lock.release()
      try: time.sleep(5e-4)   # the waiting thread sleeps; the emulated board runs beside it
      finally: self.lock.acquire()
    for d, ev, f, age in zip(data, evs, fired, aged if done else ()):   # copied back on COMPLETE only (kfd_wait_on_events)
      if f and age: d.signal_event_data.last_event_age = ev.age
      if f and ev.type == K.KFD_IOC_EVENT_MEMORY and ev.mem:
        m = d.memory_exception_data
        m.gpu_id, m.va = ev.mem["gpu_id"], ev.mem["va"]
        m.failure.NotPresent, m.failure.ReadOnly, m.failure.NoExecute, m.failure.imprecise = (ev.mem[k] for k in ("NotPresent", "ReadOnly", "NoExecute", "imprecise"))
    a.wait_result = K.KFD_IOC_WAIT_RESULT_COMPLETE if done else K.KFD_IOC_WAIT_RESULT_TIMEOUT

  # ---- mmap of /dev/kfd (doorbells, MMIO remap)
  def mmap(self, size: int, offset: int):
    kind, gpu_id = offset >> MMAP_TYPE_SHIFT, (offset >> GPU_ID_SHIFT) & 0xffff
    g = self.k.gpu_by_id(gpu_id)
    if kind == MMAP_EVENTS: raise fail(errno.EINVAL, "the kernel's own event page is not emulated")
    if kind not in (MMAP_DOORBELL, MMAP_MMIO): raise fail(errno.EFAULT, f"mmap type {kind}")   # kfd_mmap's fall-through
    if g is None: raise fail(errno.ENODEV, f"mmap offset {offset:#x} names no GPU")
    if kind == MMAP_DOORBELL:   # kfd_doorbell_mmap: the whole process slice, nothing else
      if size != DOORBELL_SLICE: raise fail(errno.EINVAL, f"doorbell mapping of {size:#x} bytes: the process slice is {DOORBELL_SLICE:#x}")
      return g.dev.doorbells.view(0, size)
    if size != PAGE: raise fail(errno.EINVAL, "MMIO remap is one page")
    return g.dev.mmio.view(F.MMIO_REG_HOLE_OFFSET, PAGE)

  def exit(self) -> None:
    """Process exit: queues stop, mappings go, memory returns to the kernel."""
    for uq in list(self.queues.values()): self._stop(uq)
    self.queues.clear()
    for bo in list(self.bos.values()): self._release(bo)
    self.bos.clear()
    for gpu in self.k.gpus:   # the process's mappings go with it
      for _, bo in gpu.cpu_views.values():
        bo.cpu_maps = 0
        if bo.backing is not None: gpu.put(bo)
      gpu.cpu_views.clear()
    self.events.clear()
    for g, vm in self.vms.items():   # amdgpu_vm_fini: the VMID's context and PASID mapping go, then its page tables
      g.set_pasid(vm.vmid, 0)
      g.dev.gmc.set_context(vm.vmid, None, hubs=g.hubs)
      vm.pt.release()
    self.vms.clear()
    if self in self.k.processes: self.k.processes.remove(self)


HANDLERS = {int(K.AMDKFD_IOC_GET_VERSION): Process.get_version, int(K.AMDKFD_IOC_ACQUIRE_VM): Process.acquire_vm,
            int(K.AMDKFD_IOC_RUNTIME_ENABLE): Process.runtime_enable, int(K.AMDKFD_IOC_SET_XNACK_MODE): Process.set_xnack_mode, int(K.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW): Process.apertures_new,
            int(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU): Process.alloc_memory, int(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU): Process.free_memory,
            int(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU): Process.map_memory, int(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU): Process.unmap_memory,
            int(K.AMDKFD_IOC_CREATE_QUEUE): Process.create_queue, int(K.AMDKFD_IOC_DESTROY_QUEUE): Process.destroy_queue,
            int(K.AMDKFD_IOC_CREATE_EVENT): Process.create_event, int(K.AMDKFD_IOC_DESTROY_EVENT): Process.destroy_event,
            int(K.AMDKFD_IOC_SET_EVENT): Process.set_event, int(K.AMDKFD_IOC_RESET_EVENT): Process.reset_event,
            int(K.AMDKFD_IOC_WAIT_EVENTS): Process.wait_events}

class KFDFile:
  """An open /dev/kfd. Every open in this (one) process shares the process's KFD state, as kfd_create_process does.
  The state outlives the files: amdkfd keys it by the process's mm and frees it when the process exits
  (kfd_process_notifier_release), so closing the last file ends nothing (Process.exit is the exit)."""
  def __init__(self, kernel: Kernel):
    self.proc = kernel.processes[0] if kernel.processes else Process(kernel)
    self.pid = os.getpid()   # the process that opened it
  def read(self, n: int, offset: int) -> bytes: raise OSError(errno.EINVAL, "read of /dev/kfd")
  def write(self, data: bytes, offset: int) -> int: raise OSError(errno.EINVAL, "write of /dev/kfd")
  def ioctl(self, request: int, buf) -> int:
    self._same_process()
    return self.proc.ioctl(int(request), buf)
  def mmap(self, size: int, offset: int):
    self._same_process()
    return self.proc.mmap(size, offset)
  def _same_process(self) -> None:
    """A file a forked child inherited is no use there (kfd_ioctl, kfd_mmap: EBADF for any other process)."""
    if os.getpid() != self.pid: raise OSError(errno.EBADF, "/dev/kfd was opened by another process (the parent of a fork)")
  def close(self) -> None: pass


class RenderFile:
  def __init__(self, gpu: GPU): self.gpu = gpu
  def read(self, n: int, offset: int) -> bytes: raise OSError(errno.EINVAL, "read of a render node")
  def write(self, data: bytes, offset: int) -> int: raise OSError(errno.EINVAL, "write of a render node")
  def ioctl(self, request: int, buf) -> int:
    """amdgpu's AMDGPU_INFO for DEV_INFO (the device's ids and whether it is an APU; the fields not modelled read 0,
    an unknown query is EINVAL as amdgpu_info_ioctl's default); other amdgpu ioctls are not emulated."""
    from rawgpu.autogen import amdgpu_drm as D
    if request != int(D.DRM_IOCTL_AMDGPU_INFO): raise OSError(errno.ENOTTY, "amdgpu DRM ioctls other than AMDGPU_INFO are not emulated")
    if buf.query != D.AMDGPU_INFO_DEV_INFO: raise OSError(errno.EINVAL, f"AMDGPU_INFO query {buf.query:#x} is not emulated")
    info = D.drm_amdgpu_info_device(device_id=self.gpu.dev.pci.device, ids_flags=D.AMDGPU_IDS_FLAGS_FUSION if self.gpu.apu else 0)
    ctypes.memmove(buf.return_pointer, ctypes.addressof(info), min(buf.return_size, ctypes.sizeof(info)))   # copy_to_user
    return 0
  def mmap(self, size: int, offset: int):
    bo = self.gpu.mmaps.get(offset)
    if bo is None or size > align(bo.size, PAGE): raise OSError(errno.EINVAL, f"no BO at mmap offset {offset:#x} of size {size:#x}")
    if bo.domain == K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR: raise OSError(errno.EPERM, "a userptr BO is mapped where its memory is (amdgpu_gem_mmap)")
    if bo.domain == K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL: raise OSError(errno.EINVAL, "CPU mappings of doorbell BOs through the render node are not emulated")
    if bo.domain == K.KFD_IOC_ALLOC_MEM_FLAGS_GTT:   # a mapping of its own of the BO's pages, as the kernel makes one per mmap
      host = self.gpu.dev.system.host_memory
      view = host.alias(bo.backing.view).view(0, size) if host is not None else bo.backing.view.view(0, size)
    else:
      d = self.gpu.dev
      if bo.backing + size > d.bar_size: raise OSError(errno.EINVAL, "VRAM BO beyond the CPU-visible BAR")
      view = d.map_vram(bo.backing, size)   # a mapping of its own, as the kernel makes one per mmap
    bo.cpu_maps += 1
    self.gpu.cpu_views[id(view)] = (view, bo)
    return view
  def munmap(self, view) -> None:
    """The mapping goes (as System.munmap leaves it on Linux: private zero pages where a Python view outlives it); a
    BO freed meanwhile goes with its last one."""
    with self.gpu.lock:
      _, bo = self.gpu.cpu_views.pop(id(view))
      host = self.gpu.dev.system.host_memory
      if bo.domain != K.KFD_IOC_ALLOC_MEM_FLAGS_GTT: zero_pages(view.addr, view.size)
      elif host is not None: host.unmap(view)
      bo.cpu_maps -= 1
      if bo.freed: bo.gpu.put(bo)
  def close(self) -> None: pass
