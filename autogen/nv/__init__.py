"""Generated bindings: rawgpu.autogen.nv."""
