"""packet-trace (issue 8): record, show, stats, diff, Perfetto export and dependency graphs of
amdgpu-direct AQL packet traces (the format of `packets.trace`). Entry point: `cli.main`."""
