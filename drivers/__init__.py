"""Everything that touches a device or the operating system, and the emulated hardware (drivers/emu)."""
