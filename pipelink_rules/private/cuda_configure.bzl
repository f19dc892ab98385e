"""Repository rules that find the local CUDA toolkit and the linker's Python.

Nothing here downloads anything. The module extension (pipelink_rules/extensions.bzl) passes
the root module's tags; the order of detection is documented there:
  python: tag, $PIPELINK_PYTHON, $VIRTUAL_ENV/bin/python, <root module>/.venv/bin/python,
          <pipelink checkout>/.venv/bin/python, python3 on PATH;
  toolkit: tag, $PIPELINK_CUDA_HOME, the NVIDIA wheels (nvidia/cu13, laid out as
          {bin,include,lib,nvvm}) in that python's site-packages or a .venv's, $CUDA_PATH,
          the nvcc on PATH (its parent's parent directory), like rules_cuda's local detection;
  CUTLASS/CuTe headers: tag, $PIPELINK_CUTLASS_INCLUDE, the nvidia-cutlass wheel
          (site-packages/cutlass_library/source/include), <toolkit>/include.
"""

load(
    ":cuda_configure_files.bzl",
    "control_chars",
    "host_compiler_problem",
    "local_cuda_build",
    "local_cuda_stub_build",
    "missing_tool_script",
    "PYTHON_FINGERPRINT_SCRIPT",
    "PYTHON_LAUNCHER",
    "pipelink_python_build",
    "py_test_interpreter_problem",
    "starlark_string",
)
load(":errors.bzl", "pl_fail")

_ENVIRON = [
    "VIRTUAL_ENV",
    "PIPELINK_CUDA_HOME",
    "PIPELINK_CUTLASS_INCLUDE",
    "PIPELINK_HOST_COMPILER",
    "PIPELINK_PYTHON",
    "CUDA_PATH",
    "PATH",
]

# nvcc 13.0 rejects gcc > 15. Tried in this order; the first that exists and is <= 15 wins.
_HOST_COMPILER_CANDIDATES = ["g++-14", "g++-15", "g++-13", "g++-12", "g++-11", "g++"]
_MAX_GCC_MAJOR = 15

def _workspace_root(rctx):
    """The pipelink checkout (the repo holding this file; also when pipelink is a dependency
    through local_path_override), symlinks resolved. Its .venv holds the toolkit wheels."""
    return _realpath(rctx, str(rctx.path(Label("//:MODULE.bazel")).dirname))

def _realpath(rctx, path):
    res = rctx.execute(["readlink", "-f", path])
    if res.return_code == 0 and res.stdout.strip():
        return res.stdout.strip()
    return path

def root_module_dir(rctx):
    """The root module's directory: the attribute when a caller sets it, else the workspace
    root of this invocation (where the root module's MODULE.bazel lies)."""
    return rctx.attr.root_module_dir or str(rctx.workspace_root)

def _abs(rctx, path):
    """A tag's path: relative paths are relative to the root module's directory."""
    if not path or path.startswith("/"):
        return path
    return root_module_dir(rctx) + "/" + path

def find_python(rctx):
    """Returns (interpreter, how it was found) or (None, reasons tried)."""
    env = rctx.os.environ
    tried = []
    candidates = [
        (_abs(rctx, rctx.attr.interpreter), "the pipelink_toolchains.python tag"),
        (env.get("PIPELINK_PYTHON", ""), "PIPELINK_PYTHON"),
        ((env.get("VIRTUAL_ENV", "") + "/bin/python") if env.get("VIRTUAL_ENV", "") else "", "VIRTUAL_ENV"),
        (root_module_dir(rctx) + "/.venv/bin/python", "the root module's .venv"),
        (_workspace_root(rctx) + "/.venv/bin/python", "the pipelink checkout's .venv"),
    ]
    for path, how in candidates:
        if not path:
            continue
        if rctx.path(path).exists:
            return path, how
        tried.append("%s (%s) does not exist" % (path, how))
        if how.startswith("the pipelink_toolchains") or how == "PIPELINK_PYTHON":
            return None, tried  # an explicit choice that is wrong must not fall through
    py = rctx.which("python3")
    if py:
        return str(py), "python3 on PATH"
    tried.append("no python3 on PATH")
    return None, tried

