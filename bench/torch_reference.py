#!/usr/bin/env python3
"""PyTorch reference for tessel's GPU figures: GPT-2 124M (12 layers, hidden 768, 12
heads, sequence 1024, tied embedding, learned positions, pre-norm blocks with a tanh-GELU
MLP of 4 x hidden, no dropout) trained in bf16 autocast with fused AdamW under
torch.compile, the way the best PyTorch GPT-2 trainers run it (nanoGPT: the vocabulary
padded to 50,304, scaled_dot_product_attention's fused kernels). It prints the median
step time and tokens/s over the timed steps, so gpu-check sets tessel's run against a
baseline measured in the same command on the same device. The model is written out here
(not taken from a library) so its shape is exactly the one tessel trains.

Exit status 2 with one line when PyTorch or a CUDA device is missing."""
import argparse
import json
import statistics
import sys
import time


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50304, help="padded as nanoGPT and llm.c pad GPT-2's 50,257")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=5, help="steps before timing (the first compiles)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--no-compile", action="store_true", help="eager mode instead of torch.compile")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
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

        def forward(self, ids, targets):
            positions = torch.arange(ids.shape[1], device=ids.device)
            x = self.tokens(ids) + self.positions(positions)
            for block in self.blocks:
                x = block(x)
            logits = self.norm(x) @ self.tokens.weight.t()  # the tied head
            return functional.cross_entropy(logits.float().view(-1, args.vocab), targets.view(-1))

    return Gpt()


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("torch_reference: PyTorch is not installed")
        return 2
    if not torch.cuda.is_available():
        print("torch_reference: no CUDA device")
        return 2
    device = torch.device("cuda", args.device)
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = build_model(torch, args).to(device)
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    step_fn = model if args.no_compile else torch.compile(model)
    ids = torch.randint(0, 50257, (args.batch, args.seq), device=device)
    targets = torch.randint(0, 50257, (args.batch, args.seq), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(ids, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    compile_start = time.perf_counter()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize(device)
    warmup_s = time.perf_counter() - compile_start
    seconds = []
    for _ in range(args.steps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1e3)
    step_s = statistics.median(seconds)
    result = {
        "model": "gpt2-124m", "parameters": parameters, "batch": args.batch, "seq": args.seq,
        "compiled": not args.no_compile, "warmup_s": warmup_s, "step_s": step_s,
        "tokens_per_s": args.batch * args.seq / step_s, "loss": float(loss),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(device),
        "cudnn": torch.backends.cudnn.version(),
    }
    print(f"torch {result['torch']} on {result['device']}: {'compiled' if result['compiled'] else 'eager'}, "
          f"warm-up {warmup_s:.1f} s, median step {step_s * 1e3:.2f} ms, {result['tokens_per_s']:.0f} tokens/s")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
