"""Which optional `pipelink` CLI flags the rules may pass (tools/pipelink/linker/cli.py).

The CLI contract is fixed by the lead; these flags were requested for the Bazel rules and
are used once the linker accepts them. Flip a switch when cli.py gains the flag.
"""

# `pack --arch ARCH`: the architecture the objects were compiled for, overriding the
# contract's component.arch, so one contract serves several architectures. Until then the
# rules pack a copy of the contract whose `arch = ...` line is rewritten (same line numbers).
PACK_ARCH_FLAG = True

# `--origin PATH=LABEL` (pack and link): lets diagnostics name the Bazel target that owns a
# contract or kernel file next to its path and line. Either side may hold '=' (a target
# `//p:x=y`): the CLI cuts at the '=' whose PATH is a file it reads (tools/pipelink/linker/origins.py),
# so PATH must be the File's path exactly as the action passes it (--contract/--kernel).
ORIGIN_FLAG = True
