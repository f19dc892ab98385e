"""Attribute checks of the pipelink rules, one per class of bad value (codes: errors.bzl).

Each check either returns or fails analysis through pl_fail with a code and a hint; none
changes what a valid target compiles (the checks read attributes, they register nothing).
"""

load(":errors.bzl", "pl_fail")

_IDENT_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_IDENT_REST = _IDENT_FIRST + "0123456789"

def is_c_identifier(s):
    """The linker's IDENT (tools/pipelink/linker/contract_types.py): [A-Za-z_][A-Za-z0-9_]*."""
    if not s or s[0] not in _IDENT_FIRST:
        return False
    for ch in s.elems():
        if ch not in _IDENT_REST:
            return False
    return True

def check_variant(where, what, value, built):
    """B-VARIANT: a kernel macro's variant parameter (a tile geometry, a consumer) must be one
    its owner builds; `value` and `built` as the user writes them (strings)."""
    if value not in built:
        pl_fail(where, "B-VARIANT", "%s = %s is not a variant its owner builds (built: %s)" % (what, value, ", ".join(built)),
                "set %s to one of %s" % (what, ", ".join(built)))

def check_component_name(ctx, name, explicit):
    """B-NAME: the package name kernels refer to must be able to be a contract's component.name."""
    if is_c_identifier(name):
        return name
    what = "attribute component" if explicit else "the component name (the target name; `component` is not set)"
    suggestion = "".join([ch if ch in _IDENT_REST else "_" for ch in name.elems()]) or "loader"
    if suggestion[0] not in _IDENT_FIRST:
        suggestion = "_" + suggestion
    pl_fail(ctx, "B-NAME", "%s: '%s' is not a C identifier, so it cannot be the contract's component.name" % (what, name),
            'set component = "%s" (the contract\'s [component] name)' % suggestion)
    return name

# ---- files ----------------------------------------------------------------------------------

def check_files(ctx, attr, files, suffixes, hint, single = False):
    """B-FILE-TYPE: every file of attribute `attr` ends with one of `suffixes`.

    The rules take these attributes with allow_files = True and check here, so a wrong file
    gets a coded error instead of Bazel's "misplaced here". With single = True the attribute
    must give exactly one file; the file is returned.
    """
    if single and len(files) != 1:
        pl_fail(ctx, "B-FILE-TYPE", "attribute %s gives %d files (%s); it takes exactly one %s file" %
                                    (attr, len(files), ", ".join([f.short_path for f in files[:4]]) or "none", " or ".join(suffixes)), hint)
    for f in files:
        if not any([f.basename.endswith(s) for s in suffixes]):
            pl_fail(ctx, "B-FILE-TYPE", "attribute %s: %s is not a %s file" % (attr, f.short_path, " or ".join(suffixes)), hint)
    return files[0] if single else files

# ---- defines --------------------------------------------------------------------------------

# nvcc runs the host compiler, cicc and ptxas through /bin/sh: -D and -I values go inside
# double quotes, where $, `, \ and " are still special; -Xcompiler/-Xptxas values go bare.
# A value holding them runs commands on the build machine (`-DX=$(touch /tmp/x)` does).
SHELL_QUOTED_CHARS = ["$", "`", "\\", "\""]
SHELL_BARE_CHARS = SHELL_QUOTED_CHARS + ["'", ";", "&", "|", "<", ">", "(", ")", "*", "?", "[", "]", "{", "}", "!", "#", " ", "\t"]

def shell_chars(s, chars):
    """The characters of `chars` that occur in `s`, in s's order, once each."""
    found = []
    for ch in s.elems():
        if ch in chars and ch not in found:
            found.append(ch)
    return found

