"""Build the prebuilt code objects: `python -m rawgpu.kernels.build [--check] [--targets gfx1100,...]`.

OpenCL C (kernels/*.cl) goes through clang-19, hand-written assembly (kernels/<name>.<family>.s) through llvm-mc-19,
and both through ld.lld-19 into kernels/<target>/<name>.hsaco. The exact commands, the tool versions and the
sha256 of every output go to kernels/BUILD.json. The build is deterministic: sources are compiled from inside
kernels/ by relative name (no paths end up in the objects), so `--check` rebuilds and compares byte for byte.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rawgpu.kernels import KERNELS_DIR, TARGETS

MANIFEST = KERNELS_DIR / "BUILD.json"
# Assembly is written per ISA family; a kernel is built for a target when a source for its family exists.
FAMILY = {"gfx1100": "gfx11", "gfx1201": "gfx12", "gfx942": "gfx9"}
CL_FLAGS = ("-target", "amdgcn-amd-amdhsa", "-nogpulib", "-O2", "-ffp-contract=off", "-Werror", "-c")
CL_STD = {"generic.cl": ("-cl-std=CL2.0",)}   # sources that need more than OpenCL C 1.2 (generic pointers)
ASM_FLAGS = ("-triple=amdgcn-amd-amdhsa", "-filetype=obj")
TMP = "{tmp}"  # placeholder for the scratch directory in recorded commands


def tools() -> dict[str, str]:
  """Tool names, overridable for machines where they are spelled differently."""
  return {"clang": os.environ.get("RAWGPU_CLANG", "clang-19"), "llvm-mc": os.environ.get("RAWGPU_LLVM_MC", "llvm-mc-19"),
          "ld.lld": os.environ.get("RAWGPU_LD_LLD", "ld.lld-19")}


def missing_tools() -> list[str]:
  return [t for t in tools().values() if shutil.which(t) is None]


def tool_versions() -> dict[str, str]:
  out = {}
  for key, exe in tools().items():
    text = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    out[key] = next((line.strip() for line in text.splitlines() if re.search(r"\d+\.\d+", line)), text.strip())
  return out


@dataclass(frozen=True)
class Job:
  target: str
  name: str
  sources: tuple[str, ...]  # relative to kernels/, the first one is compiled, the rest are its includes
  commands: tuple[tuple[str, ...], ...]  # argv lists with TMP where the scratch directory goes

  @property
  def output(self) -> str: return f"{self.target}/{self.name}.hsaco"


def _includes(src: str) -> list[str]:
  return re.findall(r'^\s*#\s*include\s+"([^"]+)"', (KERNELS_DIR / src).read_text(), re.M)


def jobs(targets: tuple[str, ...] = TARGETS) -> list[Job]:
  t = tools()
  out = []
  for target in targets:
    for src in sorted(p.name for p in KERNELS_DIR.glob("*.cl")):
      name, obj = src[:-3], f"{TMP}/{src[:-3]}.{target}.o"
      cmds = ((t["clang"], *CL_FLAGS, *CL_STD.get(src, ()), f"-mcpu={target}", src, "-o", obj),
              (t["ld.lld"], "-shared", "--build-id=none", obj, "-o", f"{TMP}/{name}.{target}.hsaco"))
      out.append(Job(target, name, (src, *_includes(src)), cmds))
    for src in sorted(p.name for p in KERNELS_DIR.glob(f"*.{FAMILY[target]}.s")):
      name = src[:-len(f".{FAMILY[target]}.s")]
      obj = f"{TMP}/{name}.{target}.o"
      cmds = ((t["llvm-mc"], *ASM_FLAGS, f"-mcpu={target}", src, "-o", obj),
              (t["ld.lld"], "-shared", "--build-id=none", obj, "-o", f"{TMP}/{name}.{target}.hsaco"))
      out.append(Job(target, name, (src,), cmds))
  return out


def kernel_names(data: bytes) -> list[str]:
  """Kernel names as the dynamic symbol table lists their descriptors (<name>.kd)."""
  import io
  from elftools.elf.elffile import ELFFile
  dynsym = ELFFile(io.BytesIO(data)).get_section_by_name(".dynsym")
  return sorted(s.name[:-3] for s in dynsym.iter_symbols() if s.name.endswith(".kd"))


def run_job(job: Job, tmp: Path) -> bytes:
  for cmd in job.commands:
    argv = [a.replace(TMP, str(tmp)) for a in cmd]
    res = subprocess.run(argv, cwd=KERNELS_DIR, capture_output=True, text=True)
    if res.returncode != 0:
      raise RuntimeError(f"building {job.output} failed: {' '.join(argv)}\n{res.stderr}")
  return (tmp / f"{job.name}.{job.target}.hsaco").read_bytes()


def build(targets: tuple[str, ...] = TARGETS) -> dict[str, bytes]:
  """Build every code object for targets into memory: {'<target>/<name>.hsaco': bytes}."""
  with tempfile.TemporaryDirectory(prefix="rawgpu-kernels-") as d:
    return {job.output: run_job(job, Path(d)) for job in jobs(targets)}


def manifest_for(built: dict[str, bytes], targets: tuple[str, ...] = TARGETS) -> dict:
  objects = {}
  for job in jobs(targets):
    data = built[job.output]
    objects[job.output] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "kernels": kernel_names(data),
                           "sources": {s: hashlib.sha256((KERNELS_DIR / s).read_bytes()).hexdigest() for s in job.sources},
                           "commands": [shlex.join(c) for c in job.commands]}
  if set(targets) != set(TARGETS) and MANIFEST.exists():  # a partial rebuild keeps the other targets' entries
    old = json.loads(MANIFEST.read_text())["objects"]
    objects = {**{k: v for k, v in old.items() if k.split("/")[0] not in targets}, **objects}
  return {"note": f"built by `python -m rawgpu.kernels.build`; commands run in kernels/, {TMP} is a scratch directory",
          "tools": tool_versions(), "targets": list(TARGETS), "objects": objects}


def write(built: dict[str, bytes], targets: tuple[str, ...] = TARGETS) -> None:
  for target in targets:  # drop stale outputs so the directory is exactly what the manifest lists
    for old in (KERNELS_DIR / target).glob("*.hsaco"):
      if f"{target}/{old.name}" not in built: old.unlink()
  for rel, data in built.items():
    (KERNELS_DIR / rel).parent.mkdir(exist_ok=True)
    (KERNELS_DIR / rel).write_bytes(data)
  MANIFEST.write_text(json.dumps(manifest_for(built, targets), indent=1, sort_keys=True) + "\n")


def check(built: dict[str, bytes]) -> list[str]:
  """Differences between a fresh build and the committed files, as messages (empty when identical)."""
  problems = []
  for rel, data in built.items():
    path = KERNELS_DIR / rel
    if not path.exists(): problems.append(f"{rel}: not committed")
    elif path.read_bytes() != data: problems.append(f"{rel}: committed file differs from a fresh build")
  return problems


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m rawgpu.kernels.build", description=__doc__.splitlines()[0])
  ap.add_argument("--check", action="store_true", help="rebuild and compare with the committed files; write nothing")
  ap.add_argument("--targets", default=",".join(TARGETS), help="comma-separated targets (default: %(default)s)")
  args = ap.parse_args(argv)
  targets = tuple(t for t in args.targets.split(",") if t)
  if bad := [t for t in targets if t not in FAMILY]:
    print(f"unknown target(s) {bad}; known: {', '.join(FAMILY)}", file=sys.stderr)
    return 2
  if missing := missing_tools():
    print(f"missing tools: {', '.join(missing)} (Debian: apt-get install clang-19 lld-19 llvm-19)", file=sys.stderr)
    return 2
  built = build(targets)
  if args.check:
    problems = check(built)
    for p in problems: print(p, file=sys.stderr)
    print(f"{len(built)} code objects, {len(problems)} differ")
    return 1 if problems else 0
  write(built, targets)
  print(f"wrote {len(built)} code objects and {MANIFEST.name}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
