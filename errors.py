"""The one error hierarchy of rawgpu. A message says what happened, on which device, and what to do next."""


class RawGPUError(Exception):
  """Base of every error rawgpu raises on purpose."""


class DeviceSpecError(RawGPUError, ValueError):
  """A DEV string that does not parse or names something that cannot be served."""


class DeviceNotFound(RawGPUError):
  """No device matched, or the interface asked for is not usable here (the message says why)."""


class PermissionProblem(RawGPUError, PermissionError):
  """Missing root/capabilities/group membership; the message says which."""


class DeviceBusy(RawGPUError):
  """The device is owned by another process or bound to a kernel driver."""


class IoctlError(RawGPUError, OSError):
  """An ioctl failed; carries the ioctl name and errno."""

  def __init__(self, name: str, errno_: int, detail: str = ""):
    import os
    self.name, self.errno_ = name, errno_
    super().__init__(errno_, f"ioctl {name} failed: {os.strerror(errno_)} (errno {errno_}){': ' + detail if detail else ''}")


class FirmwareError(RawGPUError):
  """Missing, malformed or unknown firmware file."""


class CodeObjectError(RawGPUError):
  """A malformed, truncated or wrong-target kernel binary."""


class OutOfMemory(RawGPUError, MemoryError):
  """No room for an allocation (VRAM, host memory or GPU virtual address space); a MemoryError too, so a caching
  allocator that frees and retries on MemoryError works unchanged."""


class DeviceTimeout(RawGPUError, TimeoutError):
  """The device made no progress within the timeout."""


class DeviceFault(RawGPUError):
  """The device reported a fault (page fault, illegal instruction, hung queue)."""


def debug_level() -> int:
  """DEBUG=N from the environment (0 when unset or empty; a word that is not a number counts as 1): at 1 and above
  the commands show tracebacks and the drivers say more."""
  import os
  v = os.environ.get("DEBUG", "").strip()
  try: return int(v or 0)
  except ValueError: return 1
