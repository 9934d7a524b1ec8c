"""Command-line tools: rawgpu, hcq-smi, am-smi."""
