"""MOCKKFD end to end: the emulated amdkfd (boards booted by the AM driver) under KFDIface and hcq, and its argument
checks, each expecting the errno amdkfd's kfd_chardev.c / kfd_queue.c return for the same mistake (Linux 6.12)."""
import ctypes, errno, os, time
import numpy as np
import pytest
from rawgpu import kernels
from rawgpu.autogen import kfd as K
from rawgpu.errors import DeviceFault, IoctlError, RawGPUError
from rawgpu.drivers.emu.mockkfd.kernel import FIRST_KFD_VMID

ENOTSUPP = 524   # kernel-internal, what set_queue_properties_from_user returns for an unknown queue type
PAGE = 4096


@pytest.fixture(scope="module", autouse=True)
def firmware():
  from conftest import find_firmware
  fw = find_firmware()
  if fw is None: pytest.skip("AMD firmware not found: run .ci/fetch-firmware (Debian firmware-amd-graphics) or set RAWGPU_FIRMWARE_DIR")
  os.environ.setdefault("RAWGPU_FIRMWARE_DIR", fw)


MACHINES: dict = {}   # id(System) -> the MockMachine of this module's tests


@pytest.fixture(scope="module")
def own_machine():
  """A gfx1100 machine of this module's own, two boards: a process no other test module shares, so a test may end it."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  m = MockMachine("gfx1100", 2)
  MACHINES[id(m.system)] = m
  return m


@pytest.fixture
def system(own_machine):
  exit_process(own_machine)   # each test starts in a process of its own
  yield own_machine.system
  exit_process(own_machine)


def exit_process(m) -> None:
  """What this process's exit would do: amdkfd drops the process's state (kfd_process_notifier_release) and its
  files close; KFDIface's record of them goes with it."""
  from rawgpu.drivers.kfd import iface
  for p in list(m.kernel.processes): p.exit()
  proc = iface._PROCESSES.pop(m.system, None)
  for fd in ([proc.kfd_fd, *proc.drm.values()] if proc else []):
    if fd >= 0: m.system.close(fd)


VAS: dict[int, int] = {}   # BO handle -> the GPU VA it was allocated at


def _va(raw, a): return VAS[a.handle]


class Raw:
  """A process talking to the mock through the bare ioctls (what KFDIface would send, or mistakes it never makes).
  A process acquires a GPU's VM with one render-node file for its whole life (another is EBUSY): start it in a
  process of its own (the `system` fixture)."""
  def __init__(self, system, acquire=True):
    from rawgpu.drivers.kfd.topology import gpu_nodes
    self.s = system
    self.node = gpu_nodes(system)[0]
    self.gpu = self.node.gpu_id
    self.kfd = system.open("/dev/kfd", os.O_RDWR)
    self.drm = system.open(f"/dev/dri/renderD{self.node.render_minor}", os.O_RDWR)
    if acquire: self.io(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=self.drm, gpu_id=self.gpu)
    self.next_va = 0x7F10_0000_0000

  def io(self, ioc, **kw): return ioc(self.s, self.kfd, **kw)

  def errno_of(self, ioc, **kw) -> int:
    with pytest.raises(IoctlError) as e: self.io(ioc, **kw)
    return e.value.errno_

  def alloc(self, size, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_GTT, map=True):
    va = self.next_va
    self.next_va += max(size, PAGE) + (2 << 20)   # a gap: nothing ends up exactly adjacent by accident
    a = self.io(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=va, size=size, gpu_id=self.gpu, flags=flags | K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE)
    VAS[a.handle] = va
    if map: self.map(a.handle)
    return a

  def map(self, handle, ioc=K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, n=1, done=0):
    ids = (ctypes.c_uint32 * 1)(self.gpu)
    return self.io(ioc, handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=n, n_success=done)

  def close(self):
    self.s.close(self.drm); self.s.close(self.kfd)


@pytest.fixture
def raw(system):
  r = Raw(system)
  yield r
  r.close()


def gpu_of(system): return MACHINES[id(system)].gpus[0]


def translate(g, va: int) -> int | None:
  """Where the (one) process's page tables on g's board send va (None: unmapped)."""
  return g.kernel.translate(g, va)


def test_topology_and_ip_discovery_match_the_board(system):
  from rawgpu.drivers.kfd import KFDIface
  g = gpu_of(system)
  it = KFDIface(0, system)
  try:
    p = it.props
    assert p.iface == "MOCKKFD" and p.emulated and p.arch == "gfx1100" and p.pci_bus == g.dev.bus
    assert p.ip_versions["gc"] == g.dev.ips["gc"] and p.ip_bases["gc"] == g.dev.disc.find("gc").bases
    from rawgpu.drivers.emu.mockkfd import machine
    board = machine("gfx1100").vbus.boards[g.dev.bus]
    assert p.compute_units == board.cus and p.vram_size == g.dev.vram_size   # the CUs that work, as cu_info counts them
  finally: it.close()


def test_alloc_map_free_and_errnos(raw):
  g = gpu_of(raw.s)
  v = raw.alloc(1 << 20, K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC)
  assert v.handle == raw.gpu << 32   # MAKE_HANDLE(gpu_id, the device idr's first id, 0)
  cpu = raw.s.mmap(raw.drm, 1 << 20, v.mmap_offset)
  cpu.write(0x100, 0xdeadbeef)
  assert translate(g, VAS[v.handle] + 0x100) is not None
  # kfd_ioctl_alloc_memory_of_gpu
  assert raw.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=raw.next_va, size=0, gpu_id=raw.gpu, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_GTT) == errno.EINVAL
  assert raw.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=raw.next_va, size=PAGE, gpu_id=raw.gpu ^ 0xffff, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_GTT) == errno.EINVAL
  assert raw.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=raw.next_va, size=PAGE, gpu_id=raw.gpu, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL) == errno.EINVAL
  assert raw.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=raw.next_va, size=2 * PAGE, gpu_id=raw.gpu, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP) == errno.EINVAL
  mmio = raw.alloc(PAGE, K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, map=False)
  assert mmio.mmap_offset >> 62 == 0 and (mmio.mmap_offset >> 46) & 0xffff == raw.gpu   # KFD_MMAP_TYPE_MMIO | GPU_ID
  raw.alloc(2 * PAGE, K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, map=False)
  # map/unmap/free
  assert raw.errno_of(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle=v.handle, device_ids_array_ptr=0, n_devices=0, n_success=0) == errno.EINVAL
  ids = (ctypes.c_uint32 * 1)(raw.gpu)
  assert raw.errno_of(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle=v.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=2) == errno.EINVAL
  assert raw.errno_of(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=v.handle) == errno.EBUSY          # still mapped
  assert raw.errno_of(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=(raw.gpu << 32) | 0xfffff) == errno.EINVAL
  unknown = (raw.gpu << 32) | 0xfffff
  assert raw.errno_of(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle=unknown, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0) == errno.ENOMEM
  assert raw.errno_of(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle=unknown, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0) == errno.ENOMEM
  raw.map(v.handle, K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU)
  assert translate(g, VAS[v.handle] + 0x100) is None
  assert raw.errno_of(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle=v.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0) == errno.EINVAL   # not mapped
  free0 = g.dev.visible.free_bytes
  raw.io(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=v.handle)
  assert raw.errno_of(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=v.handle) == errno.EINVAL
  # the CPU mapping holds the BO (drm_gem_object_put frees on the last reference); its offset takes no new mapping
  assert g.dev.visible.free_bytes == free0 and cpu.read(0x100) == 0xdeadbeef
  with pytest.raises(OSError): raw.s.mmap(raw.drm, 1 << 20, v.mmap_offset)
  raw.s.munmap(cpu)
  assert g.dev.visible.free_bytes == free0 + (1 << 20)   # the VRAM went back with the mapping


def test_no_acquire_vm_and_bad_drm_fd(system):
  r = Raw(system, acquire=False)
  try:
    # kfd_bind_process_to_device: no VM yet
    assert r.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=r.next_va, size=PAGE, gpu_id=r.gpu, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_GTT) == errno.ENODEV
    assert r.errno_of(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=r.kfd, gpu_id=r.gpu) == errno.EINVAL
  finally: r.close()


