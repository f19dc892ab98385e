"""The bad-input fuzzers (issue 11): test tooling, imported by tests/linker/test_fuzz.py for its
seeded slices and run on their own for the long runs (BENCHMARKS.md):

    PYTHONPATH=tools:tests .venv/bin/python -m fuzz.cli --cases 10000 --seed 1
    PYTHONPATH=tools:tests .venv/bin/python -m fuzz.manifest --cases 20000 --seed 3

  cli       damaged contracts, kernel files, packages, paths and argument lists through the CLI
  corpora   clause-aware damage of the real kernels' contracts and kernel files (for cli)
  damage    the damage itself: TOML edits, package bytes, typed value pools, a TOML writer
  manifest  damaged manifests through the runtime's reading and launch planning
"""
