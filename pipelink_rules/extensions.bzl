"""Module extensions of pipelink (use from MODULE.bazel)."""

load("//pipelink_rules/private:cuda_configure.bzl", "local_cuda_repository", "pipelink_python_repository")

def _pipelink_toolchains_impl(module_ctx):
    local_cuda_repository(name = "local_cuda")
    pipelink_python_repository(name = "pipelink_python")

pipelink_toolchains = module_extension(
    implementation = _pipelink_toolchains_impl,
    doc = "Creates @local_cuda (the local CUDA toolkit + cuda_toolchain) and @pipelink_python (the repo's venv as Python toolchain).",
)
