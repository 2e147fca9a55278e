"""Command-line tools over the driver: packet-trace and hwlab."""
