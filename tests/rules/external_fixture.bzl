"""A repository outside the main one, for the analysis tests of sources from another repository.

`@pipelink_rules_test_external` (pipelink's MODULE.bazel, dev_dependency: only when pipelink is
the root module) holds a copy of testdata/comp.{cu,h,contract.toml} and two cuda_components that
compile the one comp.cu with different defines, as kernels/gemm_variants.bzl does. Its sources'
short_path is `../<repo>/comp.cu`, which objects must not be named after; `bad_object_collision`
is a component two of whose sources would compile to one object path.
"""

_BUILD = """\
load("@@//pipelink_rules:defs.bzl", "cuda_component")

package(default_visibility = ["//visibility:public"])

exports_files(["comp.cu", "comp.h", "comp.contract.toml"])

[cuda_component(
    name = name,
    component = "comp",
    srcs = ["comp.cu"],
    hdrs = ["comp.h"],
    contract = "comp.contract.toml",
    defines = ["TILE=%d" % tile],
    tags = ["manual"],
) for name, tile in [("comp", 64), ("comp_tile128", 128)]]

# Its own tests/rules/testdata/comp.cu and the main repository's: both objects would be
# _pl_objs/bad_object_collision/tests/rules/testdata/comp.o (B-SRCS).
cuda_component(
    name = "bad_object_collision",
    component = "comp",
    srcs = ["tests/rules/testdata/comp.cu", "@@//tests/rules:testdata/comp.cu"],
    hdrs = ["comp.h"],
    contract = "comp.contract.toml",
    tags = ["manual"],
)
"""

def _external_fixture_repository_impl(rctx):
    for f in ["comp.cu", "comp.h", "comp.contract.toml"]:
        rctx.file(f, rctx.read(Label("//tests/rules:testdata/" + f)))
    rctx.file("tests/rules/testdata/comp.cu", rctx.read(Label("//tests/rules:testdata/comp.cu")))
    rctx.file("BUILD.bazel", _BUILD)

external_fixture_repository = repository_rule(implementation = _external_fixture_repository_impl)

def _external_fixture_impl(module_ctx):
    external_fixture_repository(name = "pipelink_rules_test_external")

external_fixture = module_extension(
    implementation = _external_fixture_impl,
    doc = "Creates @pipelink_rules_test_external (see this file's docstring).",
)
