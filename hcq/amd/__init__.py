"""AMD command encoders (PM4, SDMA), their decoders, and the AMDGPU code-object loader."""
