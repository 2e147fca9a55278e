"""hwlab suites: pytest modules over the lab_device fixture."""
