#!/usr/bin/env python3
"""Each CUDA kernel of a GPT-2 training step with its expected time on a device: the
larger of its FLOPs over the dense peak and its bytes over the memory bandwidth, both
from the device's profile (profiles/data/<device>.json, the datasheet's figures). These
are floors, not predictions: a kernel's measured time over its floor is its gap. The
table is docs/GPU.md's; the measured column is filled from a lent GPU's run.

  scripts/gpu_expected_times.py [--device H100-SXM] [--batch 16] [--markdown]
Counts (per step, one micro-batch of batch x 1024 tokens, bf16 activations, fp32 master
weights and AdamW state): N tokens, C hidden, V the vocabulary padded to 50,304 as the
executor pads it on a GPU, L layers. Bytes count each input read once and each output
written once."""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kernels(batch, layers=12, hidden=768, seq=1024, vocab=50304, params=124_475_904):
    n, c, v, t = batch * seq, hidden, vocab, seq
    bf16, f32 = 2, 4
    rows = []  # (kernel, calls per step, FLOPs per call, bytes per call)

    def add(name, calls, flops, data_bytes):
        rows.append((name, calls, flops, data_bytes))

    add("embedding forward (tokens + positions)", 1, 0, n * c * bf16 + n * 4 + (n + t) * c * bf16)
    add("residual + layer norm (fused)", 2 * layers, 0, 4 * n * c * bf16)
    add("GEMM qkv (bias)", layers, 2 * n * c * 3 * c, (n * c + 3 * c * c + n * 3 * c) * bf16)
    add("attention forward (causal, fused)", layers, 2 * batch * t * t * c, 4 * n * c * bf16 + n * 12 * f32)
    add("GEMM projection (bias)", layers, 2 * n * c * c, (2 * n * c + c * c) * bf16)
    add("GEMM fc1 (bias, GELU epilogue)", layers, 2 * n * c * 4 * c, (n * c + 4 * c * c + 2 * n * 4 * c) * bf16)
    add("GEMM fc2 (bias)", layers, 2 * n * 4 * c * c, (n * 4 * c + 4 * c * c + n * c) * bf16)
    add("final layer norm", 1, 0, 2 * n * c * bf16)
    add("GEMM logits (tied head)", 1, 2 * n * c * v, (n * c + v * c + n * v) * bf16)
    add("softmax cross-entropy + gradient (fused, in place)", 1, 0, 2 * n * v * bf16)
    add("GEMM logits backward (dX and dW)", 1, 4 * n * c * v, (2 * n * v + 2 * v * c + 2 * n * c) * bf16)
    add("GEMM fc2 backward (dX, dW, bias gradient)", layers, 4 * n * 4 * c * c, (3 * n * 4 * c + 3 * n * c) * bf16)
    add("GEMM fc1 backward (dGELU epilogue, dX, dW)", layers, 4 * n * c * 4 * c, (3 * n * 4 * c + 3 * n * c) * bf16)
    add("GEMM projection backward", layers, 4 * n * c * c, 6 * n * c * bf16)
    add("attention backward (causal, fused)", layers, 5 * batch * t * t * c, 8 * n * c * bf16 + n * 24 * f32)
    add("GEMM qkv backward", layers, 4 * n * c * 3 * c, (3 * n * 3 * c + 3 * n * c) * bf16)
    add("layer norm backward (dx accumulated)", 2 * layers + 1, 0, 4 * n * c * bf16)
    add("embedding backward", 1, 0, n * c * bf16 + (v + t) * c * f32)
    add("AdamW (fp32, whole model)", 1, 0, 7 * params * f32)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="H100-SXM", help="a profile in profiles/data/")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    path = os.path.join(ROOT, "profiles", "data", args.device + ".json")
    try:
        device = json.load(open(path))["device"]
    except (OSError, KeyError, ValueError) as error:
        print(f"gpu_expected_times: --device: no readable profile {path} ({error})")
        return 2
    peak = device["peak_flops_per_s"]["bf16"]
    bandwidth = device["memory_bandwidth_bytes_per_s"]
    print(f"GPT-2 124M, batch {args.batch} x 1024 tokens, on {args.device}: bf16 peak {peak / 1e12:.1f} TFLOP/s, "
          f"memory {bandwidth / 1e12:.2f} TB/s (profiles/data/{args.device}.json)")
    total = 0.0
    if args.markdown:
        print("\n| kernel | calls | GFLOP per call | MB per call | bound | expected us per call | measured us |")
        print("|---|---|---|---|---|---|---|")
    for name, calls, flops, data_bytes in kernels(args.batch):
        compute_s, memory_s = flops / peak, data_bytes / bandwidth
        expected_s = max(compute_s, memory_s)
        total += calls * expected_s
        bound = "compute" if compute_s >= memory_s else "memory"
        if args.markdown:
            print(f"| {name} | {calls} | {flops / 1e9:.2f} | {data_bytes / 1e6:.1f} | {bound} | {expected_s * 1e6:.1f} | |")
        else:
            print(f"{name:52s} x{calls:3d}  {flops / 1e9:9.2f} GFLOP  {data_bytes / 1e6:8.1f} MB  {bound:7s}  "
                  f"{expected_s * 1e6:9.1f} us")
    tokens = args.batch * 1024
    print(f"\nfloor of the step: {total * 1e3:.2f} ms, {tokens / total:.0f} tokens/s at the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
