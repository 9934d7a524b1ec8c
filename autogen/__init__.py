"""Generated bindings for kernel interfaces, registers, packets and firmware formats (see autogen/README.md)."""
