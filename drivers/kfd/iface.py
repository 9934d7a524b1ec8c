"""KFDIface: drivers/iface.py's Iface over /dev/kfd and the GPU's render node (what ROCr does, minus ROCr).

Memory: ALLOC_MEMORY_OF_GPU at a VA we pick in the node's GPUVM aperture, mmap through the render node, then
MAP_MEMORY_TO_GPU. Queues: PM4 compute and SDMA rings in GTT, created with the buffer sizes amdkfd demands
(rawgpu.drivers.kfd.sizes). Waits sleep in WAIT_EVENTS; memory-exception events become DeviceFault.
"""
from __future__ import annotations
import atexit, ctypes, errno, math, os, weakref
from typing import Literal
from rawgpu.autogen import kfd
from rawgpu.drivers.amd_target import TARGET_FEATURES, target_id
from rawgpu.drivers.cpufence import fences_or_none
from rawgpu.drivers.iface import DeviceProps, HWRing, Mem, PeerMaps, hdp_bypassed
from rawgpu.drivers.kfd import topology
from rawgpu.drivers.kfd.sizes import PAGE, QueueSizes, align, queue_sizes
from rawgpu.drivers.system import SYSTEM, System
from rawgpu.errors import DeviceBusy, DeviceFault, DeviceNotFound, IoctlError, OutOfMemory, PermissionProblem, RawGPUError

KFD_PATH = "/dev/kfd"
SUPPORTED_GFX = (11, 12)             # hcq's PM4/SDMA encoders cover RDNA3 and RDNA4
SUPPORTED_GFX9 = (90402,)            # and CDNA3's gfx942 (MI300: gfx9 PM4 forms, SDMA 4.4)
MIN_MINOR = 6                        # ACQUIRE_VM, ALLOC_MEMORY_OF_GPU and event data as used here
RUNTIME_ENABLE_MINOR = 13            # 1.13 added the debugger API and RUNTIME_ENABLE
DOORBELL_SLICE = 2 * PAGE            # SOC15: a process's doorbell frame is two pages
HUGE = 1 << 21
HDP_MEM_FLUSH_CNTL = 0x0           # KFD_MMIO_REMAP_HDP_MEM_FLUSH_CNTL: offset in the remapped MMIO page
F = kfd
WRITABLE_EXEC = F.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | F.KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE | F.KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE


class VARange:
  """Bump-and-free-list allocator of GPU virtual addresses inside the GPUVM aperture."""
  def __init__(self, base: int, limit: int):
    self.free: list[tuple[int, int]] = [(base, limit - base)]

  def alloc(self, size: int, al: int) -> int:
    for i, (s, z) in enumerate(self.free):
      a = align(s, al)
      if a + size <= s + z:
        self.free[i:i + 1] = [p for p in ((s, a - s), (a + size, s + z - a - size)) if p[1]]
        return a
    raise OutOfMemory(f"GPU virtual address space exhausted ({size:#x} bytes asked)")

  def release(self, va: int, size: int) -> None:
    self.free.append((va, size)); self.free.sort()
    out: list[tuple[int, int]] = []
    for s, z in self.free:
      if out and out[-1][0] + out[-1][1] == s: out[-1] = (out[-1][0], out[-1][1] + z)
      else: out.append((s, z))
    self.free = out


class _Process:
  """What amdkfd keeps once per process, however often /dev/kfd is opened, until the process exits (its state hangs
  on the process's mm, not on the files: a /dev/kfd opened again finds it): the KFD file, one render-node file per GPU
  (ACQUIRE_VM takes only the file it was first given, EBUSY for another, so it stays open), and the signal-event page
  (a second one is EINVAL, freeing it EPERM). So these stay open after the last device closes."""
  def __init__(self):
    self.pid = os.getpid()   # amdkfd serves this process only: a forked child starts a _Process of its own
    self.kfd_fd, self.drm, self.event_page = -1, {}, None
    self.event_page_gpus: set[int] = set()   # the GPUs whose VM maps the event page: each GPU writes its wake-ups there
    self.stopped: dict[int, str] = {}   # gpu_id -> why amdkfd stopped this process's queues there (for the process's life)
    self.va: VARange | None = None   # one GPU address space per process, as ROCr keeps it


_PROCESSES: weakref.WeakKeyDictionary[System, _Process] = weakref.WeakKeyDictionary()   # a System's process state
# a forked child gets EBADF for the parent's /dev/kfd (kfd_ioctl checks the caller's process): it opens its own
os.register_at_fork(after_in_child=_PROCESSES.clear)


def _nothing_to_fence() -> None:
  """The fences where the CPU has none: alloc then maps no VRAM for the CPU."""


