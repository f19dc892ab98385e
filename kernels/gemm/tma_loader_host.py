"""Host provider of tma_loader: the two tensor maps its TMA copies read.

Called by the pipelink runtime when a session is opened (docs/CONTRACTS.md, [host]):
`lent` holds the caller's x, w (device addresses) and m, n, k; `facts` the linked tile
facts; `host` the runtime's encoder. Returns the parameter region this package owns.
"""


def provide(lent, facts, host):
    bm, bn, bk, parts = facts["block_m"], facts["block_n"], facts["block_k"], facts["b_parts"]
    box_b = min(bn, parts * bn // facts["cluster_x"])  # a CTA of a cluster loads its share of B
    m, n, k = lent["m"], lent["n"], lent["k"]
    host.require(k % 8 == 0, f"k = {k} must be a multiple of 8 (TMA row strides are 16-byte multiples)")
    return {
        "tmap_x": host.tensor_map_2d(lent["x"], "bf16", rows=m, cols=k, box_rows=bm, box_cols=bk, swizzle=128),
        "tmap_w": host.tensor_map_2d(lent["w"], "bf16", rows=parts * n, cols=k, box_rows=box_b, box_cols=bk,
                                     swizzle=128),
    }
