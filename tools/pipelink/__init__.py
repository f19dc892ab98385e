"""pipelink: a contract-guided linker for GPU kernel components.

The linker is a pipeline of plain passes over typed data:
parse (contract, compose) -> pack -> check -> solve -> generate -> link.
Each pass takes data and returns data or raises `Rejected` carrying diagnostics.

pipelink.linker holds the passes and the CLI, pipelink.runtime launches what they link (its
public API is the package itself), and pipelink.common is what both share; neither half
imports the other (tests/linker/test_layering.py).
"""

__version__ = "0.1.0"