def _define_problem(d):
    if not d.strip():
        return "an empty define", "remove it"
    if "\n" in d or "\r" in d:
        return "a define spanning lines", "give the value on one line"
    bad = shell_chars(d, SHELL_QUOTED_CHARS)
    if bad:
        return ("a define holding %s, which the shell nvcc runs its compilers through would interpret " +
                "(nvcc quotes -D values only with double quotes)") % " ".join(["'%s'" % c for c in bad]), \
               "give the value through a header (#define in a file listed in hdrs); defines take no $, `, \\ or \""
    if d.startswith("-D"):
        return "a define starting with -D (the rule adds -D)", 'write "%s"' % d[2:]
    if d.startswith("="):
        return "a define with no name before '='", 'write NAME or NAME=VALUE, e.g. "TILE=64"'
    if "," in d:
        return "a define with a comma (nvcc splits -D values at commas, so it would define two macros)", \
               "avoid commas; give the value through a header, or one define per macro"
    name = d.partition("=")[0].partition("(")[0]
    if not is_c_identifier(name):
        return "macro name '%s' is not a C identifier" % name, 'write NAME or NAME=VALUE, e.g. "TILE=64"'
    if name.startswith("PL_") or name.startswith("pl_"):
        return "macro name '%s' is reserved (pipelink.h and the linker's generated code own PL_*/pl_* names)" % name, \
               "rename it; a component's PL_COMPONENT is #defined in its source before #include <pipelink.h>"
    return None, None

def check_defines(ctx, attr, defines, inherited = []):
    """B-DEFINE: each define is NAME or NAME=VALUE with a C identifier NAME, no comma, no
    reserved name; one name never gets two values (`inherited`: deps' defines, checked for
    conflicts only)."""
    for d in defines:
        problem, hint = _define_problem(d)
        if problem:
            pl_fail(ctx, "B-DEFINE", "attribute %s: '%s' is %s" % (attr, d, problem), hint)
    for d in inherited:
        # A cc_library's `defines` reach nvcc as -D too (PL_*, commas and shell characters included).
        problem, hint = _define_problem(d)
        if problem:
            pl_fail(ctx, "B-DEFINE", "a deps' define '%s' is %s" % (d, problem),
                    "fix that cc_library's `defines` (%s); or give the value through one of its headers" % hint)
    seen = {}
    for d in inherited + defines:
        name = d.partition("=")[0].partition("(")[0]
        if name in seen and seen[name] != d:
            pl_fail(ctx, "B-DEFINE", "attribute %s: macro %s is defined twice, as '%s' and as '%s'" % (attr, name, seen[name], d),
                    "keep one value (a deps' cc_library define counts too)")
        seen[name] = d

# ---- facts ----------------------------------------------------------------------------------

_U32_MAX = 4294967295
_FACTS_HINT = 'write {"<fact>": "<MACRO>=<value>"}: the fact\'s [fact.<name>] table, the macro the source reads, a decimal number, e.g. {"block_n": "CONSUMER_BLOCK_N=64"}'

def check_facts(ctx, facts, defines):
    """B-FACT: each `facts` entry is a fact name (a C identifier) -> "MACRO=VALUE", MACRO a
    define the rule may pass (B-DEFINE's rules), VALUE a u32 in decimal; MACRO is not also in
    `defines` (the value would be written twice again). Returns the defines ("MACRO=VALUE")."""
    out = []
    for fact, given in facts.items():
        if not is_c_identifier(fact):
            pl_fail(ctx, "B-FACT", "attribute facts: key '%s' is not a fact name (a C identifier)" % fact, _FACTS_HINT)
        name, eq, value = given.partition("=")
        problem, _ = _define_problem(given)
        if problem or not eq or "(" in name:
            pl_fail(ctx, "B-FACT", "attribute facts: fact %s is given as '%s', not MACRO=VALUE%s" %
                                   (fact, given, " (%s)" % problem if problem else ""), _FACTS_HINT)
        if not value.isdigit() or (len(value) > 1 and value[0] == "0") or len(value) > 10 or int(value) > _U32_MAX:
            pl_fail(ctx, "B-FACT", "attribute facts: fact %s's value '%s' is not a u32 in decimal" % (fact, value), _FACTS_HINT)
        for d in defines:
            if d.partition("=")[0].partition("(")[0] == name:
                pl_fail(ctx, "B-FACT", "attribute facts: macro %s carries fact %s and is also defined as '%s'" % (name, fact, d),
                        "drop it from `defines` (or a deps' cc_library): facts passes -D%s itself" % given)
        out.append(given)
    return out

# ---- copts ----------------------------------------------------------------------------------

