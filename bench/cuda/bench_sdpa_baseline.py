"""Times torch.nn.functional.scaled_dot_product_attention on the decode and
prefill shapes of bench_paged_attention, with K/V laid out contiguously (no
paging), as a baseline for the paged kernels. Run on a device machine where
torch with CUDA exists:  python3 bench/cuda/bench_sdpa_baseline.py
Prints the same columns as bench_paged_attention (bandwidth = KV bytes / time).
"""
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_sdpa_baseline: torch not installed")
    sys.exit(0)

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(fn, warmup=3, iters=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def bench_decode(batch, context):
    q = torch.rand(batch, Q_HEADS, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16) * 2 - 1
    v = torch.rand_like(k) * 2 - 1
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    kv_bytes = 2.0 * batch * context * KV_HEADS * HEAD_DIM * 2
    print(f"sdpa decode  batch {batch:4d} ctx {context:6d}  {ms * 1e3:9.1f} us  "
          f"{kv_bytes / (ms * 1e-3) / 1e9:7.1f} GB/s")


def bench_prefill(batch, context):
    q = torch.rand(batch, Q_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16) * 2 - 1
    k = torch.rand(batch, KV_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16) * 2 - 1
    v = torch.rand_like(k) * 2 - 1
    ms = median_ms(
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
        iters=10)
    flops = 4.0 * batch * context * (context + 1) / 2 * Q_HEADS * HEAD_DIM
    print(f"sdpa prefill batch {batch:4d} ctx {context:6d}  {ms * 1e3:9.1f} us  "
          f"{flops / (ms * 1e-3) / 1e12:7.2f} TFLOP/s")


def main():
    if not torch.cuda.is_available():
        print("bench_sdpa_baseline: no CUDA device")
        return
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for batch in (64, 256):
        for context in (1024, 4096):
            bench_decode(batch, context)
    bench_decode(1, 32768)
    bench_prefill(1, 4096)
    bench_prefill(4, 4096)


if __name__ == "__main__":
    main()
