"""Host provider of moe_expert: the tensor maps its TMA copies of the expert weights read.

Called by the pipelink runtime when a session is opened (docs/CONTRACTS.md, [host]): `lent`
holds the caller's w13 [experts, 2 inter, hidden] and w2 [experts, hidden, inter] (device
addresses, bf16, contiguous: the Python entry checks), `facts` the expert's tile facts and the
model's (kernel facts). Each map views the
weights as a 2-D row-major tensor (expert-major rows) read in SWIZZLE_128B boxes of 64 k:
w13 in boxes of block_h rows (a gate box and an up box per k-step), w2 in boxes of block_n.
"""


def provide(lent, facts, host):
    bh, bn = facts["block_h"], facts["block_n"]
    experts, hidden, inter = facts["experts"], facts["hidden"], facts["inter"]
    host.require(bh in (32, 64) and bn in (64, 128), f"block_h = {bh}, block_n = {bn}: expert.cu takes 32/64, 64/128")
    return {
        "tmap_w13": host.tensor_map_2d(lent["w13"], "bf16", rows=experts * 2 * inter, cols=hidden, box_rows=bh,
                                       box_cols=64, swizzle=128),
        "tmap_w2": host.tensor_map_2d(lent["w2"], "bf16", rows=experts * hidden, cols=inter, box_rows=bn,
                                      box_cols=64, swizzle=128),
    }