_ARCH_HINT = "drop it: the rule compiles for the kernel's arch (fused_kernel(arch = ...) or --//pipelink_rules:arch)"
_MODE_HINT = "drop it: the rule compiles each .cu with -dc to LTO-IR for `pipelink pack` and link"
_OUT_HINT = "drop it: the rule names every output itself"
_TOOL_HINT = "drop it: the CUDA toolchain chooses the host compiler (pipelink_toolchains.cuda(host_compiler = ...))"
_TEMP_HINT = "drop it: kept intermediates are undeclared outputs and break reproducible objects"
_FILE_HINT = "drop it: an options file is an undeclared input; list the options in copts"
_DEBUG_HINT = "drop it: LTO-IR carries no device debug information (nvcc refuses -G with LTO); -lineinfo keeps source lines"

# nvcc option names (without leading dashes) that the rule itself sets, -> hint.
_RULE_FLAGS = {
    "arch": _ARCH_HINT,
    "gpu-architecture": _ARCH_HINT,
    "code": _ARCH_HINT,
    "gpu-code": _ARCH_HINT,
    "gencode": _ARCH_HINT,
    "generate-code": _ARCH_HINT,
    "o": _OUT_HINT,
    "output-file": _OUT_HINT,
    "odir": _OUT_HINT,
    "output-directory": _OUT_HINT,
    "c": _MODE_HINT,
    "compile": _MODE_HINT,
    "dc": _MODE_HINT,
    "device-c": _MODE_HINT,
    "dw": _MODE_HINT,
    "device-w": _MODE_HINT,
    "rdc": _MODE_HINT,
    "relocatable-device-code": _MODE_HINT,
    "dlto": _MODE_HINT,
    "dlink-time-opt": _MODE_HINT,
    "dlink": _MODE_HINT,
    "device-link": _MODE_HINT,
    "link": _MODE_HINT,
    "lib": _MODE_HINT,
    "run": _MODE_HINT,
    "ptx": _MODE_HINT,
    "cubin": _MODE_HINT,
    "fatbin": _MODE_HINT,
    "optix-ir": _MODE_HINT,
    "cuda": _MODE_HINT,
    "E": _MODE_HINT,
    "preprocess": _MODE_HINT,
    "M": _MODE_HINT,
    "MM": _MODE_HINT,
    "MD": _MODE_HINT,
    "MMD": _MODE_HINT,
    "MF": _MODE_HINT,
    "MT": _MODE_HINT,
    "generate-dependencies": _MODE_HINT,
    "generate-nonsystem-dependencies": _MODE_HINT,
    "generate-dependencies-with-compile": _MODE_HINT,
    "generate-nonsystem-dependencies-with-compile": _MODE_HINT,
    "dependency-output": _MODE_HINT,
    "ewp": _MODE_HINT,
    "extensible-whole-program": _MODE_HINT,
    "dryrun": _MODE_HINT,
    "ccbin": _TOOL_HINT,
    "compiler-bindir": _TOOL_HINT,
    "allow-unsupported-compiler": _TOOL_HINT,
    "keep": _TEMP_HINT,
    "keep-dir": _TEMP_HINT,
    "save-temps": _TEMP_HINT,
    "objtemp": _TEMP_HINT,
    "objdir-as-tempdir": _TEMP_HINT,
    "optf": _FILE_HINT,
    "G": _DEBUG_HINT,
    "device-debug": _DEBUG_HINT,
    "options-file": _FILE_HINT,
}

# Options whose value is a path; an absolute one reads the host outside the declared inputs.
_PATH_FLAGS = ["-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "-L",
               "--include-path", "--system-include", "--pre-include", "--library-path"]

def _absolute_path(c, prev):
    if c.startswith("/") or c.startswith("~"):
        return True
    if "=/" in c or ",/" in c:
        return True
    for flag in _PATH_FLAGS:
        if c.startswith(flag + "/") or ("-" + flag.lstrip("-") + "/") in c:
            return True
    return False

