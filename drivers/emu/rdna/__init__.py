"""RDNA3/RDNA4 compute-unit emulator."""
