"""The offline parts of `python -m rawgpu.autogen fetch`: member selection, lock file, missing-header errors."""
import glob
import pathlib

import pytest

from rawgpu.autogen import fetch
from rawgpu.errors import RawGPUError


def test_member_patterns_select_what_glob_selects(tmp_path):
  # the oracle is Python's glob on a real tree: "*" stays in a folder, "**" crosses folders
  files = ["a/x.h", "a/y.c", "a/sub/z.h", "a/sub/deep/w.h", "b/x.h", "a.h", "a/sub/x.json"]
  for f in files:
    (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / f).write_text("")
  for pats in [("a/*.h",), ("a/**",), ("a/sub/*",), ("*.h",), ("a/*.h", "b/*"), ("a/sub/deep/w.h",), ("a/?.h",)]:
    pkg = fetch.Package("t", "t", "t", "1", "deb", "", "top/", pats)
    want = set()
    for p in pats:
      want |= {str(pathlib.Path(g).relative_to(tmp_path)) for g in glob.glob(str(tmp_path / p), recursive=True)
               if pathlib.Path(g).is_file()}
    got = {f for f in files if fetch._want(pkg, "top/" + f) == f}
    assert got == want, pats
    assert fetch._want(pkg, "./top/" + files[0]) == fetch._want(pkg, "top/" + files[0])
    assert fetch._want(pkg, "other/a/x.h") is None


def test_lock_round_trip(tmp_path):
  pkgs = {"linux": "linux-source-6.12 6.12.118-1~deb12u1", "nv580": "nvidia-headers.tar.xz sha256:ab12"}
  files = {"linux-6.12/include/uapi/linux/kfd_ioctl.h": "0" * 64, "nvidia-580/x/y.h": "f" * 64}
  fetch.write_lock(pkgs, files, tmp_path / "lock")
  assert fetch.read_lock(tmp_path / "lock") == (pkgs, files)


def test_committed_lock_pins_every_package():
  pkgs, files = fetch.read_lock()
  for p in fetch.PACKAGES:
    assert pkgs.get(p.source) == f"{p.name} {p.version}", p.source
    assert any(f.startswith(p.root + "/") for f in files), p.source


def test_missing_headers_say_what_to_run(tmp_path, monkeypatch):
  monkeypatch.setenv("RAWGPU_CACHE", str(tmp_path))
  with pytest.raises(RawGPUError, match=r"linux-source-6\.12 .*run python -m rawgpu.autogen fetch"):
    fetch.header_root("linux")
  with pytest.raises(RawGPUError, match="nvidia-headers.tar.xz"):
    fetch.header_root("nv580")
  with pytest.raises(RawGPUError, match="unknown header source"):
    fetch.header_root("nope")


def test_mirror_uris_come_from_the_machine_sources(tmp_path, monkeypatch):
  src = tmp_path / "debian.sources"
  src.write_text("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm\n\n"
                 "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n")
  monkeypatch.setattr(fetch, "SOURCES_FILE", src)
  assert fetch._uris() == ("http://mirror.example/debian", "http://mirror.example/debian-security")
  env, changed = fetch._apt_setup(tmp_path / "apt")
  text = (tmp_path / "apt" / "parts" / "extra.sources").read_text()
  assert changed and "URIs: http://mirror.example/debian\n" in text and "bookworm-backports" in text
  assert env["APT_CONFIG"] == str(tmp_path / "apt" / "apt.conf")
  assert fetch._apt_setup(tmp_path / "apt")[1] is False  # unchanged sources: the lists stay valid
