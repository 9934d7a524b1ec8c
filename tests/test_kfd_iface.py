"""KFDIface against a fake sysfs topology (real files, the kernel's formats) and a fake /dev/kfd whose ioctls answer
from a script: every error path, the open sequence, and what the queues are created with."""
import errno, os
import pytest
from rawgpu.autogen import kfd as K
from rawgpu.drivers.kfd import KFDIface
from rawgpu.drivers.kfd.sizes import queue_sizes
from rawgpu.drivers.mmio import MemMMIO
from rawgpu.drivers.system import DirProvider, System
from rawgpu.errors import DeviceFault, DeviceNotFound, IoctlError, PermissionProblem, RawGPUError

from rawgpu.autogen import amdgpu_drm as D
NAMES = {int(v): k for k, v in vars(K).items() if k.startswith("AMDKFD_IOC_")} | {int(D.DRM_IOCTL_AMDGPU_INFO): "DRM_IOCTL_AMDGPU_INFO"}
GPU_ID = 0x1a2b


def gpu_props(gfxv=110000, location=0xc100, simds=192, **extra):
  p = {"cpu_cores_count": 0, "simd_count": simds, "mem_banks_count": 1, "lds_size_in_kb": 64, "wave_front_size": 32, "array_count": 12,
       "simd_arrays_per_engine": 2, "cu_per_simd_array": 8, "simd_per_cu": 2, "gfx_target_version": gfxv, "vendor_id": 0x1002,
       "device_id": 0x744c, "location_id": location, "domain": 0, "drm_render_minor": 128, "num_xcc": 1, "local_mem_size": 24 << 30}
  p.update(extra)
  return p


