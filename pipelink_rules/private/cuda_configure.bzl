"""Repository rules that find the local CUDA toolkit and the repo's Python.

Nothing here downloads anything: the toolkit comes from (in order)
  1. $PIPELINK_CUDA_HOME,
  2. the NVIDIA PyPI wheels in the repo's .venv (.venv/lib/python3*/site-packages/nvidia/cu13,
     laid out as {bin,include,lib,nvvm}), as installed by tools/setup.sh,
  3. $CUDA_PATH,
  4. the nvcc found on PATH (its parent's parent directory),
like rules_cuda's local detection. CUTLASS/CuTe headers come from $PIPELINK_CUTLASS_INCLUDE
or the nvidia-cutlass wheel (site-packages/cutlass_library/source/include).
The Python for link actions is $PIPELINK_PYTHON or the repo's .venv/bin/python.
"""

_ENVIRON = [
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

def _venv_site_packages(rctx):
    """All .venv/lib/python3*/site-packages directories of the workspace, newest first."""
    lib = rctx.path(_workspace_root(rctx) + "/.venv/lib")
    if not lib.exists:
        return []
    found = []
    for entry in lib.readdir():
        if entry.basename.startswith("python3"):
            sp = rctx.path(str(entry) + "/site-packages")
            if sp.exists:
                found.append(str(sp))
    return sorted(found, reverse = True)

def _is_toolkit(rctx, home):
    return home and rctx.path(home + "/bin/nvcc").exists

def find_cuda_home(rctx):
    """Returns (toolkit root, how it was found) or (None, reasons tried)."""
    env = rctx.os.environ
    tried = []
    home = env.get("PIPELINK_CUDA_HOME", "")
    if home:
        if _is_toolkit(rctx, home):
            return home, "PIPELINK_CUDA_HOME"
        tried.append("PIPELINK_CUDA_HOME=%s has no bin/nvcc" % home)
    site_packages = _venv_site_packages(rctx)
    for sp in site_packages:
        home = sp + "/nvidia/cu13"
        if _is_toolkit(rctx, home):
            return home, ".venv wheels"
        tried.append("%s has no bin/nvcc" % home)
    if not site_packages:
        tried.append("no .venv in %s" % _workspace_root(rctx))
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
    env_cc = rctx.os.environ.get("PIPELINK_HOST_COMPILER", "")
    if env_cc:
        return env_cc
    for name in _HOST_COMPILER_CANDIDATES:
        path = rctx.which(name)
        if not path:
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
            fail("pipelink: cannot patch %s/crt/math_functions.h for this glibc: '%s' not found. Set PIPELINK_HOST_COMPILER to a g++ with glibc < 2.42 headers." % (src, old))
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
    rctx.file(
        "missing/" + name,
        "#!/bin/sh\necho 'pipelink: %s is not in the CUDA toolkit at %s. Fix: bash tools/setup.sh (installs the nvidia-cuda-%s wheel)' >&2\nexit 1\n" % (name, why, name),
        executable = True,
    )
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
        reason = "no CUDA toolkit found: " + "; ".join(how) + ". Fix: bash tools/setup.sh, or set PIPELINK_CUDA_HOME to a CUDA 13 toolkit root."
        rctx.file("BUILD.bazel", """\
load("{bzl}", "cuda_toolchain")
package(default_visibility = ["//visibility:public"])
cuda_toolchain(name = "toolkit", missing_reason = {reason})
toolchain(name = "cuda_toolchain", toolchain = ":toolkit", toolchain_type = "{tt}")
""".format(bzl = toolchain_bzl, reason = repr(reason), tt = toolchain_type))
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

    rctx.file("BUILD.bazel", """\
# Generated by pipelink_rules/private/cuda_configure.bzl. Toolkit: {home} (found via {how}).
{include_note}load("{bzl}", "cuda_toolchain")

package(default_visibility = ["//visibility:public"])

exports_files(glob(["bin/*", "lib/*"]))

filegroup(name = "nvcc", srcs = ["bin/nvcc"])

filegroup(
    name = "nvcc_files",
    srcs = glob(["bin/**", "nvvm/**", "include/**", "lib/**"], exclude = ["**/__pycache__/**", "lib/cmake/**"]),
)

filegroup(name = "headers", srcs = glob(["include/**"]))

filegroup(name = "cuobjdump", srcs = ["{cuobjdump}"])

filegroup(name = "nvdisasm", srcs = ["{nvdisasm}"])

filegroup(name = "nvjitlink", srcs = ["{nvjitlink}"])

filegroup(name = "cutlass_headers", srcs = glob(["cutlass/include/**"], exclude = ["**/.empty"]))

cuda_toolchain(
    name = "toolkit",
    nvcc = "bin/nvcc",
    nvcc_files = ":nvcc_files",
    cuobjdump = "{cuobjdump}",
    nvdisasm = "{nvdisasm}",
    nvjitlink = "{nvjitlink}",
    cutlass_headers = ":cutlass_headers",
    cutlass_include_dir = "{cutlass_dir}",
    host_compiler = "{host_cc}",
    version = "{version}",
    copts = {copts},
)

toolchain(
    name = "cuda_toolchain",
    exec_compatible_with = {exec_constraints},
    toolchain = ":toolkit",
    toolchain_type = "{tt}",
)
""".format(
        home = home,
        how = how,
        include_note = include_note,
        bzl = toolchain_bzl,
        cuobjdump = tools["cuobjdump"],
        nvdisasm = tools["nvdisasm"],
        nvjitlink = nvjitlink,
        cutlass_dir = "cutlass/include" if cutlass else "",
        host_cc = host_cc,
        version = version,
        copts = repr([]),
        exec_constraints = repr(_exec_constraints(rctx)),
        tt = toolchain_type,
    ))

local_cuda_repository = repository_rule(
    implementation = _local_cuda_impl,
    environ = _ENVIRON,
    local = True,
    configure = True,
    doc = "Creates @local_cuda: the local CUDA toolkit as filegroups plus a cuda_toolchain.",
)

def _pipelink_python_impl(rctx):
    python = rctx.os.environ.get("PIPELINK_PYTHON", "") or (_workspace_root(rctx) + "/.venv/bin/python")
    note = ""
    if not rctx.path(python).exists:
        note = "# WARNING: %s does not exist yet. Fix: bash tools/setup.sh\n" % python
        print("pipelink: " + note.strip())  # buildifier: disable=print
    defs = str(Label("@rules_python//python:defs.bzl"))
    rctx.file("BUILD.bazel", """\
# Generated by pipelink_rules/private/cuda_configure.bzl: the repo's venv Python (z3-solver,
# cuda-bindings) as the Python toolchain for py_binary/py_test and link actions.
{note}load("{defs}", "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

py_runtime(
    name = "venv_python",
    interpreter_path = "{python}",
    python_version = "PY3",
    stub_shebang = "#!{python}",
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":venv_python",
)

toolchain(
    name = "python_toolchain",
    toolchain = ":runtime_pair",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(note = note, defs = defs, python = python))

pipelink_python_repository = repository_rule(
    implementation = _pipelink_python_impl,
    environ = ["PIPELINK_PYTHON"],
    local = True,
    configure = True,
    doc = "Creates @pipelink_python: a py_runtime_pair whose interpreter is the repo's .venv/bin/python.",
)
