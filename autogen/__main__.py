"""python -m rawgpu.autogen fetch|gen ...: fetch headers, regenerate bindings (dev-time only)."""
import sys


def main(argv: list[str]) -> int:
  if not argv or argv[0] in ("-h", "--help"):
    print("usage: python -m rawgpu.autogen fetch [sources] [--write-lock] [--force]\n"
          "       python -m rawgpu.autogen gen [modules] [--out DIR] [--no-verify]")
    return 0 if argv else 2
  if argv[0] == "fetch":
    from rawgpu.autogen.fetch import main as fetch_main
    return fetch_main(argv[1:])
  if argv[0] == "gen":
    from rawgpu.autogen.gen.run import main as gen_main
    return gen_main(argv[1:])
  print(f"unknown command {argv[0]!r}; use fetch or gen", file=sys.stderr)
  return 2


raise SystemExit(main(sys.argv[1:]))
