"""Analysis tests for cuda_component / fused_kernel (bazel_skylib analysistest).

They check the actions' command lines, declared outputs, providers and the arch transition;
failure_tests.bzl checks that bad attributes are rejected at analysis time with a B-* code
and hint. Nothing is compiled.
"""

load("@bazel_skylib//lib:unittest.bzl", "analysistest", "asserts")
load("//pipelink_rules:defs.bzl", "CudaComponentInfo", "FusedKernelInfo", "cuda_component", "fused_kernel", "fused_kernel_sass_test")
load("//pipelink_rules/private:linker_cli.bzl", "PACK_ARCH_FLAG")
load(":configure_files_test.bzl", "configure_files_tests")
load(":failure_tests.bzl", "failure_fixtures", "failure_tests")

_ARCH = str(Label("//pipelink_rules:arch"))

def _actions(env, mnemonic):
    return [a for a in analysistest.target_actions(env) if a.mnemonic == mnemonic]

def _one_action(env, mnemonic):
    found = _actions(env, mnemonic)
    asserts.equals(env, 1, len(found), "expected one %s action" % mnemonic)
    return found[0] if found else None

def _flag_values(argv, flag):
    return [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == flag]

def _basenames(files):
    return sorted([f.basename for f in (files.to_list() if type(files) == "depset" else files)])

def _contains(env, haystack, needle, msg = ""):
    asserts.true(env, needle in haystack, "%s: %r not in %r" % (msg, needle, haystack))

# ---- cuda_component: compile + pack actions, provider --------------------------------------

def _component_test_impl(ctx):
    env = analysistest.begin(ctx)
    target = analysistest.target_under_test(env)
    info = target[CudaComponentInfo]
    asserts.equals(env, "comp", info.component)
    asserts.equals(env, "sm_90a", info.arch)
    asserts.equals(env, "comp.plpkg", info.package.basename)
    asserts.equals(env, "comp.contract.toml", info.contract.basename)
    asserts.equals(env, ["comp.o"], _basenames(info.objects))
    asserts.equals(env, ["comp.cu"], _basenames(info.sources))
    _contains(env, _basenames(info.headers), "comp.h", "headers")
    _contains(env, _basenames(info.headers), "pipelink.h", "headers")
    _contains(env, _basenames(info.headers), "dep.h", "headers (cc_library dep)")
    _contains(env, info.copts, "-DTILE=64", "recorded copts")
    asserts.equals(env, ["comp.plpkg"], _basenames(target[DefaultInfo].files))

    compile = _one_action(env, "CudaCompile")
    if compile:
        argv = compile.argv
        _contains(env, argv, "-gencode=arch=compute_90a,code=lto_90a", "compile argv")
        _contains(env, argv, "-dc", "compile argv")
        _contains(env, argv, "-DTILE=64", "compile argv")
        _contains(env, argv, "-DDEP_DEFINE=1", "compile argv (cc_library defines)")
        asserts.true(env, any([a.startswith("-I") and a.endswith("tools/pipelink/include") for a in argv]),
                     "pipelink.h include dir missing from %r" % argv)
        asserts.true(env, any([a.startswith("-I") and a.endswith("testdata/dep/include") for a in argv]),
                     "cc_library include dir missing from %r" % argv)
        _contains(env, _basenames(compile.inputs), "dep.h", "compile inputs")
        _contains(env, _basenames(compile.inputs), "comp.h", "compile inputs")
        asserts.equals(env, ["comp.o"], _basenames(compile.outputs))

    pack = _one_action(env, "PipelinkPack")
    if pack:
        argv = pack.argv
        _contains(env, argv, "pack", "pack argv")
        asserts.equals(env, ["comp.contract.toml"], [p.rsplit("/", 1)[-1] for p in _flag_values(argv, "--contract")])
        asserts.equals(env, ["comp.o"], [p.rsplit("/", 1)[-1] for p in _flag_values(argv, "--object")])
        asserts.equals(env, ["comp.cu"], [p.rsplit("/", 1)[-1] for p in _flag_values(argv, "--source")])
        asserts.equals(env, ["sm_90a"] if PACK_ARCH_FLAG else [], _flag_values(argv, "--arch"))
        _contains(env, argv, "--copt=-DTILE=64", "pack argv")
        asserts.equals(env, ["comp.plpkg"], _basenames(pack.outputs))
        _contains(env, _basenames(pack.inputs), "comp.o", "pack inputs")
        _contains(env, _basenames(pack.inputs), "comp.contract.toml", "pack inputs")

        # Hermetic: a fixed environment, no absolute paths in the linker's arguments.
        asserts.equals(env, "/usr/bin:/bin", pack.env.get("PATH"))
        for a in argv[argv.index("pack"):]:
            if a.startswith("/") or ("=/" in a and "=//" not in a):  # "=//pkg:name" is a label
                asserts.true(env, False, "absolute path in pack argv: " + a)
    return analysistest.end(env)

