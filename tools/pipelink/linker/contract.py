"""Parse pass: contract TOML -> typed `Contract`, every clause remembering its file:line.

The schema is strict: unknown keys and wrong types are rejected (C-SCHEMA) so a typo in a
contract never silently changes a placement.

This module is the public entry; the work is split by what it is about:
- contract_types.py: the vocabulary (PARAM_TYPES, DTYPES, ARCHES, ...) and the declarations;
- contract_reader.py: line numbers, the typed table reader and bounded values (read_u32, read_expr);
- contract_clauses.py: one parser per clause, called below in order.
Every name other modules import from `pipelink.linker.contract` is re-exported here (__all__).
"""

from __future__ import annotations

from pathlib import Path

from pipelink.linker.contract_clauses import (
    normalize_signature, parse_barriers, parse_callables, parse_component, parse_facts, parse_host, parse_params,
    parse_rings, parse_role, parse_smem, parse_tensors, parse_workspaces,
)
from pipelink.linker.contract_reader import (
    LineIndex, read_align, read_expr, read_ident, Reader, read_shape_entry, read_u32, load_toml, parse_toml_text,
)
from pipelink.linker.contract_types import (
    ARCHES, DTYPES, FACT_TYPES, IDENT, MBARRIER_COUNT_MAX, PARAM_ALIGN, PARAM_TYPES, PROVIDED_TYPES, RUNTIME_NAMES,
    SCOPES, SPACES, U32_MAX, WORKSPACE_BUILTINS, WORKSPACE_SCOPES, BarrierClaim, CallableDecl, Contract, FactDecl,
    HostDecl, Origin, RingSide, RoleDecl, SmemClaim, TensorDecl, WorkspaceDecl,
)

__all__ = [
    # parsing
    "parse_contract", "parse_contract_text", "contract_from_data", "load_toml", "parse_toml_text",
    "normalize_signature", "LineIndex",
    # the reader and value checks, shared with compose.py's kernel-file reader
    "Reader", "read_ident", "read_align", "read_u32", "read_expr", "read_shape_entry",
    # vocabulary
    "IDENT", "PARAM_TYPES", "PARAM_ALIGN", "PROVIDED_TYPES", "FACT_TYPES", "DTYPES", "SPACES", "SCOPES", "ARCHES",
    "U32_MAX", "MBARRIER_COUNT_MAX", "WORKSPACE_BUILTINS", "RUNTIME_NAMES", "WORKSPACE_SCOPES",
    # declarations
    "Origin", "Contract", "FactDecl", "SmemClaim", "BarrierClaim", "RingSide", "TensorDecl", "CallableDecl",
    "RoleDecl", "WorkspaceDecl", "HostDecl",
]


def parse_contract(path: str | Path, *, display_name: str | None = None) -> Contract:
    data, lines, text = load_toml(path)
    return contract_from_data(data, lines, display_name or str(path))


def parse_contract_text(text: str, file: str) -> Contract:
    return contract_from_data(parse_toml_text(text, file), LineIndex(text), file)


def contract_from_data(data: dict, lines: LineIndex, file: str) -> Contract:
    top = Reader(data, "", lines, file)
    # The order is the order errors are found in: the first bad clause in it is the one reported.
    name, kind, entry, arch, co_resident = parse_component(top)
    params, param_origins = parse_params(top)
    role = parse_role(top, kind)
    facts = parse_facts(top)
    declared_facts = {f.name for f in facts}  # what expressions in the clauses below may name
    smem = parse_smem(top, declared_facts)
    barriers = parse_barriers(top, kind)
    rings = parse_rings(top, declared_facts)
    tensors = parse_tensors(top, declared_facts)
    host = parse_host(top, dict(params), facts)
    workspaces = parse_workspaces(top, dict(params), facts)
    callables = parse_callables(top)
    top.finish()

    return Contract(
        name=name, kind=kind, entry=entry, arch=arch, params=tuple(params), role=role,
        facts=tuple(facts), smem=tuple(smem), barriers=tuple(barriers), rings=tuple(rings),
        tensors=tuple(tensors), callables=tuple(callables), file=file,
        origin=Origin(file, lines.line("component")), param_origins=tuple(param_origins), host=host,
        workspaces=workspaces, co_resident=co_resident,
    )
