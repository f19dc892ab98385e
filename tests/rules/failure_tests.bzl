"""Failure tests of the pipelink rules: one bad target per class of bad attribute value.

Each test asserts the B-* code (pipelink_rules/private/errors.bzl) and a piece of its hint.
The fixtures (testdata/, :comp, :other_pkg) are declared by rules_analysis_test_suite.
    tools/bazel test //tests/rules:rules_analysis_tests
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts")
load("//pipelink_rules:cuda.bzl", "cuda_ltoir")
load("//pipelink_rules:defs.bzl", "CudaComponentInfo", "cuda_component", "fused_kernel", "fused_kernel_sass_test")
load("//experiments/symbol_link:counterexample.bzl", "check_mutation_rows", "mutation", "symbol_link_mutations")
load("//pipelink_rules/private:cuda_configure_files.bzl", "py_test_interpreter_problem")
load("//pipelink_rules/private:python_toolchain.bzl", "pipelink_py_test_runtime")
load("//pipelink_rules/private:toolchain.bzl", "cuda_toolchain")
load("//pipelink_rules/private:validate.bzl", "check_variant")

_ARCH = str(Label("//pipelink_rules:arch"))

def _failure_test_impl(ctx):
    env = analysistest.begin(ctx)
    asserts.expect_failure(env, "pipelink %s: " % ctx.attr.code)
    asserts.expect_failure(env, ". hint: " + ctx.attr.hint)
    if ctx.attr.message:
        asserts.expect_failure(env, ctx.attr.message)
    return analysistest.end(env)

_ATTRS = {
    "code": attr.string(mandatory = True),
    "hint": attr.string(mandatory = True, doc = "The start of the hint."),
    "message": attr.string(doc = "A piece of the message (optional)."),
}

failure_test = analysistest.make(_failure_test_impl, expect_failure = True, attrs = _ATTRS)

# The //pipelink_rules:arch build setting itself with a bad value.
setting_failure_test = analysistest.make(
    _failure_test_impl,
    expect_failure = True,
    attrs = _ATTRS,
    config_settings = {_ARCH: "sm_75"},
)

def _fake_component_impl(ctx):
    pkg = ctx.actions.declare_file(ctx.label.name + ".plpkg")
    ctx.actions.write(pkg, "")
    return [CudaComponentInfo(
        package = pkg,
        component = ctx.label.name,
        contract = pkg,
        packed_contract = pkg,
        objects = depset(),
        sources = depset(),
        headers = depset(),
        copts = [],
        arch = "sm_80",  # whatever the configuration says: a provider of another arch
        label = ctx.label,
    )]

_fake_component = rule(implementation = _fake_component_impl)

def _gen_file_impl(ctx):
    f = ctx.actions.declare_file(ctx.attr.out)
    ctx.actions.write(f, "")
    return [DefaultInfo(files = depset([f]))]

_gen_file = rule(implementation = _gen_file_impl, attrs = {"out": attr.string()})

# The kernel macros' checks run while a BUILD file loads, where analysis tests cannot look:
# these probes run the same checks from a rule (kernels/moe.bzl's and gemm_variants.bzl's
# check_variant; counterexample.bzl's mutation()).
def _variant_probe_impl(ctx):
    check_variant(ctx, "moe_expert block_n", ctx.attr.value, ctx.attr.built)
    return []

_variant_probe = rule(implementation = _variant_probe_impl, attrs = {"value": attr.string(), "built": attr.string_list()})

def _mutation_probe_impl(ctx):
    mutation(ctx.label.name, owner = "main", what = "a row with neither component nor target")
    return []

_mutation_probe = rule(implementation = _mutation_probe_impl)

def _mutation_rows_probe_impl(ctx):
    row = mutation("bn64", owner = "main", what = "a row", target = ":comp")
    check_mutation_rows(ctx, [row, mutation(ctx.attr.second, owner = "main", what = "another", target = ":comp")])
    return []

_mutation_rows_probe = rule(implementation = _mutation_rows_probe_impl, attrs = {"second": attr.string()})

_SRC = "testdata/comp.cu"
_CONTRACT = "testdata/comp.contract.toml"
_KERNEL = "testdata/kern.kernel.toml"

def _component(name, **kw):
    kw.setdefault("srcs", [_SRC])
    kw.setdefault("contract", _CONTRACT)
    kw.setdefault("component", "comp")
    cuda_component(name = name, tags = ["manual"], **kw)

# (target, code, hint prefix, message piece), then the fixtures below declare each target.
CASES = [
    ("bad_arch", "B-ARCH", 'set arch = "sm_90a"', "unsupported architecture 'sm_75'; supported: sm_90a"),
    ("bad_arch_component", "B-ARCH", 'set arch = "sm_100a", or drop', "unsupported architecture 'sm_100'"),
    ("bad_arch_ltoir", "B-ARCH", 'set arch = "sm_90a"', "attribute arch"),
    ("bad_pinned_component", "B-ARCH-MISMATCH", "drop the `arch` attribute", "pins the component to 'sm_90a' but it is being built for 'sm_100a'"),
    ("bad_foreign_arch", "B-ARCH-MISMATCH", "build the component in the kernel's configuration", "was built for 'sm_80'"),
    ("bad_kernel_file", "B-FILE-TYPE", "name the <kernel>.kernel.toml", "not_a_kernel.toml is not a .kernel.toml file"),
    ("bad_kernel_two_files", "B-FILE-TYPE", "name the <kernel>.kernel.toml", "attribute kernel gives 2 files"),
    ("bad_contract_kernel_toml", "B-FILE-TYPE", "name the component's <component>.contract.toml", "is not a .contract.toml file"),
    ("bad_hdrs_cu", "B-FILE-TYPE", "list only headers in hdrs", "attribute hdrs: tests/rules/testdata/other.cu"),
    ("bad_srcs_toml", "B-FILE-TYPE", "list .cu translation units", "attribute srcs:"),
    ("bad_host_provider", "B-FILE-TYPE", "name the contract's [host] provider", "attribute host_provider"),
    ("bad_ltoir_out", "B-FILE-TYPE", "give a relative name ending in .o", "attribute out: '../x.o'"),
    ("bad_no_cu", "B-SRCS", "list at least one .cu", "attribute srcs has no .cu file"),
    ("bad_no_components", "B-COMPONENTS", "list the cuda_component targets", "attribute components is empty"),
    ("bad_duplicate_package", "B-DUP-PACKAGE", "list each package once", "both provide package 'comp'"),
    ("bad_facts_value", "B-KERNEL-FACT", 'write facts = {"hidden": 4096}', 'attribute facts: hidden = "4096" is a string'),
    ("bad_facts_type", "B-KERNEL-FACT", 'write facts = {"hidden": 4096}', "unknown fact type 'f32'"),
    ("bad_facts_range", "B-KERNEL-FACT", 'write facts = {"hidden": 4096}', "is outside u32's 0..4294967295"),
    ("bad_component_name", "B-NAME", 'set component = "my_comp"', "'my-comp' is not a C identifier"),
    ("bad-target-name", "B-NAME", 'set component = "bad_target_name"', "the target name; `component` is not set"),
    ("bad_define_empty", "B-DEFINE", "remove it", "is an empty define"),
    ("bad_define_no_name", "B-DEFINE", "write NAME or NAME=VALUE", "no name before '='"),
    ("bad_define_comma", "B-DEFINE", "avoid commas", "nvcc splits -D values at commas"),
    ("bad_define_space", "B-DEFINE", "write NAME or NAME=VALUE", "macro name 'TILE M' is not a C identifier"),
    ("bad_define_reserved", "B-DEFINE", "rename it", "macro name 'PL_COMPONENT' is reserved"),
    ("bad_define_twice", "B-DEFINE", "keep one value", "macro TILE is defined twice"),
    ("bad_define_dash_d", "B-DEFINE", 'write "TILE=64"', "starting with -D"),
    ("bad_copt_define", "B-DEFINE", "rename it", "'-DPL_SYM=x'"),
    ("bad_copt_arch", "B-COPT", "drop it: the rule compiles for the kernel's arch", "'-arch=sm_80' sets what the rule controls"),
    ("bad_copt_gencode", "B-COPT", "drop it: the rule compiles for the kernel's arch", "'-gencode'"),
    ("bad_copt_output", "B-COPT", "drop it: the rule names every output", "'-o'"),
    ("bad_copt_rdc", "B-COPT", "drop it: the rule compiles each .cu with -dc", "'--relocatable-device-code=false'"),
    ("bad_copt_dlto", "B-COPT", "drop it: the rule compiles each .cu with -dc", "'-dlto'"),
    ("bad_copt_ccbin", "B-COPT", "drop it: the CUDA toolchain chooses the host compiler", "'-ccbin'"),
    ("bad_copt_keep", "B-COPT", "drop it: kept intermediates", "'--keep'"),
    ("bad_copt_abs_include", "B-COPT", "use a path relative to the workspace", "'-I/usr/include' names an absolute path"),
    ("bad_copt_abs_separate", "B-COPT", "use a path relative to the workspace", "'/opt/include' names an absolute path"),
    ("bad_copt_debug", "B-COPT", "drop it: LTO-IR carries no device debug information", "'-G' sets what the rule controls"),
    ("bad_copt_ltoir", "B-COPT", "drop it: the rule compiles for the kernel's arch", "'--gpu-architecture=sm_90a'"),
    ("bad_define_shell", "B-DEFINE", "give the value through a header", "which the shell nvcc runs its compilers through would interpret"),
    ("bad_dep_define_shell", "B-DEFINE", "fix that cc_library's `defines` (give the value through a header", "a deps' define 'DEP_X=`id`' is a define holding '`'"),
    ("bad_dep_define_reserved", "B-DEFINE", "fix that cc_library's `defines` (rename it", "a deps' define 'PL_SYM=x' is macro name 'PL_SYM' is reserved"),
    ("bad_copt_define_long", "B-DEFINE", "rename it", "'--define-macro=PL_X=1'"),
    ("bad_copt_shell", "B-COPT", "one option per element with no spaces", "'-O2;id' holds ';'"),
    ("bad_copt_dangling", "B-COPT", "give its value as the next element", "'-I' is the last copt but takes a value"),
    ("bad_copt_dangling_define", "B-COPT", "give its value as the next element", "'-D' is the last copt but takes a value"),
    ("bad_copt_passthrough_output", "B-COPT", "drop it: the rule names every output", "'-Xcompiler=-Wall,-o,x.o' passes '-o'"),
    ("bad_copt_host_programs", "B-COPT", "drop it: the host compiler runs only the toolchain's programs", "'-Xcompiler=-Wall,-Btools/evil' passes '-Btools/evil'"),
    ("bad_copt_response_file", "B-COPT", "drop it: an options file is an undeclared input", "'@flags.txt' is a response file"),
    ("bad_copt_climb", "B-COPT", "use a path relative to the workspace", "'../../../etc' names a path that climbs out of the workspace"),
    ("bad_include_comma", "B-INCLUDE", "rename the directory", "'a,b' holds ','"),
    ("bad_name_shell$(touch x)", "B-NAME", "rename the target", "holds '$'; the objects' paths are named after it"),
    ("bad_kernel_name_é", "B-NAME", "rename the target with ASCII letters", "is not ASCII"),
    ("bad_component_name_é", "B-NAME", "rename the target with ASCII letters", "is not ASCII"),
    ("bad_src_shell", "B-FILE-TYPE", "rename the file", "attribute srcs: tests/rules/gen`id`.cu holds '`'"),
    ("bad_ltoir_out_shell", "B-FILE-TYPE", "give a relative name ending in .o", "attribute out: 'x$(id).o' holds '$'"),
    ("bad_copt_unexpanded", "B-COPT", "$(location LABEL)", "'-I$(CUDA_PATH)/include' holds a $(...) that did not expand"),
    ("bad_include_abs", "B-INCLUDE", "give a directory relative to this package", "'/usr/include' is not a directory inside this package"),
    ("bad_include_up", "B-INCLUDE", "give a directory relative to this package", "'../x'"),
    ("bad_subst_empty", "B-SUBST", "use a marker that occurs in the contract", "an empty key"),
    ("bad_subst_newline", "B-SUBST", "give the value as many line breaks as its key", "replaces 0 line break(s) with 1"),
    ("bad_fact_value", "B-FACT", 'write {"<fact>": "<MACRO>=<value>"}', "fact tile's value '0x40' is not a u32 in decimal"),
    ("bad_fact_value_big", "B-FACT", 'write {"<fact>": "<MACRO>=<value>"}', "fact tile's value '4294967296' is not a u32"),
    ("bad_fact_no_macro", "B-FACT", 'write {"<fact>": "<MACRO>=<value>"}', "fact tile is given as '64', not MACRO=VALUE"),
    ("bad_fact_name", "B-FACT", 'write {"<fact>": "<MACRO>=<value>"}', "key 'ti-le' is not a fact name"),
    ("bad_fact_and_define", "B-FACT", "drop it from `defines`", "macro TILE carries fact tile and is also defined as 'TILE=128'"),
    ("bad_sass_args", "B-ARGS", "use --kernel=NAME", "'; rm -rf x'"),
    ("bad_variant", "B-VARIANT", "set moe_expert block_n to one of 64, 128", "moe_expert block_n = 96 is not a variant"),
    ("bad_mutation_row", "B-MUTATION", "give exactly one: component = dict(", "gives neither of component and target"),
    ("bad_mutation_rows_twice", "B-MUTATION", "give each row its own name", 'two rows are named "bn64"'),
    ("bad_mutation_row_name", "B-MUTATION", "name the row like", 'row name "a/b" is empty or not made of'),
    ("bad_mutations_arch", "B-ARCH", 'set arch = "sm_90a"', "unsupported architecture 'sm_75'"),
    ("bad_mutations_arch_mismatch", "B-ARCH-MISMATCH", 'set arch = "sm_90a" (the kernel', "kernel //tests/rules:kern is built for 'sm_90a'"),
    ("bad_toolchain", "B-TOOLCHAIN", "bash tools/setup.sh", "no CUDA toolkit found: nothing here"),
    # pipelink's own py_tests on an interpreter Bazel's py_test stub cannot carry (cuda_configure.bzl)
    ("bad_py_test_runtime", "B-TOOLCHAIN", "point pipelink_toolchains.python", "which Bazel writes into a Python string"),
]

def failure_fixtures():
    """Declares every bad_* target of CASES (all manual: they fail analysis on purpose)."""
    m = ["manual"]
    fused_kernel(name = "bad_arch", arch = "sm_75", kernel = _KERNEL, components = [":comp"], tags = m)
    _component("bad_arch_component", arch = "sm_100")
    cuda_ltoir(name = "bad_arch_ltoir", src = _SRC, arch = "sm_86", tags = m)
    _component("pinned_sm90a", arch = "sm_90a")
    fused_kernel(name = "bad_pinned_component", arch = "sm_100a", kernel = _KERNEL, components = [":pinned_sm90a"], tags = m)
    _fake_component(name = "foreign", tags = m)
    fused_kernel(name = "bad_foreign_arch", kernel = _KERNEL, components = [":foreign"], tags = m)
    fused_kernel(name = "bad_kernel_file", kernel = "testdata/not_a_kernel.toml", components = [":comp"], tags = m)
    native.filegroup(name = "two_kernels", srcs = [_KERNEL, "testdata/not_a_kernel.toml"], tags = m)
    fused_kernel(name = "bad_kernel_two_files", kernel = ":two_kernels", components = [":comp"], tags = m)
    _component("bad_contract_kernel_toml", contract = _KERNEL)
    _component("bad_hdrs_cu", hdrs = ["testdata/other.cu"])
    _component("bad_srcs_toml", srcs = [_SRC, "testdata/other.contract.toml"])
    _component("bad_host_provider", host_provider = "testdata/comp.h")
    cuda_ltoir(name = "bad_ltoir_out", src = _SRC, out = "../x.o", tags = m)
    _component("bad_no_cu", srcs = ["testdata/comp.h"])
    fused_kernel(name = "bad_no_components", kernel = _KERNEL, components = [], tags = m)
    _component("comp_again")
    fused_kernel(name = "bad_duplicate_package", kernel = _KERNEL, components = [":comp", ":comp_again"], tags = m)
    fused_kernel(name = "bad_facts_value", kernel = _KERNEL, components = [":comp"], facts = {"hidden": "4096"}, tags = m)
    fused_kernel(name = "bad_facts_type", kernel = _KERNEL, components = [":comp"], facts = {"hidden": ("f32", 1)}, tags = m)
    fused_kernel(name = "bad_facts_range", kernel = _KERNEL, components = [":comp"], facts = {"hidden": -1}, tags = m)
    _component("bad_component_name", component = "my-comp")
    _component("bad-target-name", component = "")
    _component("bad_define_empty", defines = [""])
    _component("bad_define_no_name", defines = ["=1"])
    _component("bad_define_comma", defines = ["TILE=64,128"])
    _component("bad_define_space", defines = ["TILE M=64"])
    _component("bad_define_reserved", defines = ["PL_COMPONENT=comp"])
    _component("bad_define_twice", defines = ["TILE=64", "TILE=128"])
    _component("bad_define_dash_d", defines = ["-DTILE=64"])
    _component("bad_copt_define", copts = ["-O3", "-DPL_SYM=x"])
    _component("bad_copt_arch", copts = ["-arch=sm_80"])
    _component("bad_copt_gencode", copts = ["-gencode", "arch=compute_90a,code=sm_90a"])
    _component("bad_copt_output", copts = ["-o", "x.o"])
    _component("bad_copt_rdc", copts = ["--relocatable-device-code=false"])
    _component("bad_copt_dlto", copts = ["-dlto"])
    _component("bad_copt_ccbin", copts = ["-ccbin", "clang++"])
    _component("bad_copt_keep", copts = ["--keep"])
    _component("bad_copt_abs_include", copts = ["-I/usr/include"])
    _component("bad_copt_abs_separate", copts = ["-isystem", "/opt/include"])
    _component("bad_copt_debug", copts = ["-G"])
    cuda_ltoir(name = "bad_copt_ltoir", src = _SRC, copts = ["--gpu-architecture=sm_90a"], tags = m)
    _component("bad_define_shell", defines = ["TILE=1+$(touch /tmp/pipelink_pwned)0"])
    native.cc_library(name = "shell_dep", hdrs = ["testdata/dep/include/dep.h"], defines = ["DEP_X=`id`"], tags = m)
    _component("bad_dep_define_shell", deps = [":shell_dep"])
    native.cc_library(name = "reserved_dep", hdrs = ["testdata/dep/include/dep.h"], defines = ["PL_SYM=x"], tags = m)
    _component("bad_dep_define_reserved", deps = [":reserved_dep"])
    _component("bad_copt_define_long", copts = ["--define-macro=PL_X=1"])
    _component("bad_copt_shell", copts = ["-Xcompiler", "-O2;id"])
    _component("bad_copt_dangling", copts = ["-O3", "-I"])
    _component("bad_copt_dangling_define", copts = ["-O3", "-D"])
    _component("bad_copt_passthrough_output", copts = ["-Xcompiler=-Wall,-o,x.o"])
    _component("bad_copt_host_programs", copts = ["-O3", "-Xcompiler=-Wall,-Btools/evil"])
    _component("bad_copt_response_file", copts = ["-Xcompiler", "@flags.txt"])
    _component("bad_copt_climb", copts = ["-isystem", "../../../etc"])
    _component("bad_include_comma", includes = ["a,b"])
    _component("bad_name_shell$(touch x)")
    fused_kernel(name = "bad_kernel_name_é", kernel = _KERNEL, components = [":comp", ":other_pkg"], tags = m)
    _component("bad_component_name_é")
    _gen_file(name = "shell_src", out = "gen`id`.cu", tags = m)
    _component("bad_src_shell", srcs = [":shell_src"])
    cuda_ltoir(name = "bad_ltoir_out_shell", src = _SRC, out = "x$(id).o", tags = m)
    _component("bad_copt_unexpanded", copts = ["-I$(CUDA_PATH)/include"])
    _component("bad_include_abs", includes = ["/usr/include"])
    _component("bad_include_up", includes = ["../x"])
    _component("bad_subst_empty", contract_substitutions = {"": "x"})
    _component("bad_subst_newline", contract_substitutions = {"@X@": "1\n2"})
    _component("bad_fact_value", facts = {"tile": "TILE=0x40"})
    _component("bad_fact_value_big", facts = {"tile": "TILE=4294967296"})
    _component("bad_fact_no_macro", facts = {"tile": "64"})
    _component("bad_fact_name", facts = {"ti-le": "TILE=64"})
    _component("bad_fact_and_define", facts = {"tile": "TILE=64"}, defines = ["TILE=128"])
    fused_kernel(name = "kern_for_sass", kernel = _KERNEL, components = [":comp", ":other_pkg"], tags = m)
    fused_kernel_sass_test(name = "bad_sass_args", kernel = ":kern_for_sass", args_extra = ["; rm -rf x"], tags = m)
    _variant_probe(name = "bad_variant", value = "96", built = ["64", "128"], tags = m)
    _mutation_probe(name = "bad_mutation_row", tags = m)
    _mutation_rows_probe(name = "bad_mutation_rows_twice", second = "bn64", tags = m)
    row = [mutation("other_again", owner = "o", what = "the same package", target = ":other_pkg")]
    symbol_link_mutations(name = "bad_mutations_arch", kernel = ":kern", mutations = row, arch = "sm_75", tags = m)
    symbol_link_mutations(name = "bad_mutations_arch_mismatch", kernel = ":kern", mutations = row, arch = "sm_100a", tags = m)
    _mutation_rows_probe(name = "bad_mutation_row_name", second = "a/b", tags = m)
    cuda_toolchain(name = "bad_toolchain", missing_reason = "no CUDA toolkit found: nothing here. Fix: bash tools/setup.sh.", tags = m)
    pipelink_py_test_runtime(name = "bad_py_test_runtime", refusal = py_test_interpreter_problem("/opt/it's/python"), tags = m)

_TEST_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"

def failure_tests():
    """One failure_test per CASES row (plus the build setting's own); returns their labels."""
    tests = []
    for target, code, hint, message in CASES:
        # A test named after a target named `x$(y)` would trip Bazel's own test-setup.sh.
        test = "".join([ch if ch in _TEST_NAME_CHARS else "_" for ch in target.elems()]) + "_test"
        failure_test(name = test, target_under_test = ":" + target, code = code, hint = hint,
                     message = message, size = "small")
        tests.append(":" + test)
    setting_failure_test(name = "bad_arch_setting_test", target_under_test = ":comp", code = "B-ARCH",
                         hint = "pass --//pipelink_rules:arch=sm_90a", message = "build setting value: unsupported architecture 'sm_75'",
                         size = "small")
    tests.append(":bad_arch_setting_test")
    failure_test(name = "bad_object_collision_test", target_under_test = "@pipelink_rules_test_external//:bad_object_collision",
                 code = "B-SRCS", hint = "compile one of them in another cuda_component",
                 message = "would both compile to _pl_objs/bad_object_collision/tests/rules/testdata/comp.o", size = "small")
    tests.append(":bad_object_collision_test")  # the fixture is in external_fixture.bzl
    return tests
