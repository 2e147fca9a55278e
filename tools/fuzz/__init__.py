"""Coverage-guided fuzzing of the readers of untrusted bytes (atheris, libFuzzer).

`python -m tools.fuzz TARGET --seconds N` (or `make fuzz`, every target for FUZZ_SECONDS)
runs one target of `tools.fuzz.targets` from the seed corpus in tests/data/fuzz/TARGET;
new inputs go to build/fuzz/TARGET/corpus, crashing ones to build/fuzz/TARGET/ (crash-*,
timeout-*, oom-*). A finding, once fixed, is saved in tests/data/fuzz/regressions/TARGET,
which tests/test_fuzz_regressions.py replays in every test run.
"""