component_test = analysistest.make(_component_test_impl)

# ---- cuda_component(facts = ...): one number, to the define and to the packed contract --------

def _facts_test_impl(ctx):
    env = analysistest.begin(ctx)
    info = analysistest.target_under_test(env)[CudaComponentInfo]
    _contains(env, info.copts, "-DTILE=128", "recorded copts")
    compile = _one_action(env, "CudaCompile")
    if compile:
        _contains(env, compile.argv, "-DTILE=128", "compile argv")
    write = [a for a in _actions(env, "FileWrite") if a.outputs.to_list()[0].basename == "facts.json"]
    asserts.equals(env, 1, len(write), "one facts.json")
    if write:
        asserts.equals(env, {"tile": "TILE=128"}, json.decode(write[0].content))
    subst = _one_action(env, "PipelinkSubstitute")
    pack = _one_action(env, "PipelinkPack")
    if subst and pack:
        _contains(env, subst.argv, write[0].outputs.to_list()[0].path if write else "facts.json", "substitute argv")
        packed = subst.outputs.to_list()[0]
        asserts.equals(env, [packed.path], _flag_values(pack.argv, "--contract"), "pack reads the contract with the fact's value")
        asserts.equals(env, packed, info.packed_contract)
    return analysistest.end(env)

facts_test = analysistest.make(_facts_test_impl)

def _component_arch_test_impl(ctx):
    env = analysistest.begin(ctx)
    info = analysistest.target_under_test(env)[CudaComponentInfo]
    asserts.equals(env, "sm_100a", info.arch)
    compile = _one_action(env, "CudaCompile")
    if compile:
        _contains(env, compile.argv, "-gencode=arch=compute_100a,code=lto_100a", "compile argv")
    pack = _one_action(env, "PipelinkPack")
    if pack:
        asserts.equals(env, ["sm_100a"] if PACK_ARCH_FLAG else [], _flag_values(pack.argv, "--arch"))
    return analysistest.end(env)

component_arch_test = analysistest.make(
    _component_arch_test_impl,
    config_settings = {_ARCH: "sm_100a"},
)

def _cutlass_test_impl(ctx):
    env = analysistest.begin(ctx)
    info = analysistest.target_under_test(env)[CudaComponentInfo]
    compile = _one_action(env, "CudaCompile")
    if compile:
        inc = [a for a in compile.argv if a.startswith("-I") and "cutlass" in a.lower()]
        asserts.equals(env, 1, len(inc), "one CUTLASS -I in %r" % compile.argv)
        hdrs = [f for f in compile.inputs.to_list() if f.path.endswith("cutlass/cutlass.h")]
        asserts.equals(env, 1, len(hdrs), "cutlass/cutlass.h is a declared input")
        if inc:
            _contains(env, info.copts, inc[0], "recorded copts carry the CUTLASS include")
    pack = _one_action(env, "PipelinkPack")
    if pack:
        asserts.false(env, any([a.endswith("cutlass/cutlass.h") for a in pack.argv]),
                      "CUTLASS headers come with the toolchain; they are not packed")
    return analysistest.end(env)

cutlass_test = analysistest.make(_cutlass_test_impl)

# ---- sources from another repository: objects stay inside _pl_objs/<target>/ ----------------

_EXTERNAL = "@pipelink_rules_test_external"