def _python_site_packages(rctx, python):
    if not python:
        return []
    res = rctx.execute([python, "-s", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    out = res.stdout.strip()
    if res.return_code == 0 and out and rctx.path(out).exists:
        return [out]
    return []

def _venv_site_packages(rctx):
    """site-packages of the linker's python, then of <root module>/.venv and the pipelink
    checkout's .venv (newest Python first)."""
    python, _ = find_python(rctx)
    found = _python_site_packages(rctx, python)
    roots = [root_module_dir(rctx), _workspace_root(rctx)]
    for root in roots:
        if not root:
            continue
        lib = rctx.path(root + "/.venv/lib")
        if not lib.exists:
            continue
        here = []
        for entry in lib.readdir():
            if entry.basename.startswith("python3"):
                sp = rctx.path(str(entry) + "/site-packages")
                if sp.exists:
                    here.append(str(sp))
        found += sorted(here, reverse = True)
    return found

def _is_toolkit(rctx, home):
    return home and rctx.path(home + "/bin/nvcc").exists

def find_cuda_home(rctx):
    """Returns (toolkit root, how it was found) or (None, reasons tried)."""
    env = rctx.os.environ
    tried = []
    home = _abs(rctx, rctx.attr.toolkit_path)
    if home:
        if _is_toolkit(rctx, home):
            return home, "the pipelink_toolchains.cuda tag"
        return None, ["path = %s (pipelink_toolchains.cuda tag) has no bin/nvcc" % home]
    home = env.get("PIPELINK_CUDA_HOME", "")
    if home:
        if _is_toolkit(rctx, home):
            return home, "PIPELINK_CUDA_HOME"
        tried.append("PIPELINK_CUDA_HOME=%s has no bin/nvcc" % home)
    site_packages = _venv_site_packages(rctx)
    for sp in site_packages:
        home = sp + "/nvidia/cu13"
        if _is_toolkit(rctx, home):
            return home, "NVIDIA wheels in " + sp
        tried.append("%s has no bin/nvcc" % home)
    if not site_packages:
        tried.append("no site-packages with NVIDIA wheels (no python found, no .venv)")
    home = env.get("CUDA_PATH", "")
    if home:
        if _is_toolkit(rctx, home):
            return home, "CUDA_PATH"
        tried.append("CUDA_PATH=%s has no bin/nvcc" % home)
    nvcc = rctx.which("nvcc")
    if nvcc:
        home = str(rctx.path(_realpath(rctx, str(nvcc))).dirname.dirname)
        if _is_toolkit(rctx, home):
            return home, "nvcc on PATH"
    tried.append("no nvcc on PATH")
    return None, tried

def _find_cutlass_include(rctx, cuda_home):
    tag_dir = _abs(rctx, rctx.attr.cutlass_include)
    if tag_dir:
        if rctx.path(tag_dir + "/cutlass").exists:
            return tag_dir
        pl_fail("pipelink_toolchains.cuda", "B-MODULE", "cutlass_include = %s has no cutlass/ directory" % tag_dir,
                "give the directory that holds cutlass/ and cute/, or drop cutlass_include to detect it")
    env_dir = rctx.os.environ.get("PIPELINK_CUTLASS_INCLUDE", "")
    if env_dir and rctx.path(env_dir + "/cutlass").exists:
        return env_dir
    for sp in _venv_site_packages(rctx):
        d = sp + "/cutlass_library/source/include"
        if rctx.path(d + "/cutlass").exists:
            return d
    if cuda_home and rctx.path(cuda_home + "/include/cutlass").exists:
        return cuda_home + "/include"
    return None

def _gcc_major(rctx, compiler):
    res = rctx.execute([compiler, "-dumpversion"])
    if res.return_code != 0:
        return None
    head = res.stdout.strip().split(".")[0]
    return int(head) if head.isdigit() else None

def find_host_compiler(rctx):
    """Absolute path of a g++ that nvcc accepts, or None."""
    env_cc = rctx.attr.host_compiler or rctx.os.environ.get("PIPELINK_HOST_COMPILER", "")
    if env_cc:
        found = env_cc if env_cc.startswith("/") else rctx.which(env_cc)
        where = "pipelink_toolchains.cuda" if rctx.attr.host_compiler else "PIPELINK_HOST_COMPILER"
        if not found or not rctx.path(str(found)).exists:
            pl_fail(where, "B-MODULE", "host_compiler = %s does not exist (nor on PATH)" % env_cc,
                    "give the absolute path of a g++ <= 15 (e.g. /usr/bin/g++-14), or drop it to detect one")
        problem = host_compiler_problem(str(found))
        if problem:
            pl_fail(where, "B-MODULE", "host_compiler = %s cannot be nvcc's -ccbin: %s" % (starlark_string(str(found)), problem),
                    "give a path of letters, digits and / . _ - + (a symlink to the compiler), or drop it to detect one")
        return str(found)
    for name in _HOST_COMPILER_CANDIDATES:
        path = rctx.which(name)
        if not path or host_compiler_problem(str(path)):  # a g++ in a directory nvcc's shell would mangle
            continue
        major = _gcc_major(rctx, str(path))
        if major != None and major <= _MAX_GCC_MAJOR:
            return str(path)
    return None

def _host_declares_rsqrt(rctx, host_cc):
    """True if the host C++ compiler's <math.h> declares C23 rsqrt (glibc >= 2.42 with _GNU_SOURCE)."""
    if not host_cc:
        return False
    rctx.file("probe/math.cc", "#include <math.h>\n")
    res = rctx.execute([host_cc, "-x", "c++", "-E", str(rctx.path("probe/math.cc"))])
    rctx.delete("probe")
    return res.return_code == 0 and ("rsqrt (" in res.stdout or "rsqrt(" in res.stdout)

_RSQRT_PATCH_NOTE = """
/* pipelink (cuda_configure.bzl): this host's glibc declares C23 rsqrt/rsqrtf with
 * __THROW (noexcept). CUDA 13.0 declares them without, which cudafe++ rejects
 * ("exception specification is incompatible"); the declarations below get __THROW. */
"""

def _overlay_include(rctx, home, patch_rsqrt):
    """Creates include/ as links to the toolkit's headers, with crt/math_functions.h
    patched when the host glibc declares rsqrt. Returns a note for the BUILD file."""
    src = home + "/include"
    if not patch_rsqrt or not rctx.path(src + "/crt/math_functions.h").exists:
        rctx.symlink(src, "include")
        return ""
    for entry in rctx.path(src).readdir():
        if entry.basename != "crt":
            rctx.symlink(str(entry), "include/" + entry.basename)
    for entry in rctx.path(src + "/crt").readdir():
        if entry.basename != "math_functions.h":
            rctx.symlink(str(entry), "include/crt/" + entry.basename)
    text = rctx.read(src + "/crt/math_functions.h")
    patched = text
    for old, new in [
        ("double                 rsqrt(double x);", "double                 rsqrt(double x) __THROW;"),
        ("float                  rsqrtf(float x);", "float                  rsqrtf(float x) __THROW;"),
    ]:
        if old not in patched:
            pl_fail("@local_cuda", "B-TOOLCHAIN", "cannot patch %s/crt/math_functions.h for this glibc: '%s' not found" % (src, old),
                    "set PIPELINK_HOST_COMPILER (or pipelink_toolchains.cuda(host_compiler = ...)) to a g++ with glibc < 2.42 headers")
        patched = patched.replace(old, new, 1)
    marker = "#if defined(__GNUC__) && !defined(__ANDROID__)"
    patched = patched.replace(marker, _RSQRT_PATCH_NOTE + marker, 1)
    rctx.file("include/crt/math_functions.h", patched)
    return "# include/crt/math_functions.h is patched: rsqrt/rsqrtf get __THROW to match this host's glibc.\n"

def _nvcc_version(rctx, home):
    res = rctx.execute([home + "/bin/nvcc", "--version"])
    for line in res.stdout.splitlines():
        if "release " in line:
            return line.split("release ")[1].split(",")[0].strip()
    return "unknown"

def _missing_tool_script(rctx, name, why):
    rctx.file("missing/" + name, missing_tool_script(name, why), executable = True)
    return "missing/" + name

def _exec_constraints(rctx):
    cpu = {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(rctx.os.arch)
    out = [str(Label("@platforms//os:linux"))]
    if cpu:
        out.append(str(Label("@platforms//cpu:" + cpu)))
    return out

def _local_cuda_impl(rctx):
    toolchain_bzl = str(Label("//pipelink_rules/private:toolchain.bzl"))
    toolchain_type = str(Label("//pipelink_rules:cuda_toolchain_type"))
    home, how = find_cuda_home(rctx)
    if home == None:
        reason = "no CUDA toolkit found: " + "; ".join(how) + ". Fix: pipelink_toolchains.cuda(path = <CUDA 13 toolkit root>) in MODULE.bazel, or PIPELINK_CUDA_HOME, or a python whose site-packages has the nvidia-cuda-* 13.0 wheels (pipelink_toolchains.python); in a pipelink checkout: bash tools/setup.sh."
        rctx.file("BUILD.bazel", local_cuda_stub_build(toolchain_bzl, toolchain_type, reason))
        return

    home = _realpath(rctx, home)
    host_cc = find_host_compiler(rctx) or ""
    include_note = _overlay_include(rctx, home, _host_declares_rsqrt(rctx, host_cc))
    for sub in ["bin", "lib", "nvvm"]:
        if rctx.path(home + "/" + sub).exists:
            rctx.symlink(home + "/" + sub, sub)
        else:
            rctx.file(sub + "/.empty", "")

    cutlass = _find_cutlass_include(rctx, home)
    if cutlass:
        rctx.symlink(_realpath(rctx, cutlass), "cutlass/include")
    else:
        rctx.file("cutlass/include/.empty", "")

    version = _nvcc_version(rctx, home)

    nvjitlink = ""
    libdir = rctx.path(home + "/lib")
    if libdir.exists:
        libs = sorted([e.basename for e in libdir.readdir() if e.basename.startswith("libnvJitLink.so")])
        if libs:
            nvjitlink = "lib/" + libs[-1]
    if not nvjitlink:
        nvjitlink = _missing_tool_script(rctx, "nvjitlink", home)

    tools = {}
    for tool in ["cuobjdump", "nvdisasm"]:
        if rctx.path(home + "/bin/" + tool).exists:
            tools[tool] = "bin/" + tool
        else:
            tools[tool] = _missing_tool_script(rctx, tool, home)

    rctx.file("BUILD.bazel", local_cuda_build({
        "home": home,
        "how": how,
        "include_note": include_note,
        "toolchain_bzl": toolchain_bzl,
        "toolchain_type": toolchain_type,
        "cuobjdump": tools["cuobjdump"],
        "nvdisasm": tools["nvdisasm"],
        "nvjitlink": nvjitlink,
        "cutlass_dir": "cutlass/include" if cutlass else "",
        "host_cc": host_cc,
        "version": version,
        "exec_constraints": _exec_constraints(rctx),
    }))

_COMMON_ATTRS = {
    "interpreter": attr.string(doc = "pipelink_toolchains.python(interpreter = ...) of the root module."),
    "root_module_dir": attr.string(doc = "The root module's directory (relative tag paths start there). Empty: the invocation's workspace root."),
}

local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    attrs = dict(_COMMON_ATTRS, **{
        "toolkit_path": attr.string(doc = "pipelink_toolchains.cuda(path = ...)."),
        "cutlass_include": attr.string(doc = "pipelink_toolchains.cuda(cutlass_include = ...)."),
        "host_compiler": attr.string(doc = "pipelink_toolchains.cuda(host_compiler = ...)."),
    }),
    environ = _ENVIRON,
    local = True,
    configure = True,
    doc = "Creates @local_cuda: the local CUDA toolkit as filegroups plus a cuda_toolchain.",
)

def _python_fingerprint(rctx, python, missing):
    """What the actions are keyed on instead of the interpreter's path (PYTHON_FINGERPRINT_SCRIPT);
    the path itself where the interpreter cannot say (then only that checkout hits its cache).
    Watches the interpreter's site-packages listing: a package installed, removed or upgraded
    there (a new .dist-info name) re-runs this repository rule, so the fingerprint follows."""
    if missing:
        return "missing\n"
    res = rctx.execute([python, "-s", "-c", PYTHON_FINGERPRINT_SCRIPT])
    lines = res.stdout.strip().split("\n")
    if res.return_code != 0 or len(lines) < 2:
        return "path " + python + "\n"
    site = rctx.path(lines[-1])
    if site.exists:
        site.readdir(watch = "yes")
    return "\n".join(lines[:-1]) + "\n"

def _pipelink_python_impl(rctx):
    python, how = find_python(rctx)
    bad = control_chars(python) if python else []
    if bad:  # the #! line of pipelink's own py_tests (and any file name) ends at a line break
        pl_fail(how, "B-MODULE", "the linker's interpreter %s holds %s" % (starlark_string(python), ", ".join(bad)),
                "point %s at a python whose path has no control characters (a symlink to it)" % how)
    missing = ""
    if python == None:
        missing = ("no Python for pipelink's linker: " + "; ".join(how) +
                   ". Fix: pipelink_toolchains.python(interpreter = <a python with z3-solver and " +
                   "cuda-bindings>) in MODULE.bazel, or PIPELINK_PYTHON; in a pipelink checkout: bash tools/setup.sh")
        python = "/nonexistent/python"
    bzl = str(Label("//pipelink_rules/private:python_toolchain.bzl"))
    tt = str(Label("//pipelink_rules:python_toolchain_type"))
    defs = str(Label("@rules_python//python:defs.bzl"))
    refusal = missing or py_test_interpreter_problem(python)  # only pipelink's own py_tests use it: fail there
    rctx.file("interpreter_path", python + "\n")
    rctx.file("python", PYTHON_LAUNCHER, executable = True)
    rctx.file("interpreter.fingerprint", _python_fingerprint(rctx, python, missing))
    rctx.file("BUILD.bazel", pipelink_python_build(python, how if type(how) == "string" else "nothing", missing, bzl, tt, defs, refusal))

pipelink_python_repository = repository_rule(
    implementation = _pipelink_python_impl,
    attrs = _COMMON_ATTRS,
    environ = ["PIPELINK_PYTHON", "VIRTUAL_ENV", "PATH"],
    local = True,
    configure = True,
    doc = "Creates @pipelink_python: the linker's interpreter as a //pipelink_rules:python_toolchain_type toolchain.",
)
