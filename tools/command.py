"""What every rawgpu command does when it stops early: an error is one line on stderr (DEBUG=1: the traceback),
Ctrl-C exits 130, and a reader that goes away (`... | head`) ends the output quietly."""
from __future__ import annotations
import argparse, os, sys
from typing import Callable
from rawgpu.errors import RawGPUError, debug_level


class UsageError(RawGPUError):
  """Bad usage the argument parser cannot see (a value that parses but makes no sense): exit 2."""


def run_command(prog: str, fn: Callable[[], int]) -> int:
  try:
    rc = fn()
    sys.stdout.flush()   # (a closed pipe shows here, not at exit where nothing could catch it)
    return rc
  except RawGPUError as e:
    if debug_level(): raise
    print(f"{prog}: error: {e}", file=sys.stderr)
    return 2 if isinstance(e, UsageError) else 1
  except KeyboardInterrupt:
    return 130
  except BrokenPipeError:   # the reader went away: not an error; stop writing quietly
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def seconds_arg(s: str) -> float:
  """argparse type: a positive, finite number of seconds."""
  try: v = float(s)
  except ValueError: v = float("nan")
  if not 0 < v < float("inf"): raise argparse.ArgumentTypeError(f"{s!r} is not a positive number of seconds")
  return v


def positive_int(s: str) -> int:
  """argparse type: a whole number of at least 1."""
  try: v = int(s)
  except ValueError: v = 0
  if v < 1: raise argparse.ArgumentTypeError(f"{s!r} is not a positive whole number")
  return v
