"""The dense decode models that one set of megakernel packages serves: each is one more link of
the same packages, the model's shape owned by the kernel file (fused_kernel `facts`).

    decode_models()    # kernels/decode/BUILD.bazel: one fused_kernel per served model and attention

DECODE_MODELS is the table; kernels/decode/llama_models.py holds each model's full config for
Python (tests/kernels/test_llama_megakernel.py asserts the two agree). The RoPE table and the
RMSNorm epsilon are data (`inv_freq`, `eps`), not facts: the tied/untied head is which buffer the
caller passes as `head`.
"""

load("//pipelink_rules:defs.bzl", "fused_kernel", "fused_kernel_sass_test")

# A plain dict literal, so Python can read it (ast.literal_eval).
DECODE_MODELS = {
    "llama3_2_1b": {"target": "llama3_1b", "hidden": 2048, "layers": 16, "heads": 32, "kv_heads": 8, "head_dim": 64, "inter": 8192, "vocab": 128256, "qk_norm": False},
    "llama3_8b": {"target": "llama3_8b", "hidden": 4096, "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128, "inter": 14336, "vocab": 128256, "qk_norm": False},
    "qwen3_1_7b": {"target": "qwen3_1_7b", "hidden": 2048, "layers": 28, "heads": 16, "kv_heads": 8, "head_dim": 128, "inter": 6144, "vocab": 151936, "qk_norm": True},
    # A small shape of the same family for the GPU tests (seconds, not minutes, of f32 reference).
    "llama_tiny": {"target": "llama_tiny", "hidden": 512, "layers": 2, "heads": 8, "kv_heads": 2, "head_dim": 64, "inter": 1024, "vocab": 1024, "qk_norm": False},
}

DECODE_FACTS = ("hidden", "layers", "heads", "kv_heads", "head_dim", "inter", "vocab", "qk_norm")

# The attention packages that link into the same megakernel unchanged (package dec_attn).
DECODE_ATTENTION = {
    "split": ":dec_attn_split",
    "simple": ":dec_attn_simple",
}

DECODE_COMPONENTS = [":dec_step", ":dec_stream", ":dec_embed", ":dec_rmsnorm", ":dec_matvec", ":dec_rope", ":dec_swiglu", ":dec_argmax"]

# Batched links (kernel fact `batch`: sequences a step, 1 .. 32): target -> (model, batch). The
# packages are the same; llama_megakernel.MegakernelStep(batch = B) picks <target>_b<B>.
DECODE_BATCHES = {
    "llama3_1b_b32": ("llama3_2_1b", 32),
    "llama3_1b_b8": ("llama3_2_1b", 8),
    "llama3_1b_b4": ("llama3_2_1b", 4),
    "llama_tiny_b3": ("llama_tiny", 3),  # an odd batch for the GPU tests
    "llama_tiny_b20": ("llama_tiny", 20),  # the wide path (batch > 8): two m16 tiles, the second part-filled
}

def decode_step(batch):
    """The step role's build for `batch`: more than 8 sequences link :dec_step_wide (the same
    source, its contract accepting batch 9 .. 32 and inputs at most 3584 wide)."""
    return ":dec_step_wide" if batch > 8 else ":dec_step"

def decode_stream(batch):
    """The weight stream's build for `batch`: more than 8 sequences take :dec_stream_wide (its
    warp group's registers go to the wide step)."""
    return ":dec_stream_wide" if batch > 8 else ":dec_stream"

def decode_down_chunks(m, batch):
    """The DOWN op's k-chunks (fact down_chunks, dec.h mat_op) for model row `m` at `batch`: 1 at
    batch 1 (one input row costs little shared memory), else the fewest chunks (1, 2, 4 or 8,
    inter / chunks whole 256s) that make the DOWN op's input rows no wider than the other ops',
    so xin holds B rows of max(hidden, heads · head_dim) and the rest of shared memory goes to the
    weight ring (Python packs by the manifest's value)."""
    if batch == 1:
        return 1
    widest = max(m["hidden"], m["heads"] * m["head_dim"])
    fits = [c for c in ([4, 8] if batch > 8 else [1, 2, 4, 8]) if m["inter"] % (256 * c) == 0]  # (dec_step_wide accepts 4, 8)
    for c in fits:
        if m["inter"] // c <= widest:
            return c
    return fits[-1]

def llama_decode(name, model, attention = "split", unfused = False, batch = 1, step = None, stream = None, spills = "error", tags = [], matvec = None):
    """The decode step of `model` (a DECODE_MODELS key) with one of DECODE_ATTENTION (or another
    build of package dec_attn, by label). unfused:
    the baseline build, launched once per op with the op range as parameters (dec.h OpRange).
    batch: sequences a step (the kernel fact; the simple attention package accepts 1).
    step, stream, matvec: the step role's, the weight stream's and the matvec library's packages
    (other builds of their sources, for a variant; by default decode_step(batch),
    decode_stream(batch) and :dec_matvec).
    spills: fused_kernel's ("warning" for head_dim 128's split attention)."""
    m = DECODE_MODELS[model]
    step, stream = step or decode_step(batch), stream or decode_stream(batch)
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [{":dec_step": step, ":dec_stream": stream, ":dec_matvec": matvec or ":dec_matvec"}.get(c, c) for c in DECODE_COMPONENTS] + [DECODE_ATTENTION.get(attention, attention)],
        kernel = "llama_decode.kernel.toml",
        facts = dict([(f, m[f]) for f in DECODE_FACTS] + [
            ("unfused", unfused),
            ("batch", batch),
            ("down_chunks", decode_down_chunks(m, batch)),
        ]),
        spills = spills,
        visibility = ["//visibility:public"],
        tags = tags,
    )
    fused_kernel_sass_test(
        name = name + "_sass_test",
        kernel = ":" + name,
        tags = tags,
    )

