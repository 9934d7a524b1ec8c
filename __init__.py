"""rawgpu: a userspace GPU driver stack in Python.

Import is cheap: nothing here touches a device or loads large modules. Use the subpackages:
rawgpu.hcq (devices, buffers, queues, programs), rawgpu.drivers, rawgpu.autogen, rawgpu.tools, rawgpu.kernels.
"""
__version__ = "0.1.0"
