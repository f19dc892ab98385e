"""pipelink: a contract-guided linker for GPU kernel components.

The linker is a pipeline of plain passes over typed data:
parse (contract, compose) -> pack -> check -> solve -> generate -> link.
Each pass takes data and returns data or raises `Rejected` carrying diagnostics.
"""

__version__ = "0.1.0"
