"""The `rawgpu` command: devices, demo, bench, decode."""
from __future__ import annotations
import argparse, json, os, sys
from rawgpu.errors import RawGPUError

EPILOG = """examples:
  rawgpu devices              every GPU found and how it can be driven
  rawgpu devices --json       the same as JSON
  rawgpu demo                 vector add + matmul on the first device (the emulated GPU when none is present)
  rawgpu demo --dev MOCKPCI+AMD::gfx1201

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


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="rawgpu", description="rawgpu: drive GPUs from Python without a vendor runtime.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
  d = sub.add_parser("devices", help="list GPUs and the interfaces that can drive them")
  d.add_argument("--json", action="store_true", help="print JSON")
  d.set_defaults(fn=cmd_devices)
  return p


def main(argv: list[str] | None = None) -> int:
  p = _parser()
  args = p.parse_args(argv)
  if not getattr(args, "fn", None):
    p.print_help()
    return 2
  try: return args.fn(args)
  except RawGPUError as e:
    if os.environ.get("DEBUG"): raise
    print(f"rawgpu: error: {e}", file=sys.stderr)
    return 1
  except KeyboardInterrupt:
    return 130


if __name__ == "__main__": sys.exit(main())
