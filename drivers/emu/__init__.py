"""Emulated hardware: PCI device models, amdgpu IP blocks, command processors and the RDNA ISA."""
