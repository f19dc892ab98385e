"""Unit tests of the files cuda_configure.bzl generates (cuda_configure_files.bzl): a value from
the machine (PIPELINK_CUDA_HOME, PIPELINK_PYTHON, a site-packages path, nvcc's version) holding a
quote, a backslash, a line break or a `$` stays one string literal of the BUILD file (one quoted
word of a script) and cannot add a line of code to it.

Before, the values were pasted between double quotes or into a comment, so a PIPELINK_CUDA_HOME
of `/opt/cuda\\nload("@evil//:x.bzl", "y")` wrote that load() into @local_cuda's BUILD file.
"""

load("@bazel_skylib//lib:unittest.bzl", "asserts", "unittest")
load(
    "//pipelink_rules/private:cuda_configure_files.bzl",
    "control_chars",
    "host_compiler_problem",
    "local_cuda_build",
    "local_cuda_stub_build",
    "missing_tool_script",
    "pipelink_python_build",
    "py_stub_shebang",
    "py_test_interpreter_problem",
    "sh_quote",
    "starlark_string",
)
load("//pipelink_rules/private:toolchain.bzl", "split_fix")

# Each a hostile value of the machine's; the generated text must hold it only as repr() does.
_HOSTILE = [
    '/opt/cu"da\\\nload("@evil//:x.bzl", "y")\n# $HOME',
    "/a'b $(touch pwned) `id`\n)\ncuda_toolchain(name = \"evil\")",
    "C:\\temp\\\"\"\"",
    "13.0\"\ncopts = [\"-Xcompiler=-fplugin=/tmp/evil.so\"]#",
]

def _swap(text, benign, hostile):
    for b, h in zip(benign, hostile):
        text = text.replace(starlark_string(b), starlark_string(h))
        text = text.replace(starlark_string(py_stub_shebang(b)), starlark_string(py_stub_shebang(h)))  # the py_runtime's stub_shebang
    return text

def _no_injection(env, make, n):
    """make(values) -> text. The text of hostile values is that of plain placeholders with each
    placeholder's literal replaced by the hostile value's: nothing else of the file changed."""
    benign = ["PLACEHOLDER_%d" % i for i in range(n)]
    for shift in range(len(_HOSTILE)):
        hostile = [_HOSTILE[(i + shift) % len(_HOSTILE)] for i in range(n)]
        got = make(hostile)
        asserts.equals(env, _swap(make(benign), benign, hostile), got)
        asserts.equals(env, len(make(benign).split("\n")), len(got.split("\n")), "a value added lines")
        for h in hostile:
            asserts.false(env, "\n" in starlark_string(h), "a line break in %s" % starlark_string(h))

def _local_cuda_build_test_impl(ctx):
    env = unittest.begin(ctx)
    keys = ["home", "how", "toolchain_bzl", "toolchain_type", "cuobjdump", "nvdisasm", "nvjitlink", "cutlass_dir", "host_cc", "version"]

    def make(values):
        v = {k: values[i] for i, k in enumerate(keys)}
        v["include_note"] = ""
        v["exec_constraints"] = [values[0]]
        return local_cuda_build(v)

    _no_injection(env, make, len(keys))
    _no_injection(env, lambda vs: local_cuda_stub_build(vs[0], vs[1], vs[2]), 3)
    _no_injection(env, lambda vs: pipelink_python_build(vs[0], vs[1], vs[2], vs[3], vs[4], vs[5], vs[6]), 7)
    return unittest.end(env)

local_cuda_build_test = unittest.make(_local_cuda_build_test_impl)

def _missing_tool_script_test_impl(ctx):
    env = unittest.begin(ctx)
    asserts.equals(env, "'a'\\''b'", sh_quote("a'b"))
    for home in _HOSTILE:
        script = missing_tool_script("cuobjdump", home)
        message = "pipelink: cuobjdump is not in the CUDA toolkit at %s. Fix: bash tools/setup.sh (installs the nvidia-cuda-cuobjdump wheel)" % home
        asserts.equals(env, "#!/bin/sh\necho " + sh_quote(message) + " >&2\nexit 1\n", script)

        # Outside the quotes only sh's own `'\''`: the single-quoted word is the whole message.
        asserts.equals(env, message, script[len("#!/bin/sh\necho '"):-len("' >&2\nexit 1\n")].replace("'\\''", "'"))
    return unittest.end(env)

missing_tool_script_test = unittest.make(_missing_tool_script_test_impl)

def _refusals_test_impl(ctx):
    env = unittest.begin(ctx)
    asserts.equals(env, "", host_compiler_problem("/usr/bin/g++-14"))
    asserts.equals(env, "", host_compiler_problem("/opt/gcc+13/bin/x86_64-linux-gnu-g++"))
    for bad in ["/opt/my gcc/g++", "/opt/$x/g++", "/opt/a\"b/g++", "/opt/a\nb/g++", "/opt/a\\b/g++", "/opt/`id`/g++"]:
        asserts.true(env, host_compiler_problem(bad) != "", "nvcc's shell would mangle %s" % repr(bad))
    asserts.equals(env, ['"\\n"', '"\\t"'], control_chars("/a\nb\tc\n"))
    asserts.equals(env, '"a\\"b\\\\c\\nd\\001$e"', starlark_string('a"b\\c\nd\001$e'))
    asserts.equals(env, [], control_chars("/home/me/My Projects/.venv/bin/python"))

    # A py_test's stub starts as /bin/sh, which execs the interpreter quoted; Python reads lines
    # 2-3 as a string (no backslash: Python would read an escape). Before: `#!/My Projects/python`.
    asserts.equals(env, "#!/bin/sh\n'''exec' '/My Projects/$x \"q\"/python' \"$0\" \"$@\"\n' '''",
                   py_stub_shebang("/My Projects/$x \"q\"/python"))
    asserts.equals(env, "#!/bin/sh\n'''exec' '/a'\"'\"'b/python' \"$0\" \"$@\"\n' '''", py_stub_shebang("/a'b/python"))
    asserts.equals(env, "", py_test_interpreter_problem("/My Projects/$x \"q\"/python"))
    for bad in ["/a'b/python", "/a\\b/python"]:
        asserts.true(env, " Fix: " in py_test_interpreter_problem(bad), bad)

    # The fix is after the last " Fix: ": the paths before it are the machine's.
    asserts.equals(env, ("PIPELINK_CUDA_HOME=/x Fix: y has no bin/nvcc", "set it"),
                   split_fix("PIPELINK_CUDA_HOME=/x Fix: y has no bin/nvcc Fix: set it"))
    asserts.equals(env, ("nothing to fix", ""), split_fix("nothing to fix"))
    return unittest.end(env)

refusals_test = unittest.make(_refusals_test_impl)

def configure_files_tests():
    """Declares the tests; returns their labels (rules_analysis_test_suite adds them to its suite)."""
    local_cuda_build_test(name = "configure_files_build_test", size = "small")
    missing_tool_script_test(name = "configure_files_script_test", size = "small")
    refusals_test(name = "configure_files_refusals_test", size = "small")
    return [":configure_files_build_test", ":configure_files_script_test", ":configure_files_refusals_test"]
