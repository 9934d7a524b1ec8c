"""The `rawgpu` command: devices, demo, bench, decode, tinygrad."""
from __future__ import annotations
import argparse, json, os, re, sys
from rawgpu.errors import RawGPUError
from rawgpu.tools.command import UsageError, positive_int, run_command

EPILOG = """examples:
  rawgpu devices              every GPU found and how it can be driven
  rawgpu devices --json       the same as JSON
  rawgpu demo                 vector add + matmul on the first device (the emulated GPU when none is present)
  rawgpu demo --dev MOCKPCI+AMD::gfx1201
  rawgpu bench --quick        every benchmark at tiny sizes, few repeats (see rawgpu bench --help)
  rawgpu decode pm4 ring.bin  PM4 packets of a dump, one per line (also sdma; isa for code objects)
  rawgpu tinygrad train.py    a tinygrad program, unchanged, on rawgpu's device

exit codes: 0 ok, 1 failure (the message says why), 2 bad usage, 3 not available in this build
"""


def cmd_devices(args) -> int:
  from rawgpu.tools.inventory import inventory
  found = inventory()
  if args.json: print(json.dumps(found, indent=2))
  elif not found: print("no GPU found (the emulated one is always available: DEV=MOCKPCI+AMD)")
  else:
    for d in found: print(f"{d['bus']}  {d['vendor']} {d['device_id']:#06x} {d['name']:<28} driver={d['driver'] or '-':<8} " + "  ".join(f"{k}:{'yes' if v is True else v}" for k, v in d["ifaces"].items()))
  return 0


BENCH_EPILOG = """benchmarks: launch, signal, copy, alloc and boot measure --dev; emu measures the emulated GPU (MOCKPCI);
import needs no device. Each runs warm-up calls, then repeats, and reports median, min and max with the
machine's description. A benchmark whose prerequisite is missing reports "skipped: <reason>", never a number.

examples:
  rawgpu bench --quick                          every benchmark at tiny sizes, few repeats
  rawgpu bench --dev MOCKPCI+AMD --json out.json
  rawgpu bench --only import emu

progress goes to stderr, one line per benchmark; with --json - the table goes there too. Ctrl-C stops the run and
still prints (and writes) what was measured.

exit codes: 0 every figure measured or skipped with its reason, 1 a benchmark failed (stderr says which), 2 bad usage
(incl. a DEV that does not parse), 130 interrupted
"""

DECODE_EPILOG = """input: a binary file of little-endian dwords (hang reports dump them and print the command), or text
holding 32-bit hex words (0x1234abcd or 1234abcd, optionally with offset: prefixes); `-` reads stdin. isa takes an
AMDGPU code object (.hsaco) or raw instruction bytes (--arch). A malformed packet or an undecodable word is marked
"!! <why>" and makes the exit code 1.

examples:
  rawgpu decode pm4 ring.bin
  rawgpu decode sdma dump.txt --json
  rawgpu decode pm4 ring.txt --arch gfx942     MI300 rings: gfx9 PM4 forms (sdma: SDMA 4.4 layouts)
  rawgpu decode isa kernels/gfx1100/vadd.hsaco
  rawgpu decode isa code.bin --arch gfx1201
  rawgpu decode isa kernels/gfx942/reduce.hsaco      CDNA3 code objects too

exit codes: 0 ok, 1 failure (unreadable or malformed input), 2 bad usage (incl. an unknown --arch), 3 the decoder is
not in this build
"""


def cmd_demo(args) -> int:
  from rawgpu.tools import demo
  res = demo.run(args.dev, args.size)   # (not $DEV: tinygrad's too, where AMD or CPU mean other things)
  if args.json:
    print(json.dumps(res, indent=2))
    return 0 if res["vadd_ok"] and res["matmul_ok"] else 1
  return demo.report(res)


