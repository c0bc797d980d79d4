"""Forward + backward time of solutions_lib's attention against PyTorch's, as ratios.

    python benchmarks/bench_attention.py            # CPU, or CUDA when available

The last line is the geometric mean of (ours / PyTorch's) over the sizes;
below 1 would mean ours is faster. The explicit version materialises the
(T, T) weights, so it is expected to be slower than PyTorch's fused kernel.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

import solutions_lib as sl


def timed(fn, *inputs, repeats):
    for _ in range(3):
        fn(*inputs)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*inputs)
        if inputs[0].is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def step(attention):
    def run(q, k, v, mask):
        out = attention(q, k, v, mask)
        out.sum().backward()

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    ours = step(lambda q, k, v, m: sl.scaled_dot_product_attention(q, k, v, m)[0])
    theirs = step(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m))
    ratios = []
    print(f"device: {device}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'B':>3} {'h':>3} {'T':>5} {'d_k':>4}  {'ours (ms)':>10} {'PyTorch (ms)':>13} {'ratio':>6}")
    for B, h, T, d_k in [(8, 4, 64, 32), (4, 8, 128, 64), (2, 8, 256, 64)]:
        q, k, v = (torch.randn(B, h, T, d_k, device=device, requires_grad=True) for _ in range(3))
        mask = sl.causal_mask(T, device=device)
        a = timed(ours, q, k, v, mask, repeats=args.repeats)
        b = timed(theirs, q, k, v, mask, repeats=args.repeats)
        ratios.append(a / b)
        print(f"{B:>3} {h:>3} {T:>5} {d_k:>4}  {a * 1e3:>10.2f} {b * 1e3:>13.2f} {a / b:>6.2f}")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"attention forward+backward time ratio (solutions_lib / torch): {geo:.2f}")


if __name__ == "__main__":
    main()
