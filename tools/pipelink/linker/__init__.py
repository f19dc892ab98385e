"""The link side of pipelink: contracts and kernel files parsed, components packed, checked,
placed (solve), generated and linked into one cubin and its manifest; the `pipelink` CLI
(pipelink.linker.cli) drives it. It never imports pipelink.runtime: what both share is in
pipelink.common."""
