"""Smoke test of the build toolchains (issue 2).

Under pytest (no arguments) it checks the venv: z3 and cuda.bindings.nvjitlink import and work.
Under Bazel (//tests:toolchain_smoke_test) it is given the two LTO-IR objects of
//examples/hello and the toolchain's cuobjdump: it links them with nvJitLink (-lto, no GPU
needed) and checks the placement was folded (no CALL left in the SASS).
"""

import os
import subprocess
import sys
import unittest


class ToolchainSmokeTest(unittest.TestCase):
    def test_z3(self):
        import z3

        x = z3.Int("x")
        s = z3.Solver()
        s.add(x > 3, x < 5)
        self.assertEqual(s.check(), z3.sat)
        self.assertEqual(s.model()[x].as_long(), 4)

    def test_nvjitlink_imports(self):
        from cuda.bindings import nvjitlink

        major, minor = nvjitlink.version()
        self.assertGreaterEqual(major, 13)

    def test_link_hello_with_lto(self):
        if not os.environ.get("PIPELINK_SMOKE_OBJS"):
            self.skipTest("needs the Bazel-built objects (bazel test //tests:toolchain_smoke_test)")
        from cuda.bindings import nvjitlink

        objs = os.environ["PIPELINK_SMOKE_OBJS"].split(os.pathsep)
        cuobjdump = os.environ["PIPELINK_SMOKE_CUOBJDUMP"]
        handle = nvjitlink.create(3, ["-arch=sm_90a", "-lto", "-O3"])
        try:
            for path in objs:
                with open(path, "rb") as f:
                    data = f.read()
                nvjitlink.add_data(handle, nvjitlink.InputType.OBJECT, data, len(data), os.path.basename(path))
            nvjitlink.complete(handle)
            size = nvjitlink.get_linked_cubin_size(handle)
            cubin = bytearray(size)
            nvjitlink.get_linked_cubin(handle, cubin)
        finally:
            nvjitlink.destroy(handle)
        out_dir = os.environ.get("TEST_TMPDIR", "/tmp")
        cubin_path = os.path.join(out_dir, "hello.cubin")
        with open(cubin_path, "wb") as f:
            f.write(cubin)
        sass = subprocess.run([cuobjdump, "-sass", cubin_path], check=True, capture_output=True, text=True).stdout
        self.assertIn("hello_kernel", sass)
        self.assertNotIn("CALL", sass, "pl_hello_scale() should have been inlined by LTO")


def main():
    # Bazel passes: <obj>... <cuobjdump>
    argv = sys.argv[1:]
    if argv:
        os.environ["PIPELINK_SMOKE_OBJS"] = os.pathsep.join(argv[:-1])
        os.environ["PIPELINK_SMOKE_CUOBJDUMP"] = argv[-1]
    unittest.main(argv=sys.argv[:1], verbosity=2)


if __name__ == "__main__":
    main()
