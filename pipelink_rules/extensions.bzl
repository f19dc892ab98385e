"""Module extension of pipelink: its toolchains, configured from the root module's MODULE.bazel.

    pipelink = use_extension("@pipelink//pipelink_rules:extensions.bzl", "pipelink_toolchains")
    pipelink.cuda(path = "/usr/local/cuda-13.0")        # optional; default: detected
    pipelink.python(interpreter = ".venv/bin/python")   # optional; default: detected

Nothing to register: pipelink's MODULE.bazel registers `@local_cuda//:cuda_toolchain` and
`@pipelink_python//:linker_toolchain` for every module that depends on it. Only the root
module's tags count (like rules_cuda's); each tag class at most once. Relative paths are
relative to the root module's directory. Detection order (first found wins):

  python (the interpreter of pipelink's own pack/link actions; it needs z3-solver and
  cuda-bindings — `pip install` pipelink's requirements.lock):
    the tag; $PIPELINK_PYTHON; $VIRTUAL_ENV/bin/python; <root module>/.venv/bin/python;
    <pipelink checkout>/.venv/bin/python (local_path_override of a set-up checkout);
    python3 on PATH.
  cuda (a CUDA 13 toolkit root holding bin/nvcc):
    the tag; $PIPELINK_CUDA_HOME; the NVIDIA wheels (nvidia/cu13) in the interpreter's
    site-packages; those of <root module>/.venv or <pipelink checkout>/.venv; $CUDA_PATH; the
    nvcc on PATH.
  CUTLASS/CuTe headers: the tag's cutlass_include; $PIPELINK_CUTLASS_INCLUDE; the
    nvidia-cutlass wheel next to the toolkit wheels; <toolkit>/include/cutlass.

The interpreter is pipelink's own toolchain type (`//pipelink_rules:python_toolchain_type`):
it never becomes the Python toolchain of the consumer's py_binary/py_test targets.
"""

load("//pipelink_rules/private:cuda_configure.bzl", "local_cuda_repository", "pipelink_python_repository")
load("//pipelink_rules/private:errors.bzl", "pl_fail")

_cuda_tag = tag_class(
    doc = "The CUDA toolkit for pipelink's compile, pack and link actions.",
    attrs = {
        "path": attr.string(doc = "Toolkit root (holds bin/nvcc). Empty: detect."),
        "cutlass_include": attr.string(doc = "Directory holding cutlass/ and cute/. Empty: detect."),
        "host_compiler": attr.string(doc = "The g++ nvcc runs (-ccbin); nvcc 13.0 takes g++ <= 15. Empty: detect."),
    },
)

_python_tag = tag_class(
    doc = "The interpreter of pipelink's linker (pack/link actions, sass tests).",
    attrs = {
        "interpreter": attr.string(doc = "Path of a python (>= 3.11) with z3-solver and cuda-bindings. Empty: detect."),
    },
)

def _one(module, tags, what):
    if len(tags) > 1:
        pl_fail("module %s" % module.name, "B-MODULE", "pipelink_toolchains.%s is given %d times" % (what, len(tags)),
                "give each pipelink_toolchains tag class at most once, in the root module's MODULE.bazel")
    return tags[0] if tags else None

def _pipelink_toolchains_impl(module_ctx):
    cuda = None
    python = None
    for mod in module_ctx.modules:
        if not mod.is_root:
            continue
        cuda = _one(mod, mod.tags.cuda, "cuda")
        python = _one(mod, mod.tags.python, "python")
    # The root module's directory is the workspace root of the invocation; the repository
    # rules read it from rctx.workspace_root. Resolving a label such as @@//:MODULE.bazel here
    # would need a BUILD file in the root package, which a consumer workspace need not have.
    interpreter = python.interpreter if python else ""
    local_cuda_repository(
        name = "local_cuda",
        toolkit_path = cuda.path if cuda else "",
        cutlass_include = cuda.cutlass_include if cuda else "",
        host_compiler = cuda.host_compiler if cuda else "",
        interpreter = interpreter,
    )
    pipelink_python_repository(
        name = "pipelink_python",
        interpreter = interpreter,
    )

pipelink_toolchains = module_extension(
    implementation = _pipelink_toolchains_impl,
    tag_classes = {"cuda": _cuda_tag, "python": _python_tag},
    doc = "Creates @local_cuda (the CUDA toolkit + cuda_toolchain) and @pipelink_python (the " +
          "linker's interpreter as pipelink's own toolchain). See this file's docstring.",
)
