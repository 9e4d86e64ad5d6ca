#!/usr/bin/env python3
"""Writes profiles/data/<device>.json, the shipped datasheet profiles.

A datasheet profile has the vendor's peak rates and memory figures, and GEMM samples
synthesised from an achievable-efficiency curve: seconds = 2mnk / (peak x efficiency),
for square GEMMs from 64^3 to 8192^3 in each precision. The curves (below) are
assumptions, not measurements, and every sample says so (source = "datasheet"); a
measured profile in the database replaces them (tessel profile --backend ...).

Origin of the curves: their shape follows NVIDIA's "Matrix Multiplication Background"
guide (throughput rises with GEMM size and saturates above ~1e10 FLOP); the plateau is
the fraction of dense peak that large cuBLAS GEMMs are reported to reach: ~82% on A100
(bf16 and tf32 alike), ~72% on H100/H200 SXM, whose higher peak is harder to feed.
local-cpu: Eigen on one core of the development machine reaches about 60% of its AVX-512
FMA peak on large shapes.

fp8 (H100, H200: fp8 tensor cores; A100 and CPUs have none and get no fp8 peak, so fp8
training is refused on them): NVIDIA's H100 SXM datasheet gives 3,958 TFLOP/s fp8 with
sparsity, 1,979 dense; H200 SXM the same. The fp8 curve is the H100 curve, as a fraction
of that peak at the same GEMM FLOPs: an assumption until `tessel profile --backend cuda`
measures fp8 GEMMs (cuBLASLt) on the device.
"""
import json
import math
import pathlib

CURVES = {
    "A100": [(1e6, 0.02), (1e7, 0.07), (1e8, 0.25), (1e9, 0.5), (1e10, 0.7), (1e11, 0.8), (1e12, 0.82)],
    "H100": [(1e6, 0.01), (1e7, 0.04), (1e8, 0.15), (1e9, 0.4), (1e10, 0.6), (1e11, 0.7), (1e12, 0.72)],
    "CPU": [(1e5, 0.05), (1e6, 0.2), (1e7, 0.4), (1e8, 0.55), (1e9, 0.6), (1e10, 0.6)],
}

# What every GPU profile assumes rather than reads from a datasheet.
GPU_ASSUMPTIONS = {
    "memory_efficiency": "assumed: streaming kernels reach about 80% of HBM bandwidth",
    "workspace_bytes": "assumed: CUDA context, cuBLAS workspace and allocator slack",
    "gemm": "assumed efficiency curve, see scripts/make_datasheet_profiles.py",
}

A100_SXM_80GB = {
    "curve": "A100",
    "device": {
        "name": "A100-SXM-80GB", "kind": "gpu",
        "peak_flops_per_s": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
        "memory_bytes": 85899345920, "memory_bandwidth_bytes_per_s": 2.039e12,
        "memory_efficiency": 0.8, "workspace_bytes": 2147483648,
        "sources": {
            "peak_flops_per_s": "datasheet: NVIDIA A100 Tensor Core GPU datasheet (dense, no sparsity)",
            "memory_bytes": "datasheet: 80 GB HBM2e (81920 MiB as the driver reports)",
            "memory_bandwidth_bytes_per_s": "datasheet: 2,039 GB/s",
            **GPU_ASSUMPTIONS,
        },
    },
}


def with_memory(entry, name, memory_bytes, bandwidth, sources):
    """The same part with other memory: same SMs and clocks (same peaks, same GEMM curve)."""
    device = {**entry["device"], "name": name, "memory_bytes": memory_bytes,
              "memory_bandwidth_bytes_per_s": bandwidth}
    device["sources"] = {**entry["device"]["sources"], **sources}
    return {**entry, "device": device}


