"""Generated bindings: rawgpu.autogen.amd."""