# nvcc options that take their value as the next element: the last copt must not be one, or
# it would take the rule's own `-o OUT` as its value (the object then lands elsewhere).
_VALUE_FLAGS = [
    "-D", "-U", "-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros", "-L", "-l", "-x",
    "-Xcompiler", "-Xptxas", "-Xnvlink", "-Xlinker", "-Xarchive", "-Xcudafe", "-Xfatbin",
    "-std", "-maxrregcount", "-ftz", "-prec-div", "-prec-sqrt", "-fmad", "-t", "-split-compile",
    "-diag-suppress", "-diag-error", "-diag-warn", "-default-stream", "-Werror",
    "--define-macro", "--undefine-macro", "--include-path", "--system-include", "--pre-include",
    "--compiler-options", "--ptxas-options", "--nvlink-options", "--linker-options", "--archive-options",
    "--std", "--maxrregcount", "--x", "--threads", "--split-compile", "--library", "--library-path",
    "--ftz", "--prec-div", "--prec-sqrt", "--fmad", "--diag-suppress", "--diag-error", "--diag-warn",
    "--default-stream", "--Werror",
]

# Options whose value is a comma-separated list of another tool's options (gcc, ptxas, ...):
# each of those is checked like a copt of its own (`-Xcompiler=-o,x` would move gcc's output).
_PASS_THROUGH = ["Xcompiler", "compiler-options", "Xptxas", "ptxas-options", "Xnvlink", "nvlink-options",
                 "Xlinker", "linker-options", "Xarchive", "archive-options", "Xcudafe", "Xfatbin"]

_DEFINE_FLAGS = ["-D", "--define-macro"]

def _climbs_out(path):
    """Whether a relative path leaves the directory it is resolved from (`../x`, `a/../../x`)."""
    depth = 0
    for part in path.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part and part != ".":
            depth += 1
    return False

def _path_value(c):
    """The path a path-taking option names in `c` (-I../x, --include-path=../x), else None."""
    for flag in _PATH_FLAGS:
        if c.startswith(flag + "="):
            return c[len(flag) + 1:]
        if c.startswith(flag) and not flag.startswith("--"):
            return c[len(flag):]
    return None

# Host-compiler options that make gcc run programs or load code the rule does not declare.
_RUNS_PROGRAMS = ["B", "specs", "wrapper", "fplugin", "fplugin-arg", "no-integrated-cpp"]
_PROGRAM_HINT = "drop it: the host compiler runs only the toolchain's programs (no -B, -specs, -wrapper or -fplugin)"

def _copt_problem(c):
    """(message, hint) for one nvcc option (or a tool option passed through -X...), else (None, None)."""
    if c.startswith("@"):
        return "is a response file (@FILE), an undeclared input of the build", _FILE_HINT
    if c.startswith("-B") or c.lstrip("-").partition("=")[0] in _RUNS_PROGRAMS:
        return "makes the host compiler run programs or load plugins from outside the toolchain", _PROGRAM_HINT
    if c.startswith("-"):
        name = c.lstrip("-").partition("=")[0]
        if name in _RULE_FLAGS:
            return "sets what the rule controls", _RULE_FLAGS[name]
    return None, None

def _define_value(c, prev):
    """The define a copt gives (-DX, -D X, --define-macro=X, --define-macro X), else None."""
    if prev in _DEFINE_FLAGS:
        return c
    if c.startswith("--define-macro="):
        return c[len("--define-macro="):]
    if c.startswith("-D") and c != "-D":
        return c[2:]
    return None