def _objects_dir(label):
    """The short_path of _pl_objs/<name>/ of a target: `../<repo>/<pkg>/...` outside the main repository."""
    parts = (["../" + label.workspace_name] if label.workspace_name else []) + ([label.package] if label.package else [])
    return "/".join(parts + ["_pl_objs", label.name]) + "/"

def _external_source_test_impl(ctx):
    env = analysistest.begin(ctx)
    target = analysistest.target_under_test(env)
    compile = _one_action(env, "CudaCompile")
    if compile:
        src = [f for f in compile.inputs.to_list() if f.basename == "comp.cu"]
        asserts.equals(env, 1, len(src), "comp.cu is an input")
        asserts.true(env, src and src[0].short_path.startswith("../"), "the source is from another repository: %r" % src)
        obj = compile.outputs.to_list()[0]
        where = _objects_dir(target.label)
        asserts.true(env, obj.short_path.startswith(where), "object %s is not under %s" % (obj.short_path, where))
        inside = obj.short_path[len(where):].split("/") if obj.short_path.startswith(where) else [".."]
        asserts.false(env, ".." in inside, "object %s climbs out of %s" % (obj.short_path, where))
        asserts.equals(env, ctx.attr.object, obj.short_path[len(where):])
        pack = _one_action(env, "PipelinkPack")
        if pack:
            asserts.equals(env, [obj.path], _flag_values(pack.argv, "--object"))
    return analysistest.end(env)

external_source_test = analysistest.make(_external_source_test_impl, attrs = {"object": attr.string()})

# ---- fused_kernel: link actions, outputs, provider, transition ------------------------------

def _kernel_test_impl(ctx):
    env = analysistest.begin(ctx)
    target = analysistest.target_under_test(env)
    name = target.label.name
    arch = ctx.attr.arch
    info = target[FusedKernelInfo]
    asserts.equals(env, arch, info.arch)
    asserts.equals(env, name + ".cubin", info.cubin.basename)
    asserts.equals(env, name + ".manifest.json", info.manifest.basename)
    asserts.equals(env, name + ".report.json", info.report.basename)
    asserts.equals(env, name + ".map.txt", info.map.basename)
    asserts.equals(env, name + ".control.cubin", info.control_cubin.basename)
    asserts.equals(env, ["comp.plpkg", "other_pkg.plpkg"], _basenames(info.packages))

    # The default outputs exclude the control cubin; the `control` group holds it.
    asserts.equals(
        env,
        sorted([name + s for s in [".cubin", ".manifest.json", ".report.json", ".map.txt"]]),
        _basenames(target[DefaultInfo].files),
    )
    asserts.equals(env, [name + ".control.cubin"], _basenames(target[OutputGroupInfo].control))

    link = _one_action(env, "PipelinkLink")
    if link:
        argv = link.argv
        _contains(env, argv, "link", "link argv")
        asserts.equals(env, [arch], _flag_values(argv, "--arch"))
        asserts.equals(env, ["kern.kernel.toml"], [p.rsplit("/", 1)[-1] for p in _flag_values(argv, "--kernel")])
        asserts.equals(env, ["comp.plpkg", "other_pkg.plpkg"], sorted([p.rsplit("/", 1)[-1] for p in _flag_values(argv, "--package")]))
        asserts.false(env, "--control-cubin" in argv, "the default link must not build the control cubin")
        spills = ctx.attr.spills
        asserts.equals(env, [] if spills == "error" else [spills], _flag_values(argv, "--spills"))
        # The link also writes the placement (output group `placement`; `map_html` draws it).
        asserts.equals(env, sorted([info.cubin.basename, info.manifest.basename, info.report.basename, info.map.basename,
                                    name + ".placement.json"]),
                       _basenames(link.outputs))
        asserts.equals(env, [name + ".placement.json"], _basenames(target[OutputGroupInfo].placement))
        asserts.equals(env, [name + ".map.html"], _basenames(target[OutputGroupInfo].map_html))
        for f in ["--cubin", "--manifest", "--report", "--map", "--placement"]:
            asserts.equals(env, 1, len(_flag_values(argv, f)), "one %s" % f)

        # The packages were built for the kernel's arch: under sm_90a (the setting's default)
        # they share the top-level output directory, otherwise they get their own.
        for p in info.packages.to_list():
            same_dir = p.root.path == info.cubin.root.path
            asserts.equals(env, arch == "sm_90a", same_dir, "output dir of %s vs %s" % (p.path, info.cubin.path))

    control = _one_action(env, "PipelinkControlLink")
    if control:
        asserts.equals(env, [info.control_cubin.path], _flag_values(control.argv, "--control-cubin"))
        _contains(env, _basenames(control.inputs), "comp.cu", "control inputs (sources)")
        _contains(env, _basenames(control.outputs), name + ".control.cubin", "control outputs")
    return analysistest.end(env)