def test_the_process_state_outlives_its_files(system, own_machine):
  """amdkfd keeps a process's state until the process exits, not until its last /dev/kfd closes: a render-node file
  opened later cannot take the VM the first one acquired (kfd_ioctl_acquire_vm: EBUSY), so KFDIface keeps its files
  open and a device opened again works."""
  from rawgpu.drivers.kfd import KFDIface
  s, kernel = system, own_machine.kernel
  first = Raw(s, acquire=False)
  first.io(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=first.drm, gpu_id=first.gpu)
  first.close()
  assert len(kernel.processes) == 1   # every file closed: the state stays
  later = Raw(s, acquire=False)
  try: assert later.errno_of(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=later.drm, gpu_id=later.gpu) == errno.EBUSY
  finally: later.close()
  kernel.processes[0].exit()   # the process exits: a new one starts clean
  assert not kernel.processes
  for _ in range(2):   # KFDIface opened, closed and opened again in one process
    it = KFDIface(0, s)
    it.create_ring("compute", 1 << 12); it.alloc(4096)
    it.close()
  assert len(kernel.processes) == 1


def _queue_bufs(raw, ring_size=PAGE):
  return raw.alloc(ring_size), raw.alloc(PAGE)


def test_a_queues_buffers_are_held_in_the_queues_vm(raw):
  """amdgpu's queue_refcount is the bo_va's (one BO in one VM): a BO of GPU A mapped on GPU B and used by a queue on
  B cannot leave B's VM while the queue lives (EBUSY), and leaves A's at once."""
  from rawgpu.drivers.kfd.topology import gpu_nodes
  nb = gpu_nodes(raw.s)[1]
  drm_b = raw.s.open(f"/dev/dri/renderD{nb.render_minor}", os.O_RDWR)
  try:
    raw.io(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=drm_b, gpu_id=nb.gpu_id)
    ring, ptrs = _queue_bufs(raw)
    both = (ctypes.c_uint32 * 2)(raw.gpu, nb.gpu_id)
    for bo in (ring, ptrs): raw.io(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle=bo.handle, device_ids_array_ptr=ctypes.addressof(both), n_devices=2, n_success=1)
    q = raw.io(K.AMDKFD_IOC_CREATE_QUEUE, gpu_id=nb.gpu_id, queue_type=K.KFD_IOC_QUEUE_TYPE_SDMA, queue_percentage=100, queue_priority=7,
               ring_size=PAGE, ring_base_address=_va(raw, ring), read_pointer_address=_va(raw, ptrs), write_pointer_address=_va(raw, ptrs) + 8)
    def unmap(bo, gpu):
      ids = (ctypes.c_uint32 * 1)(gpu)   # held while the ioctl reads it
      raw.io(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle=bo.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0)
    with pytest.raises(IoctlError) as e: unmap(ring, nb.gpu_id)
    assert e.value.errno_ == errno.EBUSY
    unmap(ring, raw.gpu)                                                        # A's VM: no queue of A uses it
    raw.io(K.AMDKFD_IOC_DESTROY_QUEUE, queue_id=q.queue_id)
    unmap(ring, nb.gpu_id)
  finally: raw.s.close(drm_b)


