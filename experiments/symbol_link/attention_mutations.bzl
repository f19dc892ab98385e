"""Attention's geometry mutations for the symbol-linking counterexample (issue 9's rule,
experiments/symbol_link/counterexample.bzl): one owner of a fused attention kernel changes a tile/geometry
constant (a define, a fact, a ring depth, a stage size, a tile shape) and is rebuilt; the
rule plain-links the mutant against the ORIGINAL kernel's glue and links it with pipelink,
which must propagate the change or reject it with a coded diagnostic.

    tools/bazel build //experiments:attn_causal_mutations //experiments:attn_decode_mutations
    python3 experiments/symbol_link/symbol_link_counterexample.py --kernel attn_causal     # GPU
    python3 experiments/symbol_link/symbol_link_counterexample.py --kernel attn_decode     # GPU

Geometry each owner holds (attn.h; the contracts say which are facts):
  core     owns block_q (ATTN_BLOCK_Q, 128) and head_dim (ATTN_HEAD_DIM, 128 or 64) with
           PL_OWN_FACT; its ring stage stride and rows follow from them
  loader   reads block_q, head_dim (accept [128], [64, 128]); ring q depth [2, 2], ring kv
           [2, 6], stage_bytes "block_q * head_dim * 2"
  variant  (attn_mask) reads block_q (accept [128]) for its tile / kv_count / kv_block math
  store    reads block_q, head_dim; imports `out` of shape [block_q, head_dim]
  combine  reads block_q, head_dim (accept [128]): its partials' row stride is head_dim
Each row's `what` says what changed; tests/kernels/test_attention_mutations.py holds the expected
outcome of each (a code, or propagated facts).
"""

load("//kernels/attention:attention_variants.bzl", "LOADER_FILES")
load(":counterexample.bzl", "mutation", "symbol_link_mutations")

_ATTN = "//kernels/attention:"

def _files(srcs, hdrs, contract, host_provider = None, **kwargs):
    """cuda_component file kwargs named in kernels/attention (these targets live elsewhere)."""
    kw = dict(srcs = [_ATTN + f for f in srcs], hdrs = [_ATTN + f for f in hdrs], contract = _ATTN + contract, **kwargs)
    if host_provider:
        kw["host_provider"] = _ATTN + host_provider
    return kw

_CORE = _files(["attn_core.cu"], ["attn.h", "attn_wgmma.h"], "attn_core.contract.toml", cutlass = True)
_LOADER = _files(**LOADER_FILES)
_STORE = _files(["attn_store.cu"], ["attn.h"], "attn_store.contract.toml", "attn_store_host.py")
_COMBINE = _files(["attn_combine.cu"], ["attn.h"], "attn_combine.contract.toml")

def _mask(src):
    return _files([src], ["attn.h", "attn_variant.h"], "attn_mask.contract.toml")

def _comp(component, files, defines = [], subs = {}):
    """cuda_component kwargs of `component` rebuilt with `defines`, its contract edited by `subs`
    (same lines, so diagnostics keep their file:line)."""
    kw = dict(component = component, copts = ["-O3"], defines = defines, **files)
    if subs:
        kw["contract_substitutions"] = subs
    return kw

# The core's block (its `own` follows the define, so pack accepts it; the readers must not).
_CORE_BLOCK64 = {'[fact.block_q]\ntype = "u32"\nown = 128': '[fact.block_q]\ntype = "u32"\nown = 64'}

# The variant's block: its contract's accept follows the define.
_MASK_BLOCK64 = {'[fact.block_q]\ntype = "u32"\naccept = [128]': '[fact.block_q]\ntype = "u32"\naccept = [64]'}

ATTN_CAUSAL_MUTATIONS = [
    mutation("core_d64", owner = "core", what = "attn_core ATTN_HEAD_DIM 128 -> 64 (own head_dim = 64)",
             target = _ATTN + "attn_core_d64"),
    mutation("core_block64", owner = "core", what = "attn_core ATTN_BLOCK_Q 128 -> 64 (own block_q = 64)",
             component = _comp("attn_core", _CORE, ["ATTN_BLOCK_Q=64"], _CORE_BLOCK64)),
    mutation("loader_qdepth3", owner = "load", what = "attn_loader ring q depth [2, 2] -> [3, 3]",
             component = _comp("attn_loader", _LOADER, subs = {"depth = [2, 2] ": "depth = [3, 3] "})),
    mutation("loader_kvdepth4", owner = "load", what = "attn_loader ring kv depth [2, 6] -> [2, 4]",
             component = _comp("attn_loader", _LOADER, subs = {"depth = [2, 6]": "depth = [2, 4]"})),
    mutation("loader_kvstage", owner = "load",
             what = "attn_loader ring kv stage_bytes block_q*head_dim*2 -> +1024 (padded stages)",
             component = _comp("attn_loader", _LOADER, subs = {
                 'side = "producer"\nstage_bytes = "block_q * head_dim * 2"\ndepth = [2, 6]':
                     'side = "producer"\nstage_bytes = "block_q * head_dim * 2 + 1024"\ndepth = [2, 6]',
             })),
    mutation("mask_block64", owner = "mask", what = "attn_causal.cu (variant) ATTN_BLOCK_Q 128 -> 64",
             component = _comp("attn_mask", _mask("attn_causal.cu"), ["ATTN_BLOCK_Q=64"], _MASK_BLOCK64)),
    mutation("store_shape64", owner = "epi", what = "attn_store import out [block_q, head_dim] -> [block_q, 64]",
             component = _comp("attn_store", _STORE, subs = {'shape = ["block_q", "head_dim"]': 'shape = ["block_q", "64"]'})),
]

ATTN_DECODE_MUTATIONS = [
    mutation("core_d64", owner = "core", what = "attn_core ATTN_HEAD_DIM 128 -> 64 (own head_dim = 64)",
             target = _ATTN + "attn_core_d64"),
    mutation("combine_d64", owner = "epi", what = "attn_combine ATTN_HEAD_DIM 128 -> 64 (define only)",
             component = _comp("attn_combine", _COMBINE, ["ATTN_HEAD_DIM=64"])),
    mutation("mask_block64", owner = "mask", what = "attn_decode_split.cu (variant) ATTN_BLOCK_Q 128 -> 64",
             component = _comp("attn_mask", _mask("attn_decode_split.cu"), ["ATTN_BLOCK_Q=64"], _MASK_BLOCK64)),
]

def attention_mutations():
    symbol_link_mutations(name = "attn_causal_mutations", kernel = _ATTN + "attn_causal", mutations = ATTN_CAUSAL_MUTATIONS)
    symbol_link_mutations(name = "attn_decode_mutations", kernel = _ATTN + "attn_decode", mutations = ATTN_DECODE_MUTATIONS)