def check_copts(ctx, attr, copts):
    """B-COPT (options the rule controls, absolute paths or paths out of the workspace, shell
    metacharacters, a value-taking option with no value) and B-DEFINE (-D values) of copts,
    after $(location) expansion."""
    for i, c in enumerate(copts):
        prev = copts[i - 1] if i > 0 else ""
        if "\n" in c or "\r" in c or not c.strip():
            pl_fail(ctx, "B-COPT", "attribute %s: %r is empty or spans lines" % (attr, c), "one nvcc option per list element")
        define = _define_value(c, prev)
        if define != None:
            problem, hint = _define_problem(define)
            if problem:
                pl_fail(ctx, "B-DEFINE", "attribute %s: '%s' is %s" % (attr, c, problem),
                        hint + " (or move it to `defines`)")
            continue
        if c in _DEFINE_FLAGS and i < len(copts) - 1:
            continue  # its value, the next element, is checked as a define (a last one fails below)
        if "$(" in c:
            pl_fail(ctx, "B-COPT", "attribute %s: '%s' holds a $(...) that did not expand" % (attr, c),
                    "$(location LABEL) (also execpath, rootpath, locations) expands only a label listed in deps; other make variables do not expand here")
        bad = shell_chars(c, SHELL_BARE_CHARS)
        if bad:
            pl_fail(ctx, "B-COPT", ("attribute %s: '%s' holds %s, which the shell nvcc runs its compilers through would " +
                                    "interpret (nvcc passes -Xcompiler values unquoted)") % (attr, c, " ".join(["'%s'" % ch for ch in bad])),
                    "one option per element with no spaces, quotes or shell metacharacters; lists for -Xcompiler go comma-separated (\"-Xcompiler=-Wall,-Wextra\")")
        problem, hint = _copt_problem(c)
        if problem:
            pl_fail(ctx, "B-COPT", "attribute %s: '%s' %s" % (attr, c, problem), hint)
        through = None
        if c.startswith("-"):
            name, eq, value = c.lstrip("-").partition("=")
            if name in _PASS_THROUGH and eq:
                through = value
        if prev.lstrip("-") in _PASS_THROUGH:
            through = c
        if through != None:
            for piece in through.split(","):
                problem, hint = _copt_problem(piece)
                if problem:
                    pl_fail(ctx, "B-COPT", "attribute %s: '%s' passes '%s', which %s" % (attr, c, piece, problem), hint)
                if _absolute_path(piece, "") or _climbs_out(_path_value(piece) or ""):
                    pl_fail(ctx, "B-COPT", "attribute %s: '%s' passes '%s', a path outside the workspace" % (attr, c, piece),
                            "use a path relative to the workspace, e.g. \"-I$(location :headers)\", or a cc_library in deps")
        if _absolute_path(c, prev):
            pl_fail(ctx, "B-COPT", "attribute %s: '%s' names an absolute path, which is no declared input of the build" % (attr, c),
                    "use a path relative to the workspace, e.g. \"-I$(location :headers)\", or a cc_library in deps")
        path = _path_value(c)
        if prev in _PATH_FLAGS:
            path = c
        if path != None and _climbs_out(path):
            pl_fail(ctx, "B-COPT", "attribute %s: '%s' names a path that climbs out of the workspace, which is no declared input of the build" % (attr, c),
                    "use a path relative to the workspace, e.g. \"-I$(location :headers)\", or a cc_library in deps")
        if i == len(copts) - 1 and c in _VALUE_FLAGS:
            pl_fail(ctx, "B-COPT", "attribute %s: '%s' is the last copt but takes a value; it would take the rule's own -o as its value" % (attr, c),
                    "give its value as the next element (\"%s\", \"VALUE\"), or drop it" % c)

# ---- paths nvcc's shell sees ------------------------------------------------------------------

_ASCII = " !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\t\n\r"

def non_ascii(s):
    """The non-ASCII characters of `s` (Bazel 7 reads BUILD files as Latin-1: one per byte);
    Starlark here has no ord()."""
    return [ch for ch in s.elems() if ch not in _ASCII]

def check_target_name(ctx):
    """B-NAME: the outputs are named after the target; with a non-ASCII name Bazel 7 creates
    their directories under one encoding and passes their paths to the action under another
    (Latin-1 vs UTF-8), so the action's outputs are "not created"."""
    where = ctx.label.package + ":" + ctx.label.name
    if non_ascii(where):
        pl_fail(ctx, "B-NAME", ("the target's package or name '%s' is not ASCII; Bazel 7 names the outputs after it in one " +
                                "encoding and hands their paths to the action in another, so the action's outputs are never found") % where,
                "rename the target with ASCII letters, digits and _ - . /")

