"""The CWSR / control-stack / EOP sizes KFDIface asks for, against amdkfd's own C (kfd_queue.c of Linux 6.12)
compiled with gcc: CREATE_QUEUE on 6.10+ refuses any other ctl_stack_size and any smaller save area."""
import os, re, shutil, subprocess
from pathlib import Path
import pytest
from rawgpu.drivers.kfd.sizes import queue_sizes

REL = "drivers/gpu/drm/amd/amdkfd/kfd_queue.c"


def _kernel_source() -> Path | None:
  cands = [os.environ.get("RAWGPU_LINUX_SRC", ""), "/tmp/rg/linux/linux-source-6.12", "/usr/src/linux-source-6.12"]
  try:
    from rawgpu.autogen.fetch import header_root
    cands.append(str(header_root("linux")))
  except Exception: pass
  for c in cands:
    if c and (Path(c) / REL).is_file(): return Path(c) / REL
  return None


SHIM = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
typedef uint32_t u32;
#define PAGE_SIZE 4096u
#define ALIGN(x, a) ((((x) + (a) - 1) / (a)) * (a))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define NUM_XCC(m) ((u32)__builtin_popcount(m))
struct kfd_node_properties { u32 gfx_target_version, simd_count, simd_per_cu, array_count, simd_arrays_per_engine,
                             ctl_stack_size, debug_memory_size, cwsr_size, eop_buffer_size; };
struct kfd_node { u32 xcc_mask; };
struct kfd_topology_device { struct kfd_node_properties node_props; struct kfd_node *gpu; };
"""
MAIN = r"""
int main(int argc, char **argv) {
  struct kfd_node node = { (1u << atoi(argv[6])) - 1 };
  struct kfd_topology_device d = { { atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]) }, &node };
  kfd_queue_ctx_save_restore_size(&d);
  printf("%u %u %u %u\n", d.node_props.ctl_stack_size, d.node_props.cwsr_size, d.node_props.debug_memory_size, d.node_props.eop_buffer_size);
  return 0;
}
"""


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
  src = _kernel_source()
  if src is None: pytest.skip(f"Linux 6.12 source ({REL}) not found: set RAWGPU_LINUX_SRC to an extracted linux-source-6.12")
  if shutil.which("gcc") is None: pytest.skip("gcc not installed")
  text = src.read_text()
  start = text.index("#define SGPR_SIZE_PER_CU")
  m = re.search(r"void kfd_queue_ctx_save_restore_size\(.*?\n}\n", text[start:], re.S)
  assert m, "kfd_queue_ctx_save_restore_size not found in the kernel source"
  d = tmp_path_factory.mktemp("kfdsizes")
  (d / "k.c").write_text(SHIM + text[start:start + m.end()] + MAIN)
  subprocess.run(["gcc", "-O1", "-o", str(d / "k"), str(d / "k.c")], check=True, capture_output=True)
  def run(*args: int) -> tuple[int, ...]:
    return tuple(int(x) for x in subprocess.run([str(d / "k"), *map(str, args)], check=True, capture_output=True, text=True).stdout.split())
  return run


# gfx target version, SIMDs, SIMDs per CU, arrays, arrays per engine, XCCs: RDNA3/4 boards, gfx10 (0x7000 clamp), CDNA, Polaris
CASES = [(110000, 192, 2, 12, 2, 1), (110001, 120, 2, 6, 2, 1), (110002, 64, 2, 4, 2, 1), (120001, 128, 2, 8, 2, 1), (120000, 64, 2, 4, 2, 1),
         (100100, 80, 2, 4, 2, 1), (103000, 160, 2, 8, 2, 1), (90010, 440, 4, 8, 1, 1), (90402, 1216, 4, 32, 1, 8), (80002, 128, 4, 4, 1, 1),
         (80003, 144, 4, 4, 1, 1), (90000, 256, 4, 4, 1, 1), (70000, 40, 4, 2, 1, 1)]


@pytest.mark.parametrize("case", CASES)
def test_sizes_match_kernel(oracle, case):
  gfxv, simds, per_cu, arrays, per_engine, xccs = case
  s = queue_sizes(gfxv, simds, per_cu, arrays, per_engine, xccs)
  ctl, cwsr, dbg, eop = oracle(gfxv, simds, per_cu, arrays, per_engine, xccs)
  if gfxv < 80001: assert (ctl, cwsr) == (0, 0) and (s.ctl_stack, s.cwsr) == (0, 0); return
  assert (s.ctl_stack, s.cwsr, s.debug_memory, s.eop) == (ctl, cwsr, dbg, eop)


def test_cwsr_allocation_is_what_acquire_buffers_expects():
  # kfd_queue_acquire_buffers: ALIGN((ctx_save_restore_size + debug_memory_size) * NUM_XCC, PAGE)
  s = queue_sizes(90402, 1216, 4, 32, 1, 8)
  assert s.cwsr_alloc % 4096 == 0 and s.cwsr_alloc >= (s.cwsr + s.debug_memory) * 8 > s.cwsr_alloc - 4096