def cmd_tinygrad(args) -> int:
  from rawgpu.hcq import tinygrad
  from rawgpu.tools.demo import open_demo_device
  if args.script is None: raise UsageError("give the tinygrad script to run: rawgpu tinygrad SCRIPT [ARGS...]")
  tinygrad._tinygrad()   # installed, and the version this runtime implements, before a device boots
  if not os.path.isfile(args.script): raise RawGPUError(f"no such script: {args.script}")
  dev, emulated = open_demo_device(args.dev)
  print(f"rawgpu tinygrad: RAWGPU is {dev}{' (emulated GPU, not real hardware)' if emulated or dev.props.emulated else ''}", file=sys.stderr)
  try: return tinygrad.run_script(dev, args.script, args.args)
  finally:
    if not dev.closed: dev.close()


def cmd_bench(args) -> int:
  from rawgpu.drivers.devspec import parse_dev
  from rawgpu.errors import DeviceSpecError
  from rawgpu.tools.bench import bench_main
  if args.dev is not None:   # a typo is bad usage, not a device that is absent here (which skips, as a $DEV
    try: parse_dev(args.dev) # that is tinygrad's does)
    except DeviceSpecError as e: raise UsageError(str(e)) from None
  return bench_main(args.dev or os.environ.get("DEV") or None, args.json, args.only, args.quick)


def _read_input(path: str) -> bytes:
  if path == "-": return sys.stdin.buffer.read()
  try:
    with open(path, "rb") as f: return f.read()
  except OSError as e: raise RawGPUError(f"cannot read {path}: {e.strerror}") from e


_HEX_TEXT = set("0123456789abcdefABCDEFxX,:[]")   # what a text of hex words holds, besides spaces


def _words(data: bytes) -> list[int]:
  """Hex words from text, else the bytes as little-endian dwords."""
  try: text = data.decode("ascii")
  except UnicodeDecodeError: text = None
  if text is not None and text.strip() and all(c in _HEX_TEXT or c.isspace() for c in text):
    try: words = [int(t, 16) for t in text.replace(",", " ").replace("[", " ").replace("]", " ").split() if not t.endswith(":")]
    except ValueError as e: raise RawGPUError(f"not a list of hex words: {e}") from e
    if wide := [w for w in words if w >> 32]: raise RawGPUError(f"not a list of 32-bit hex words: {wide[0]:#x} is wider")
    if not words: raise RawGPUError("nothing to decode: the text holds no hex words")
    return words
  if text is not None and all(c.isprintable() or c in "\t\r\n" for c in text):   # (a binary dump is never all text)
    bad = next(t for t in text.split() if not all(c in _HEX_TEXT for c in t))
    raise RawGPUError(f"text that is not hex words ({bad[:20]!r}): give hex words (0x1234abcd or 1234abcd) or a binary dump")
  if len(data) % 4: raise RawGPUError(f"{len(data)} bytes is not a whole number of dwords")
  return list(memoryview(data).cast("I")) if sys.byteorder == "little" else [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]


def _isa(data: bytes, arch: str | None) -> list[dict]:
  """Lane masks print as SGPR pairs in wave64 code: each kernel's descriptor says which it is (CDNA3 is always wave64;
  raw bytes count as wave32 on RDNA). Where a sweep stops short (a word no encoding knows, an instruction cut off at
  the end), a row says so, with "error"."""
  from rawgpu.drivers.emu.shader.decode import decode_sweep, family
  from rawgpu.drivers.emu.shader.disasm import disasm
  def rows(kernel, code: bytes, w64: bool, start: int = 0, end: int | None = None) -> list[dict]:
    insts, stop = decode_sweep(arch, code, start, end)
    out = [{"kernel": kernel, "offset": i.addr, "text": disasm(arch, i, w64)} for i in insts]
    if stop is not None:
      at, why = stop
      word = f" (word {int.from_bytes(code[at:at + 4], 'little'):#010x})" if at + 4 <= len(code) else f" ({len(code) - at} bytes left)"
      out.append({"kernel": kernel, "offset": at, "text": f"!! {why}{word}: the rest is not decoded", "error": True})
    return out
  if data[:4] == b"\x7fELF":
    from rawgpu.hcq.amd.elf import load_code_object
    co = load_code_object(data)
    if arch is not None and not co.runs_on(arch):
      raise RawGPUError(f"the code object is built for {co.target}, not {arch}: drop --arch {arch} (a code object names its own target)")
    arch = arch or co.target
    ends = sorted(v + m for v, m, fl, _ in co.segments if fl & 1)  # end of each executable segment
    out = []
    for name, k in sorted(co.kernels.items(), key=lambda kv: kv[1].code_offset):
      end = min([e for e in ends if e > k.code_offset] + [o.code_offset for o in co.kernels.values() if o.code_offset > k.code_offset] or [len(co.image)])
      out += rows(name, co.image, not k.descriptor.wave32, k.code_offset, end)
    return out
  if arch is None: raise UsageError("raw instruction bytes need --arch (e.g. --arch gfx1100)")
  return rows(None, data, family(arch) == "gfx9")