DEVICES = [
    A100_SXM_80GB,
    # The 40 GB part: HBM2 instead of HBM2e.
    with_memory(A100_SXM_80GB, "A100-SXM-40GB", 42949672960, 1.555e12, {
        "peak_flops_per_s": "datasheet: NVIDIA A100 Tensor Core GPU datasheet (dense, no sparsity; the same for the 40 GB and 80 GB SXM parts)",
        "memory_bytes": "datasheet: 40 GB HBM2 (40960 MiB as the driver reports)",
        "memory_bandwidth_bytes_per_s": "datasheet: 1,555 GB/s",
    }),
    {
        "curve": "H100",
        "device": {
            "name": "H100-SXM", "kind": "gpu",
            "peak_flops_per_s": {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                                 "fp8": 1979e12},
            "memory_bytes": 85899345920, "memory_bandwidth_bytes_per_s": 3.35e12,
            "memory_efficiency": 0.8, "workspace_bytes": 2147483648,
            "sources": {
                "peak_flops_per_s": "datasheet: NVIDIA H100 Tensor Core GPU datasheet, SXM5 (dense, no sparsity; fp8 1,979 TFLOP/s = half the 3,958 with sparsity)",
                "memory_bytes": "datasheet: 80 GB HBM3",
                "memory_bandwidth_bytes_per_s": "datasheet: 3.35 TB/s",
                **GPU_ASSUMPTIONS,
            },
        },
    },
    {
        "curve": "H100",
        "device": {
            "name": "H200", "kind": "gpu",
            "peak_flops_per_s": {"fp32": 66.9e12, "tf32": 494.7e12, "bf16": 989.4e12, "fp16": 989.4e12,
                                 "fp8": 1979e12},
            "memory_bytes": 141000000000, "memory_bandwidth_bytes_per_s": 4.8e12,
            "memory_efficiency": 0.8, "workspace_bytes": 2147483648,
            "sources": {
                "peak_flops_per_s": "datasheet: NVIDIA H200 Tensor Core GPU datasheet, SXM (same compute as H100 SXM; fp8 1,979 TFLOP/s dense)",
                "memory_bytes": "datasheet: 141 GB HBM3e",
                "memory_bandwidth_bytes_per_s": "datasheet: 4.8 TB/s",
                **GPU_ASSUMPTIONS,
            },
        },
    },
    {
        "curve": "CPU",
        "device": {
            "name": "local-cpu", "kind": "cpu",
            "peak_flops_per_s": {"fp32": 147.2e9, "tf32": 147.2e9, "bf16": 147.2e9, "fp16": 147.2e9},
            "memory_bytes": 25769803776, "memory_bandwidth_bytes_per_s": 10e9,
            "memory_efficiency": 0.8, "workspace_bytes": 20866662, "cuda_libraries_bytes": 157076275, "cores": 2,
            "sources": {
                "cores": "the development and CI machines have 2 cores; more ranks than that take turns on them (replaced by tessel profile --backend cpu)",
                "peak_flops_per_s": "estimate for one rank (one core) of the development machine: 2.3 GHz x 64 fp32 FLOP/cycle (two 512-bit FMA ports); CPU kernels compute in fp32 whatever the storage precision",
                "memory_bytes": "the development and CI machines have 24 GiB",
                "memory_bandwidth_bytes_per_s": "assumed: 10 GB/s",
                "memory_efficiency": "assumed",
                "workspace_bytes": ("measured: the runtime beyond the trainer's tensors (MPI, libraries, data loader) in a build without the CUDA libraries: the process's peak resident set less the trainer's peak tensor bytes, per rank, of tessel run --steps 2 on the 16 plans of examples/cpu-suite and examples/local-cpu-* (TESSEL=build-nocuda/bin/tessel scripts/memory-table.sh: 17.0-34.4 MiB, median 19.9 MiB over 45 ranks, the offload plan apart); the trainer's temporaries are predicted apart (planner/src/trainer_temporaries.cpp); tessel profile --backend cpu measures it for the build that runs"),
                "cuda_libraries_bytes": ("measured: what linking the CUDA libraries adds to every CPU rank's resident set: the median runtime of the same 45 ranks in a build with the CUDA backend (scripts/memory-table.sh: 166.6-184.0 MiB, median 169.7 MiB) less the 19.9 MiB without it; counted only where the build links them"),
                "gemm": "assumed efficiency curve, see scripts/make_datasheet_profiles.py; replaced by tessel profile --backend cpu",
            },
        },
    },
]


