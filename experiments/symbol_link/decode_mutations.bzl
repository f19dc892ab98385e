"""The decode megakernel's mutation for the symbol-linking counterexample (issue 43's gate;
issue 9's rule, experiments/symbol_link/counterexample.bzl): the weight stream's owner changes
its tile size (DEC_TILE_ELEMS 16384 -> 8192, the fact tile_elems it owns). The step and the
attention role read tile_elems through handles (their tile walks and the QKV tile count), and
the Python side packs the gate/up interleave by it (the manifest's fact), so pipelink's relink
propagates the change; the plain symbol link keeps the original glue's 16384 for every reader.

    tools/bazel build //experiments:llama_tiny_mutations
    python3 benchmarks/llama_decode_bench.py counterexample                         # GPU
"""

load(":counterexample.bzl", "mutation", "symbol_link_mutations")

_DEC = "//kernels/decode:"

def decode_mutations(name = "llama_tiny_mutations", kernel = _DEC + "llama_tiny"):
    symbol_link_mutations(
        name = name,
        kernel = kernel,
        mutations = [
            mutation(
                "stream_tile8k",
                owner = "stream",
                what = "dec_stream DEC_TILE_ELEMS 16384 -> 8192",
                component = dict(
                    component = "dec_stream",
                    srcs = [_DEC + "dec_stream.cu"],
                    hdrs = [_DEC + "dec.h"],
                    contract = _DEC + "dec_stream.contract.toml",
                    copts = ["-O3"],
                    facts = {"tile_elems": "DEC_TILE_ELEMS=8192"},
                ),
            ),
        ],
    )