def decode_models():
    """For each model: <target> (split-KV attention), <target>_simple (the simple one) and
    <target>_unfused (split-KV, one launch per op: the baseline of what fusing buys)."""
    for model, m in DECODE_MODELS.items():
        # (head_dim 128: the split attention's role holds 32 B of stack, the second 16 bytes of
        # each value row live beside the next block's keys; docs/DECISIONS.md)
        spills = "warning" if m["head_dim"] > 64 else "error"
        llama_decode(name = m["target"], model = model, spills = spills)
        llama_decode(name = m["target"] + "_simple", model = model, attention = "simple")
        llama_decode(name = m["target"] + "_unfused", model = model, unfused = True, spills = spills)
    for name, (model, batch) in DECODE_BATCHES.items():
        llama_decode(name = name, model = model, batch = batch)
    # Llama-3.2-1B with the step's timeline stamps (benchmarks/llama_decode_timeline.py)
    llama_decode(name = "llama3_1b_trace", model = "llama3_2_1b", step = ":dec_step_trace", attention = ":dec_attn_split_trace")
    llama_decode(name = "llama3_1b_b8_trace", model = "llama3_2_1b", batch = 8, step = ":dec_step_trace", attention = ":dec_attn_split_trace")
    llama_decode(name = "llama3_1b_b32_trace", model = "llama3_2_1b", batch = 32, step = ":dec_step_wide_trace", attention = ":dec_attn_split_trace")
    # (The links that timed a decided knob against its default, e.g. llama3_1b_uncapped,
    # _no_l2ahead, _no_kvahead, _b32_8k, _b32_w2, are deleted once the figures are in
    # BENCHMARKS.md: each knob stays a define of its source, DEC_INFLIGHT, DEC_L2_AHEAD,
    # DEC_KV_AHEAD, DEC_TILE_ELEMS, DEC_WIDE_INFLIGHT, and a VARIANT_PACKAGES row brings it back.)