def make_sysfs(root, gpus):
  """gpus: list of (gpu_id, props). Node 0 is the CPU, as on every real machine."""
  topo = os.path.join(root, "topology", "nodes")
  def w(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f: f.write(text)
  w(f"{topo}/0/gpu_id", "0\n"); w(f"{topo}/0/properties", "cpu_cores_count 16\nsimd_count 0\n")
  for i, (gid, props) in enumerate(gpus, 1):
    w(f"{topo}/{i}/gpu_id", f"{gid}\n")
    w(f"{topo}/{i}/properties", "".join(f"{k} {v}\n" for k, v in props.items()))
    w(f"{topo}/{i}/mem_banks/0/properties", f"heap_type 1\nsize_in_bytes {props['local_mem_size']}\nflags 0\n")
    ip = os.path.join(root, "drm", f"renderD{props['drm_render_minor']}", "device", "ip_discovery", "die", "0")
    gfxv = props["gfx_target_version"]
    for name, ver, bases in (("GC", (gfxv // 10000, gfxv // 100 % 100, gfxv % 100), (0x1260, 0xa000, 0x1c000)), ("SDMA0", (6, 0, 0), (0x1260,))):
      for f, v in zip(("major", "minor", "revision"), ver): w(f"{ip}/{name}/0/{f}", f"{v}\n")
      w(f"{ip}/{name}/0/base_addr", "".join(f"0x{b:08X}\n" for b in bases))


class FakeKFD:
  """/dev/kfd and /dev/dri: records every ioctl; `fail` maps an ioctl name to the errno it returns."""
  def __init__(self, version=(1, 17), fail=None, fault=None, deny=False, xnack=0):
    self.version, self.fail, self.fault, self.deny, self.xnack = version, dict(fail or {}), fault, deny, xnack
    self.fire: dict[int, dict] = {}   # event id -> the exception data the next WAIT_EVENTS copies out for it (then it is reset)
    self.waited: list[list[int]] = []   # the event ids of each WAIT_EVENTS
    self.calls, self.args, self.handles, self.events, self.types = [], {}, 0, 0, {}
    self.opened, self.closed, self.maps = [], [], []

  # Provider
  def open(self, rel, flags):
    if self.deny: raise PermissionError(13, "Permission denied")
    self.opened.append(rel)
    return FakeFile(self, rel)
  def listdir(self, rel): return ["renderD128", "renderD129"] if rel in ("", "dri") else []
  def readlink(self, rel): raise OSError(22, "no link")
  def exists(self, rel): return True


class FakeFile:
  def __init__(self, k, rel): self.k, self.rel = k, rel
  def read(self, n, off): return b""
  def write(self, d, off): return 0
  def close(self): self.k.closed.append(self.rel)
  def mmap(self, size, offset):
    self.k.maps.append((self.rel, size, offset))
    return MemMMIO(bytearray(size))

  def ioctl(self, request, a):
    k, name = self.k, NAMES[int(request)]
    k.calls.append(name)
    try: self._answer(k, name, a)
    finally: k.args.setdefault(name, []).append(type(a).from_buffer_copy(a))   # what the caller saw afterwards
    return 0

  def _answer(self, k, name, a):
    if name in k.fail: raise OSError(k.fail[name], os.strerror(k.fail[name]))
    if name == "AMDKFD_IOC_GET_VERSION": a.major_version, a.minor_version = k.version
    elif name == "AMDKFD_IOC_SET_XNACK_MODE": a.xnack_enabled = k.xnack if a.xnack_enabled < 0 else a.xnack_enabled
    elif name == "DRM_IOCTL_AMDGPU_INFO": pass   # DEV_INFO: a discrete GPU (ids_flags 0, as the caller's zeroed buffer says)
    elif name == "AMDKFD_IOC_GET_PROCESS_APERTURES_NEW":
      if a.num_of_nodes == 0: a.num_of_nodes = 1; return   # the count: this process's one GPU
      if a.num_of_nodes > 2: raise OSError(errno.EINVAL, "more nodes than the topology's two (CPU and GPU)")
      arr = (K.kfd_process_device_apertures * a.num_of_nodes).from_address(a.kfd_process_device_apertures_ptr)
      arr[0].gpu_id, arr[0].gpuvm_base, arr[0].gpuvm_limit = GPU_ID, 0x1000000, (1 << 47) - 1
      a.num_of_nodes = 1
    elif name == "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU":
      k.handles += 1
      a.handle, a.mmap_offset = (a.gpu_id << 32) | k.handles, k.handles << 32
    elif name in ("AMDKFD_IOC_MAP_MEMORY_TO_GPU", "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU"): a.n_success = a.n_devices   # as amdkfd counts them
    elif name == "AMDKFD_IOC_CREATE_EVENT":
      k.events += 1
      a.event_id = k.events
      k.types[a.event_id] = a.event_type
    elif name == "AMDKFD_IOC_CREATE_QUEUE":
      a.queue_id, a.doorbell_offset = 3, (3 << 62) | (a.gpu_id << 46) | 0x18
    elif name == "AMDKFD_IOC_WAIT_EVENTS":
      data = (K.kfd_event_data * a.num_events).from_address(a.events_ptr)
      k.waited.append([d.event_id for d in data])
      for d in data:
        for field, value in k.fire.pop(d.event_id, {}).items():
          part = d.hw_exception_data if k.types[d.event_id] == K.KFD_IOC_EVENT_HW_EXCEPTION else d.memory_exception_data
          setattr(part.failure if field == "imprecise" else part, field, value)
      if k.fault is not None:
        for d in data:
          if d.event_id == 2:   # the memory event (second created)
            d.memory_exception_data.gpu_id, d.memory_exception_data.va = GPU_ID, k.fault
            d.memory_exception_data.failure.NotPresent = 1
      a.wait_result = K.KFD_IOC_WAIT_RESULT_TIMEOUT


@pytest.fixture
def machine(tmp_path):
  def build(gpus=((GPU_ID, gpu_props()),), **kw):
    make_sysfs(str(tmp_path), list(gpus))
    s = System()
    fake = FakeKFD(**kw)
    s.mount("/dev/kfd", fake)
    s.mount("/dev/dri", fake)
    s.mount("/sys/devices/virtual/kfd/kfd", DirProvider(str(tmp_path)))
    s.mount("/sys/class/drm", DirProvider(str(tmp_path / "drm")))
    return s, fake
  return build


def test_open_sequence_and_props(machine):
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    assert fake.calls[:2] == ["AMDKFD_IOC_GET_VERSION", "AMDKFD_IOC_ACQUIRE_VM"] and "AMDKFD_IOC_RUNTIME_ENABLE" in fake.calls
    acq = fake.args["AMDKFD_IOC_ACQUIRE_VM"][0]
    assert acq.gpu_id == GPU_ID and acq.drm_fd == next(fd for fd, f in s.vfds.items() if f.rel == "renderD128")
    p = it.props
    assert (p.arch, p.iface, p.compute_units, p.pci_bus) == ("gfx1100", "KFD", 96, "0000:c1:00.0")
    assert p.ip_versions["gc"] == (11, 0, 0) and p.ip_bases["gc"] == (0x1260, 0xa000, 0x1c000) and p.vram_size == 24 << 30
    types = [a.event_type for a in fake.args["AMDKFD_IOC_CREATE_EVENT"]]
    assert types == [K.KFD_IOC_EVENT_SIGNAL, K.KFD_IOC_EVENT_MEMORY, K.KFD_IOC_EVENT_HW_EXCEPTION]
    assert fake.args["AMDKFD_IOC_CREATE_EVENT"][0].event_page_offset != 0   # the dGPU event page goes with the first one
  finally: it.close()
  # amdkfd keeps the process's state until it exits, and its VM takes only the render-node file first given: the
  # files stay open, and a device opened again uses them
  assert fake.closed == [] and sorted(fake.opened) == ["", "renderD128"]
  KFDIface(0, s).close()
  assert sorted(fake.opened) == ["", "renderD128"] and fake.calls.count("AMDKFD_IOC_ACQUIRE_VM") == 1
  assert sum(1 for e in fake.args["AMDKFD_IOC_CREATE_EVENT"] if e.event_page_offset) == 1   # one event page per process


def test_the_target_id_says_what_the_kernel_runs(machine):
  """gfx942 as ROCr names it: sramecc from the topology's HSA_CAP_SRAM_EDCSUPPORTED, xnack from the process's mode
  (SET_XNACK_MODE -1 asks); a kernel without the ioctl (ENOTTY) leaves xnack unknown, a node without a capability
  line sramecc. RDNA has neither feature: nothing is asked."""
  mi300 = lambda **extra: ((GPU_ID, gpu_props(gfxv=90402, wave_front_size=64, **extra)),)
  for gpus, kw, want in ((mi300(capability=K.HSA_CAP_SRAM_EDCSUPPORTED), {}, "gfx942:sramecc+:xnack-"),
                         (mi300(capability=0), {"xnack": 1}, "gfx942:sramecc-:xnack+"),
                         (mi300(capability=K.HSA_CAP_SRAM_EDCSUPPORTED), {"fail": {"AMDKFD_IOC_SET_XNACK_MODE": errno.ENOTTY}}, "gfx942:sramecc+"),
                         (mi300(), {}, "gfx942:xnack-")):
    s, fake = machine(gpus, **kw)
    it = KFDIface(0, s)
    try: assert it.props.target == want and it.props.arch == "gfx942"
    finally: it.close()
  s, fake = machine()
  it = KFDIface(0, s)
  try: assert it.props.target == "gfx1100" and "AMDKFD_IOC_SET_XNACK_MODE" not in fake.calls
  finally: it.close()


def test_another_runtime_in_the_process_is_named(machine):
  """amdkfd gives a process one VM per GPU: ACQUIRE_VM with a second render-node file is EBUSY (another runtime took
  it), and one signal-event page (a second is EINVAL). RUNTIME_ENABLE's EEXIST (queues made before the runtime was
  enabled) leaves the queues working: opened."""
  from rawgpu.errors import DeviceBusy
  s, fake = machine(fail={"AMDKFD_IOC_ACQUIRE_VM": errno.EBUSY})
  with pytest.raises(DeviceBusy, match="another runtime in this process"): KFDIface(0, s)
  s, fake = machine(fail={"AMDKFD_IOC_RUNTIME_ENABLE": errno.EEXIST})
  KFDIface(0, s).close()
  s, fake = machine(fail={"AMDKFD_IOC_RUNTIME_ENABLE": errno.EPERM})
  with pytest.raises(IoctlError): KFDIface(0, s)
  s, fake = machine(fail={"AMDKFD_IOC_CREATE_EVENT": errno.EINVAL})   # kfd_kmap_event_page: a page is set already
  with pytest.raises(DeviceBusy, match="signal-event page"): KFDIface(0, s)
  assert fake.calls.count("AMDKFD_IOC_FREE_MEMORY_OF_GPU") == 1   # the page it made is given back


def test_old_minor_skips_runtime_enable(machine):
  s, fake = machine(version=(1, 12))
  KFDIface(0, s).close()
  assert "AMDKFD_IOC_RUNTIME_ENABLE" not in fake.calls


@pytest.mark.parametrize("version", [(2, 0), (0, 9), (1, 2)])
def test_version_mismatch(machine, version):
  s, fake = machine(version=version)
  with pytest.raises(DeviceNotFound, match=r"KFD ioctl interface .* not supported"): KFDIface(0, s)
  assert fake.calls == ["AMDKFD_IOC_GET_VERSION"] and fake.closed == [""]


def test_no_dev_kfd(tmp_path):
  s = System()
  s.mount("/dev/kfd", DirProvider(str(tmp_path / "missing")))   # /dev/kfd absent, whatever this machine has
  with pytest.raises(DeviceNotFound, match="amdgpu kernel module is not loaded or the kernel is not ROCm-capable"): KFDIface(0, s)
  import rawgpu.drivers.select as sel
  with pytest.raises(DeviceNotFound, match="no /dev/kfd"): sel._amd_kfd(sel.parse_dev("KFD+AMD"), s)


def test_permission_denied(machine):
  s, _ = machine(deny=True)
  with pytest.raises(PermissionProblem, match="render and video groups"): KFDIface(0, s)


def test_unsupported_gpu(machine):
  s, fake = machine(gpus=[(GPU_ID, gpu_props(gfxv=90010))])
  with pytest.raises(DeviceNotFound, match="gfx90a: unsupported GPU"): KFDIface(0, s)
  assert "AMDKFD_IOC_ACQUIRE_VM" not in fake.calls


def test_mi300_in_a_multi_xcc_partition_is_refused(machine):
  """gfx942 nodes are driven one XCC per node (CPX); an SPX node (8 XCCs behind one queue) is a clear refusal."""
  s, fake = machine(gpus=[(GPU_ID, gpu_props(gfxv=90402, num_xcc=8, wave_front_size=64, simd_per_cu=4))])
  with pytest.raises(DeviceNotFound, match="gfx942.*partition of 8 XCCs.*CPX"): KFDIface(0, s)
  assert "AMDKFD_IOC_ACQUIRE_VM" not in fake.calls


def test_no_gpu(machine):
  s, _ = machine(gpus=[])
  with pytest.raises(DeviceNotFound, match="lists no GPU"): KFDIface(0, s)


def test_nodes_in_pci_order(machine, tmp_path):
  # topology node numbers need not follow the bus; KFD:N must be PCI:N
  s, fake = machine(gpus=[(0x2222, gpu_props(location=0xc300, drm_render_minor=129)), (GPU_ID, gpu_props(location=0xc100))])
  from rawgpu.drivers.kfd.topology import gpu_nodes
  assert [n.gpu_id for n in gpu_nodes(s)] == [GPU_ID, 0x2222]
  with pytest.raises(DeviceNotFound, match="index 2 asked for, but only 2"): KFDIface(2, s)


def test_out_of_memory(machine):
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    fake.fail["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"] = errno.ENOMEM
    with pytest.raises(IoctlError, match="out of VRAM") as e: it.alloc(1 << 30)
    assert e.value.errno_ == errno.ENOMEM
    with pytest.raises(IoctlError, match=r"out of system memory \(GTT\)"): it.alloc(4096, host=True)
  finally: it.close()


def test_alloc_flags_and_free(machine):
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    n0 = len(fake.args["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"])
    v = it.alloc(5000)
    it.alloc(3 << 20, host=True, uncached=True)
    av, ah = fake.args["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"][n0:]
    assert av.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_VRAM and av.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC and av.size == 8192
    assert ah.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_GTT and ah.flags & K.KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED and ah.size == 4 << 20
    assert av.va_addr % 4096 == 0 and ah.va_addr % (2 << 20) == 0 and (av.va_addr + av.size <= ah.va_addr or ah.va_addr + ah.size <= av.va_addr)
    assert v.size == 5000 and v.cpu is not None and ("renderD128", 8192, av.mmap_offset) in fake.maps
    it.free(v)
    assert fake.args["AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU"][-1].handle == fake.args["AMDKFD_IOC_FREE_MEMORY_OF_GPU"][-1].handle
  finally: it.close()


def test_compute_queue_arguments(machine):
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    ring = it.create_ring("compute", 1 << 16)
    q = fake.args["AMDKFD_IOC_CREATE_QUEUE"][0]
    want = queue_sizes(110000, 192, 2, 12, 2, 1)
    assert q.queue_type == K.KFD_IOC_QUEUE_TYPE_COMPUTE and q.ring_size == 1 << 16 and q.ring_base_address == ring.ring.va
    assert (q.ctl_stack_size, q.ctx_save_restore_size, q.eop_buffer_size) == (want.ctl_stack, want.cwsr, want.eop)
    allocs = {a.va_addr: a for a in fake.args["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"]}
    assert allocs[q.ctx_save_restore_address].size == want.cwsr_alloc and allocs[q.ring_base_address].size == 1 << 16
    assert allocs[q.read_pointer_address].size == 4096 and q.write_pointer_address == q.read_pointer_address + 8
    assert ring.wptr_unit == 4
    # the doorbell page is mapped through /dev/kfd at the offset's page; the queue's doorbell is 0x18 into it
    assert ("", 8192, q.doorbell_offset & ~0x1fff) in [(r, z, o) for r, z, o in fake.maps]
    sd = it.create_ring("sdma", 1 << 14)
    assert fake.args["AMDKFD_IOC_CREATE_QUEUE"][1].queue_type == K.KFD_IOC_QUEUE_TYPE_SDMA and sd.wptr_unit == 1
  finally: it.close()
  assert fake.calls.count("AMDKFD_IOC_DESTROY_QUEUE") == 2


def test_kernel_published_sizes_win(machine):
  s, fake = machine(gpus=[(GPU_ID, gpu_props(ctl_stack_size=0x5000, cwsr_size=0x2000000))])
  it = KFDIface(0, s)
  try:
    it.create_ring("compute", 4096)
    q = fake.args["AMDKFD_IOC_CREATE_QUEUE"][0]
    assert q.ctl_stack_size == 0x5000 and q.ctx_save_restore_size >= 0x2000000
  finally: it.close()


def test_queue_creation_refused(machine):
  s, fake = machine(fail={"AMDKFD_IOC_CREATE_QUEUE": errno.EINVAL})
  it = KFDIface(0, s)
  try:
    n = len(fake.args["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"])
    with pytest.raises(IoctlError, match="refused a compute queue") as e: it.create_ring("compute", 1 << 12)
    assert e.value.errno_ == errno.EINVAL
    assert len(fake.args.get("AMDKFD_IOC_FREE_MEMORY_OF_GPU", [])) == len(fake.args["AMDKFD_IOC_ALLOC_MEMORY_OF_GPU"]) - n   # nothing leaks
    with pytest.raises(RawGPUError, match="power of two"): it.create_ring("sdma", 3000)
  finally: it.close()


def test_fault_event_becomes_device_fault(machine):
  s, fake = machine(fault=0x7f0012345000)
  it = KFDIface(0, s)
  try:
    with pytest.raises(DeviceFault, match="0x7f0012345000.*page not present"): it.sleep(5)
    w = fake.args["AMDKFD_IOC_WAIT_EVENTS"][-1]
    assert w.timeout == 5 and w.num_events == 3 and w.wait_for_all == 0
    n = len(fake.args["AMDKFD_IOC_WAIT_EVENTS"])
    with pytest.raises(DeviceFault, match="0x7f0012345000.*stopped this process's queues"): it.check_faults()   # said again
    assert len(fake.args["AMDKFD_IOC_WAIT_EVENTS"]) == n   # without asking the kernel: the queues do not come back
  finally: it.close()


def test_a_fault_check_leaves_the_wake_up_to_the_sleeper(machine):
  # the signal event resets when a wait returns it: a fault check that waited on it too would take a GPU's wake-up
  # from the sleep() that follows, which then sleeps its whole timeout
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    it.sleep(1); it.check_faults()
    assert fake.waited[-2] == [it.signal_event, it.memory_event, it.hw_event] and fake.waited[-1] == [it.memory_event, it.hw_event]
  finally: it.close()


OTHER_GPU = 0x3c4d


@pytest.mark.parametrize("cause, said", [(K.KFD_HW_EXCEPTION_GPU_HANG, "after a hang"), (K.KFD_HW_EXCEPTION_ECC, "after an ECC error")])
def test_a_reset_of_this_gpu_is_said_and_stays_said(machine, cause, said):
  """kfd_signal_reset_event sets every HW exception event of the process, naming the GPU reset (its queues and VRAM
  are gone); a reset of another GPU is not this device's."""
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    fake.fire[it.hw_event] = {"gpu_id": OTHER_GPU, "memory_lost": 1, "reset_cause": cause}
    it.check_faults()                                                            # another node's reset
    fake.fire[it.hw_event] = {"gpu_id": GPU_ID, "memory_lost": 1, "reset_cause": cause}
    with pytest.raises(DeviceFault, match=f"reset the whole GPU {said}, and VRAM contents were lost.*close it and open it again"): it.sleep(1)
    n = len(fake.waited)
    with pytest.raises(DeviceFault, match=said): it.check_faults()                # the event fired once; the device stays gone
    with pytest.raises(DeviceFault, match=said): it.sleep(1)
    assert len(fake.waited) == n
  finally: it.close()


@pytest.mark.parametrize("error, said", [(K.KFD_MEM_ERR_POISON_CONSUMED, "poisoned memory consumed"), (K.KFD_MEM_ERR_SRAM_ECC, "an uncorrectable ECC error")])
def test_a_memory_error_is_not_called_a_page_fault(machine, error, said):
  # kfd_signal_poison_consumed_event / an ECC reset: the memory event names the GPU and the error, no address
  s, fake = machine()
  it = KFDIface(0, s)
  try:
    fake.fire[it.memory_event] = {"gpu_id": OTHER_GPU, "ErrorType": error, "imprecise": 1}
    it.check_faults()
    fake.fire[it.memory_event] = {"gpu_id": GPU_ID, "ErrorType": error, "imprecise": 1}
    with pytest.raises(DeviceFault, match=f"memory error \\({said}") as e: it.check_faults()
    assert "page fault" not in str(e.value)
  finally: it.close()
  with pytest.raises(DeviceFault, match="earlier in this process.*restart the process"): KFDIface(0, s)
  s, fake = machine()   # another process
  it = KFDIface(0, s)
  try:
    fake.fire[it.memory_event] = {"gpu_id": GPU_ID, "ErrorType": error, "imprecise": 1}   # with the reset it comes with
    fake.fire[it.hw_event] = {"gpu_id": GPU_ID, "memory_lost": 1, "reset_cause": K.KFD_HW_EXCEPTION_ECC}
    with pytest.raises(DeviceFault, match=f"reset the whole GPU after an ECC error \\({said}.*\\), and VRAM contents were lost"): it.check_faults()
    with pytest.raises(DeviceFault, match="reset the whole GPU"): it.check_faults()
  finally: it.close()


def test_two_ifaces_share_the_process(machine):
  # amdkfd keeps one process per task: a second render-node ACQUIRE_VM would be EBUSY, a second event page EINVAL
  s, fake = machine()
  a, b = KFDIface(0, s), KFDIface(0, s)
  try:
    assert fake.opened.count("") == 1 and fake.opened.count("renderD128") == 1 and fake.calls.count("AMDKFD_IOC_ACQUIRE_VM") == 1
    assert sum(1 for e in fake.args["AMDKFD_IOC_CREATE_EVENT"] if e.event_page_offset) == 1
    a.close()
    assert "" not in fake.closed
  finally: b.close()
  assert fake.closed == []   # the process's files outlive its devices (test_open_sequence_and_props)


def test_ip_discovery_is_read_from_the_pci_device_first(tmp_path):
  """amdgpu creates ip_discovery under the PCI device only: an MI300 partition past the first has a render node whose
  `device` is a platform device (amdgpu_xcp) without it. The PCI device's is read; the render node's is the fallback;
  with neither, the error names both."""
  from rawgpu.drivers.kfd import topology
  def write(root, gc):
    d = root / "ip_discovery" / "die" / "0" / "GC" / "0"
    d.mkdir(parents=True)
    for f, v in zip(("major", "minor", "revision"), gc): (d / f).write_text(f"{v}\n")
    (d / "base_addr").write_text("0x00001260\n")
  write(tmp_path / "pci" / "0000:c1:00.0", (9, 4, 3))
  (tmp_path / "drm" / "renderD129" / "device").mkdir(parents=True)   # a partition's platform device: no ip_discovery
  write(tmp_path / "drm" / "renderD128" / "device", (11, 0, 0))
  s = System()
  s.mount("/sys/bus/pci/devices", DirProvider(str(tmp_path / "pci")))
  s.mount("/sys/class/drm", DirProvider(str(tmp_path / "drm")))
  assert topology.ip_discovery(s, 129, "0000:c1:00.0")[0]["gc"] == (9, 4, 3)
  assert topology.ip_discovery(s, 128, "0000:c2:00.0")[0]["gc"] == (11, 0, 0)    # no PCI entry: the render node's
  with pytest.raises(RawGPUError, match="0000:c3:00.0/ip_discovery.*renderD129"): topology.ip_discovery(s, 129, "0000:c3:00.0")