# the SDMA IP each target family carries (SDMA 4.4.2 on MI300, 6.0 on RDNA3, 7.0 on RDNA4): packet layouts differ before 5
SDMA_OF_FAMILY = {9: (4, 4), 11: (6, 0), 12: (7, 0)}


def _stream_version(stream: str, arch: str | None):
  """The PM4 generation or SDMA version the stream's packets follow: from --arch, else RDNA3's."""
  family = 11 if arch is None else 9 if arch.startswith("gfx9") else int(arch[3:-2])
  return family if stream == "pm4" else SDMA_OF_FAMILY[family]


# what --arch may name: a target of the families the decoders know (RDNA3 and 3.5, RDNA4, CDNA3), as a device reports
# it (KFD opens any gfx11xx or gfx12xx node, and a hang report names the device's)
DECODE_ARCH = re.compile(r"gfx1[12][0-9a-f]{2}|gfx94[0-2]")


def arch_arg(s: str) -> str:
  if not DECODE_ARCH.fullmatch(s): raise argparse.ArgumentTypeError(f"unknown arch {s!r}; valid: gfx11xx, gfx12xx (e.g. gfx1100, gfx1201), gfx940-gfx942")
  return s


def cmd_decode(args) -> int:
  data = _read_input(args.file)
  if not data.strip():
    what = "is empty" if not data else "holds only whitespace"
    raise RawGPUError(f"{'standard input' if args.file == '-' else args.file} {what}: nothing to decode")
  try:
    if args.stream == "pm4": from rawgpu.hcq.amd.pm4 import decode_pm4 as dec, format_packet as fmt
    elif args.stream == "sdma": from rawgpu.hcq.amd.sdma import decode_sdma as dec, format_packet as fmt
    else: dec = fmt = None
  except ImportError as e:
    print(f"rawgpu: decode {args.stream} is not available in this build ({e})", file=sys.stderr)
    return 3
  if dec is None:
    try: rows = _isa(data, args.arch)
    except ImportError as e:
      print(f"rawgpu: decode isa is not available in this build ({e})", file=sys.stderr)
      return 3
    if args.json: print(json.dumps(rows, indent=2))
    else:
      kernel = object()
      for r in rows:
        if r["kernel"] != kernel and r["kernel"] is not None: print(f"{r['kernel']}:")
        kernel = r["kernel"]
        print(f"  {r['offset']:06x}  {r['text']}")
    return 1 if not rows or any(r.get("error") for r in rows) else 0
  packets = dec(_words(data), _stream_version(args.stream, args.arch))
  if args.json:
    import dataclasses
    print(json.dumps([dataclasses.asdict(p) for p in packets], indent=2, default=str))
  else:
    for p in packets: print(fmt(p))
  return 1 if any(p.error for p in packets) else 0   # malformed, or cut short


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="rawgpu", description="rawgpu: drive GPUs from Python without a vendor runtime.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
  d = sub.add_parser("devices", help="list GPUs and the interfaces that can drive them", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Every AMD and NVIDIA GPU on the PCI bus: bus, vendor, device id, name, bound kernel driver, and for "
                     "each interface (KFD/NVK, PCI) yes or why not.",
                     epilog="examples:\n  rawgpu devices\n  rawgpu devices --json\n\nexit codes: 0 ok (also when none is found), 1 failure")
  d.add_argument("--json", action="store_true", help="print JSON")
  d.set_defaults(fn=cmd_devices)
  from rawgpu.tools.bench.core import ORDER
  fmt = argparse.RawDescriptionHelpFormatter
  m = sub.add_parser("demo", help="run vector add and matmul on the first device and check them against numpy",
                     description="Boot the first real GPU (or, when there is none, the built-in emulated one, labelled as such), "
                     "run vector add and matmul from kernels/, check them against numpy and print boot time, launch overhead, "
                     "kernel times and copy bandwidth.", epilog="examples:\n  rawgpu demo\n  rawgpu demo --dev MOCKPCI+AMD::gfx1201\n  rawgpu demo --json",
                     formatter_class=fmt)
  m.add_argument("--dev", help="device to use (DEV grammar, e.g. PCI+AMD, MOCKPCI+AMD::gfx1201); default: first real GPU, else emulated")
  m.add_argument("--size", type=positive_int, help="vector add length (default: 2^14 emulated, 2^22 real)")
  m.add_argument("--json", action="store_true", help="print the results as JSON")
  m.set_defaults(fn=cmd_demo)
  t = sub.add_parser("tinygrad", help="run a tinygrad program with rawgpu as its default device", formatter_class=fmt,
                     description="Run a tinygrad (0.14.0) script unchanged with rawgpu's device as tinygrad's default device, "
                     "RAWGPU (rawgpu.hcq.tinygrad): tinygrad compiles the kernels, rawgpu loads and launches them.",
                     epilog="examples:\n  rawgpu tinygrad train.py --epochs 1\n  rawgpu tinygrad --dev MOCKPCI+AMD::gfx1201 model.py\n\n"
                     "needs: tinygrad 0.14.0 (pip install 'rawgpu[tinygrad]'), libLLVM for its compiler (Debian: llvm-19-dev), "
                     "ld.lld (lld-19).\nexit codes: the script's; 1 if rawgpu fails (the message says why)")
  t.add_argument("--dev", help="device to use (DEV grammar, e.g. PCI+AMD, MOCKPCI+AMD::gfx1201); default: first real GPU, else emulated")
  t.add_argument("script", nargs="?", help="the tinygrad program (a .py file)")   # (required: cmd_tinygrad says so; argparse would name ARGS too)
  t.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
  t.set_defaults(fn=cmd_tinygrad)
  b = sub.add_parser("bench", help="measure launches, signals, copies, the emulator, boot, alloc, import", epilog=BENCH_EPILOG, formatter_class=fmt,
                     description="Run the benchmarks and print a table (and with --json FILE, one JSON record per figure).")
  b.add_argument("--dev", metavar="DEV", help="the device to measure (DEV grammar, e.g. MOCKPCI+AMD; default: $DEV)")
  b.add_argument("--json", metavar="FILE", help="also write the figures as a JSON list to FILE (- for stdout)")
  b.add_argument("--only", nargs="+", choices=ORDER, metavar="NAME", help=f"only these benchmarks ({', '.join(ORDER)})")
  b.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: checks that everything runs, not how fast")
  b.set_defaults(fn=cmd_bench)
  c = sub.add_parser("decode", help="decode PM4 or SDMA command streams, disassemble RDNA and CDNA3 code", epilog=DECODE_EPILOG, formatter_class=fmt,
                     description="Print command packets or instructions one per line.")
  c.add_argument("stream", choices=["pm4", "sdma", "isa"], help="what the input holds")
  c.add_argument("file", help="input file (- for stdin)")
  c.add_argument("--arch", type=arch_arg, help="the target (gfx1100, gfx1201, gfx942): pm4/sdma packets follow its forms (default "
                 "gfx11's: PM4 gfx11, SDMA 6); isa: needed for raw bytes")
  c.add_argument("--json", action="store_true", help="print JSON")
  c.set_defaults(fn=cmd_decode)
  return p


def main(argv: list[str] | None = None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  if not getattr(args, "fn", None):
    p.print_help()
    return 2
  return run_command("rawgpu", lambda: args.fn(args))


if __name__ == "__main__": sys.exit(main())
