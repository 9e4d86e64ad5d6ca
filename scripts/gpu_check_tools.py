#!/usr/bin/env python3
"""gpu-check's arithmetic, in one place: the plans it trains, the losses it compares,
throughput and MFU from the same formula for tessel and PyTorch, and the prediction's
error. Plain Python 3 (the lent machine's own, never the bundle's environment).

  gpt2-plan --device-name NAME [--batch B] [--kernels fused]  the GPT-2 124M plan (JSON)
  compare-losses CPU_LOG GPU_LOG [--relative 1e-5]            step losses of two runs
  throughput LOG --device-name NAME [--skip K]                 tessel's tokens/s and MFU
  torch-throughput JSON --device-name NAME                     the reference's, alike
  profile-device NAME                                          the profile name of a CUDA device
MFU counts 6N + 6 L T C FLOPs per token (N parameters of the model as published, L
layers, T sequence, C hidden: the weights' forward and backward plus causal attention's
scores, as llm.c and nanoGPT count them) over the device's dense bf16 peak."""
import argparse
import json
import re
import statistics
import sys

# GPT-2 124M as published (configs/models/gpt2-124m.json): the vocabulary is padded by the
# trainers, not here, so N is the published model's.
GPT2 = {"layers": 12, "hidden": 768, "heads": 12, "vocab": 50257, "seq_len": 1024}

# Dense bf16 tensor-core peaks in FLOP/s by CUDA device name, from NVIDIA's datasheets
# (H100 SXM5 and H200: 989.4 TFLOP/s; H100 PCIe 756; H100 NVL 835; A100 312).
PEAKS = [("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989.4e12), ("H200", 989.4e12),
         ("GH200", 989.4e12), ("A100", 312e12)]

# CUDA device names that have a shipped profile, as `tessel profile --backend cuda` maps
# them (profiles/data/, docs/GPU.md); any other is stored under its own name.
PROFILE_NAMES = [("H100 80GB HBM3", "H100-SXM"), ("H200", "H200"), ("A100-SXM4-80GB", "A100-SXM-80GB"),
                 ("A100-SXM4-40GB", "A100-SXM-40GB")]


def parameters(model):
    h, v, s, layers = model["hidden"], model["vocab"], model["seq_len"], model["layers"]
    per_layer = 12 * h * h + 13 * h  # qkv, proj, fc1, fc2 with biases; two layer norms
    return v * h + s * h + layers * per_layer + 2 * h


def flops_per_token(model):
    return 6 * parameters(model) + 6 * model["layers"] * model["seq_len"] * model["hidden"]


def peak_flops(device_name):
    for key, peak in PEAKS:
        if key in device_name:
            return peak
    return None


def profile_device(device_name):
    for key, name in PROFILE_NAMES:
        if key in device_name:
            return name
    return re.sub(r"\s+", "-", device_name.strip())


def gpt2_plan(args):
    device = profile_device(args.device_name)
    # One GPU: a cluster of one device whose profile is the measured one (or the datasheet's).
    cluster = {
        "name": "one-gpu", "gpus_per_node": 1, "max_nodes": 1, "device": device,
        "intra_node": {"kind": "nvswitch", "bandwidth_bytes_per_s": 450e9, "latency_s": 3e-6, "efficiency": 0.8},
        "host_memory_bytes": 1e12, "host_memory_bandwidth_bytes_per_s": 400e9,
        "host_device_bandwidth_bytes_per_s": 50e9,
        "sources": {"all": "gpu-check: one lent GPU; the links are never used by a one-GPU plan"},
    }
    plan = {"model": "gpt2-124m", "cluster": cluster, "nodes": 1,
            "train": {"global_batch": args.batch, "precision": "bf16", "optimizer": "adamw",
                      "kernels": args.kernels, "dropout": False},
            "parallel": {"micro_batch": args.batch}}
    json.dump(plan, sys.stdout, indent=1)
    print()


STEP = re.compile(r"^step (\d+) loss ([-+0-9.eE]+|nan|inf).*?(\d+) tokens/s\s+step ([0-9.]+) s")


def steps(log):
    found = []
    with open(log) as text:
        for line in text:
            match = STEP.match(line.strip())
            if match:
                found.append({"step": int(match[1]), "loss": float(match[2]), "tokens_per_s": float(match[3]),
                              "step_s": float(match[4])})
    return found


def compare_losses(args):
    cpu, gpu = steps(args.cpu_log), steps(args.gpu_log)
    if not cpu or len(cpu) != len(gpu):
        print(f"losses: {len(cpu)} CPU steps and {len(gpu)} GPU steps (need the same, at least one)")
        return 1
    worst = 0.0
    for a, b in zip(cpu, gpu):
        difference = abs(a["loss"] - b["loss"]) / max(1.0, abs(a["loss"]))
        worst = max(worst, difference)
        print(f"step {a['step']}: cpu {a['loss']:.7f} gpu {b['loss']:.7f} relative difference {difference:.2e}")
    verdict = worst <= args.relative
    print(f"losses: worst relative difference {worst:.2e} {'<=' if verdict else '>'} {args.relative:g}")
    return 0 if verdict else 1


def mfu(tokens_per_s, device_name, model=GPT2):
    peak = peak_flops(device_name)
    return tokens_per_s * flops_per_token(model) / peak if peak else None


def report_throughput(who, tokens_per_s, step_s, device_name):
    share = mfu(tokens_per_s, device_name)
    text = f"{share * 100:.1f} %" if share is not None else "unknown (no peak for this device)"
    print(f"{who}: {tokens_per_s:.0f} tokens/s, step {step_s * 1e3:.1f} ms, MFU {text}")
    print(json.dumps({"who": who, "tokens_per_s": tokens_per_s, "step_s": step_s, "mfu": share}))


def throughput(args):
    timed = steps(args.log)[args.skip:]
    if not timed:
        print(f"throughput: no timed steps in {args.log} after skipping {args.skip}")
        return 1
    step_s = statistics.median(s["step_s"] for s in timed)
    tokens_per_s = statistics.median(s["tokens_per_s"] for s in timed)
    report_throughput("tessel", tokens_per_s, step_s, args.device_name)
    return 0


def torch_throughput(args):
    with open(args.json_file) as text:
        lines = [line for line in text.read().splitlines() if line.startswith("{")]
    if not lines:
        print(f"torch: no result in {args.json_file}")
        return 1
    result = json.loads(lines[-1])
    report_throughput("torch.compile", result["tokens_per_s"], result["step_s"], args.device_name)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("gpt2-plan")
    plan.add_argument("--device-name", required=True)
    plan.add_argument("--batch", type=int, default=16)
    plan.add_argument("--kernels", default="fused", choices=["fused", "unfused"])
    losses = commands.add_parser("compare-losses")
    losses.add_argument("cpu_log")
    losses.add_argument("gpu_log")
    losses.add_argument("--relative", type=float, default=1e-5)
    rate = commands.add_parser("throughput")
    rate.add_argument("log")
    rate.add_argument("--device-name", required=True)
    rate.add_argument("--skip", type=int, default=5, help="warm-up steps left out of the median")
    torch_rate = commands.add_parser("torch-throughput")
    torch_rate.add_argument("json_file")
    torch_rate.add_argument("--device-name", required=True)
    device = commands.add_parser("profile-device")
    device.add_argument("name")
    args = parser.parse_args()
    if args.command == "gpt2-plan":
        return gpt2_plan(args) or 0
    if args.command == "compare-losses":
        return compare_losses(args)
    if args.command == "throughput":
        return throughput(args)
    if args.command == "torch-throughput":
        return torch_throughput(args)
    print(profile_device(args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
