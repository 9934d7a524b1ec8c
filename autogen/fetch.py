"""Fetch the third-party headers the generator reads, from pinned Debian packages, into a local cache.

Nothing here runs at import time of the bindings: only `python -m rawgpu.autogen fetch` and the generator use it.
Cache layout: <cache>/headers/<root>/<path inside the upstream tree>, cache = $RAWGPU_CACHE or ~/.cache/rawgpu.
The apt state (private sources, lists, downloaded .debs) lives in <cache>/apt-headers so neither the system's apt
nor other rawgpu fetchers' apt folders are touched.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from rawgpu.errors import RawGPUError

LOCK_PATH = pathlib.Path(__file__).with_name("headers.lock")


@dataclasses.dataclass(frozen=True)
class Package:
  source: str             # name used by header_root()
  root: str               # folder under <cache>/headers
  name: str               # Debian package (binary) or source package name
  version: str            # pinned version
  kind: str               # "deb": binary package; "orig": upstream .orig tarball of a source package
  inner: str              # deb: the tarball inside the deb (or "" for the deb's own files); orig: ""
  strip: str              # prefix removed from member names
  members: tuple[str, ...]  # globs on stripped names: * stays inside a folder, ** crosses folders


LINUX_MEMBERS = (
  "drivers/gpu/drm/amd/include/*.h",
  "drivers/gpu/drm/amd/include/ivsrcid/**",
  "drivers/gpu/drm/amd/include/asic_reg/gc/*", "drivers/gpu/drm/amd/include/asic_reg/mmhub/*",
  "drivers/gpu/drm/amd/include/asic_reg/nbio/*", "drivers/gpu/drm/amd/include/asic_reg/nbif/*",
  "drivers/gpu/drm/amd/include/asic_reg/oss/*", "drivers/gpu/drm/amd/include/asic_reg/mp/*",
  "drivers/gpu/drm/amd/include/asic_reg/hdp/*", "drivers/gpu/drm/amd/include/asic_reg/athub/*",
  "drivers/gpu/drm/amd/include/asic_reg/smuio/*", "drivers/gpu/drm/amd/include/asic_reg/sdma*/*",
  "drivers/gpu/drm/amd/include/asic_reg/lsdma/*", "drivers/gpu/drm/amd/include/asic_reg/thm/*",
  "drivers/gpu/drm/amd/include/asic_reg/umc/*", "drivers/gpu/drm/amd/include/asic_reg/gmc/*",
  "drivers/gpu/drm/amd/include/asic_reg/df/*", "drivers/gpu/drm/amd/include/asic_reg/vcn/*",
  "drivers/gpu/drm/amd/amdgpu/*.h",
  "drivers/gpu/drm/amd/pm/swsmu/inc/**",
  "drivers/gpu/drm/amd/amdkfd/*.h",
  # driver sources the tests read facts from (queue size rules, boot sequences, IP tables)
  "drivers/gpu/drm/amd/amdkfd/kfd_queue.c",
  "drivers/gpu/drm/amd/amdgpu/amdgpu_discovery.c", "drivers/gpu/drm/amd/amdgpu/soc21.c", "drivers/gpu/drm/amd/amdgpu/soc24.c",
  "drivers/gpu/drm/amd/amdgpu/nbio_v4_3.c", "drivers/gpu/drm/amd/amdgpu/nbif_v6_3_1.c", "drivers/gpu/drm/amd/amdgpu/gfx_v11_0.c",
  "drivers/gpu/drm/amd/amdgpu/gfx_v12_0.c", "drivers/gpu/drm/amd/amdgpu/gmc_v10_0.c", "drivers/gpu/drm/amd/amdgpu/gmc_v11_0.c",
  "drivers/gpu/drm/amd/amdgpu/gmc_v12_0.c", "drivers/gpu/drm/amd/amdgpu/gfx_v9_4_3.c",
  "drivers/gpu/drm/amd/pm/swsmu/smu13/smu_v13_0_0_ppt.c", "drivers/gpu/drm/amd/pm/swsmu/smu14/smu_v14_0_2_ppt.c",
  "include/uapi/linux/kfd_ioctl.h", "include/uapi/linux/kfd_sysfs.h", "include/uapi/linux/pci_regs.h",
  "include/uapi/linux/vfio.h", "include/uapi/linux/ioctl.h", "include/uapi/linux/types.h",
  "include/uapi/linux/const.h", "include/uapi/linux/stddef.h", "include/uapi/linux/posix_types.h",
  "include/uapi/asm-generic/*", "include/uapi/drm/amdgpu_drm.h", "include/uapi/drm/drm.h",
  "include/uapi/drm/drm_mode.h",
  "drivers/net/ethernet/broadcom/bnxt/bnxt_hsi.h",
)

PACKAGES = (
  Package("linux", "linux-6.12", "linux-source-6.12", "6.12.118-1~deb12u1", "deb",
          "./usr/src/linux-source-6.12.tar.xz", "linux-source-6.12/", LINUX_MEMBERS),
  Package("llvm", "llvm-19", "llvm-19-dev", "1:19.1.7-3~deb12u1", "deb", "", "./usr/include/llvm-19/",
          ("llvm/Support/AMDHSAKernelDescriptor.h", "llvm/BinaryFormat/ELF.h", "llvm/BinaryFormat/ELFRelocs/AMDGPU.def")),
  Package("rocr", "rocr-5.2", "libhsa-runtime-dev", "5.2.3-3", "deb", "", "./usr/include/hsa/",
          ("hsa.h", "hsa_ext_amd.h", "amd_hsa_*.h")),
  Package("mesa", "mesa", "mesa", "25.0.7-2~bpo12+1", "orig", "", "mesa-25.0.7/",
          ("src/amd/registers/*.json", "src/amd/common/ac_pm4.h", "src/amd/common/sid.h", "src/nouveau/headers/**")),
  Package("nvidia", "nvidia", "nvidia-open-gpu-kernel-modules", "535.261.03-1", "orig", "",
          "NVIDIA-kernel-module-source-535.261.03/",
          ("src/common/sdk/nvidia/inc/**", "kernel-open/common/inc/**", "kernel-open/nvidia-uvm/uvm_ioctl.h",
           "kernel-open/nvidia-uvm/uvm_linux_ioctl.h", "kernel-open/nvidia-uvm/uvm_types.h", "src/nvidia/arch/nvalloc/unix/include/**",
           "src/common/inc/swref/published/**", "src/nvidia/inc/kernel/gpu/gsp/**",
           "src/nvidia/generated/g_rpc-structures.h", "src/nvidia/generated/g_sdk-structures.h",
           "src/nvidia/kernel/inc/vgpu/**")),
)


# Inputs no package registry carries, shipped beside the project (see ../shared/third_party/README.md): the archive
# is taken from RAWGPU_THIRD_PARTY or the shared folder next to the repository; fetch skips it when absent.
LOCAL = {"nv580": ("nvidia-580", "nvidia-headers.tar.xz",
                   "NVIDIA open-gpu-kernel-modules 580.142 + open-gpu-doc c8607fe headers")}


def _local_archive(name: str) -> pathlib.Path:
  base = os.environ.get("RAWGPU_THIRD_PARTY") or pathlib.Path(__file__).resolve().parent.parent.parent / "shared" / "third_party"
  return pathlib.Path(base) / name


def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("RAWGPU_CACHE") or pathlib.Path.home() / ".cache" / "rawgpu")


def _package(source: str) -> Package:
  for p in PACKAGES:
    if p.source == source: return p
  raise RawGPUError(f"unknown header source {source!r}; known: {', '.join(p.source for p in PACKAGES)}")


def header_root(source: str) -> pathlib.Path:
  """The folder holding the fetched headers of `source` ("linux", "llvm", "rocr", "mesa", "nvidia", "nv580")."""
  if source in LOCAL:
    root = cache_dir() / "headers" / LOCAL[source][0]
    if not (root / ".complete").exists():
      raise RawGPUError(f"{LOCAL[source][2]} are not in {root}; put {LOCAL[source][1]} in "
                        f"{_local_archive(LOCAL[source][1]).parent} (or set RAWGPU_THIRD_PARTY) and run "
                        f"python -m rawgpu.autogen fetch")
    return root
  p = _package(source)
  root = cache_dir() / "headers" / p.root
  if not (root / ".complete").exists():
    raise RawGPUError(f"headers of {p.name} {p.version} are not in {root}; run python -m rawgpu.autogen fetch")
  return root


# ---- apt plumbing (a private APT_CONFIG, sources derived from the machine's own debian.sources)

SOURCES_FILE = pathlib.Path("/etc/apt/sources.list.d/debian.sources")


def _uris() -> tuple[str, str]:
  uris = [ln.split()[1] for ln in SOURCES_FILE.read_text().splitlines() if ln.startswith("URIs:")]
  if not uris: raise RawGPUError(f"no URIs: line in {SOURCES_FILE}; cannot locate a Debian mirror")
  main = next((u for u in uris if "security" not in u), uris[0])
  sec = next((u for u in uris if "security" in u), uris[-1])
  return main, sec


def _apt_setup(adir: pathlib.Path) -> tuple[dict[str, str], bool]:
  """Write the private apt config; returns the environment and whether the sources changed (lists are stale)."""
  for d in ("lists/partial", "cache/archives/partial", "parts"): (adir / d).mkdir(parents=True, exist_ok=True)
  main, sec = _uris()
  comp = "Components: main contrib non-free non-free-firmware\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
  sources = (f"Types: deb deb-src\nURIs: {main}\nSuites: bookworm bookworm-updates bookworm-backports\n{comp}\n"
             f"Types: deb deb-src\nURIs: {sec}\nSuites: bookworm-security\n{comp}")
  sfile = adir / "parts" / "extra.sources"
  changed = not sfile.exists() or sfile.read_text() != sources
  if changed: sfile.write_text(sources)
  (adir / "apt.conf").write_text(
    f'Dir::Etc::SourceList "/dev/null";\nDir::Etc::SourceParts "{adir}/parts";\n'
    f'Dir::State::Lists "{adir}/lists";\nDir::Cache "{adir}/cache";\n')
  return dict(os.environ, APT_CONFIG=str(adir / "apt.conf"), LC_ALL="C"), changed


def _run(cmd: list[str], env: dict[str, str], cwd: pathlib.Path | None = None) -> str:
  r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
  if r.returncode != 0:
    raise RawGPUError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
  return r.stdout


def _available(p: Package, env: dict[str, str]) -> list[str]:
  if p.kind == "deb":
    out = _run(["apt-cache", "madison", p.name], env)
    return [ln.split("|")[1].strip() for ln in out.splitlines() if "|" in ln and "Sources" not in ln]
  out = _run(["apt-cache", "showsrc", p.name], env)
  return [ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Version:")]


def _pick_version(p: Package, env: dict[str, str]) -> str:
  avail = _available(p, env)
  if p.version in avail: return p.version
  if not avail: raise RawGPUError(f"package {p.name} is not in the archive any more; update autogen/fetch.py")
  # same upstream series first (e.g. 6.12.x), else the newest the archive has
  series = [v for v in avail if v.split("-")[0].rsplit(".", 1)[0] == p.version.split("-")[0].rsplit(".", 1)[0]]
  v = (series or avail)[0]
  print(f"  pinned {p.name} {p.version} has left the archive; taking {v} instead", flush=True)
  return v


def _download(p: Package, version: str, adir: pathlib.Path, env: dict[str, str]) -> pathlib.Path:
  dl = adir / "downloads"
  dl.mkdir(exist_ok=True)
  upstream = version.split(":")[-1].rsplit("-", 1)[0]
  if p.kind == "deb":
    hits = sorted(dl.glob(f"{p.name}_*{version.split(':')[-1].replace('~', '*')}_*.deb"))
    if not hits:
      _run(["apt-get", "download", f"{p.name}={version}"], env, cwd=dl)
      hits = sorted(dl.glob(f"{p.name}_*{version.split(':')[-1].replace('~', '*')}_*.deb"))
  else:
    hits = sorted(h for h in dl.glob(f"{p.name}_{upstream}.orig.tar.*") if h.suffix != ".asc")
    if not hits:
      # apt-get source exits non-zero when a companion file 404s; the .orig tarball is what we need
      r = subprocess.run(["apt-get", "source", "--download-only", f"{p.name}={version}"], env=env, cwd=dl,
                         capture_output=True, text=True)
      hits = sorted(h for h in dl.glob(f"{p.name}_{upstream}.orig.tar.*") if h.suffix != ".asc")
      if not hits: raise RawGPUError(f"apt-get source {p.name}={version} gave no .orig tarball: {r.stderr[-1500:]}")
  if not hits: raise RawGPUError(f"apt-get download {p.name}={version} produced no file in {dl}")
  return hits[-1]


@functools.cache
def _pattern(members: tuple[str, ...]) -> re.Pattern:
  def one(g: str) -> str:
    return "".join(".*" if part == "**" else "[^/]*" if part == "*" else "[^/]" if part == "?" else re.escape(part)
                   for part in re.split(r"(\*\*|\*|\?)", g))
  return re.compile("|".join(f"(?:{one(m)})" for m in members) + r"\Z")


def _want(p: Package, name: str) -> str | None:
  if name.startswith("./") and not p.strip.startswith("./"): name = name[2:]
  if not name.startswith(p.strip): return None
  rel = name[len(p.strip):]
  return rel if _pattern(p.members).match(rel) else None


def _extract_tar(p: Package, fobj, mode: str, dest: pathlib.Path) -> int:
  n = 0
  with tarfile.open(fileobj=fobj, mode=mode) as tf:
    for m in tf:
      if not m.isfile(): continue
      rel = _want(p, m.name)
      if rel is None: continue
      out = dest / rel
      out.parent.mkdir(parents=True, exist_ok=True)
      out.write_bytes(tf.extractfile(m).read())
      n += 1
  return n


def _extract(p: Package, archive: pathlib.Path, dest: pathlib.Path) -> int:
  if p.kind == "orig":
    with open(archive, "rb") as f: return _extract_tar(p, f, "r|*", dest)
  fsys = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(archive)], stdout=subprocess.PIPE)
  try:
    if not p.inner: return _extract_tar(p, fsys.stdout, "r|", dest)
    with tarfile.open(fileobj=fsys.stdout, mode="r|") as outer:
      for m in outer:
        if m.name == p.inner:
          # the inner .tar.xz goes to the xz tool: multi-threaded and faster than Python's lzma
          xz = subprocess.Popen(["xz", "-dc", "-T0"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
          import threading
          src = outer.extractfile(m)
          def pump() -> None:
            shutil.copyfileobj(src, xz.stdin, 1 << 20)
            xz.stdin.close()
          t = threading.Thread(target=pump, daemon=True)
          t.start()
          n = _extract_tar(p, xz.stdout, "r|", dest)
          t.join()
          xz.wait()
          return n
    raise RawGPUError(f"{archive.name} has no {p.inner}")
  finally:
    fsys.stdout.close()
    fsys.wait()


def _hash_tree(root: pathlib.Path) -> dict[str, str]:
  return {f.relative_to(root).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
          for f in sorted(root.rglob("*")) if f.is_file() and not f.name.startswith(".")}


def read_lock(path: pathlib.Path = LOCK_PATH) -> tuple[dict[str, str], dict[str, str]]:
  """(source -> "package version", "root/path" -> sha256) from a lock file."""
  pkgs, files = {}, {}
  if not path.exists(): return pkgs, files
  for ln in path.read_text().splitlines():
    if ln.startswith("package "):
      _, src, name, ver = ln.split(maxsplit=3)
      pkgs[src] = f"{name} {ver}"
    elif ln and not ln.startswith("#"):
      h, f = ln.split(None, 1)
      files[f] = h
  return pkgs, files


def write_lock(pkgs: dict[str, str], files: dict[str, str], path: pathlib.Path) -> None:
  lines = ["# written by python -m rawgpu.autogen fetch --write-lock: pinned packages and sha256 of every header"]
  lines += [f"package {s} {v}" for s, v in sorted(pkgs.items())]
  lines += [f"{h}  {f}" for f, h in sorted(files.items())]
  path.write_text("\n".join(lines) + "\n")


def fetch(sources: list[str] | None = None, write_repo_lock: bool = False, force: bool = False) -> int:
  """Download and extract the headers; returns the number of lock mismatches (0 = matches autogen/headers.lock)."""
  t0 = time.monotonic()
  cache = cache_dir()
  adir = cache / "apt-headers"
  env, changed = _apt_setup(adir)
  lists = adir / "lists"
  releases = list(lists.glob("*InRelease"))
  if force or changed or not releases or time.time() - max(f.stat().st_mtime for f in releases) > 86400:
    print(f"apt-get update (private lists in {lists})", flush=True)
    _run(["apt-get", "update"], env)
  lock_pkgs, lock_files = read_lock()
  new_pkgs, new_files = {}, {}
  bad = 0
  todo = [p for p in PACKAGES if not sources or p.source in sources]

  def unpack(p: Package, want: str, dest: pathlib.Path, archive: pathlib.Path) -> None:
    t = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix=".extract-"))
    try:
      n = _extract(p, archive, tmp)
      if n == 0: raise RawGPUError(f"no wanted files in {archive.name}; update the member patterns in autogen/fetch.py")
      if dest.exists(): shutil.rmtree(dest)
      dest.parent.mkdir(parents=True, exist_ok=True)
      tmp.rename(dest)
    finally:
      if tmp.exists(): shutil.rmtree(tmp)
    (dest / ".complete").write_text(want + "\n")
    print(f"  extracted {n} files of {p.name} into {dest} in {time.monotonic() - t:.1f} s", flush=True)

  plans = []  # downloads run one after another; each extraction starts as soon as its download is done
  from concurrent.futures import ThreadPoolExecutor
  with ThreadPoolExecutor(max_workers=2) as pool:  # two cores is the common case
    jobs = []
    for p in todo:
      dest = cache / "headers" / p.root
      version = _pick_version(p, env)
      # the stamp names the version and the member patterns: changing either extracts again
      want = f"{version} {hashlib.sha256(repr(p.members).encode()).hexdigest()[:16]}"
      stamp = dest / ".complete"
      archive = None
      if stamp.exists() and stamp.read_text().strip() == want and not force:
        print(f"{p.name} {version}: already extracted in {dest}", flush=True)
      else:
        t = time.monotonic()
        archive = _download(p, version, adir, env)
        print(f"{p.name} {version}: {archive.name} ({archive.stat().st_size >> 20} MiB) in "
              f"{time.monotonic() - t:.1f} s", flush=True)
        jobs.append(pool.submit(unpack, p, want, dest, archive))
      plans.append((p, version, dest))
    for j in jobs: j.result()

  for p, version, dest in plans:
    new_pkgs[p.source] = f"{p.name} {version}"
    hashes = {f"{p.root}/{k}": v for k, v in _hash_tree(dest).items()}
    new_files.update(hashes)
    if p.source in lock_pkgs and lock_pkgs[p.source] != new_pkgs[p.source]:
      print(f"  note: autogen/headers.lock pins {lock_pkgs[p.source]}", flush=True)
    diff = [f for f in sorted(set(hashes) | {f for f in lock_files if f.startswith(p.root + "/")})
            if lock_files.get(f) != hashes.get(f)]
    if lock_files and diff:
      bad += len(diff)
      print(f"  {len(diff)} headers of {p.name} differ from autogen/headers.lock, e.g. {', '.join(diff[:3])}", flush=True)
  kept_roots: list[str] = []  # sources we could not fetch keep their lock entries
  for src, (rootname, fname, what) in LOCAL.items():
    if sources and src not in sources: continue
    arc = _local_archive(fname)
    dest = cache / "headers" / rootname
    if not arc.exists():
      print(f"{what}: {arc} not found, skipped (the modules generated from it are committed)", flush=True)
      kept_roots.append(rootname + "/")
      continue
    digest = hashlib.sha256(arc.read_bytes()).hexdigest()
    if not ((dest / ".complete").exists() and (dest / ".complete").read_text().strip() == digest) or force:
      t = time.monotonic()
      tmp = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix=".extract-"))
      try:
        with tarfile.open(arc) as tf:
          n = 0
          for m in tf:
            if m.isfile() and m.name.endswith((".h", ".md", ".txt")):
              out = tmp / m.name
              out.parent.mkdir(parents=True, exist_ok=True)
              out.write_bytes(tf.extractfile(m).read())
              n += 1
        if dest.exists(): shutil.rmtree(dest)
        tmp.rename(dest)
      finally:
        if tmp.exists(): shutil.rmtree(tmp)
      (dest / ".complete").write_text(digest + "\n")
      print(f"{what}: extracted {n} files from {arc.name} in {time.monotonic() - t:.1f} s", flush=True)
    else:
      print(f"{what}: already extracted in {dest}", flush=True)
    new_pkgs[src] = f"{fname} sha256:{digest}"
    new_files.update({f"{rootname}/{k}": v for k, v in _hash_tree(dest).items()})
  write_lock(new_pkgs, new_files, cache / "headers" / "headers.lock")
  if write_repo_lock:
    # keep the entries of sources not fetched this time (not asked for, or their archive is absent)
    done = set(new_pkgs)
    done_roots = tuple(r for r in ((LOCAL[s][0] if s in LOCAL else _package(s).root) + "/" for s in done)
                       if r not in kept_roots)
    new_pkgs = {**{k: v for k, v in lock_pkgs.items() if k not in done}, **new_pkgs}
    new_files = {**{k: v for k, v in lock_files.items() if not k.startswith(done_roots)}, **new_files}
    write_lock(new_pkgs, new_files, LOCK_PATH)
    print(f"wrote {LOCK_PATH}", flush=True)
  print(f"fetch done in {time.monotonic() - t0:.1f} s; headers in {cache / 'headers'}", flush=True)
  return bad


def main(argv: list[str]) -> int:
  import argparse
  ap = argparse.ArgumentParser(prog="python -m rawgpu.autogen fetch", description="fetch pinned third-party headers")
  ap.add_argument("sources", nargs="*", help=f"subset of: {' '.join([p.source for p in PACKAGES] + list(LOCAL))}")
  ap.add_argument("--write-lock", action="store_true", help="rewrite autogen/headers.lock from what was fetched")
  ap.add_argument("--force", action="store_true", help="apt-get update and extract again")
  a = ap.parse_args(argv)
  try:
    bad = fetch(a.sources or None, a.write_lock, a.force)
  except RawGPUError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  if bad: print(f"warning: {bad} headers differ from autogen/headers.lock (regenerate and review)", file=sys.stderr)
  return 0