def check_shell_paths(ctx, srcs, include_dirs = []):
    """The target's name and package (object paths are named after them), each source's path and
    each include directory reach nvcc's shell inside double quotes: none may hold $, `, \\ or \"
    (a target named `c$(cmd)` ran cmd while compiling). B-NAME, B-FILE-TYPE, B-INCLUDE."""
    check_target_name(ctx)
    where = ctx.label.package + ":" + ctx.label.name
    bad = shell_chars(where, SHELL_QUOTED_CHARS)
    if bad:
        pl_fail(ctx, "B-NAME", ("the target's package or name '%s' holds %s; the objects' paths are named after it and nvcc " +
                                "passes them to the shell it runs its compilers through, which would expand them") %
                               (where, " ".join(["'%s'" % c for c in bad])),
                "rename the target (letters, digits and _ - . /)")
    for f in srcs:
        bad = shell_chars(f.path, SHELL_QUOTED_CHARS) + non_ascii(f.path)
        if bad:
            pl_fail(ctx, "B-FILE-TYPE", ("attribute srcs: %s holds %s, which the shell nvcc runs its compilers through " +
                                         "would expand in the source's path, or a non-ASCII character, which Bazel 7 passes to " +
                                         "nvcc in another encoding than the file's") % (f.short_path, " ".join(["'%s'" % c for c in bad])),
                    "rename the file (ASCII letters, digits and _ - . /)")
    for d in include_dirs:
        bad = shell_chars(d, SHELL_QUOTED_CHARS + [","])
        if bad:
            pl_fail(ctx, "B-INCLUDE", ("include directory %s (of this package or a dep) holds %s (nvcc splits -I values at " +
                                       "commas and runs its compilers through a shell that would expand the rest)") %
                                      (d, " ".join(["'%s'" % c for c in bad])),
                    "rename the directory, or give its headers through a cc_library in deps")

# ---- includes, contract substitutions -------------------------------------------------------

def check_includes(ctx, includes):
    """B-INCLUDE: package-relative directories only."""
    for inc in includes:
        if not inc or inc.startswith("/") or ".." in inc.split("/"):
            pl_fail(ctx, "B-INCLUDE", "attribute includes: '%s' is %s" % (inc, "empty" if not inc else "not a directory inside this package"),
                    "give a directory relative to this package (\".\" for the package itself); for headers elsewhere add their cc_library to deps")
        bad = shell_chars(inc, SHELL_QUOTED_CHARS + [",", "\n", "\r"])
        if bad:
            pl_fail(ctx, "B-INCLUDE", ("attribute includes: '%s' holds %s (nvcc splits -I values at commas and runs its " +
                                       "compilers through a shell that would interpret the rest)") % (inc, " ".join(["'%s'" % c for c in bad])),
                    "rename the directory, or give its headers through a cc_library in deps")

def check_substitutions(ctx, subs):
    """B-SUBST: keys non-empty; a value has as many line breaks as its key (diagnostics cite
    the contract's lines, which must stay where they are)."""
    for k, v in subs.items():
        if not k:
            pl_fail(ctx, "B-SUBST", "attribute contract_substitutions: an empty key", "use a marker that occurs in the contract, e.g. \"@BLOCK_N@\"")
        if k.count("\n") != v.count("\n") or "\r" in k or "\r" in v:
            pl_fail(ctx, "B-SUBST", ("attribute contract_substitutions: %r -> %r replaces %d line break(s) with %d, which would " +
                                     "move the contract's line numbers") % (k, v, k.count("\n"), v.count("\n")),
                    "give the value as many line breaks as its key")

# ---- sass test arguments --------------------------------------------------------------------

def check_sass_args(ctx, args):
    """B-ARGS: only the sass-diff options a test may pass (--kernel NAME, --side-by-side)."""
    i = 0
    for _ in range(len(args)):
        if i >= len(args):
            break
        a = args[i]
        if a == "--side-by-side":
            i += 1
            continue
        if a.startswith("--kernel=") and is_c_identifier(a[len("--kernel="):]):
            i += 1
            continue
        if a == "--kernel" and i + 1 < len(args) and is_c_identifier(args[i + 1]):
            i += 2
            continue
        pl_fail(ctx, "B-ARGS", "attribute args_extra: '%s' is not an option fused_kernel_sass_test passes to `pipelink sass-diff`" % a,
                "use --kernel=NAME (a C identifier) or --side-by-side; the cubins and --cuda-home come from the rule")