class KFDIface(PeerMaps):
  def __init__(self, index: int = 0, system: System = SYSTEM, *, iface_name: str | None = None):
    self.system, self.closed = system, False
    self.kfd_fd = self.drm_fd = -1
    self.gone: str | None = None   # set once the kernel reset this GPU or stopped its queues after a fault
    self.proc = _PROCESSES.setdefault(system, _Process())
    self.gpu_id = 0
    self.mems: list[Mem] = []
    self.queues: list[tuple[int | None, list[Mem]]] = []   # (queue id, or None while it has none: reset_ring; its buffers)
    self.queue_args: dict[int, dict] = {}   # id of a ring's Mem -> its CREATE_QUEUE arguments (reset_ring makes it again)
    self.events: list[int] = []
    self.doorbells = None
    self._init_peers()
    try: self._open(index, iface_name)
    except BaseException:
      self.close()
      raise
    atexit.register(_close_ref, weakref.ref(self))

  # ---- bring-up
  @staticmethod
  def check_present(system: System) -> None:
    if not system.exists(KFD_PATH): raise DeviceNotFound(f"no {KFD_PATH}: the amdgpu kernel module is not loaded or the kernel is not ROCm-capable (CONFIG_HSA_AMD)")

  def _open(self, index: int, iface_name: str | None) -> None:
    sysm = self.system
    self.check_present(sysm)
    if self.proc.kfd_fd < 0: self.proc.kfd_fd = self._open_node(KFD_PATH)
    self.kfd_fd = self.proc.kfd_fd
    ver = self._ioctl(F.AMDKFD_IOC_GET_VERSION)
    self.version = (ver.major_version, ver.minor_version)
    if ver.major_version != F.KFD_IOCTL_MAJOR_VERSION or ver.minor_version < MIN_MINOR:
      raise DeviceNotFound(f"{KFD_PATH}: KFD ioctl interface {ver.major_version}.{ver.minor_version} is not supported "
                           f"(rawgpu speaks {F.KFD_IOCTL_MAJOR_VERSION}.{MIN_MINOR} to {F.KFD_IOCTL_MAJOR_VERSION}.{F.KFD_IOCTL_MINOR_VERSION}); use a Linux 5.15+ kernel or PCI+AMD")
    nodes = topology.gpu_nodes(sysm)
    if not nodes: raise DeviceNotFound("the KFD topology lists no GPU: amdgpu found no ROCm-capable GPU")
    if index >= len(nodes): raise DeviceNotFound(f"KFD device index {index} asked for, but only {len(nodes)} GPU node(s) found")
    self.node = n = nodes[index]
    if n.gfx_target_version // 10000 not in SUPPORTED_GFX and n.gfx_target_version not in SUPPORTED_GFX9:
      raise DeviceNotFound(f"KFD node {n.index} ({n.pci_bus}) is {n.arch}: unsupported GPU (rawgpu runs gfx11 and gfx12 parts, "
                           "RDNA3 and RDNA4, and gfx942, MI300)")
    if (xcc := n.props.get("num_xcc", 1)) > 1:   # SPX/DPX/QPX: the CP runs one queue on several XCCs
      raise DeviceNotFound(f"KFD node {n.index} ({n.pci_bus}) is {n.arch} in a partition of {xcc} XCCs: rawgpu's PM4 queues run on "
                           "one XCC so far; switch the GPU to CPX mode (amd-smi set --compute-partition CPX)")
    self.gpu_id = n.gpu_id
    if (why := self.proc.stopped.get(self.gpu_id)) is not None:
      raise DeviceFault(f"{why.split('; ')[0]} earlier in this process: amdkfd keeps this process's queues on {n.pci_bus} stopped "
                        "(queues made later too) until the process exits; restart the process to use this GPU again")
    versions, bases = topology.ip_discovery(sysm, n.render_minor, n.pci_bus)
    if (fd := self.proc.drm.get(self.gpu_id)) is None:
      fd = self._open_node(topology.render_node(n.render_minor))
      try: self._ioctl(F.AMDKFD_IOC_ACQUIRE_VM, drm_fd=fd, gpu_id=self.gpu_id)
      except BaseException as e:
        sysm.close(fd)
        if isinstance(e, IoctlError) and e.errno_ == errno.EBUSY:   # kfd_ioctl_acquire_vm: the VM was acquired with another file
          raise DeviceBusy(f"KFD node {n.index} ({n.pci_bus}): another runtime in this process (ROCm's, say) already took this GPU's "
                           "VM with a render-node file of its own; amdkfd gives a process one VM per GPU, so rawgpu cannot share "
                           "the process with it: run it in a process of its own") from None
        raise
      self.proc.drm[self.gpu_id] = fd
    self.drm_fd = fd
    if self.version[1] >= RUNTIME_ENABLE_MINOR:
      try: self._ioctl(F.AMDKFD_IOC_RUNTIME_ENABLE, r_debug=0, mode_mask=F.KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK, capabilities_mask=0)
      except IoctlError as e:
        # EBUSY: this process enabled the runtime already; EEXIST: it has queues from before the runtime was
        # enabled (kfd_ioctl_runtime_enable), which another runtime in the process made: both leave the queues working
        if e.errno_ not in (errno.EBUSY, errno.EEXIST): raise
    self.sizes = self._queue_sizes(n)
    if self.proc.va is None:
      base, limit = self._aperture()
      self.proc.va = VARange(max(base, 1 << 32), min(limit + 1, max(base, 1 << 32) + (1 << 40)))
    self.va = self.proc.va
    p = n.props
    emulated = sysm.host_memory is not None
    self.props = DeviceProps(vendor="AMD", arch=n.arch, iface=iface_name or ("MOCKKFD" if emulated else "KFD"), pci_bus=n.pci_bus, xcc=n.partition,
                             compute_units=p.get("simd_count", 0) // max(1, p.get("simd_per_cu", 2)), simd_per_cu=p.get("simd_per_cu", 2),
                             shader_engines=max(1, p.get("array_count", 1) // max(1, p.get("simd_arrays_per_engine", 1)) // max(1, p.get("num_xcc", 1))),
                             wave_size=p.get("wave_front_size", 32) or 32, lds_size=p.get("lds_size_in_kb", 64) << 10,
                             vram_size=topology.vram_size(n), bar_size=topology.bar_size(n),
                             vram_write_combined=True,   # amdgpu maps VRAM BOs write-combined (cached where xGMI joins it to the CPU)
                             ip_versions=versions, ip_bases=bases, emulated=emulated,
                             apu=self._is_apu(n), target=self._target(n))
    # amdgpu maps VRAM write-combined: the CPU's reads of it after a signal need a load fence, a signal set after its
    # writes a store fence; where there are none, alloc refuses VRAM with a CPU view, and there is nothing to fence
    fences, self.no_fence = fences_or_none()
    self.read_fence, self.write_fence = (fences.load, fences.store) if fences is not None else (_nothing_to_fence, _nothing_to_fence)
    self._setup_events()
    self._setup_hdp()

  def _setup_hdp(self) -> None:
    # the HDP flush register page (MMIO_REMAP): CPU writes to VRAM through the BAR reach the GPU once it is written
    self.hdp = None
    if hdp_bypassed(self.props): return   # an x86-64 APU: the CPU writes the GPU's memory directly
    try: self.hdp = self._alloc(PAGE, F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP | F.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT,
                                cpu=True, host=False, map_gpu=False, exact=True)
    except IoctlError as e:
      if e.errno_ not in (errno.ENOMEM, errno.EINVAL): raise   # no remap page on this board/kernel (64K pages): rings live in GTT anyway

  def flush_hdp(self) -> bool:
    """Make CPU writes to VRAM visible to the GPU (HDP_MEM_FLUSH_CNTL in the remapped page); False where the kernel
    gave no remap page."""
    if self.hdp is None: return hdp_bypassed(self.props)
    self.hdp.cpu.write(HDP_MEM_FLUSH_CNTL, 0)
    return True

  def _open_node(self, path: str) -> int:
    try: return self.system.open(path, os.O_RDWR)
    except PermissionError as e:
      raise PermissionProblem(f"cannot open {path}: permission denied; add the user to the render and video groups "
                              "(sudo usermod -aG render,video $USER, then log in again)") from e
    except FileNotFoundError as e: raise DeviceNotFound(f"{path} does not exist: amdgpu is not loaded or the kernel is not ROCm-capable") from e

  def _ioctl(self, ioc, fd: int | None = None, **fields):
    return ioc(self.system, self.kfd_fd if fd is None else fd, **fields)

  def _is_apu(self, n: topology.Node) -> bool:
    """amdgpu's own word (AMDGPU_INFO_DEV_INFO's ids_flags: FUSION), as 6.12's topology lists an APU's GPU as a node
    without CPU cores (its CRAT is virtual, CPU and GPU apart); an ACPI CRAT's APU node (older kernels) has both."""
    from rawgpu.autogen import amdgpu_drm as D
    if n.props.get("cpu_cores_count", 0) > 0 and n.props.get("simd_count", 0) > 0: return True
    info = D.drm_amdgpu_info_device()
    self._ioctl(D.DRM_IOCTL_AMDGPU_INFO, fd=self.drm_fd, return_pointer=ctypes.addressof(info), return_size=ctypes.sizeof(info),
                query=D.AMDGPU_INFO_DEV_INFO)
    return bool(info.ids_flags & D.AMDGPU_IDS_FLAGS_FUSION)

  def _target(self, n: topology.Node) -> str:
    """The target ID code objects must match here, as ROCr builds it: sramecc from the topology's capability
    (HSA_CAP_SRAM_EDCSUPPORTED: amdgpu's RAS on the GFX block), xnack from this process's XNACK mode (SET_XNACK_MODE
    with -1 asks; amdkfd's default is off where amdgpu runs without retry faults, as on MI300)."""
    feats = TARGET_FEATURES.get(n.arch, ())
    sramecc = bool(n.props["capability"] & F.HSA_CAP_SRAM_EDCSUPPORTED) if "sramecc" in feats and "capability" in n.props else None
    xnack = None
    if "xnack" in feats:
      try: xnack = bool(self._ioctl(F.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=-1).xnack_enabled)
      except IoctlError as e:   # a kernel before the ioctl (5.12): the mode is not known, the loader checks none
        if e.errno_ not in (errno.ENOTTY, errno.EINVAL): raise
    return target_id(n.arch, sramecc=sramecc, xnack=xnack)

  def _queue_sizes(self, n: topology.Node) -> QueueSizes:
    p = n.props
    s = queue_sizes(n.gfx_target_version, p.get("simd_count", 0), p.get("simd_per_cu", 2), p.get("array_count", 1),
                    max(1, p.get("simd_arrays_per_engine", 1)), max(1, p.get("num_xcc", 1)))
    # kernels that publish the sizes (6.10+) are the authority; older ones do not check them
    if p.get("ctl_stack_size") or p.get("cwsr_size"):
      s = QueueSizes(p.get("ctl_stack_size", s.ctl_stack), max(p.get("cwsr_size", s.cwsr), s.cwsr), s.debug_memory, s.eop, s.num_xcc)
    return s

  def process_apertures(self) -> dict[str, tuple[int, int]]:
    """The kernel's apertures of this process on this GPU, as (base, limit): "gpuvm" (where buffers may go), "lds" and
    "scratch" (where the GPU places generic pointers to LDS and private memory)."""
    # ask how many first: more than the topology's node count (CPUs included) is EINVAL (kfd_ioctl_get_process_apertures_new)
    n = self._ioctl(F.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=0, num_of_nodes=0).num_of_nodes
    arr = (F.kfd_process_device_apertures * max(n, 1))()
    a = self._ioctl(F.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=ctypes.addressof(arr), num_of_nodes=max(n, 1))
    for ap in arr[:a.num_of_nodes]:
      if ap.gpu_id == self.gpu_id:
        return {k: (getattr(ap, f"{k}_base"), getattr(ap, f"{k}_limit")) for k in ("gpuvm", "lds", "scratch")}
    raise RawGPUError(f"KFD: no apertures reported for gpu_id {self.gpu_id}")

  def _aperture(self) -> tuple[int, int]: return self.process_apertures()["gpuvm"]

  def _setup_events(self) -> None:
    # dGPUs: the signal-event page is the process's (GTT), handed over with its first CREATE_EVENT; it lives as long as the process
    page = 0
    if self.proc.event_page is None:
      m = self._alloc(0x8000, F.KFD_IOC_ALLOC_MEM_FLAGS_GTT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED | WRITABLE_EXEC, cpu=True, host=True)
      self.mems.remove(m)
      self.proc.event_page, page = m, m.meta[0]
      self.proc.event_page_gpus.add(self.gpu_id)
    elif self.gpu_id not in self.proc.event_page_gpus:   # a later GPU: the page made on the first one, at the same VA
      self._gpu_map(F.AMDKFD_IOC_MAP_MEMORY_TO_GPU, self.proc.event_page.meta[0])
      self.proc.event_page_gpus.add(self.gpu_id)
    try: ev = self._ioctl(F.AMDKFD_IOC_CREATE_EVENT, event_page_offset=page, event_type=F.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
    except IoctlError as e:
      if not page or e.errno_ != errno.EINVAL: raise
      m, self.proc.event_page = self.proc.event_page, None   # never the process's page: freed, the next open starts over
      self.proc.event_page_gpus.discard(self.gpu_id)
      self.mems.append(m)
      self.free(m)
      raise DeviceBusy(f"KFD node {self.node.index} ({self.node.pci_bus}): amdkfd refused this process's signal-event page: another "
                       "runtime in this process (ROCm's, say) has set one already (kfd_kmap_event_page), and amdkfd keeps one per "
                       "process: run rawgpu in a process of its own") from None
    self.signal_event = ev.event_id
    # where the GPU wakes a sleeping sleep(): write a value != ~0 to this slot, then interrupt with ctxid = event id
    # (RELEASE_MEM int_sel=interrupt); amdkfd's handler finds the slot and signals the event WAIT_EVENTS waits on
    self.wake = (self.proc.event_page.va + 8 * ev.event_slot_index, ev.event_id)
    self.events.append(ev.event_id)
    ev = self._ioctl(F.AMDKFD_IOC_CREATE_EVENT, event_type=F.KFD_IOC_EVENT_MEMORY, auto_reset=1, node_id=self.node.index)
    self.memory_event = ev.event_id
    self.events.append(ev.event_id)
    ev = self._ioctl(F.AMDKFD_IOC_CREATE_EVENT, event_type=F.KFD_IOC_EVENT_HW_EXCEPTION, auto_reset=1, node_id=self.node.index)
    self.hw_event = ev.event_id
    self.events.append(ev.event_id)
    self._wait_arr = (F.kfd_event_data * 3)()
    for i, e in enumerate((self.signal_event, self.memory_event, self.hw_event)): self._wait_arr[i].event_id = e

  # ---- memory
  def _alloc(self, asked: int, flags: int, *, cpu: bool, host: bool, map_gpu: bool = True, va: int | None = None,
             mmap_offset: int = 0, exact: bool = False) -> Mem:
    size = align(asked, PAGE) if exact else align(asked, HUGE if asked >= HUGE else PAGE)
    gva = va if va is not None else self.va.alloc(size, HUGE if size >= HUGE else PAGE)
    try:
      a = self._ioctl(F.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=gva, size=size, gpu_id=self.gpu_id, flags=flags, mmap_offset=mmap_offset)
    except IoctlError as e:
      if va is None: self.va.release(gva, size)
      if e.errno_ == errno.ENOMEM:
        what = "system memory (GTT)" if host else "VRAM"
        raise IoctlError(e.name, e.errno_, f"out of {what} on {self.node.pci_bus}: {size:#x} bytes asked") from e
      raise
    handle = a.handle
    cpu_view = None
    try:
      if cpu:
        fd = self.kfd_fd if flags & (F.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL | F.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) else self.drm_fd
        cpu_view = self.system.mmap(fd, size, a.mmap_offset)
      if map_gpu: self._gpu_map(F.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle)
    except BaseException:
      try:
        if cpu_view is not None: self.system.munmap(cpu_view)
      finally:
        self._ioctl(F.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=handle)
        if va is None: self.va.release(gva, size)
      raise
    # Mem.size is what was asked (hcq sizes buffers by it); the BO's own size and the CPU mapping made here stay in meta
    mem = Mem(gva, asked, cpu_view, host=host, uncached=bool(flags & F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED),
              meta=(handle, map_gpu, va is None, size, cpu_view))
    self.mems.append(mem)
    return mem

  def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = True, contiguous: bool = False) -> Mem:
    if size <= 0: raise RawGPUError(f"alloc of {size} bytes: the size must be positive")
    flags = WRITABLE_EXEC
    if host: flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_GTT | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT
    else:
      flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM
      if cpu_access and not self.props.bar_size:   # kfd_ioctl_alloc_memory_of_gpu: EINVAL unless kfd_dev_is_large_bar
        raise RawGPUError(f"{self.props.iface}+AMD {self.node.pci_bus}: VRAM with a CPU view needs a large BAR, and amdkfd publishes this "
                          "GPU's VRAM as private (its BAR is smaller than VRAM): allocate it without CPU access (copies go through "
                          "the copy engine) or in host memory, or enable Resizable BAR (Above 4G decoding) in the firmware setup")
      if cpu_access and self.no_fence:
        raise RawGPUError(f"{self.props.iface}+AMD {self.node.pci_bus}: amdgpu maps VRAM write-combined, which needs CPU fences "
                          f"(a read after a wait, a signal after writes): {self.no_fence}; allocate it without CPU access (copies go through the copy "
                          "engine) or in host memory")
      if cpu_access: flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC
      if contiguous and self.version[1] >= 16: flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS
    if uncached: flags |= F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED
    return self._alloc(size, flags, cpu=host or cpu_access, host=host)

  def alloc_userptr(self, cpu_mem) -> Mem:
    """Register page-aligned host memory (a MemMMIO, e.g. from system.alloc_host) with the GPU (USERPTR)."""
    m = self._alloc(cpu_mem.size, F.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | WRITABLE_EXEC, cpu=False, host=True, mmap_offset=cpu_mem.addr, exact=True)
    m.cpu = cpu_mem
    return m

  def cpu_view(self, mem: Mem):
    """Users get the BO's own mapping, which free unmaps: a view kept past free then reads zeros (System.munmap)."""
    return mem.cpu

  def free(self, mem: Mem) -> None:
    handle, mapped, own_va, size, cpu_view = mem.meta  # type: ignore[misc]
    if mem not in self.mems: return
    self.mems.remove(mem)
    try:
      self._forget_peers(mem)   # amdkfd refuses to free a BO still mapped on any GPU (EBUSY)
      if mapped: self._gpu_map(F.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle)
      # a CPU mapping holds the BO: its memory would stay taken after the free until Python dropped every view
      try:
        if cpu_view is not None: self.system.munmap(cpu_view)
      finally: self._ioctl(F.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=handle)
    finally:
      if own_va: self.va.release(mem.va, size)

  def _gpu_map(self, ioc, handle: int) -> None:
    """MAP_MEMORY_TO_GPU / UNMAP_MEMORY_FROM_GPU of the BO `handle` on this GPU."""
    ids = (ctypes.c_uint32 * 1)(self.gpu_id)
    m = self._ioctl(ioc, handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0)
    if m.n_success != 1:
      what = "MAP_MEMORY_TO_GPU" if ioc is F.AMDKFD_IOC_MAP_MEMORY_TO_GPU else "UNMAP_MEMORY_FROM_GPU"
      raise RawGPUError(f"{what} of handle {handle:#x} on {self.node.pci_bus} did {m.n_success} of 1 device(s)")

  # ---- peer-to-peer: the same process's BO of another GPU, mapped on this GPU at its VA (one VA space per process)
  def _map_peer(self, mem: Mem, owner: "KFDIface") -> int | None:
    where = f"{self.node.pci_bus}: cannot map {mem.size:#x} bytes at {mem.va:#x} of {owner.node.pci_bus}"
    if self.closed or owner.closed: raise RawGPUError(f"{where}: a device is closed")
    if owner.proc is not self.proc: raise RawGPUError(f"{where}: the devices are not on the same machine's /dev/kfd")
    if owner.gpu_id == self.gpu_id: return None   # the same GPU: its one VM of this process maps the BO already (an
                                                  # unmap here would take the owner's mapping away)
    handle = mem.meta[0]  # type: ignore[index]
    try: self._gpu_map(F.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle)
    except IoctlError as e: raise IoctlError(e.name, e.errno_, f"{where}: the kernel refused the peer mapping (amdgpu maps a peer's VRAM only where PCIe P2P works: a kernel with CONFIG_HSA_AMD_P2P, amdgpu.pcie_p2p on, all of VRAM CPU-visible (a large BAR) and a P2P path between the devices; else allocate host memory)") from e
    return handle

  def _unmap_peer(self, mem: Mem, handle: int | None) -> None:
    if handle is not None and not self.closed: self._gpu_map(F.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle)

  # ---- rings
  def create_ring(self, kind: Literal["compute", "sdma"], size: int) -> HWRing:
    if kind not in ("compute", "sdma"): raise RawGPUError(f"unknown ring kind {kind!r}; use 'compute' or 'sdma'")
    if size & (size - 1) or size < 1024: raise RawGPUError(f"{kind} ring size {size:#x} must be a power of two >= 1 KiB")
    gtt = F.KFD_IOC_ALLOC_MEM_FLAGS_GTT | F.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED | F.KFD_IOC_ALLOC_MEM_FLAGS_COHERENT | WRITABLE_EXEC
    vram = F.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | WRITABLE_EXEC
    bufs: list[Mem] = []
    try:
      ring = self._alloc(size, gtt, cpu=True, host=True, exact=True); bufs.append(ring)
      ptrs = self._alloc(PAGE, gtt, cpu=True, host=True, exact=True); bufs.append(ptrs)   # rptr at +0, wptr at +8
      args = dict(gpu_id=self.gpu_id, queue_percentage=100, queue_priority=7, ring_base_address=ring.va, ring_size=size,
                  read_pointer_address=ptrs.va, write_pointer_address=ptrs.va + 8)
      if kind == "compute":
        s = self.sizes
        eop = self._alloc(s.eop, vram, cpu=False, host=False, exact=True); bufs.append(eop)
        cwsr = self._alloc(s.cwsr_alloc, vram, cpu=False, host=False, exact=True); bufs.append(cwsr)
        args.update(queue_type=F.KFD_IOC_QUEUE_TYPE_COMPUTE, eop_buffer_address=eop.va, eop_buffer_size=s.eop,
                    ctx_save_restore_address=cwsr.va, ctx_save_restore_size=s.cwsr, ctl_stack_size=s.ctl_stack)
      else: args.update(queue_type=F.KFD_IOC_QUEUE_TYPE_SDMA)
      q = self._create_queue(kind, ring, args)
    except BaseException:
      for m in reversed(bufs): self.free(m)
      raise
    self.queues.append((q.queue_id, bufs))
    return HWRing(kind, ring, ptrs.cpu.view(8, 8).cast("Q"), ptrs.cpu.view(0, 8).cast("Q"), self._doorbell(q.doorbell_offset),
                  4 if kind == "compute" else 1, name=f"{kind} queue {q.queue_id}",
                  before_doorbell=self.flush_hdp if self.hdp is not None else None)   # the engines see what the CPU wrote to VRAM (cpu() views)

  def _create_queue(self, kind: str, ring: Mem, args: dict):
    try: q = self._ioctl(F.AMDKFD_IOC_CREATE_QUEUE, **args)
    except IoctlError as e:
      raise IoctlError(e.name, e.errno_, f"the kernel refused a {kind} queue on {self.node.pci_bus} (ring {args['ring_size']:#x} bytes"
                       + (f", ctl stack {self.sizes.ctl_stack:#x}, cwsr {self.sizes.cwsr:#x}" if kind == "compute" else "")
                       + "); too many queues open, or a kernel whose size rules differ: run with dmesg open") from e
    self.queue_args[id(ring)] = args
    return q

  def _doorbell(self, offset: int) -> memoryview:
    if self.doorbells is None:
      self.doorbell_base = offset & ~(DOORBELL_SLICE - 1)
      self.doorbells = self.system.mmap(self.kfd_fd, DOORBELL_SLICE, self.doorbell_base)
    off = offset - self.doorbell_base
    if not 0 <= off < DOORBELL_SLICE: raise RawGPUError(f"CREATE_QUEUE returned doorbell offset {offset:#x} outside the process doorbell page {self.doorbell_base:#x}")
    return self.doorbells.view(off, 8).cast("Q")

  def reset_ring(self, hw: HWRing) -> None:
    """Restart a ring after a hang: the kernel destroys its queue, preempting it (with the scheduler firmware its
    waves are saved, without it reset; never resumed: a new queue starts from a fresh descriptor), and a new one is
    made over the same ring and pointers, emptied. What was queued is dropped. A queue the CP cannot preempt fails
    the destroy after the kernel's preemption timeout (9 s by default), and amdkfd resets the queue or the GPU: the
    device is then gone. After a fault amdkfd has stopped the process's queues on the GPU for good: refused."""
    if self.gone is not None: raise DeviceFault(self.gone)
    i = next((i for i, (_, bufs) in enumerate(self.queues) if bufs[0] is hw.ring), None)
    if i is None: raise RawGPUError(f"{self.node.pci_bus}: ring {hw.name or hw.kind} is not one of this device's")
    qid, bufs = self.queues[i]
    if qid is not None:   # (None: destroyed by a reset_ring whose create failed; only the create is left to do)
      self.queues[i] = (None, bufs)   # the kernel tears the queue down even where the destroy fails: never name it again
      try: self._ioctl(F.AMDKFD_IOC_DESTROY_QUEUE, queue_id=qid)
      except IoctlError as e:
        if e.errno_ not in (errno.ETIME, errno.EIO): raise
        self.gone = (f"{self.props.iface}+AMD {self.node.pci_bus}: the kernel could not preempt the hung {hw.kind} queue {qid} "
                     f"({os.strerror(e.errno_)}); amdkfd resets the queue or the GPU: close the device and open it again")
        raise DeviceFault(self.gone) from e
    for m in bufs[:2]: m.cpu.writebytes(0, bytes(m.size))   # the ring, and its read and write pointers
    q = self._create_queue(hw.kind, hw.ring, self.queue_args[id(hw.ring)])
    self.queues[i] = (q.queue_id, bufs)
    hw.doorbell, hw.name = self._doorbell(q.doorbell_offset), f"{hw.kind} queue {q.queue_id}"

  # ---- waits and faults
  RAS_ERRORS = {F.KFD_MEM_ERR_SRAM_ECC: "an uncorrectable ECC error in on-chip memory", F.KFD_MEM_ERR_POISON_CONSUMED: "poisoned memory consumed",
                F.KFD_MEM_ERR_GPU_HANG: "a GPU hang"}

  def _wait(self, timeout_ms: int, sleeping: bool) -> None:
    """WAIT_EVENTS on the fault events, and on the wake-up (signal) event too when sleeping: a fault check must not
    consume the auto-reset wake-up a sleeper is about to wait for."""
    if self.gone is not None: raise DeviceFault(self.gone)
    arr, first = self._wait_arr, 0 if sleeping else 1
    for e in arr[1:]: ctypes.memset(ctypes.addressof(e), 0, ctypes.sizeof(e._anon0))   # the kernel writes only the events that fired
    self._ioctl(F.AMDKFD_IOC_WAIT_EVENTS, events_ptr=ctypes.addressof(arr) + first * ctypes.sizeof(arr[0]), num_events=len(arr) - first,
                wait_for_all=0, timeout=timeout_ms)
    where = f"{self.props.iface}+AMD {self.node.pci_bus}"
    mx, hx = arr[1].memory_exception_data, arr[2].hw_exception_data
    # kfd_signal_poison_consumed_event and an ECC reset name the GPU and the error in the memory event, no address
    mem_error = self.RAS_ERRORS.get(mx.ErrorType) if mx.gpu_id == self.gpu_id else None
    if hx.gpu_id == self.gpu_id:   # kfd_signal_reset_event sets every HW exception event of the process, naming the GPU
      kind = "the whole GPU" if hx.reset_type == F.KFD_HW_EXCEPTION_WHOLE_GPU_RESET else "an engine"
      cause = "an ECC error" if hx.reset_cause == F.KFD_HW_EXCEPTION_ECC else "a hang"
      # the reset took this process's queues and perhaps its VRAM: every later wait says so too
      self.gone = (f"{where}: the kernel reset {kind} after {cause}" + (f" ({mem_error})" if mem_error else "") +
                   (", and VRAM contents were lost" if hx.memory_lost else "") + "; this device's queues are gone: close it and open it again")
      raise DeviceFault(self.gone)
    if mem_error: self._stopped(f"{where}: memory error ({mem_error})")
    # amdkfd sets every memory event of the process, naming the GPU that faulted (kfd_signal_vm_fault_event), and
    # stops that GPU's queues only: another node's fault is not this device's
    if (mx.gpu_id or mx.va) and mx.gpu_id in (0, self.gpu_id):
      f = mx.failure
      # ReadOnly is the IV's write bit (kfd_int_process_v11.c: prot_write), set by an unmapped page's write too
      write = "a write" if f.NotPresent else "write to read-only page"
      why = ", ".join(n for n, v in (("page not present", f.NotPresent), (write, f.ReadOnly), ("execute of NX page", f.NoExecute),
                                     ("imprecise address", f.imprecise)) if v) or "memory violation"
      self._stopped(f"{where}: GPU page fault at {mx.va:#x} ({why})")

  def _stopped(self, what: str) -> None:
    """amdkfd evicted this process's queues on the GPU for the process's life (kfd_set_dbg_ev_from_interrupt raises
    qpd->evicted, and queues made later start evicted): every later wait says why, and so does opening the GPU again
    in this process, rather than timing out on queues that never run."""
    self.gone = f"{what}; amdkfd stopped this process's queues on it until the process exits: restart the process to use it again"
    self.proc.stopped[self.gpu_id] = self.gone
    raise DeviceFault(self.gone)

  def sleep(self, timeout_ms: float) -> None:
    if self.closed: return
    self._wait(max(1, math.ceil(timeout_ms)), sleeping=True)

  def check_faults(self) -> None:
    if not self.closed: self._wait(0, sleeping=False)

  def close(self) -> None:
    if self.closed: return
    if self.proc.pid != os.getpid():   # inherited through a fork: the queues and memory are the parent's, not ours to free
      self.closed, self.queues, self.mems, self.events = True, [], [], []
      return
    try: self._forget_peers()   # peers lose the mappings of this device's memory, this one its mappings of theirs
    except RawGPUError: pass
    self.closed = True
    for qid, bufs in reversed(self.queues):
      if qid is None: continue   # (destroyed already: reset_ring)
      try: self._ioctl(F.AMDKFD_IOC_DESTROY_QUEUE, queue_id=qid)
      except RawGPUError: pass
    self.queues = []
    for ev in self.events:
      try: self._ioctl(F.AMDKFD_IOC_DESTROY_EVENT, event_id=ev)
      except RawGPUError: pass
    for m in reversed(list(self.mems)):
      try: self.free(m)
      except RawGPUError: pass
    # the process's files stay open (see _Process): amdkfd keeps their state until the process exits anyway, and a
    # device opened again needs the render-node file its VM was acquired with (kfd_ioctl_acquire_vm)
    if self.doorbells is not None: self.system.munmap(self.doorbells)
    self.doorbells = None
    proc = self.proc
    if not proc.drm and proc.kfd_fd >= 0:   # no VM was acquired (an open that failed early): nothing needs the file
      try: self.system.close(proc.kfd_fd)
      except OSError: pass
      proc.kfd_fd = -1
    self.drm_fd = self.kfd_fd = -1


def _close_ref(ref) -> None:
  if (iface := ref()) is not None: iface.close()
