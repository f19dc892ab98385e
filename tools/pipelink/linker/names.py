"""Names that reach generated C++ as they are: kernel, instance and parameter names.

They pass the identifier check and then, if they are a C++ keyword (`int`, `class`), `main`,
a reserved identifier (`__x`, `_X`), or one of the generated code's own names, fail much
later in nvcc (L-COMPILE) or nvJitLink (L-LINK, a duplicate symbol). `reserved_reason` names
the problem at parse time instead (C-SCHEMA).
"""

from __future__ import annotations

CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires return short signed sizeof static static_assert static_cast struct switch template
this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile wchar_t
while xor xor_eq
""".split())
# Global names a kernel (a global function) cannot take; a struct member may.
GLOBAL_RESERVED = frozenset("main threadIdx blockIdx blockDim gridDim warpSize printf malloc free".split())


def reserved_reason(name: str, *, generated_prefixes: tuple[str, ...] = (), is_global: bool = False) -> str | None:
    """Why `name` cannot be used as a C++ name in the generated source, or None."""
    if name in CXX_KEYWORDS:
        return f"{name!r} is a C++ keyword"
    if is_global and name in GLOBAL_RESERVED:
        return f"{name!r} is already a global name in CUDA C++"
    if name.startswith("__") or (len(name) > 1 and name[0] == "_" and name[1].isupper()):
        return f"{name!r} is a reserved identifier (leading __ or _ and a capital)"
    for p in generated_prefixes:
        if name.startswith(p):
            return f"{name!r} starts with {p!r}, which the generated code uses for its own names"
    return None
