#!/usr/bin/env python3
"""PyTorch reference for tessel's GPU numbers: the executor benchmark's GPT (hidden 512,
8 layers, 8 heads, vocabulary 256, sequence 256, batch 4; tied embedding table, learned
positions, pre-norm blocks with a GELU MLP of 4 x hidden) trained a few steps in bf16 on
CUDA with AdamW. It prints the median step time and tokens/s, so a gpu-check report
carries a baseline measured in the same run on the same device. The model is written
out here (not taken from a library) so its shape is exactly the benchmark's.

Exit status 2 with one line when PyTorch or a CUDA device is missing."""
import argparse
import json
import statistics
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (after 3 warm-up steps)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    return parser.parse_args()


def build_model(torch, args):
    nn = torch.nn
    functional = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(args.hidden)
            self.qkv = nn.Linear(args.hidden, 3 * args.hidden)
            self.proj = nn.Linear(args.hidden, args.hidden)
            self.norm2 = nn.LayerNorm(args.hidden)
            self.fc1 = nn.Linear(args.hidden, 4 * args.hidden)
            self.fc2 = nn.Linear(4 * args.hidden, args.hidden)

        def forward(self, x):
            batch, seq, hidden = x.shape
            head_dim = hidden // args.heads
            q, k, v = self.qkv(self.norm1(x)).split(hidden, dim=-1)
            q, k, v = (t.view(batch, seq, args.heads, head_dim).transpose(1, 2) for t in (q, k, v))
            attention = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attention.transpose(1, 2).reshape(batch, seq, hidden))
            return x + self.fc2(functional.gelu(self.fc1(self.norm2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = nn.Embedding(args.vocab, args.hidden)
            self.positions = nn.Embedding(args.seq, args.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(args.layers))
            self.norm = nn.LayerNorm(args.hidden)

        def forward(self, tokens):
            positions = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.tokens(tokens) + self.positions(positions)
            for block in self.blocks:
                x = block(x)
            return self.norm(x) @ self.tokens.weight.t()  # the tied table is the LM head

    return Gpt()


def main():
    args = parse_args()
    try:
        import torch
    except ImportError as error:
        print(f"torch_reference: no PyTorch: {error}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available() or torch.cuda.device_count() <= args.device:
        print("torch_reference: no CUDA device for PyTorch on this machine", file=sys.stderr)
        return 2
    device = torch.device("cuda", args.device)
    torch.manual_seed(0)
    model = build_model(torch, args).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    generator = torch.Generator(device="cpu").manual_seed(3)
    tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator).to(device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    parameters = sum(p.numel() for p in model.parameters())

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, args.vocab), targets.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize(device)
    seconds = []
    loss = None
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    step_s = statistics.median(seconds)
    tokens_per_step = args.batch * args.seq
    result = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "precision": "bf16 autocast, fp32 weights, fused AdamW",
        "shape": {k: getattr(args, k) for k in ("layers", "hidden", "heads", "vocab", "seq", "batch")},
        "parameters": parameters,
        "steps_timed": args.steps,
        "step_s": step_s,
        "tokens_per_s": tokens_per_step / step_s,
        "final_loss": float(loss),
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"PyTorch {result['torch']} on {result['device']}: GPT hidden {args.hidden}, {args.layers} layers, "
              f"seq {args.seq}, batch {args.batch}, {parameters} parameters, bf16")
        print(f"  step (fwd + bwd + AdamW), median of {args.steps}   {step_s * 1e3:.2f} ms   "
              f"{result['tokens_per_s']:.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
