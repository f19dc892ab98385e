"""moe_step's geometry mutations for the symbol-linking counterexample (issue 9).

Each row rebuilds one owner with other tile defines through that owner's own macro; the rule
in counterexample.bzl then plain-links it against the original moe_step glue (//kernels:moe_step)
and links it with pipelink. In experiments/BUILD.bazel:

    load("//experiments/symbol_link:moe_mutations.bzl", "moe_step_mutations")
    moe_step_mutations()

    tools/bazel build //experiments:moe_step_mutations
    python3 experiments/symbol_link/symbol_link_counterexample.py --kernel moe_step

`moe_step_geometries()` links moe_step at more expert geometries, with no spill allowed (a
regression guard for the expert's register budget; manual, not in CI's `//...`).
"""

load(":counterexample.bzl", "mutation", "symbol_link_mutations")
load("//kernels:moe.bzl", "moe_expert", "moe_step")

# (mutation, owner instance in moe_step.kernel.toml, what changed, the owner's macro, its kwargs)
# The expert owner (X) owns block_m / block_h / block_n (defaults 64 / 64 / 128); dispatch,
# SwiGLU and combine read them through handles. Add rows for other owners the same way.
MOE_STEP_MUTATIONS = [
    ("expert_bm32", "ffn", "moe_expert EXPERT_BLOCK_M 64 -> 32", moe_expert, {"block_m": 32}),
    ("expert_bm16", "ffn", "moe_expert EXPERT_BLOCK_M 64 -> 16", moe_expert, {"block_m": 16}),
    ("expert_bh32", "ffn", "moe_expert EXPERT_BLOCK_H 64 -> 32", moe_expert, {"block_h": 32}),
    ("expert_bn64", "ffn", "moe_expert EXPERT_BLOCK_N 128 -> 64", moe_expert, {"block_n": 64}),
    ("expert_bm32_bh32", "ffn", "moe_expert EXPERT_BLOCK_M 64 -> 32, BLOCK_H 64 -> 32", moe_expert,
     {"block_m": 32, "block_h": 32}),
]

def moe_step_mutations(name = "moe_step_mutations", kernel = "//kernels:moe_step", rows = MOE_STEP_MUTATIONS):
    muts = []
    for m, owner, what, macro, kwargs in rows:
        target = name + "__" + m
        macro(name = target, **kwargs)
        muts.append(mutation(m, owner = owner, what = what, target = ":" + target))
    symbol_link_mutations(name = name, kernel = kernel, mutations = muts)

# (block_m, block_h, block_n, stages) beyond the mutations above and the default (64, 64, 128,
# 4): every stage count from 2 that fits shared memory, each block size. The first five spilled
# 8-24 B (L-REGS) with four A rows held per thread (BENCHMARKS.md, MoE geometries).
MOE_STEP_GEOMETRIES = [
    (16, 32, 128, 4), (64, 64, 128, 2), (32, 64, 64, 2), (16, 64, 64, 4), (64, 32, 128, 3),
    (16, 32, 64, 2), (32, 32, 128, 4), (64, 64, 64, 4), (64, 32, 64, 6), (32, 64, 128, 3),
    (16, 64, 128, 2), (64, 64, 128, 3),
]

def moe_step_geometries(name = "moe_step_geometries", geometries = MOE_STEP_GEOMETRIES):
    """moe_step with the expert at each geometry (targets <name>__<bm>_<bh>_<bn>_<stages>), and a
    filegroup `name` of them all: building it links every one, and a spill fails the build."""
    steps = []
    for bm, bh, bn, stages in geometries:
        target = "%s__%d_%d_%d_%d" % (name, bm, bh, bn, stages)
        moe_expert(name = target + "_expert", block_m = bm, block_h = bh, block_n = bn, stages = stages,
                   tags = ["manual"])
        moe_step(name = target, expert = ":" + target + "_expert", sass_test = False, tags = ["manual"])
        steps.append(":" + target)
    native.filegroup(name = name, srcs = steps, tags = ["manual"])
