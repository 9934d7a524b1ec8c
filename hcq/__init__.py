"""Hardware command queues: the vendor-neutral core and per-vendor encoders."""
