"""Block masks and document ranges for the attention variants (layouts: attn_block_sparse.cu,
attn_document.cu). Built on the GPU with torch; the result is one int32 aux tensor.

Bad arguments are LaunchErrors with a code and a hint, never a torch traceback:
create_block_mask refuses B/H that are not None or an int >= 1 (0 is not "broadcast"), lengths
that are not positive multiples of 128 (R-SHAPE), a mask_mod that is not callable, raises or
returns no bool tensor of the chunk's shape (R-PARAM), a device torch does not know (R-DEVICE),
and a mask whose aux would pass 2^31 words (R-SHAPE). BlockMask.check refuses a mask made for
other lengths, batch or heads (R-SHAPE), on another device (R-DEVICE), or whose aux is no int32
1-D contiguous tensor (R-PARAM). check_doc_ids: an int32 [B, S] tensor on the inputs' device
(R-DTYPE, R-SHAPE, R-DEVICE, R-PARAM), B*H and S/128 <= 65535 (R-SHAPE); document_aux also
refuses decreasing ids (R-PARAM, one host read per new ids tensor or version).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipelink.runtime.entry import integer
from pipelink.runtime import LaunchError
from pipelink.runtime.launch_values import is_tensor

BLOCK = 128
HEADER = 16  # words


@dataclass
class BlockMask:
    """Per Q block, the KV blocks to visit (full or partial) and the predicate's bits inside the
    partial ones, for a [B, H, Q_LEN, KV_LEN] predicate (B or H may be broadcast: 1)."""
    aux: object           # int32 tensor, attn_block_sparse.cu's layout
    B: int
    H: int
    Q_LEN: int
    KV_LEN: int
    kept: float           # fraction of blocks visited
    partial: float        # fraction of blocks needing the per-element mask
    _by_heads: dict = field(default_factory=dict, repr=False, compare=False)

    def check(self, B, H, Lq, Lkv, device):
        import torch
        aux = self.aux
        if (not is_tensor(aux) or getattr(aux, "dtype", None) != torch.int32 or aux.dim() != 1
                or not aux.is_contiguous() or aux.numel() < HEADER):
            raise LaunchError("R-PARAM", f"block mask's aux is not an int32 vector of >= {HEADER} words "
                              f"({type(aux).__name__})", hint="make block masks with create_block_mask")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1
                   for n in (self.B, self.H, self.Q_LEN, self.KV_LEN)):
            raise LaunchError("R-PARAM", f"{self!r:.120} has sizes that are not positive ints",
                              hint="make block masks with create_block_mask")
        if (self.Q_LEN, self.KV_LEN) != (Lq, Lkv):
            raise LaunchError("R-SHAPE", f"block mask is for Q_LEN, KV_LEN = {self.Q_LEN}, {self.KV_LEN}; "
                              f"the inputs have {Lq}, {Lkv}", hint="create_block_mask with the inputs' lengths")
        for name, m, x in (("B", self.B, B), ("H", self.H, H)):
            if m not in (1, x):
                raise LaunchError("R-SHAPE", f"block mask {name} = {m} does not broadcast to {x}",
                                  hint=f"create_block_mask(..., {name}={x} or None)")
        if aux.device != device:
            raise LaunchError("R-DEVICE", f"block mask is on {aux.device}, inputs on {device}",
                              hint="create_block_mask(..., device=q.device)")

    def aux_for(self, H: int):
        """The aux for inputs with H heads: word 3 is the H that attn_block_sparse.cu divides bh
        by to find the batch row. A mask made with H=None (one head row) but B > 1 holds 1 there;
        for H > 1 heads that would read batch row bh (past the mask): a copy with H, made once."""
        if self.B == 1 or self.H == H:
            return self.aux
        a = self._by_heads.get(H)
        if a is None:
            a = self._by_heads[H] = self.aux.clone()
            a[3] = H  # a device write, no host sync (graph capture is fine)
        return a

    def __repr__(self):
        return (f"BlockMask(B={self.B}, H={self.H}, Q_LEN={self.Q_LEN}, KV_LEN={self.KV_LEN}, "
                f"kept={self.kept:.3f}, partial={self.partial:.3f})")


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device="cuda", BLOCK_SIZE=BLOCK, chunk_rows=1024):
    """FlexAttention-like: mask_mod(b, h, q_idx, kv_idx) -> bool tensor (broadcasting torch ops).
    B or H None broadcasts the mask over that dimension."""
    import torch
    if integer("BLOCK_SIZE", BLOCK_SIZE, code="R-SHAPE", hint="BLOCK_SIZE=128") != BLOCK:
        raise LaunchError("R-SHAPE", f"BLOCK_SIZE = {BLOCK_SIZE}: the core's tiles are {BLOCK}", hint="BLOCK_SIZE=128")
    for name, n in (("Q_LEN", Q_LEN), ("KV_LEN", KV_LEN)):
        if integer(name, n, 1, 2**31 - 1, code="R-SHAPE", hint=f"a positive multiple of {BLOCK}") % BLOCK:
            raise LaunchError("R-SHAPE", f"{name} = {n!r} is not a positive multiple of {BLOCK}",
                              hint=f"pad the sequence to a multiple of {BLOCK}")
    Q_LEN, KV_LEN = int(Q_LEN), int(KV_LEN)
    for name, n in (("B", B), ("H", H)):
        if n is not None:
            integer(name, n, 1, 65535, code="R-SHAPE", hint=f"{name}=None broadcasts the mask over that dimension")
    if not callable(mask_mod):
        raise LaunchError("R-PARAM", "mask_mod must be callable (b, h, q_idx, kv_idx) -> bool tensor",
                          hint="create_block_mask(lambda b, h, q, k: k <= q, None, None, S, S)")
    chunk_rows = integer("chunk_rows", chunk_rows, 1, 2**31 - 1, hint="rows of the mask evaluated at once, e.g. 1024")
    mB, mH = (1 if B is None else int(B)), (1 if H is None else int(H))
    QB, KB = Q_LEN // BLOCK, KV_LEN // BLOCK
    try:
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("no CUDA device is available")
    except (RuntimeError, TypeError, ValueError) as e:
        raise LaunchError("R-DEVICE", f"device = {device!r:.60}: {e}", hint="device='cuda' (or q.device)") from None
    kv = torch.arange(KV_LEN, device=dev)[None, :]
    rows = chunk_rows - chunk_rows % BLOCK or BLOCK
    any_, all_, bits = [], [], []
    weights = (torch.ones(32, dtype=torch.int64, device=dev) << torch.arange(32, device=dev))
    for b in range(mB):
        for h in range(mH):
            for q0 in range(0, Q_LEN, rows):
                q = torch.arange(q0, min(q0 + rows, Q_LEN), device=dev)[:, None]
                m = _mask_chunk(mask_mod, torch, b, h, q, kv, dev)
                blk = m.view(-1, BLOCK, KB, BLOCK).transpose(1, 2)  # [qb, kb, 128, 128]
                a, al = blk.any(dim=(2, 3)), blk.all(dim=(2, 3))
                part = a & ~al
                any_.append(a)
                all_.append(al)
                if part.any():  # mask_bits order: word (row, qd), bit 2 nt + e = column 8 nt + 2 qd + e
                    pb = blk[part].reshape(-1, BLOCK, 16, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, BLOCK, 4, 32)
                    bits.append(((pb.long() * weights).sum(-1) & 0xFFFFFFFF))
    kept = torch.cat(any_).view(mB * mH, QB, KB)
    full = torch.cat(all_).view(mB * mH, QB, KB)
    partial = kept & ~full
    counts = kept.sum(-1).int()
    maxk = max(int(counts.max()), 1)
    order = torch.sort((~kept).int(), dim=-1, stable=True).indices[..., :maxk]  # kept blocks first, ascending
    kind = torch.gather(partial, -1, order)
    idx = torch.where(kind, order - 2**31, order)
    slot = (torch.cumsum(partial.flatten().long(), 0) - 1).clamp(min=0).view_as(partial)
    pslot = torch.gather(slot, -1, order)  # the bits slot of the i-th kept block
    bits_t = torch.cat(bits).flatten() if bits else torch.zeros(512, dtype=torch.int64, device=dev)
    bits_t = torch.where(bits_t >= 2**31, bits_t - 2**32, bits_t)
    words = HEADER + counts.numel() + 2 * idx.numel() + bits_t.numel()
    if words > 2**31 - 1:
        raise LaunchError("R-SHAPE", f"the block mask needs {words} aux words; the kernel indexes at most 2^31 - 1",
                          hint="a smaller or sparser mask (fewer partial blocks), or split the sequence")
    off_counts = HEADER
    off_idx = off_counts + counts.numel()
    off_pslot = off_idx + idx.numel()
    off_bits = off_pslot + pslot.numel()
    header = torch.tensor([QB, KB, maxk, mH, mB, mH, off_counts, off_idx, off_pslot, off_bits] + [0] * 6,
                          dtype=torch.int64, device=dev)
    aux = torch.cat([header, counts.flatten().long(), idx.flatten().long(), pslot.flatten(), bits_t]).int()
    n = kept.numel()
    return BlockMask(aux, mB, mH, Q_LEN, KV_LEN, float(kept.sum()) / n, float(partial.sum()) / n)


def _mask_chunk(mask_mod, torch, b, h, q, kv, dev):
    """mask_mod over one chunk of rows, as a [rows, KV_LEN] bool tensor (R-PARAM if it cannot be)."""
    try:
        m = mask_mod(torch.tensor(b, device=dev), torch.tensor(h, device=dev), q, kv)
        m = torch.as_tensor(m, device=dev)
        if m.dtype != torch.bool:
            raise TypeError(f"it returned dtype {m.dtype}, not torch.bool")
        return m.expand(q.shape[0], kv.shape[1])
    except LaunchError:
        raise
    except Exception as e:  # noqa: BLE001 - the caller's function: any failure is a bad mask_mod
        raise LaunchError("R-PARAM", f"mask_mod(b, h, q_idx [{q.shape[0]}, 1], kv_idx [1, {kv.shape[1]}]) failed: "
                          f"{type(e).__name__}: {str(e)[:200]}",
                          hint="mask_mod must return a bool tensor broadcastable to [q rows, KV_LEN] "
                               "(torch ops on the index tensors, e.g. lambda b, h, q, k: k <= q)") from None


def check_doc_ids(doc_ids, B, H, S, device) -> None:
    """doc_ids is an int32 [B, S] tensor on `device` and the document schedule's 16-bit fields
    fit (no host read: the non-decreasing check is document_aux's, once per ids version)."""
    import torch
    if doc_ids is None:
        raise LaunchError("R-PARAM", "variant 'document' needs doc_ids= (an int32 [B, S] tensor of document ids)",
                          hint="attention(..., variant='document', doc_ids=ids)")
    if not is_tensor(doc_ids) or getattr(doc_ids, "layout", torch.strided) != torch.strided:
        raise LaunchError("R-PARAM", f"doc_ids must be a dense int32 tensor on the inputs' device, got "
                          f"{type(doc_ids).__name__}", hint="doc_ids=torch.as_tensor(ids, dtype=torch.int32, "
                                                              "device=q.device)")
    if getattr(doc_ids, "dtype", None) != torch.int32:
        raise LaunchError("R-DTYPE", f"doc_ids must be an int32 tensor, got {doc_ids.dtype}",
                          hint="doc_ids.to(torch.int32)")
    if tuple(doc_ids.shape) != (B, S):
        raise LaunchError("R-SHAPE", f"doc_ids has shape {list(doc_ids.shape)}, expected [{B}, {S}]",
                          hint="one document id per token of each batch row")
    if doc_ids.device != device:
        raise LaunchError("R-DEVICE", f"doc_ids is on {doc_ids.device}, inputs on {device}", hint="doc_ids.to(q.device)")
    if B * H > 0xFFFF or S // BLOCK > 0xFFFF:
        raise LaunchError("R-SHAPE", f"B*H = {B * H}, S/128 = {S // BLOCK}: the document schedule packs each in 16 bits",
                          hint="split the batch")


def list_schedule(costs, G):
    """Tiles in the given order, each to the CTA that is free first (what a dynamic scheduler would
    do at equal speed). Returns the [G + 1] list starts and the tile indices, CTA by CTA."""
    import heapq
    heap = [(0.0, c) for c in range(G)]
    lists = [[] for _ in range(G)]
    for i, cost in enumerate(costs):
        load, c = heapq.heappop(heap)
        lists[c].append(i)
        heapq.heappush(heap, (load + cost, c))
    starts = [0]
    for lst in lists:
        starts.append(starts[-1] + len(lst))
    return starts, [i for lst in lists for i in lst]


# The host's schedules (causal family, document): the (batch, head) rows in sections whose K and V
# take at most half the L2 but hold at least 8 rows (on the H200, 8 rows per section at S = 32K;
# 2-4% faster at S = 4K-8K than sections sized by the L2 alone or one order over all heads).
SECTION_L2_SHARE = 0.5
MIN_SECTION_ROWS = 8
CAUSAL_SCHEDULE_MAX_TILES = 1 << 18  # past this, making the schedule takes the host ~1 s: the device's order


def sections(BH, S, D, l2_bytes):
    """Cuts of the B*H (batch, head) rows into sections of equal size whose K and V take at most
    SECTION_L2_SHARE of the L2 but hold at least MIN_SECTION_ROWS rows (a small last section
    would start its long tiles late)."""
    per_row = S * D * 2 * 2  # K and V of one (batch, head), bf16
    rows = max(MIN_SECTION_ROWS, int(l2_bytes * SECTION_L2_SHARE) // per_row)
    n = -(-BH // min(BH, rows))
    return [BH * i // n for i in range(n + 1)]


def causal_schedule(B, H, S, D, G, l2_bytes, base=0):
    """aux words for ATTN_CAUSAL_TILE(base), placed at word `base` of the variant's aux:
    [base + 2, base + 3 + G, starts[G + 1], tiles (q_block << 16 | bh)]; the
    (batch, head) rows in sections of equal size, each section's Q blocks longest first (a tile
    costs its KV blocks + ~0.5), list-scheduled onto G CTAs. [0] (the device's own order) for a
    shape whose fields do not fit 16 bits or whose schedule is too long to make on the host."""
    QB, BH = -(-S // BLOCK), B * H  # a last partial Q block too
    if QB > 0xFFFF or BH > 0xFFFF or QB * BH > CAUSAL_SCHEDULE_MAX_TILES:
        return [0]
    cuts = sections(BH, S, D, l2_bytes)
    tiles = [(qb, bh) for lo, hi in zip(cuts, cuts[1:]) for qb in range(QB - 1, -1, -1) for bh in range(lo, hi)]
    starts, order = list_schedule([qb + 1.5 for qb, _ in tiles], G)
    return [base + 2, base + 3 + G, *starts, *(tiles[i][0] << 16 | tiles[i][1] for i in order)]


def document_aux(doc_ids, B, H, S, device, G, l2_bytes=0, head_dim=128):
    """aux for attn_document.cu: [S, H, QB, off_lo, off_hi, off_flo, off_fhi, off_start, off_end,
    off_batch, off_starts, off_tiles] + the arrays; the tiles' schedule is made for a grid of G
    persistent CTAs (the kernel's min(num_sms, tiles)): the (batch, head) rows in sections (as
    the causal family's), each section's tiles longest first, each tile to the CTA free first."""
    import torch
    check_doc_ids(doc_ids, B, H, S, device)
    d = doc_ids.contiguous()
    if S > 1 and bool((d[:, 1:] < d[:, :-1]).any()):
        raise LaunchError("R-PARAM", "doc_ids must be non-decreasing along the sequence (packed documents)",
                          hint="pack each document's tokens contiguously, ids in order")
    QB = S // BLOCK
    start = torch.searchsorted(d, d, right=False)  # [B, S] first token of each token's document
    end = torch.searchsorted(d, d, right=True)     # one past its last
    first, last = d[:, ::BLOCK].contiguous(), d[:, BLOCK - 1::BLOCK].contiguous()
    lo = torch.searchsorted(d, first, right=False) // BLOCK
    hi = (torch.searchsorted(d, last, right=True) + BLOCK - 1) // BLOCK
    # FULL KV blocks of a Q block inside one document: wholly inside that document
    one = first == last
    s0, e0 = start[:, ::BLOCK], end[:, ::BLOCK]
    flo, fhi = (s0 + BLOCK - 1) // BLOCK, e0 // BLOCK
    empty = ~one | (fhi <= flo)
    flo, fhi = torch.where(empty, 0, flo), torch.where(empty, 0, fhi)
    # the host's schedule (ATTN_LISTED_TILE): a tile of b's Q block qb costs its KV blocks + ~0.5
    # (its Q load, first QK^T and last PV are not overlapped)
    n = (hi - lo).cpu().tolist()  # [B][QB]
    # (2.1% / 0.6% faster at S = 8K / 32K than one LPT order over all heads)
    cost = lambda qb, bh: n[bh // H][qb] + 0.5  # noqa: E731
    cuts = sections(B * H, S, head_dim, l2_bytes)
    tiles = [t for lo, hi in zip(cuts, cuts[1:])
             for t in sorted(((qb, bh) for bh in range(lo, hi) for qb in range(QB)), key=lambda t: -cost(*t))]
    starts, order = list_schedule([cost(*t) for t in tiles], G)
    packed = torch.tensor([tiles[i][0] << 16 | tiles[i][1] for i in order], dtype=torch.int64, device=device)
    sizes = [B * QB] * 4 + [B * S] * 2 + [B * H, G + 1, len(order)]  # lo hi flo fhi start end batch starts tiles
    offs = [16 + sum(sizes[:i]) for i in range(len(sizes))]
    header = torch.tensor([S, H, QB, *offs] + [0] * (13 - len(offs)), dtype=torch.int64, device=device)
    batch = torch.arange(B * H, device=device) // H
    return torch.cat([header, lo.flatten(), hi.flatten(), flo.flatten(), fhi.flatten(), start.flatten(),
                      end.flatten(), batch, torch.tensor(starts, dtype=torch.int64, device=device), packed]).int()
