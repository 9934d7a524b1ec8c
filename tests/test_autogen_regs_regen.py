"""Regenerating the register tables from the headers gives the committed files, byte for byte."""
import importlib.util
import zlib
from pathlib import Path

import pytest

GEN = Path(__file__).resolve().parents[1] / "autogen" / "regs" / "gen.py"
_spec = importlib.util.spec_from_file_location("rawgpu_regs_gen", GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

ROOT = gen.find_linux_root()


@pytest.mark.skipif(ROOT is None, reason="kernel asic_reg headers not found: run `python -m rawgpu.autogen fetch` "
                                         "or set RAWGPU_LINUX_SRC")
def test_regenerate_is_byte_identical(tmp_path, capsys):
  assert gen.main(["--out", str(tmp_path)]) == 0
  committed = {p.name: p.read_bytes() for p in GEN.parent.glob("*.bin")}
  fresh = {p.name: p.read_bytes() for p in tmp_path.glob("*.bin")}
  assert sorted(fresh) == sorted(committed), "stale or missing tables: regenerate with autogen/regs/gen.py"
  for name in sorted(fresh):
    if fresh[name] == committed[name]: continue
    same_text = zlib.decompress(fresh[name]) == zlib.decompress(committed[name])
    pytest.fail(f"{name} differs from a fresh generation " +
                (f"only in its compression (zlib {zlib.ZLIB_RUNTIME_VERSION} here)" if same_text
                 else "in content: the headers or the generator changed; rerun autogen/regs/gen.py and commit"))
