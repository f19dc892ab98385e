"""The MoE models that one set of owner packages serves: each is one more link of the same
packages with the model's shape owned by the kernel file (fused_kernel `facts`).

    moe_models()    # moe.bzl, called in kernels/BUILD.bazel: one fused_kernel per served model

MOE_MODELS is the table (kernels/moe/moe_models.py holds the same table for Python, with each
model's routing semantics and tensors; tests/kernels/test_moe_models.py asserts they agree).
`served` says whether today's owners accept the model's facts: a model they do not serve is
not a target; linking it fails with L-FACT-ACCEPT naming the fact and the owner that limits it
(tests/e2e/test_moe_models.py links each one and asserts that).
"""

# hidden, inter (the routed experts' intermediate size), experts (routed), top_k, renormalize
# (the top-k weights renormalized to sum 1, or the softmax probabilities as they are), biases
# (router and expert biases), and where the router reads them groups and topk_groups: the
# kernel's facts. router, activation: the router package and the SwiGLU library the
# composition links (//kernels packages with moe_router's and moe_swiglu's interfaces). A plain dict literal, so Python can read it (ast.literal_eval).
MOE_MODELS = {
    "qwen3_30b_a3b": {"target": "moe_step", "hidden": 2048, "inter": 768, "experts": 128, "top_k": 8, "renormalize": True, "biases": False, "router": "moe_router", "activation": "moe_swiglu", "served": True},
    "qwen3_235b_a22b": {"target": "qwen3_235b_a22b", "hidden": 4096, "inter": 1536, "experts": 128, "top_k": 8, "renormalize": True, "biases": False, "router": "moe_router", "activation": "moe_swiglu", "served": True},
    "olmoe_1b_7b": {"target": "olmoe_1b_7b", "hidden": 2048, "inter": 1024, "experts": 64, "top_k": 8, "renormalize": False, "biases": False, "router": "moe_router", "activation": "moe_swiglu", "served": True},
    # softmax over the top-k logits = the top-k softmax probabilities renormalized
    "mixtral_8x7b": {"target": "mixtral_8x7b", "hidden": 4096, "inter": 14336, "experts": 8, "top_k": 2, "renormalize": True, "biases": False, "router": "moe_router", "activation": "moe_swiglu", "served": True},
    # DeepSeek-V3's grouped-sigmoid router (kernels/moe/router_grouped.cu) reads groups and topk_groups
    "deepseek_v3": {"target": "deepseek_v3", "hidden": 7168, "inter": 2048, "experts": 256, "top_k": 8, "renormalize": True, "biases": False, "groups": 8, "topk_groups": 4, "router": "moe_router_grouped", "activation": "moe_swiglu", "served": True},
    # router and expert biases, gpt-oss's clamped SwiGLU library (kernels/moe/swiglu_clamped.cu)
    "gpt_oss_120b": {"target": "gpt_oss_120b", "hidden": 2880, "inter": 2880, "experts": 128, "top_k": 4, "renormalize": True, "biases": True, "router": "moe_router", "activation": "moe_swiglu_clamped", "served": True},
}

def moe_model_facts(model):
    """The facts the kernel file owns for `model` (a MOE_MODELS key)."""
    m = MOE_MODELS[model]
    return {k: m[k] for k in MOE_FACTS if k in m}

# The facts a model's kernel owns (groups and topk_groups only where its router reads them).
MOE_FACTS = ("hidden", "inter", "experts", "top_k", "renormalize", "biases", "groups", "topk_groups")