def test_create_queue_checks(raw):
  from rawgpu.drivers.kfd.sizes import align
  s = gpu_of(raw.s).sizes
  ring, ptrs = _queue_bufs(raw, 1 << 14)
  eop = raw.alloc(s.eop, K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM)
  cwsr = raw.alloc(align(s.cwsr + s.debug_memory, PAGE), K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM)
  base = dict(gpu_id=raw.gpu, queue_type=K.KFD_IOC_QUEUE_TYPE_COMPUTE, queue_percentage=100, queue_priority=7, ring_size=1 << 14,
              ring_base_address=_va(raw, ring), read_pointer_address=_va(raw, ptrs), write_pointer_address=_va(raw, ptrs) + 8,
              eop_buffer_address=_va(raw, eop), eop_buffer_size=s.eop, ctx_save_restore_address=_va(raw, cwsr),
              ctx_save_restore_size=s.cwsr, ctl_stack_size=s.ctl_stack)
  bad = lambda **kw: raw.errno_of(K.AMDKFD_IOC_CREATE_QUEUE, **{**base, **kw})
  assert bad(ring_size=3 << 12) == errno.EINVAL                      # not a power of 2
  assert bad(queue_percentage=101) == errno.EINVAL
  assert bad(queue_priority=16) == errno.EINVAL
  assert bad(queue_type=99) == ENOTSUPP
  assert bad(gpu_id=raw.gpu ^ 0xffff) == errno.EINVAL
  assert bad(ctl_stack_size=s.ctl_stack + PAGE) == errno.EINVAL       # must equal the node's
  assert bad(ctx_save_restore_size=s.cwsr - PAGE) == errno.EINVAL     # smaller than the node's
  assert bad(ctx_save_restore_address=0, ctx_save_restore_size=s.cwsr) == errno.EINVAL   # no CWSR area
  assert bad(eop_buffer_size=s.eop // 2) == errno.EINVAL
  assert bad(ring_size=1 << 13) == errno.EINVAL                       # the ring BO must be exactly the ring size
  assert bad(ring_base_address=raw.next_va) == errno.EINVAL           # unmapped ring
  for name in ("ring_base_address", "read_pointer_address", "eop_buffer_address", "ctx_save_restore_address"):
    assert bad(**{name: 1 << 47}) == errno.EFAULT, name                # access_ok
  # XNACK: -1 asks (off, amdgpu's noretry default); off again is no change; on is EPERM (no retry faults modelled)
  assert raw.io(K.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=-1).xnack_enabled == 0
  raw.io(K.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=0)
  assert raw.errno_of(K.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=1) == errno.EPERM
  q = raw.io(K.AMDKFD_IOC_CREATE_QUEUE, **base)
  assert q.doorbell_offset >> 62 == 3 and (q.doorbell_offset >> 46) & 0xffff == raw.gpu
  assert raw.errno_of(K.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=0) == errno.EBUSY   # a change needs no queues
  assert raw.io(K.AMDKFD_IOC_SET_XNACK_MODE, xnack_enabled=-1).xnack_enabled == 0
  # runtime_enable: EEXIST while the process has queues; disabling (no ENABLE bit) then works, enabling twice is EBUSY
  enable = lambda mask=K.KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK: raw.errno_of(K.AMDKFD_IOC_RUNTIME_ENABLE, r_debug=0, mode_mask=mask, capabilities_mask=0)
  assert enable() == errno.EEXIST
  raw.io(K.AMDKFD_IOC_RUNTIME_ENABLE, r_debug=0, mode_mask=0, capabilities_mask=0)
  ids = (ctypes.c_uint32 * 1)(raw.gpu)   # held while the ioctl reads it
  assert raw.errno_of(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, handle=ring.handle, device_ids_array_ptr=ctypes.addressof(ids),
                      n_devices=1, n_success=0) == errno.EBUSY      # a queue uses it
  raw.io(K.AMDKFD_IOC_DESTROY_QUEUE, queue_id=q.queue_id)
  assert raw.errno_of(K.AMDKFD_IOC_DESTROY_QUEUE, queue_id=q.queue_id) == errno.EINVAL
  raw.io(K.AMDKFD_IOC_RUNTIME_ENABLE, r_debug=0, mode_mask=K.KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK, capabilities_mask=0)
  assert enable() == errno.EBUSY
  # kfd_queue_buffer_get counts the ring in whole pages: a 1 KiB ring (or 0: the 1 KiB minimum) is 0 pages, any BO length
  for small in (1 << 10, 0):
    q = raw.io(K.AMDKFD_IOC_CREATE_QUEUE, **{**base, "ring_size": small})
    assert q.ring_size == 1 << 10 and q.queue_id == 0                  # clamped and said; the lowest free id again
    raw.io(K.AMDKFD_IOC_DESTROY_QUEUE, queue_id=q.queue_id)
  # SDMA queues take no EOP/CWSR
  q = raw.io(K.AMDKFD_IOC_CREATE_QUEUE, gpu_id=raw.gpu, queue_type=K.KFD_IOC_QUEUE_TYPE_SDMA, queue_percentage=100, queue_priority=7,
             ring_size=1 << 14, ring_base_address=base["ring_base_address"], read_pointer_address=base["read_pointer_address"],
             write_pointer_address=base["write_pointer_address"])
  raw.io(K.AMDKFD_IOC_DESTROY_QUEUE, queue_id=q.queue_id)


def test_events(raw):
  small = raw.alloc(0x4000)
  assert raw.errno_of(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=small.handle, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1) == errno.EINVAL   # under 4096 slots
  page = raw.alloc(0x8000)
  ev = raw.io(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=page.handle, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
  assert ev.event_id == ev.event_slot_index == ev.event_trigger_data == 1   # id 0 is reserved (kfd_event_init_process)
  mem = raw.io(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=0, event_type=K.KFD_IOC_EVENT_MEMORY, auto_reset=1, event_trigger_data=77)
  assert mem.event_page_offset == 0 and mem.event_trigger_data == mem.event_id
  assert raw.errno_of(K.AMDKFD_IOC_RESET_EVENT, event_id=mem.event_id) == errno.EINVAL    # only signal events, from the CPU
  assert raw.errno_of(K.AMDKFD_IOC_SET_EVENT, event_id=mem.event_id) == errno.EINVAL
  assert raw.errno_of(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=page.handle, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1) == errno.EINVAL
  raw.map(page.handle, K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU)
  assert raw.errno_of(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=page.handle) == errno.EPERM   # the signal BO stays
  arr = (K.kfd_event_data * 1)()
  arr[0].event_id = ev.event_id
  w = raw.io(K.AMDKFD_IOC_WAIT_EVENTS, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=2)
  assert w.wait_result == K.KFD_IOC_WAIT_RESULT_TIMEOUT
  raw.io(K.AMDKFD_IOC_SET_EVENT, event_id=ev.event_id)
  w = raw.io(K.AMDKFD_IOC_WAIT_EVENTS, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=1000)
  assert w.wait_result == K.KFD_IOC_WAIT_RESULT_COMPLETE
  assert raw.io(K.AMDKFD_IOC_WAIT_EVENTS, events_ptr=0, num_events=0, wait_for_all=1, timeout=0).wait_result == K.KFD_IOC_WAIT_RESULT_COMPLETE
  arr[0].event_id = 12345
  w = K.kfd_ioctl_wait_events_args(events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=0)
  with pytest.raises(IoctlError) as e: K.AMDKFD_IOC_WAIT_EVENTS(raw.s, raw.kfd, w)
  assert e.value.errno_ == errno.EINVAL and w.wait_result == K.KFD_IOC_WAIT_RESULT_FAIL


def test_hdp_flush_through_the_remapped_page(system):
  from rawgpu.drivers.kfd import KFDIface
  board = next(iter(MACHINES[id(system)].vbus.boards.values()))
  it = KFDIface(0, system)
  try:
    n = board.nbio.hdp_flushes
    it.flush_hdp()
    assert board.nbio.hdp_flushes == n + 1
  finally: it.close()


def test_where_the_cpu_has_no_fences_vram_gets_no_cpu_view(system, monkeypatch):
  """amdgpu maps VRAM write-combined, which needs CPU fences (rawgpu.drivers.cpufence): without them,
  VRAM with a CPU view is refused with the reason, and VRAM without one and host memory are still there."""
  from rawgpu.drivers.kfd import KFDIface, iface as kfd_iface
  monkeypatch.setattr(kfd_iface, "fences_or_none", lambda: (None, "no CPU fences are known for riscv64"))
  it = KFDIface(0, system)
  try:
    with pytest.raises(RawGPUError, match="write-combined.*CPU fences.*: no CPU fences are known for riscv64.*without CPU access"):
      it.alloc(4096, cpu_access=True)
    assert it.alloc(4096, cpu_access=False).cpu is None and it.alloc(4096, host=True).cpu is not None
    it.read_fence(); it.write_fence()   # nothing to fence: no VRAM view exists
  finally: it.close()


def test_without_a_remap_page_vram_copies_take_the_copy_engine(system, monkeypatch):
  """A kernel that gives no MMIO_REMAP page (64 KiB pages: EINVAL): nothing can flush the HDP from the CPU, so
  flush_hdp says so, a small copy into CPU-visible VRAM goes through the copy engine, and every submission on either
  ring starts with the engine's own HDP flush instead: what cpu() wrote into VRAM before it is what a kernel reads."""
  import numpy as np
  from rawgpu.drivers.kfd import KFDIface, iface as kfd_iface
  from rawgpu.hcq.device import Device
  real = KFDIface._ioctl
  def no_remap(self, ioc, fd=None, **kw):
    if ioc is kfd_iface.F.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU and kw.get("flags", 0) & K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP:
      raise IoctlError("AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", errno.EINVAL)
    return real(self, ioc, fd, **kw)
  monkeypatch.setattr(KFDIface, "_ioctl", no_remap)
  dev = Device(iface=KFDIface(0, system))
  try:
    assert dev.iface.hdp is None and dev.iface.flush_hdp() is False and not dev.backend.bar_copyin
    buf, ticket = dev.alloc(4096, cpu_access=True), dev.timeline_value
    buf.copyin(np.arange(1024, dtype=np.uint32))
    assert dev.timeline_value > ticket and np.array_equal(buf.numpy(np.uint32), np.arange(1024, dtype=np.uint32))
    assert dev.ring("compute").hw.before_doorbell is None and dev.ring("sdma").hw.before_doorbell is None
    board = next(iter(MACHINES[id(system)].vbus.boards.values()))
    code = kernels.path(dev.props.arch, "copy").read_bytes()
    copy, out = dev.program(code, "copy_u32"), dev.alloc(4096)
    dev.synchronize()
    flushes, new = board.nbio.hdp_flushes, np.arange(1024, dtype=np.uint32) * 5
    np.frombuffer(buf.cpu(), np.uint32)[:] = new
    copy(buf, out, 1024, global_size=16, local_size=64, wait=True)   # one compute submission
    assert board.nbio.hdp_flushes == flushes + 1 and np.array_equal(out.numpy(np.uint32), new)   # numpy(): one on the copy ring
    assert board.nbio.hdp_flushes == flushes + 2
  finally: dev.close()


def test_a_destroyed_sdma_queue_is_idle_and_rung_by_nobody(system, monkeypatch):
  """amdkfd's hqd_sdma_destroy: the ring off, then a wait for QUEUEn_CONTEXT_STATUS.IDLE, then its doorbell off, so the
  slot is reprogrammed for the next queue only once nothing of this one runs or arrives."""
  from rawgpu.drivers.emu.mockkfd import hw
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  stopped, real = [], hw.sdma_stop
  monkeypatch.setattr(hw, "sdma_stop", lambda dev, q: (stopped.append((dev, q.am)), real(dev, q)))
  dev = Device(iface=KFDIface(0, system))
  try:
    buf = dev.alloc(1 << 16)
    buf.copyin(np.arange(1 << 14, dtype=np.uint32))   # through the copy engine: the process's SDMA queue exists
    assert np.array_equal(buf.numpy(np.uint32), np.arange(1 << 14, dtype=np.uint32))
  finally: dev.close()
  exit_process(MACHINES[id(system)])
  assert stopped
  for am, q in stopped:
    r = lambda n: am.sdma.r(q.engine, n, q.queue)
    assert r("regSDMA0_QUEUE0_DOORBELL").read() == 0 and not r("regSDMA0_QUEUE0_RB_CNTL").fields()["RB_ENABLE"]
    assert r("regSDMA0_QUEUE0_CONTEXT_STATUS").fields()["IDLE"]


def test_an_apu_flushes_no_hdp(system, monkeypatch):
  """An APU (amdgpu's AMDGPU_INFO says FUSION; 6.12's topology lists its GPU as a node without CPU cores) on x86-64:
  amdgpu flushes no HDP there, from the CPU or in a ring (amdgpu_device_flush_hdp), and Phoenix's NBIO 7.7 has no
  flush registers rawgpu knows: the device opens without an NBIO entry, takes no remap page, and its kernels and
  copies still see what the CPU wrote."""
  import platform
  from rawgpu.drivers.kfd import KFDIface, topology
  from rawgpu.hcq.device import Device
  if platform.machine() not in ("x86_64", "AMD64"): pytest.skip("amdgpu skips the HDP flush of APUs on x86-64 only")
  discovery = topology.ip_discovery
  def no_nbio(sysm, minor, bus=None):
    versions, bases = discovery(sysm, minor, bus)
    return {k: v for k, v in versions.items() if k != "nbio"}, {k: v for k, v in bases.items() if k != "nbio"}
  monkeypatch.setattr(topology, "ip_discovery", no_nbio)
  for g in MACHINES[id(system)].kernel.gpus: monkeypatch.setattr(g, "apu", True)
  dev = Device(iface=KFDIface(0, system))
  try:
    assert dev.props.apu and dev.iface.hdp is None and dev.iface.flush_hdp() is True
    assert dev.backend.hdp_flush is None and dev.ring("compute").hw.before_doorbell is None
    board = next(iter(MACHINES[id(system)].vbus.boards.values()))
    # (the emulated kernel's own TLB flushes flush the HDP too, as amdgpu's do: only the rings' requests are counted)
    done = board.nbio.a_done   # each flush a ring requests reads back here
    board.regs.vals[done] = 0
    buf, out = dev.alloc(4096, cpu_access=True), dev.alloc(4096)
    new = np.arange(1024, dtype=np.uint32) * 3
    np.frombuffer(buf.cpu(), np.uint32)[:] = new
    code = kernels.path(dev.props.arch, "copy").read_bytes()
    dev.compute_queue().memory_barrier().submit(dev)
    dev.program(code, "copy_u32")(buf, out, 1024, global_size=16, local_size=64, wait=True)
    dev.copy_queue().memory_barrier().submit(dev)
    assert np.array_equal(out.numpy(np.uint32), new) and board.regs.vals[done] == 0   # no ring asked for a flush
  finally: dev.close()


def test_userptr_memory_reaches_the_gpu(dev):
  # host memory the process already has, registered with USERPTR; the copy engine reads it by its GPU VA
  from rawgpu.hcq.buffer import Buffer
  it = dev.iface
  host = it.system.alloc_host(3 * PAGE)
  data = np.random.default_rng(5).integers(0, 2**32, 3 * PAGE // 4, dtype=np.uint32)
  host.writebytes(0, data.tobytes())
  m = it.alloc_userptr(host)
  try:
    B = dev.alloc(3 * PAGE)
    dev.transfer(B, Buffer(dev, m))
    assert np.array_equal(B.numpy(np.uint32), data)
  finally:
    dev.synchronize()
    it.free(m)


def test_close_releases_everything(system):
  """What one KFDIface took goes back at close. Other devices of this process may hold queues and memory on the same
  GPU meanwhile (a module-scoped device of another test, under pytest-xdist's ordering): compare with before."""
  from rawgpu.drivers.kfd import KFDIface
  g = gpu_of(system)
  held = lambda: (set(g.compute_slots), set(g.sdma_slots))
  before = held()
  def cycle():
    it = KFDIface(0, system)
    it.alloc(3 << 20); it.alloc(8192, host=True)
    it.create_ring("compute", 1 << 14); it.create_ring("sdma", 1 << 14)
    assert len(g.compute_slots) > len(before[0]) and len(g.sdma_slots) > len(before[1])
    it.close()
  cycle()   # page tables grown for these VAs stay, as the kernel's would: measure the second time round
  free0 = g.dev.visible.free_bytes
  cycle()
  assert held() == before and g.dev.visible.free_bytes == free0
  assert MACHINES[id(system)].kernel.processes   # the process's KFD state stays until it exits


def test_free_gives_the_memory_back_at_once(system, monkeypatch):
  """KFDIface.free ends the CPU mapping it made, so the BO's memory is free when free returns, not when Python
  collects the last view of it; a mapping made for an allocation that then failed goes the same way."""
  from rawgpu.drivers.kfd import KFDIface
  g = gpu_of(system)
  it = KFDIface(0, system)
  try:
    it.alloc(4096); it.alloc(4096, host=True)   # page tables for the VAs below grow here, not in what is measured
    vram0, host0 = g.dev.visible.free_bytes, g.dev.system.host_memory.free_bytes
    vram, host = it.alloc(3 << 20), it.alloc(1 << 20, host=True)
    assert g.dev.visible.free_bytes < vram0 and g.dev.system.host_memory.free_bytes < host0
    views = [vram.cpu.cast("I"), host.cpu.cast("I")]   # a user's views: they must not keep the memory
    it.free(vram); it.free(host)
    assert (g.dev.visible.free_bytes, g.dev.system.host_memory.free_bytes) == (vram0, host0)
    del views
    def refuse(ioc, handle): raise RawGPUError("MAP_MEMORY_TO_GPU refused (injected)")
    monkeypatch.setattr(it, "_gpu_map", refuse)
    with pytest.raises(RawGPUError, match="injected"): it.alloc(3 << 20)
    assert g.dev.visible.free_bytes == vram0
    monkeypatch.undo()
    m = it.alloc(4096)
    def no_munmap(view): raise OSError(errno.ENOMEM, "munmap refused (injected)")
    monkeypatch.setattr(system, "munmap", no_munmap)
    with pytest.raises(OSError, match="injected"): it.free(m)   # said, and the BO is freed all the same
    assert m.meta[0] not in MACHINES[id(system)].kernel.processes[0].bos
  finally:
    monkeypatch.undo(); it.close()


def test_mi300_partition_nodes_are_named_by_their_xcc(monkeypatch):
  """amdkfd ORs a partition's node id into location_id where a GPU has several nodes (kfd_topology_add_device): the
  nodes of an MI300X in CPX mode are one board (function 0) and XCCs 0..7, named like MOCKPCI's devices
  (.../xccN). A board of one node keeps its location_id as it is."""
  from rawgpu.drivers.emu.mockkfd import mock_kfd
  from rawgpu.drivers.kfd.topology import gpu_nodes
  from rawgpu.hcq import Device
  monkeypatch.setenv("RAWGPU_AM_IN_PROGRESS", "1")
  nodes = gpu_nodes(mock_kfd("gfx942", 8))[:8]
  assert [n.partition for n in nodes] == list(range(8)) and {n.pci_bus for n in nodes} == {nodes[0].pci_bus}
  assert nodes[0].pci_bus.endswith(".0") and [n.props["location_id"] & 7 for n in nodes] == list(range(8))
  d = Device("MOCKKFD:3+AMD::gfx942")
  try: assert d.props.xcc == 3 and str(d) == f"MOCKKFD+AMD:gfx942@{nodes[0].pci_bus}/xcc3"
  finally: d.close()
  assert all(n.partition is None for n in gpu_nodes(mock_kfd("gfx1100")))


@pytest.mark.parametrize("arch", ["gfx1100", "gfx942"])
def test_sdma_queues_per_engine_as_amdkfd_gives_them(arch, monkeypatch):
  """amdkfd gives each engine's user queues their own ring queue and a static doorbell: 6 per engine on SDMA 6
  (queues 0 and 1 are amdgpu's), 8 on SDMA 4.4.2 (its RLC queues). The topology says so, one more queue is refused
  (ENOMEM), and every queue runs its own ring: a fence each, all queued before any doorbell is rung."""
  from rawgpu.drivers.emu.mockkfd import mock_kfd, machine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.amd import sdma
  if arch == "gfx942": monkeypatch.setenv("RAWGPU_AM_IN_PROGRESS", "1")   # the emulated amdkfd boots the board with AM
  system = mock_kfd(arch)
  it = KFDIface(0, system)
  try:
    g = next(g for g in machine(arch).gpus if g.gpu_id == it.gpu_id)
    per_engine = {"gfx1100": 6, "gfx942": 8}[arch]
    assert g.props["num_sdma_queues_per_engine"] == per_engine
    free = per_engine * 2 - sum(1 for e, _ in g.sdma_slots if e in g.dev.sdma.partition_engines(g.xcc))   # others' queues (xdist)
    rings = [it.create_ring("sdma", 4096) for _ in range(free)]
    with pytest.raises(IoctlError) as e: it.create_ring("sdma", 4096)
    assert e.value.errno_ == errno.ENOMEM
    out = it.alloc(4 * len(rings), host=True)
    version = it.props.ip_versions["sdma"][:2]
    for i, r in enumerate(rings):
      words = sdma.fence(out.va + 4 * i, 0x1000 + i, version=version)
      r.ring.cpu.cast("I")[:len(words)] = np.array(words, np.uint32)
      r.write_ptr[0] = 4 * len(words) // r.wptr_unit
    for r in rings: r.doorbell[0] = r.write_ptr[0]
    view = out.cpu.cast("I")
    deadline = time.monotonic() + 10
    while list(view[:len(rings)]) != [0x1000 + i for i in range(len(rings))] and time.monotonic() < deadline: time.sleep(0.01)
    assert list(view[:len(rings)]) == [0x1000 + i for i in range(len(rings))]
    assert len({r.doorbell for r in rings}) == len(rings)
  finally: it.close()


# ---- hcq on MOCKKFD
@pytest.fixture(scope="module", params=["gfx1100", "gfx1201"])
def dev(request):
  from rawgpu.drivers.emu.mockkfd import mock_kfd
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  try: d = Device(iface=KFDIface(0, mock_kfd(request.param)))
  except Exception as e:
    if "firmware" in str(e): pytest.skip(f"{request.param}: {e}")
    raise
  yield d
  d.close()


def test_hcq_signal_wait(dev):
  s, done = dev.new_signal("host"), dev.new_signal("done")
  dev.compute_queue().wait(s, 5).signal(done, 7).submit(dev)
  s.value = 5
  done.wait(7, timeout_ms=5000)
  assert done.value == 7


def test_gpu_wakes_a_sleeping_wait(dev):
  check_gpu_wakes(dev)


def check_gpu_wakes(dev):
  # RELEASE_MEM into the signal event's slot with the event id as interrupt context: the emulated amdkfd's interrupt
  # handler signals the event, and a WAIT_EVENTS on it completes instead of timing out
  from rawgpu.hcq.amd import pm4
  it = dev.iface
  slot_va, event_id = it.wake
  arr = (K.kfd_event_data * 1)()
  arr[0].event_id = event_id
  def drain():
    # hcq's own signals wake this event too, the wake-up a packet after the signal: let them land, take them
    dev.synchronize()
    while K.AMDKFD_IOC_WAIT_EVENTS(it.system, it.kfd_fd, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1,
                                   timeout=100).wait_result == K.KFD_IOC_WAIT_RESULT_COMPLETE: pass
  drain()
  q = dev.compute_queue()
  q._add(pm4.release_mem, slot_va, value=1, data_sel=pm4.DataSel.VALUE64, int_sel=pm4.IntSel.INTERRUPT_AFTER_WRITE, gen=dev.backend.gfx, int_ctxid=event_id)
  q.submit(dev)
  w = K.AMDKFD_IOC_WAIT_EVENTS(it.system, it.kfd_fd, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=10_000)
  assert w.wait_result == K.KFD_IOC_WAIT_RESULT_COMPLETE
  assert it.proc.event_page.cpu.cast("Q")[(slot_va - it.proc.event_page.va) // 8] == (1 << 64) - 1   # acknowledged
  drain()   # the submit's own timeline signal woke it as well
  w = K.AMDKFD_IOC_WAIT_EVENTS(it.system, it.kfd_fd, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=1)
  assert w.wait_result == K.KFD_IOC_WAIT_RESULT_TIMEOUT   # auto-reset: a wait consumed it
  # the copy engine the same way: FENCE into the slot, TRAP with the event id (its IV names the process by PASID)
  from rawgpu.hcq.amd import sdma
  v = dev.backend.sdma_version
  c = dev.copy_queue()
  c._add(sdma.fence, slot_va, value=1, version=v); c._add(sdma.trap, int_context=event_id, version=v)
  c.submit(dev)
  w = K.AMDKFD_IOC_WAIT_EVENTS(it.system, it.kfd_fd, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=10_000)
  assert w.wait_result == K.KFD_IOC_WAIT_RESULT_COMPLETE


def test_a_gpu_opened_later_wakes_sleepers_too(system):
  """The signal-event page is the process's, made with the first GPU it opens; a GPU opened later maps that page in
  its own VM at the same VA, or its RELEASE_MEM into the page faults and its wake-ups are lost."""
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  devs = [Device(iface=KFDIface(1, system))]
  try:
    devs.append(Device(iface=KFDIface(0, system)))
    for d in reversed(devs): check_gpu_wakes(d)
  finally:
    for d in devs: d.close()


def test_hcq_vadd_and_copies_match_numpy(dev):
  n = 3000
  rng = np.random.default_rng(7)
  a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
  A, B, C = dev.alloc(4 * n).copyin(a), dev.alloc(4 * n).copyin(b), dev.alloc(4 * n)
  prg = dev.program(kernels.path(dev.props.arch, "vadd").read_bytes(), "vadd_f32")
  prg(A, B, C, n, global_size=(n + 127) // 128, local_size=128)
  assert np.array_equal(C.numpy(np.float32), a + b)
  D = dev.alloc(4 * n)
  dev.transfer(D, C)
  assert np.array_equal(D.numpy(np.float32), a + b)


def test_hcq_via_dev_string():
  # a second user in the same process (the module's `dev` may be open): one KFD process, one address space
  from rawgpu.hcq.device import Device
  with Device("MOCKKFD+AMD") as d:
    assert d.props.iface == "MOCKKFD"
    x = np.arange(5000, dtype=np.uint32)
    assert np.array_equal(d.alloc(x.nbytes).copyin(x).numpy(np.uint32), x)


@pytest.mark.parametrize("arch", ["gfx1100", "gfx1201"])
def test_gpu_page_fault_is_device_fault(arch):
  # the board is told to fault on C's page, as a missing page would (its own fault injection); the emulated kernel's
  # interrupt handler turns the IH entry into a memory-exception event, WAIT_EVENTS hands it to KFDIface.
  # A machine of its own: after a fault the process's queues are stopped for good, as with amdkfd.
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  try: m = MockMachine(arch, 1)
  except Exception as e:
    if "firmware" in str(e): pytest.skip(f"{arch}: {e}")
    raise
  board = next(iter(m.vbus.boards.values()))
  dev = Device(iface=KFDIface(0, m.system))
  try:
    n = 1024
    A, B, C = (dev.alloc(4 * n) for _ in range(3))
    prg = dev.program(kernels.path(arch, "vadd").read_bytes(), "vadd_f32")
    board.inject("page_fault", va=C.va)
    with pytest.raises(DeviceFault, match=r"page fault at 0x[0-9a-f]+") as e:
      prg(A, B, C, n, global_size=n // 128, local_size=128)
      dev.synchronize(timeout_ms=5000)
    addr = int(str(e.value).split("page fault at ")[1].split()[0], 16)
    assert addr >> 12 == C.va >> 12
    # kfd_set_dbg_ev_from_interrupt evicted the process's queues on that GPU: off the hardware, still the process's
    g, queues = m.gpus[0], list(m.kernel.processes[0].queues.values())
    def running(q) -> bool:
      if q.kind == "sdma": return bool(g.dev.sdma.r(q.am.engine, "regSDMA0_QUEUE0_RB_CNTL", q.am.queue).fields()["RB_ENABLE"])
      with g.dev.gfx._selected(q.am) as gc: return bool(gc("regCP_HQD_ACTIVE").read() & 1)
    assert {q.hwq.kind for q in queues} == {"compute", "sdma"} and not any(running(q.hwq) for q in queues)
  finally:
    board.clear_faults()
    dev.iface.close()
    for g in m.gpus: g.dev.fini()


def test_two_boards_in_pci_order():
  # KFD:N is the N-th board on the bus (as PCI:N would be), each with its own gpu_id, VM and queues
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  m = MockMachine("gfx1100", 2)
  its = [KFDIface(i, m.system) for i in range(2)]
  try:
    assert [it.props.pci_bus for it in its] == sorted(m.vbus.boards) and its[0].gpu_id != its[1].gpu_id
    its[0].create_ring("compute", 4096); its[1].create_ring("sdma", 4096)
    assert m.gpus[0].compute_slots and m.gpus[1].sdma_slots and not m.gpus[1].compute_slots
  finally:
    for it in its: it.close()
    for g in m.gpus: g.dev.fini()


def test_a_board_plugged_in_later_joins_the_running_machine():
  """A board plugged into a machine whose first board is in use (as opening MOCKKFD:1 after MOCKKFD:0 does) is a new
  node of the same kernel: the topology grows and its generation_id moves, the open device keeps its GPU, and the two
  copy to each other. It used to be a second machine: P2P was refused and board 0 could be opened again as another
  GPU at the same bus address."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.drivers.kfd.topology import gpu_nodes
  from rawgpu.hcq import Device
  m = MockMachine("gfx1100", 1)
  d0 = Device(iface=KFDIface(0, m.system))
  try:
    from rawgpu.drivers.emu.mockkfd import TOPOLOGY_ROOT as TOPOLOGY
    generation = m.system.read_text(f"{TOPOLOGY}/generation_id")
    m.plug(2)
    assert m.system.read_text(f"{TOPOLOGY}/generation_id") != generation
    nodes = gpu_nodes(m.system)
    assert len(nodes) == 2 and nodes[0].gpu_id == d0.iface.gpu_id and len(m.vbus.boards) == 2
    d1 = Device(iface=KFDIface(1, m.system))
    try:
      x = np.arange(4096, dtype=np.uint32)
      src, dst = d0.alloc(x.nbytes).copyin(x), d1.alloc(x.nbytes)
      d1.transfer(dst, src)
      assert np.array_equal(dst.numpy(np.uint32), x)
    finally: d1.close()
  finally:
    d0.close()
    for p in list(m.kernel.processes): p.exit()
    for g in m.gpus: g.dev.fini()


def test_the_processs_machine_grows_in_place():
  """DEV=MOCKKFD+AMD:N past the boards so far plugs boards into the process's machine; it never builds another."""
  from rawgpu.drivers.emu.mockkfd import machine
  m = machine("gfx1100")
  assert machine("gfx1100", len(m.gpus) + 1) is m and len(m.gpus) == len(m.vbus.boards)


def test_peer_mappings_of_a_bo():
  """MAP_MEMORY_TO_GPU with another GPU's id maps the BO there too (VRAM through the owner's BAR0, GTT at its bus
  addresses); FREE is EBUSY while any GPU maps it; doorbell BOs stay on their own GPU; a KFDIface close drops both
  directions."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  m = MockMachine("gfx1100", 2)
  a, b = (KFDIface(i, m.system) for i in range(2))
  ga, gb = (m.kernel.gpu_by_id(it.gpu_id) for it in (a, b))
  try:
    def ids_io(ioc, handle, gpu_id):
      ids = (ctypes.c_uint32 * 1)(gpu_id)
      return a._ioctl(ioc, handle=handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0)
    vram, gtt = a.alloc(1 << 16), a.alloc(PAGE, host=True)
    for mem in (vram, gtt): b.map_peer(mem, a)
    bar0 = ga.dev.pci.resources()[0][0]
    assert bar0 <= translate(gb, vram.va + 8) < bar0 + ga.dev.bar_size
    assert translate(gb, gtt.va) == translate(ga, gtt.va)   # the same host page on both GPUs
    with pytest.raises(IoctlError) as e: a._ioctl(K.AMDKFD_IOC_FREE_MEMORY_OF_GPU, handle=vram.meta[0])
    assert e.value.errno_ == errno.EBUSY                                  # still mapped on B
    ids_io(K.AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, vram.meta[0], b.gpu_id)
    assert translate(gb, vram.va) is None and translate(ga, vram.va) is not None
    ids_io(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, vram.meta[0], b.gpu_id)       # the bookkeeping in b still holds it: map again
    db = a._alloc(2 * PAGE, K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, cpu=False, host=False, map_gpu=False, exact=True)
    with pytest.raises(IoctlError) as e: ids_io(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, db.meta[0], b.gpu_id)
    assert e.value.errno_ == errno.EINVAL
    a.free(vram)                                                          # unmaps it on B first, then frees
    assert translate(gb, vram.va) is None and vram.va not in b.peer_maps
    a.close()                                                             # B loses the GTT page as well
    assert translate(gb, gtt.va) is None and not b.peer_maps
  finally:
    for it in (b, a): it.close()
    for g in m.gpus: g.dev.fini()


def test_two_devices_on_one_gpu_share_its_mappings(system):
  """Two devices of one process on the same GPU share the process's one VM there (amdkfd keeps one mapping per BO and
  GPU VM): the second device's use of the first's buffer maps nothing, and dropping that use unmaps nothing. Its
  UNMAP used to take the owner's only mapping away: the owner faulted on its own buffer, then its free was EINVAL."""
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq import Device
  d1, d2 = Device(iface=KFDIface(0, system)), Device(iface=KFDIface(0, system))
  try:
    x = np.arange(1024, dtype=np.uint32)
    buf, dst = d1.alloc(x.nbytes).copyin(x), d2.alloc(x.nbytes)
    d2.transfer(dst, buf)   # maps buf into d2
    assert np.array_equal(dst.numpy(np.uint32), x)
    d2.close()
    assert np.array_equal(buf.numpy(np.uint32), x) and translate(gpu_of(system), buf.va) is not None
    d2 = Device(iface=KFDIface(0, system))
    d2.map(buf)
    buf.free()   # peers' mappings go first: here none of its own
    assert buf.freed
  finally:
    for d in (d2, d1): d.close()


def test_a_small_bar_board_works_without_cpu_views_of_vram():
  """A board whose BAR is smaller than its VRAM (no Resizable BAR): amdkfd publishes the VRAM as a private heap and
  refuses host-visible VRAM (EINVAL). hcq's own allocations need none, so kernels and copies run (through the copy
  engine); asking for a CPU view of VRAM is a clear error, not a bare EINVAL."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  m = MockMachine("gfx1100", 1, bar_size=256 << 20)
  d = Device(iface=KFDIface(0, m.system))
  try:
    it = d.iface
    with pytest.raises(IoctlError) as e:
      K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU(it.system, it.kfd_fd, va_addr=0x7F20_0000_0000, size=PAGE, gpu_id=it.gpu_id,
                                       flags=K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC)
    assert e.value.errno_ == errno.EINVAL
    assert d.props.bar_size == 0 and d.props.vram_size == m.gpus[0].dev.vram_size
    with pytest.raises(RawGPUError, match="needs a large BAR"): d.alloc(4096, cpu_access=True)
    n = 5000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 0.5, np.float32)
    A, B, C = d.alloc(4 * n).copyin(a), d.alloc(4 * n).copyin(b), d.alloc(4 * n)
    assert A.mem.cpu is None
    d.program(kernels.path("gfx1100", "vadd").read_bytes(), "vadd_f32")(A, B, C, n, global_size=(n + 127) // 128, local_size=128)
    assert np.array_equal(C.numpy(np.float32), a + b)
  finally: d.close()


def test_a_small_bar_boards_vram_is_no_peers(own_machine):
  """amdgpu_device_is_peer_accessible: only a large-BAR owner lends its VRAM over PCIe P2P, so mapping a small-BAR
  board's VRAM BO on another GPU is EINVAL (kfd_mem_attach), whichever part of VRAM it lies in; KFDIface names the
  conditions. Its host memory maps on the peer as ever."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  exit_process(own_machine)
  m = MockMachine("gfx1100", 2, bar_size=256 << 20)
  a, b = Device(iface=KFDIface(0, m.system)), Device(iface=KFDIface(1, m.system))
  try:
    backing = lambda buf: next(o.backing for o in m.kernel.processes[0].bos.values() if o.va == buf.va)
    held = [a.alloc(64 << 20) for _ in range(3)]                               # the kernel fills invisible VRAM first
    x = a.alloc(64 << 20)
    assert backing(held[0]) >= m.gpus[0].dev.bar_size > backing(x)            # x lies inside the BAR, and is still no peer's
    with pytest.raises(IoctlError, match="large BAR") as e: b.map(x)
    assert e.value.errno_ == errno.EINVAL
    h = a.alloc(4096, host=True)
    b.map(h)
  finally:
    a.close(); b.close()
    for p in list(m.kernel.processes): p.exit()
    from rawgpu.drivers.kfd import iface
    iface._PROCESSES.pop(m.system, None)
    m.close()


def test_a_process_reaches_its_own_vm_only(system):
  """A process's queues run in a VMID of its own (amdgpu's KFD range, 8..15) whose page tables hold its BOs only: a
  VA that the kernel's VM (VMID 0, AM's tables) maps is a page fault for the process's kernels, and the
  kernel's page stays as it was. amdkfd also leaves user queues unprivileged, so an IB cannot choose VMID 0."""
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  g = gpu_of(system)
  d = Device(iface=KFDIface(0, system))
  try:
    vm = g.kernel.processes[0].vms[g]
    assert FIRST_KFD_VMID <= vm.vmid < 16
    buf = d.alloc(4096)
    assert translate(g, buf.va) is not None and g.dev.pt.translate(buf.va) is None
    va, paddr = 0x7F30_0000_0000, g.dev.valloc_phys(4096)                       # a page of the kernel's, in VMID 0 only
    g.dev.vram(paddr, 4096)[:] = b"\x5a" * 4096
    m = g.dev.pt.map(va, [(paddr + g.dev.gmc.vram_base_offset, 4096)])
    g.dev.gmc.flush_tlb()
    try:
      with pytest.raises(DeviceFault, match=f"page fault at {va:#x}"):
        d.program(kernels.path("gfx1100", "fault").read_bytes(), "fault_store")(va, 1, local_size=(64, 1, 1), wait=True)
      assert bytes(g.dev.vram(paddr, 4096)) == b"\x5a" * 4096
    finally:
      g.dev.pt.unmap(m); g.dev.gmc.flush_tlb(); g.dev.pfree(paddr)
  finally: d.close()


def test_process_exit_gives_back_its_vm(system, own_machine):
  """At exit the process's VMID context is disabled and its page tables go back to VRAM, with its BOs; the next
  process gets the VMID again."""
  from rawgpu.drivers.kfd import KFDIface
  g = gpu_of(system)
  free0 = g.dev.visible.free_bytes
  it = KFDIface(0, system)
  it.alloc(3 << 20); it.alloc(4096, host=True); it.create_ring("compute", 1 << 12)
  vmid = g.kernel.processes[0].vms[g].vmid
  cntl = g.dev.gmc.reg("gc", "regGCVM_CONTEXT%d_CNTL" % vmid)
  assert cntl.fields()["ENABLE_CONTEXT"] == 1 and g.dev.visible.free_bytes < free0
  it.close()
  exit_process(own_machine)
  assert cntl.read() == 0 and g.dev.visible.free_bytes == free0
  it = KFDIface(0, system)
  try: assert g.kernel.processes[0].vms[g].vmid == vmid
  finally: it.close()


def test_errnos_and_event_rules_as_amdkfd_has_them(system):
  """From a reading of kfd_chardev.c / kfd_events.c / amdgpu_amdkfd_gpuvm.c against the mock: ACQUIRE_VM of an
  acquired GPU with any other file is EBUSY (checked before the file); an event page on a GPU without a VM is ENODEV
  (kfd_kmap_event_page binds first); USERPTR at 0 is EINVAL; a doorbell or MMIO-remap flag checks its size whatever
  the domain; an interrupt naming a signaled event sets that one only; a wait that times out copies nothing back."""
  r = Raw(system, acquire=False)
  try:
    page = None
    assert r.errno_of(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=(r.gpu << 32) | 1, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1) == errno.ENODEV
    r.io(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=r.drm, gpu_id=r.gpu)
    assert r.errno_of(K.AMDKFD_IOC_ACQUIRE_VM, drm_fd=r.kfd, gpu_id=r.gpu) == errno.EBUSY   # (was EINVAL: "not a render node")
    alloc = lambda flags, size, **kw: r.errno_of(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=0x7F20_0000_0000, size=size, gpu_id=r.gpu, flags=flags, **kw)
    assert alloc(K.KFD_IOC_ALLOC_MEM_FLAGS_USERPTR, PAGE, mmap_offset=0) == errno.EINVAL
    assert alloc(K.KFD_IOC_ALLOC_MEM_FLAGS_GTT | K.KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, PAGE) == errno.EINVAL
    assert alloc(K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM | K.KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, 2 * PAGE) == errno.EINVAL
    page = r.alloc(0x8000)
    e1, e2 = (r.io(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=page.handle if i == 0 else 0, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
              for i in range(2))
    proc = MACHINES[id(system)].kernel.processes[0]
    slots = proc.signal_bo.backing.view.cast("Q")
    slots[e1.event_id] = slots[e2.event_id] = 1   # both written by the GPU; the interrupt names e2
    proc.signal_from_interrupt(e2.event_id)
    assert (proc.events[e1.event_id].signaled, proc.events[e2.event_id].signaled) == (False, True) and slots[e1.event_id] == 1
    proc.signal_from_interrupt(0)   # an id whose slot is not signaled: the exhaustive search finds e1
    assert proc.events[e1.event_id].signaled
    r.io(K.AMDKFD_IOC_RESET_EVENT, event_id=e1.event_id)
    arr = (K.kfd_event_data * 2)()
    arr[0].event_id, arr[1].event_id = e1.event_id, e2.event_id
    arr[1].signal_event_data.last_event_age = 1   # e2 has been set since (its age moved): it counts as fired; e1 not
    r.io(K.AMDKFD_IOC_SET_EVENT, event_id=e2.event_id)
    w = r.io(K.AMDKFD_IOC_WAIT_EVENTS, events_ptr=ctypes.addressof(arr), num_events=2, wait_for_all=1, timeout=2)
    assert w.wait_result == K.KFD_IOC_WAIT_RESULT_TIMEOUT and arr[1].signal_event_data.last_event_age == 1   # nothing copied back
  finally: r.close()


def test_apertures_count_first(raw):
  """kfd_ioctl_get_process_apertures_new: 0 nodes asks how many; more than the topology's nodes (CPU included) is EINVAL."""
  n = raw.io(K.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=0, num_of_nodes=0).num_of_nodes
  assert n == len(MACHINES[id(raw.s)].gpus)
  arr = (K.kfd_process_device_apertures * 16)()
  assert raw.errno_of(K.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=ctypes.addressof(arr), num_of_nodes=16) == errno.EINVAL
  a = raw.io(K.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=ctypes.addressof(arr), num_of_nodes=n)
  assert a.num_of_nodes == n and arr[0].gpu_id == raw.gpu


def test_a_write_to_a_read_only_bo_is_said_so(system):
  """A BO allocated without WRITABLE is mapped read-only (amdgpu's PTE flags follow the BO's); a kernel's store to it
  faults, and the fault names the cause from the interrupt's protection bits (kfd_int_process_v11.c)."""
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  d = Device(iface=KFDIface(0, system))
  try:
    ro = d.iface._alloc(4096, K.KFD_IOC_ALLOC_MEM_FLAGS_GTT, cpu=True, host=True)
    ro.cpu.cast("I")[0] = 7
    with pytest.raises(DeviceFault, match=f"page fault at {ro.va:#x} \\(write to read-only page\\)"):
      d.program(kernels.path("gfx1100", "fault").read_bytes(), "fault_store")(ro.va, 1, local_size=(64, 1, 1), wait=True)
    assert ro.cpu.cast("I")[0] == 7
  finally: d.close()


def test_a_write_to_an_unmapped_page_is_not_called_read_only():
  """An unmapped page's write sets the IV's valid and write bits (ring 40, as real dumps show): amdkfd reports
  NotPresent and ReadOnly (its prot_write), which is a write to nothing, not to a read-only page."""
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  m = MockMachine("gfx1100", 1)
  try:
    d = Device(iface=KFDIface(0, m.system))
    with pytest.raises(DeviceFault, match="page fault at 0xdead0000000 \\(page not present, a write\\)"):
      d.program(kernels.path("gfx1100", "fault").read_bytes(), "fault_store")(0xdead0000000, 1, local_size=(64, 1, 1), wait=True)
    d.close()
  finally: m.close()


def test_a_wait_with_the_event_age_sees_a_set_it_missed(raw):
  """libhsakmt passes the signal event's age it last saw: a set since then completes the wait at once even though an
  earlier wait consumed the (auto-reset) signal, and the wait returns the age now (init_event_waiter)."""
  page = raw.alloc(0x8000)
  ev = raw.io(K.AMDKFD_IOC_CREATE_EVENT, event_page_offset=page.handle, event_type=K.KFD_IOC_EVENT_SIGNAL, auto_reset=1)
  arr = (K.kfd_event_data * 1)()
  arr[0].event_id = ev.event_id
  wait = lambda t: raw.io(K.AMDKFD_IOC_WAIT_EVENTS, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=t).wait_result
  arr[0].signal_event_data.last_event_age = 1   # a new event's age
  assert wait(1) == K.KFD_IOC_WAIT_RESULT_TIMEOUT and arr[0].signal_event_data.last_event_age == 1
  raw.io(K.AMDKFD_IOC_SET_EVENT, event_id=ev.event_id)
  arr[0].signal_event_data.last_event_age = 0   # no age: the plain wait consumes the signal
  assert wait(1000) == K.KFD_IOC_WAIT_RESULT_COMPLETE and arr[0].signal_event_data.last_event_age == 0
  arr[0].signal_event_data.last_event_age = 1   # behind: completes though nothing is signaled, and says the age
  assert wait(1) == K.KFD_IOC_WAIT_RESULT_COMPLETE and arr[0].signal_event_data.last_event_age == 2
  assert wait(1) == K.KFD_IOC_WAIT_RESULT_TIMEOUT and arr[0].signal_event_data.last_event_age == 2


def test_doorbell_mmap_takes_the_whole_slice(raw):
  """kfd_doorbell_mmap maps a process's whole doorbell slice (8 KiB) or nothing; an offset naming no GPU is ENODEV."""
  off = (3 << 62) | (raw.gpu << 46)
  for size in (PAGE, 4 * PAGE):
    with pytest.raises(OSError) as e: raw.s.mmap(raw.kfd, size, off)
    assert e.value.errno == errno.EINVAL
  with pytest.raises(OSError) as e: raw.s.mmap(raw.kfd, 2 * PAGE, (3 << 62) | ((raw.gpu ^ 0xffff) << 46))
  assert e.value.errno == errno.ENODEV
  assert raw.s.mmap(raw.kfd, 2 * PAGE, off).size == 2 * PAGE


def test_the_va_is_checked_when_mapped(raw):
  """amdkfd's ALLOC takes any VA (the size page-aligned up); MAP refuses what amdgpu_vm_bo_map would: no VA, an
  unaligned one, one past max_pfn, one that overlaps another mapping of the VM. The aperture it reports is
  AMDGPU_VA_RESERVED_BOTTOM .. the GMC hole (kfd_init_apertures_v9)."""
  arr = (K.kfd_process_device_apertures * 2)()
  raw.io(K.AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, kfd_process_device_apertures_ptr=ctypes.addressof(arr), num_of_nodes=1)
  assert (arr[0].gpuvm_base, arr[0].gpuvm_limit) == (1 << 16, (1 << 47) - 1)
  def alloc(va, size=PAGE):
    return raw.io(K.AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, va_addr=va, size=size, gpu_id=raw.gpu, flags=K.KFD_IOC_ALLOC_MEM_FLAGS_GTT | K.KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE)
  ids = (ctypes.c_uint32 * 1)(raw.gpu)
  map_errno = lambda h: raw.errno_of(K.AMDKFD_IOC_MAP_MEMORY_TO_GPU, handle=h, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1, n_success=0)
  base = raw.next_va
  for va in (0, base + 8, 1 << 48):
    assert map_errno(alloc(va).handle) == errno.EINVAL
  first = alloc(base, 100)                                  # one page
  raw.map(first.handle)
  assert translate(gpu_of(raw.s), base + PAGE - 4) is not None
  assert map_errno(alloc(base).handle) == errno.EINVAL    # the same page again
  second = alloc(base + PAGE)                               # the next page is free
  raw.map(second.handle)


def test_a_sleeping_wait_is_woken_by_the_gpu(dev, monkeypatch):
  """hcq's signals on KFD also write the device's event slot and interrupt with its id, so a wait that has gone to
  sleep (WAIT_EVENTS) is woken when the work ends instead of sleeping out its slice (amdkfd wakes only events whose
  slot the GPU wrote)."""
  import threading
  flag, done = dev.alloc(4096, host=True), dev.alloc(4096, host=True)
  flag.cpu().cast("I")[0] = 0
  results = []
  it, ioctl = dev.iface, dev.iface._ioctl
  def recording(ioc, fd=None, **kw):
    r = ioctl(ioc, fd, **kw)
    if ioc is K.AMDKFD_IOC_WAIT_EVENTS and kw.get("timeout"): results.append(r.wait_result)
    return r
  monkeypatch.setattr(it, "_ioctl", recording)
  dev.program(kernels.path(dev.props.arch, "spin").read_bytes(), "spin_until")(flag, 1, done, global_size=1, local_size=1)
  threading.Timer(0.05, lambda: flag.cpu().cast("I").__setitem__(0, 1)).start()   # released once the wait sleeps
  dev.synchronize(timeout_ms=10_000)
  assert done.cpu().cast("I")[0] == 2 and results   # it slept
  # the GPU's interrupt set the device's event: a sleep took it, or (done between two sleeps) it is still set
  arr = (K.kfd_event_data * 1)()
  arr[0].event_id = it.wake[1]
  late = K.AMDKFD_IOC_WAIT_EVENTS(it.system, it.kfd_fd, events_ptr=ctypes.addressof(arr), num_events=1, wait_for_all=1, timeout=0).wait_result
  assert K.KFD_IOC_WAIT_RESULT_COMPLETE in (*results, late)


def test_a_forked_child_opens_its_own_kfd_process(system):
  """amdkfd answers EBADF to any process but the one that opened /dev/kfd (kfd_ioctl), so a forked child must not
  reuse the parent's files: it starts a KFD process of its own, and closing what it inherited frees nothing of the
  parent's (its queues and memory are the parent's). The parent's device goes on working."""
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.drivers.kfd import iface as kfd_iface
  from rawgpu.errors import IoctlError
  from rawgpu.hcq.device import Device
  dev = Device(iface=KFDIface(0, system))
  try:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: report what it saw through the pipe, then leave without running the parent's atexit work
      try:
        out = [str(len(kfd_iface._PROCESSES))]
        try: dev.iface._ioctl(kfd_iface.F.AMDKFD_IOC_GET_VERSION)
        except IoctlError as e: out.append(str(e.errno_))
        dev.iface.close()
        out.append("closed")
        os.write(w, " ".join(out).encode())
      finally: os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    seen = os.read(r, 100).decode().split()
    os.close(r)
    assert seen == ["0", str(errno.EBADF), "closed"]
    buf = dev.alloc(4096).copyin(np.arange(1024, dtype=np.uint32))
    assert np.array_equal(buf.numpy(np.uint32), np.arange(1024, dtype=np.uint32))
  finally: dev.close()


def _two_devices_of_one_process(arch: str = "gfx1100"):
  """Two MOCKKFD GPUs of one machine (one /dev/kfd: queue ids are the process's), opened as hcq Devices."""
  from conftest import need_firmware
  from rawgpu.drivers.emu.mockkfd import MockMachine
  from rawgpu.drivers.kfd import KFDIface
  from rawgpu.hcq.device import Device
  need_firmware()
  m = MockMachine(arch, 2)
  return m, Device(iface=KFDIface(1, m.system)), Device(iface=KFDIface(0, m.system))


def _hang(d):
  from rawgpu import kernels
  from rawgpu.errors import DeviceTimeout
  spin = d.program(kernels.path(d.props.arch, "spin").read_bytes())
  flag, done = d.alloc(4, host=True), d.alloc(4, host=True)
  flag.cpu()[:4] = bytes(4)
  spin(flag, 7, done, global_size=1, local_size=32)
  with pytest.raises(DeviceTimeout): d.synchronize(timeout_ms=200)


@pytest.mark.parametrize("fails", ["destroy", "create"])
def test_recover_when_the_kernel_cannot_restart_a_hung_queue(monkeypatch, fails):
  """amdkfd tears a queue down even where its preemption times out (pqm_destroy_queue returns ETIME after
  uninit_queue), and refuses new queues while a reset is pending (EIO). Either way recover() fails with a clear
  error, never names the freed queue id again (another device of the process may have it by then), and close()
  leaves the other device's queues alone; where only the create failed, a later recover() makes the queue."""
  from rawgpu.drivers.emu.mockkfd import kernel
  m, b, a = _two_devices_of_one_process()
  try:
    fill = kernels.path("gfx1100", "fill").read_bytes()
    pa, pb = a.program(fill, "fill_u32"), b.program(fill, "fill_u32")
    x, y = a.alloc(64), b.alloc(64)
    _hang(a)
    which = int(K.AMDKFD_IOC_DESTROY_QUEUE if fails == "destroy" else K.AMDKFD_IOC_CREATE_QUEUE)
    real = kernel.HANDLERS[which]
    def once(self, arg):
      monkeypatch.setitem(kernel.HANDLERS, which, real)
      if fails == "destroy":
        real(self, arg)   # torn down all the same
        raise kernel.fail(errno.ETIME, "queue preemption timed out (test)")
      raise kernel.fail(errno.EIO, "the scheduler is hung, a reset is pending (test)")
    monkeypatch.setitem(kernel.HANDLERS, which, once)
    with pytest.raises(DeviceFault if fails == "destroy" else IoctlError, match="could not preempt the hung (compute|sdma) queue" if fails == "destroy" else "CREATE_QUEUE"):
      a.recover()
    pb(y, 3, 16, local_size=16, wait=True)   # B's queues: their ids may be the one A's queue had
    if fails == "create":
      a.recover()
      pa(x, 4, 16, local_size=16, wait=True)
      assert list(x.numpy(np.uint32)) == [4] * 16
    a.close()
    pb(y, 5, 16, local_size=16, wait=True)
    assert list(y.numpy(np.uint32)) == [5] * 16
  finally:
    for d in (a, b): d.close()
    m.close()
