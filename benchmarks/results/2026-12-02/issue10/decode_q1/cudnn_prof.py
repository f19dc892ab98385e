# One SDPA cuDNN decode call (B=8, H=32, q_len 1, KV 32K, d 128) between profiler start/stop, for ncu --profile-from-start off.
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
g = torch.Generator(device="cuda").manual_seed(3)
q, k, v = (torch.randn(8, 32, n, 128, device="cuda", dtype=torch.bfloat16, generator=g) for n in (1, 32768, 32768))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(3):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
print("cudnn prof done", float(o.float().abs().mean()))
