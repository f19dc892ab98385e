"""The check of one attention variant against its fp32 reference, on fresh random inputs: what
benchmarks/attention_bench.py `check` and tests/kernels/test_attention.py run (and the inputs
the benchmarks time).

    from attention_check import check_one
    ok, msg = check_one("causal", B=2, H=3, Lq=1024, Lkv=1024, control=False)

q, k, v ~ N(0, 1) bf16; the output is poisoned with NaN first, so every element must be written,
and |out - ref| <= ATOL + RTOL |ref| everywhere against `attention.reference` of the same mask /
score function (P is rounded to bf16 as in FA3: ~0.4% relative). Variant names are the entry's,
plus decode_uniform / decode_streamk (variant "decode" with that schedule forced) and
decode_paged / prefill_paged (decode, and chunked prefill, over a paged cache: check_paged), and
varlen_<variant> (a ragged batch: check_ragged).
"""

from __future__ import annotations

from attention import attention, create_block_mask
from attention_reference import paged_reference, reference, varlen_reference

ATOL = RTOL = 2e-2


def sparse_partial_pred(b, h, q, k):  # full and partial blocks: a causal band inside kept blocks
    return (((q // 128) * 3 + (k // 128)) % 4 == 0) & ((k <= q) | ((q + k + h) % 3 == 0))


def docs_for(B, S, seed, device, mean=700):
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(B, S, dtype=torch.int32)
    for b in range(B):
        pos, d = 0, 0
        while pos < S:
            n = int(torch.randint(1, 2 * mean, (1,), generator=g))
            ids[b, pos:pos + n] = d
            pos, d = pos + n, d + 1
    return ids.to(device)


def rand_qkv(B, H, Lq, Lkv, seed=None, D=128, Hkv=None):
    """q [B, H, Lq, D], k and v [B, Hkv (default H), Lkv, D]."""
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % 2**31)
    mk = lambda h, L: torch.randn(B, h, L, D, device="cuda", generator=g).bfloat16()  # noqa: E731
    return mk(H, Lq), mk(Hkv or H, Lkv), mk(Hkv or H, Lkv)


def entry_variant(name: str) -> str:
    return "decode" if name.startswith("decode") else name.removeprefix("varlen_")


def variant_kwargs(variant, B, H, S, device, seed=0):
    if variant.startswith("decode_"):
        return {"schedule": variant.removeprefix("decode_")}, {}
    if variant == "sliding":
        return {"window": 300}, {"window": 300}
    if variant == "softcap":
        return {"softcap": 2.0}, {"softcap": 2.0}
    if variant == "document":
        d = docs_for(B, S, seed, device, mean=max(200, S // 4))  # long ones too: FULL blocks
        return {"doc_ids": d}, {"doc_ids": d}
    if variant == "block_sparse":
        bm = create_block_mask(sparse_partial_pred, None, H, S, S, device=device)
        return {"block_mask": bm}, {"block_mask_pred": sparse_partial_pred}
    return {}, {}


def check_one(variant, B, H, Lq, Lkv, control, D=128, *, kernel_dir=None, Hkv=None):
    """-> (ok, a line of what was found). kernel_dir: attention's default when None; Hkv: k and
    v's heads (grouped-query attention where fewer than H)."""
    import torch
    if variant == "decode_paged":  # pages of 16 tokens, ragged lengths down from Lkv, KV heads H / 2
        lens = [max(1, Lkv - 131 * i) for i in range(B)]
        return check_paged(B, H, Hkv or (H // 2 if H % 2 == 0 else H), Lq, lens, 16, control, kernel_dir=kernel_dir,
                           D=D)
    if variant == "prefill_paged":  # chunked prefill: the last third of each sequence, pages of 32 tokens
        rows = max(1, Lq // 3)
        lens = [max(rows, Lkv - 131 * i) for i in range(B)]
        return check_paged(B, H, Hkv or (H // 2 if H % 2 == 0 else H), rows, lens, 32, control,
                           kernel_dir=kernel_dir, D=D, variant="causal")
    if variant.startswith("varlen_"):  # 3B + 3 sequences: lengths down from Lq, and 1, 129, 7 tokens
        lens_q = [max(1, Lq - 397 * i) for i in range(3 * B)] + [1, 129, 7]
        # keys: a cached prefix before the queries (37 i more keys: the masks align bottom-right);
        # full: its own lengths down from Lkv
        lens_k = ([max(1, Lkv - 211 * i) for i in range(3 * B)] + [5, 64, 300] if entry_variant(variant) == "full"
                  else [n + 37 * i for i, n in enumerate(lens_q)])
        return check_ragged(entry_variant(variant), lens_q, lens_k, H, Hkv or (H // 2 if H % 2 == 0 else H), control,
                            D=D, kernel_dir=kernel_dir)
    q, k, v = rand_qkv(B, H, Lq, Lkv, D=D, Hkv=Hkv)
    kw, rkw = variant_kwargs(variant, B, H, Lq, q.device, seed=Lq + B)
    out = torch.full_like(q, float("nan"))
    attention(q, k, v, entry_variant(variant), out=out, control=control, kernel_dir=kernel_dir, **kw)
    torch.cuda.synchronize()
    return compare(out, reference(q, k, v, "full" if entry_variant(variant) == "decode" else variant, **rkw))


def compare(out, ref):
    """(ok, a line): every element written (no NaN left of the poison) and within
    ATOL + RTOL |ref| of the fp32 reference."""
    import torch
    nan = int(torch.isnan(out).sum())
    err = (out.float() - ref).abs()
    bad = int((err > ATOL + RTOL * ref.abs()).sum())
    rel = float(err.norm() / ref.norm().clamp(min=1e-30))
    ok = nan == 0 and bad == 0
    return ok, f"unwritten/NaN {nan}, beyond tol {bad}, max err {float(err.nan_to_num(9.0).max()):.2e}, rel {rel:.2e}"


def paged_cache(k, v, page_size, seed=0, spare=3):
    """k, v [B, Hkv, S, D] copied into FlashInfer HND page pools [num_pages, Hkv, page_size, D]
    in a shuffled page order (plus `spare` pages of noise) -> (k_pool, v_pool, block_table)."""
    import torch
    B, Hkv, S, D = k.shape
    per = -(-S // page_size)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(B * per + spare, generator=g)
    pools = []
    for t in (k, v):
        pool = torch.randn(B * per + spare, Hkv, page_size, D, device=t.device, generator=None).to(t.dtype)
        padded = torch.zeros(B, Hkv, per * page_size, D, device=t.device, dtype=t.dtype)
        padded[:, :, :S] = t
        pool[order[:B * per].to(t.device)] = padded.view(B, Hkv, per, page_size, D).permute(0, 2, 1, 3, 4).reshape(
            B * per, Hkv, page_size, D)
        pools.append(pool)
    table = order[:B * per].view(B, per).to(torch.int32).to(k.device)
    return pools[0], pools[1], table


def check_paged(B, H, Hkv, Lq, lens, page_size, control=False, *, kernel_dir=None, D=128, variant="decode"):
    """Paged decode (or chunked prefill: variant "causal", q's Lq rows the last tokens of each
    sequence) against the fp32 reference: sequences of the given lengths (the pool holds max(lens)
    tokens a sequence; pages past a length hold other data), NaN-poisoned output."""
    import torch
    from attention import attention
    S = max(lens)
    q, k, v = rand_qkv(B, H, Lq, S, D=D, Hkv=Hkv)
    kp, vp, table = paged_cache(k, v, page_size, seed=S + B)
    seq = torch.tensor(lens, dtype=torch.int32, device=q.device)
    out = torch.full_like(q, float("nan"))
    attention(q, kp, vp, variant, block_table=table, seq_lens=seq, out=out, control=control, kernel_dir=kernel_dir)
    torch.cuda.synchronize()
    return compare(out, paged_reference(q, kp, vp, table, seq, causal=variant == "causal"))


def check_ragged(variant, lens_q, lens_k, H, Hkv, control=False, *, kernel_dir=None, D=128, seed=None):
    """A ragged batch (q [sum lens_q, H, D], k, v [sum lens_k, Hkv, D], FlashAttention's
    cu_seqlens) against varlen_reference, NaN-poisoned output."""
    import torch
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else torch.seed() % 2**31)
    mk = lambda n, h: torch.randn(n, h, D, device="cuda", generator=g).bfloat16()  # noqa: E731
    q, k, v = mk(sum(lens_q), H), mk(sum(lens_k), Hkv), mk(sum(lens_k), Hkv)
    cu = lambda lens: torch.tensor([0] + lens, dtype=torch.int64).cumsum(0).to(torch.int32).cuda()  # noqa: E731
    cu_q, cu_k = cu(list(lens_q)), cu(list(lens_k))
    kw = {"window": 300} if variant == "sliding" else {"softcap": 2.0} if variant == "softcap" else {}
    out = torch.full_like(q, float("nan"))
    attention(q, k, v, variant, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lens_q), out=out,
              control=control, kernel_dir=kernel_dir, **kw)
    torch.cuda.synchronize()
    return compare(out, varlen_reference(q, k, v, cu_q.cpu(), cu_k.cpu(), variant, **kw))