kernel_test = analysistest.make(_kernel_test_impl, attrs = {
    "arch": attr.string(default = "sm_90a"),
    "spills": attr.string(default = "error"),
})

# ---- fused_kernel(facts = ...): the kernel file plus the facts' tables is what both links read ----

def _kernel_facts_test_impl(ctx):
    env = analysistest.begin(ctx)
    name = analysistest.target_under_test(env).label.name
    info = analysistest.target_under_test(env)[FusedKernelInfo]
    writes = [a for a in _actions(env, "FileWrite") if a.outputs.to_list()[0].basename == "facts.toml"]
    asserts.equals(env, 1, len(writes), "one facts.toml")
    if writes:
        asserts.equals(env, "\n# from fused_kernel(facts = ...) of //tests/rules:%s\n\n[fact.flag]\ntype = \"bool\"\nown = true\n\n" % name +
                            "[fact.hidden]\nown = 4096\n\n[fact.offset]\ntype = \"i32\"\nown = -3\n", writes[0].content)
    join = _one_action(env, "PipelinkKernelFacts")
    if join:
        asserts.equals(env, ["kern.kernel.toml"], _basenames(join.outputs))
        asserts.equals(env, "_pl_facts/%s/kern.kernel.toml" % name, info.kernel.short_path.rpartition("tests/rules/")[2])
        for mnemonic in ("PipelinkLink", "PipelinkControlLink"):
            link = _one_action(env, mnemonic)
            if link:
                asserts.equals(env, [info.kernel.path], _flag_values(link.argv, "--kernel"))
    return analysistest.end(env)

kernel_facts_test = analysistest.make(_kernel_facts_test_impl)

# ---- fused_kernel_sass_test: the generated script quotes what it interpolates --------------

_ODD_KERNEL = "kern$(touch sass_pwned)'q"

def _sass_script_test_impl(ctx):
    env = analysistest.begin(ctx)
    writes = [a for a in analysistest.target_actions(env) if a.mnemonic == "FileWrite" and a.outputs.to_list()[0].basename.endswith(".sh")]
    asserts.equals(env, 1, len(writes), "expected the script's FileWrite")
    if writes:
        script = writes[0].content
        # Neither the shell nor Bazel's Latin-1 reading of BUILD files touches the target name:
        # the cubins' paths reach the script through the environment, not its text.
        asserts.false(env, "kern$(" in script, "the kernel's path is in the script: %r" % script)
        _contains(env, script, 'sass-diff "$PIPELINK_SASS_LINKED" "$PIPELINK_SASS_CONTROL"', "sass test script")
    target = analysistest.target_under_test(env)
    environment = target[RunEnvironmentInfo].environment
    asserts.equals(env, "tests/rules/kern$(touch sass_pwned)'q.cubin", environment.get("PIPELINK_SASS_LINKED"))
    asserts.equals(env, "tests/rules/kern$(touch sass_pwned)'q.control.cubin", environment.get("PIPELINK_SASS_CONTROL"))
    return analysistest.end(env)

sass_script_test = analysistest.make(_sass_script_test_impl)

# ---- suite ----------------------------------------------------------------------------------

