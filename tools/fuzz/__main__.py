"""`python -m tools.fuzz TARGET [--seconds N]`: run one fuzz target under atheris."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .targets import INSTRUMENTED, TARGETS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests" / "data" / "fuzz"
WORK = ROOT / "build" / "fuzz"

#: What each target imports, loaded under atheris's instrumentation (coverage feedback).
MODULES = {
    "codeobject": ["hsa.abi.codeobject"],
    "loader": ["hsa.abi.codeobject", "hsa.virtual", "amdgpu", "amdgpu.hsa_backend.device"],
    "bundle": ["hsa.abi.codeobject", "compiler.bundle"],
    "trace": ["packets.trace.reader", "tools.packet_trace.scan"],
    "kernargs": ["hsa.abi.codeobject.metadata", "amdgpu.hsa_backend.kernargs"],
    "kfd_ioctl": ["hsa.emulated.abi"],
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__)
    parser.add_argument("target", choices=sorted(TARGETS))
    parser.add_argument("--seconds", type=int, default=60, help="run time (default 60)")
    parser.add_argument("--timeout", type=int, default=20,
                        help="seconds one input may take before it counts as a hang")
    parser.add_argument("--rss-limit-mb", type=int, default=3072)
    args, extra = parser.parse_known_args(argv)
    try:
        import atheris
    except ImportError:
        print("fuzz: atheris is not installed: .venv/bin/python -m pip install atheris",
              file=sys.stderr)
        return 2
    corpus = WORK / args.target / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = SEEDS / args.target
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        for name in MODULES[args.target]:
            try:
                importlib.import_module(name)
            except ImportError as e:  # a target whose module is not on this branch
                print(f"fuzz: {args.target}: {e}; skipped", file=sys.stderr)
                return 0
    target = TARGETS[args.target]
    libfuzzer = [sys.argv[0], str(corpus), *([str(seeds)] if seeds.is_dir() else []),
                 f"-max_total_time={args.seconds}", f"-timeout={args.timeout}",
                 f"-rss_limit_mb={args.rss_limit_mb}", "-print_final_stats=1",
                 f"-artifact_prefix={WORK / args.target}/", *extra]
    atheris.Setup(libfuzzer, target)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
