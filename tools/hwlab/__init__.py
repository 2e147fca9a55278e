"""hwlab: the hardware-lab test runner (devices, run, merge, bench)."""