# The corpus's measured experience per device (profiles/prediction_bounds.hpp): per model
# size, the best MFU measured on a calibration run of corpus/published (held-out sources
# never), counted as tessel counts FLOPs. Not a datasheet number: it travels here so that
# predictions with an uncalibrated profile are flagged above it too. Copied from what
# tests/planner/measured_experience_test.cpp computes; that test fails (printing the new
# table) when the corpus or tessel's FLOP count changes it.
MEASURED_EXPERIENCE = {
    "A100-SXM-40GB": [
        {"bucket": "under 3B", "best_mfu": 0.5944078824369231,
         "run": "llm-foundry-a100-40gb-34-mpt-3b-seq512-gpus8", "runs": 56},
        {"bucket": "3B to 20B", "best_mfu": 0.5256967211323077,
         "run": "llm-foundry-a100-40gb-09-mpt-13b-seq2048-gpus32", "runs": 31},
        {"bucket": "20B to 100B", "best_mfu": 0.5221413749267693,
         "run": "llm-foundry-a100-40gb-03-mpt-30b-seq2048-gpus128", "runs": 14},
    ],
    "A100-SXM-80GB": [
        {"bucket": "under 3B", "best_mfu": 0.63654971904,
         "run": "llm-foundry-a100-80gb-28-mpt-3b-seq512-gpus8", "runs": 52},
        {"bucket": "3B to 20B", "best_mfu": 0.6413519509661539,
         "run": "llm-foundry-a100-80gb-19-mpt-7b-seq2048-gpus8", "runs": 60},
        {"bucket": "20B to 100B", "best_mfu": 0.5638376512590769,
         "run": "llm-foundry-a100-80gb-07-mpt-30b-seq512-gpus8", "runs": 13},
        {"bucket": "100B and over", "best_mfu": 0.5304057472866461,
         "run": "megascale-t2-megatron-lm-175b-gpus256-batch768", "runs": 13},
    ],
    "H100-SXM": [
        {"bucket": "under 3B", "best_mfu": 0.4628763340613705,
         "run": "llm-foundry-h100-bf16-32-mpt-3b-seq512-gpus8", "runs": 53},
        {"bucket": "3B to 20B", "best_mfu": 0.4943400040428543,
         "run": "megatron-lm-readme-h100-r3-gpt-16b", "runs": 55},
        {"bucket": "20B to 100B", "best_mfu": 0.4645239539114615,
         "run": "megatron-lm-readme-h100-r4-gpt-32b", "runs": 23},
        {"bucket": "100B and over", "best_mfu": 0.4794825146553467,
         "run": "megatron-lm-readme-h100-r8-gpt-314b", "runs": 13},
    ],
}


def efficiency(curve, flops):
    points = CURVES[curve]
    x = math.log10(flops)
    if x <= math.log10(points[0][0]):
        return points[0][1]
    for (s0, e0), (s1, e1) in zip(points, points[1:]):
        x0, x1 = math.log10(s0), math.log10(s1)
        if x <= x1:
            return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def main():
    out_dir = pathlib.Path(__file__).resolve().parent.parent / "profiles" / "data"
    out_dir.mkdir(parents=True, exist_ok=True)
    for entry in DEVICES:
        device = entry["device"]
        samples = []
        precisions = ["fp32"] if device["kind"] == "cpu" else ["fp32", "tf32", "bf16", "fp16"]
        if "fp8" in device["peak_flops_per_s"]:
            precisions.append("fp8")
        for precision in precisions:
            peak = device["peak_flops_per_s"][precision]
            for n in [64, 128, 256, 512, 1024, 2048, 4096, 8192]:
                flops = 2.0 * n * n * n
                seconds = flops / (peak * efficiency(entry["curve"], flops))
                samples.append({"op": "gemm", "precision": precision, "m": n, "n": n, "k": n,
                                "seconds": float(f"{seconds:.6e}"), "source": "datasheet"})
        profile = {
            "format": "tessel-profile",
            "version": 1,
            "device": device,
            "kernel_samples": samples,
            "link_samples": [],
            "meta": {"origin": "scripts/make_datasheet_profiles.py", "source": "datasheet"},
        }
        if device["name"] in MEASURED_EXPERIENCE:
            profile["meta"]["measured_experience"] = MEASURED_EXPERIENCE[device["name"]]
        (out_dir / f"{device['name']}.json").write_text(json.dumps(profile, indent=1) + "\n")


if __name__ == "__main__":
    main()