def rules_analysis_test_suite(name):
    """Declares the fixtures and tests; `name` is the test_suite."""
    native.cc_library(
        name = "dep",
        hdrs = ["testdata/dep/include/dep.h"],
        includes = ["testdata/dep/include"],
        defines = ["DEP_DEFINE=1"],
        tags = ["manual"],
    )
    cuda_component(
        name = "comp",
        srcs = ["testdata/comp.cu"],
        hdrs = ["testdata/comp.h"],
        contract = "testdata/comp.contract.toml",
        deps = [":dep"],
        defines = ["TILE=64"],
        tags = ["manual"],
    )
    cuda_component(
        name = "comp_facts",  # TILE once, for the define and the contract (analysed only: comp owns no fact)
        component = "comp",
        srcs = ["testdata/comp.cu"],
        contract = "testdata/comp.contract.toml",
        facts = {"tile": "TILE=128"},
        tags = ["manual"],
    )
    cuda_component(
        name = "other_pkg",
        component = "other",
        srcs = ["testdata/other.cu"],
        contract = "testdata/other.contract.toml",
        tags = ["manual"],
    )
    cuda_component(
        name = "comp_cutlass",
        component = "comp",
        srcs = ["testdata/comp.cu"],
        contract = "testdata/comp.contract.toml",
        cutlass = True,
        tags = ["manual"],
    )
    cuda_component(
        name = "comp_external_src",  # a main-repository component compiling another repository's source
        component = "comp",
        srcs = [_EXTERNAL + "//:comp.cu"],
        hdrs = [_EXTERNAL + "//:comp.h"],
        contract = "testdata/comp.contract.toml",
        tags = ["manual"],
    )
    fused_kernel(name = "kern", kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"])
    fused_kernel(name = "kern_sm100a", arch = "sm_100a", kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"])
    fused_kernel(name = "kern_spills", spills = "warning", kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"])
    fused_kernel(name = "kern_sm120a", arch = "sm_120a", kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"])

    fused_kernel(name = "kern_facts", kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"],
                 facts = {"hidden": 4096, "offset": ("i32", -3), "flag": True})
    fused_kernel(name = _ODD_KERNEL, kernel = "testdata/kern.kernel.toml", components = [":comp", ":other_pkg"], tags = ["manual"])
    fused_kernel_sass_test(name = "odd_sass", kernel = ":" + _ODD_KERNEL, tags = ["manual"])

    failure_fixtures()  # the bad_* targets (failure_tests.bzl)

    component_test(name = "component_test", target_under_test = ":comp", size = "small")
    component_arch_test(name = "component_arch_test", target_under_test = ":comp", size = "small")
    cutlass_test(name = "cutlass_test", target_under_test = ":comp_cutlass", size = "small")
    facts_test(name = "facts_test", target_under_test = ":comp_facts", size = "small")
    kernel_test(name = "kernel_test", target_under_test = ":kern", size = "small")
    kernel_test(name = "kernel_sm100a_test", target_under_test = ":kern_sm100a", size = "small", arch = "sm_100a")
    kernel_test(name = "kernel_sm120a_test", target_under_test = ":kern_sm120a", size = "small", arch = "sm_120a")
    kernel_test(name = "kernel_spills_test", target_under_test = ":kern_spills", size = "small", spills = "warning")
    sass_script_test(name = "sass_script_test", target_under_test = ":odd_sass", size = "small")
    kernel_facts_test(name = "kernel_facts_test", target_under_test = ":kern_facts", size = "small")
    external_source_test(name = "external_source_test", target_under_test = ":comp_external_src", size = "small",
                         object = "external/%s/comp.o" % Label(_EXTERNAL + "//:comp.cu").workspace_name)

    # Two components of another repository built from its one comp.cu (as tile variants are): each
    # object under its own target's folder (they used to share _pl_objs/<repo>/comp.o).
    external_source_test(name = "external_component_test", target_under_test = _EXTERNAL + "//:comp", size = "small", object = "comp.o")
    external_source_test(name = "external_variant_test", target_under_test = _EXTERNAL + "//:comp_tile128", size = "small", object = "comp.o")
    failures = failure_tests() + configure_files_tests()
    native.test_suite(
        name = name,
        tests = [
            ":component_test",
            ":component_arch_test",
            ":cutlass_test",
            ":facts_test",
            ":kernel_test",
            ":kernel_sm100a_test",
            ":kernel_sm120a_test",
            ":kernel_spills_test",
            ":sass_script_test",
            ":kernel_facts_test",
            ":external_source_test",
            ":external_component_test",
            ":external_variant_test",
        ] + failures,
    )
