#!/usr/bin/env python3
"""Checks that Hugging Face transformers reads tessel's weights as tessel does.

tessel export-weights writes model.safetensors + config.json (GPT-2 or LLaMA names by the
model's shape); this script loads that folder with transformers' AutoModelForCausalLM
(GPT2LMHeadModel or LlamaForCausalLM, offline, local files only),
computes the mean next-token cross-entropy of tessel's first global batch of a byte-level
text, and compares it with the step-1 loss `tessel run --init model.safetensors --steps 1`
records for the same weights and text (the loss of step 1 is computed before the first
update). Then the other way: a model transformers initialises and saves
(save_pretrained) is read by `tessel run --init` and scored by both. It prints one line
per model and direction with both losses and their relative difference, and exits 1 when
any exceeds 1e-4.

Without --model-dir it makes its own models first, in a temporary folder: for each of
--model gpt2 and llama (both by default), a small plan trained 30 steps on 2 ranks (dp 2),
checkpointed, exported. The LLaMA one has grouped-query attention (4 heads, 2 kv heads),
so RoPE, GQA, SwiGLU and RMSNorm are all compared.

Needs: python3 with torch and transformers (and safetensors, which transformers uses).
Exits 77 (ctest's skip code here) when they cannot be imported.

  scripts/check-hf-interop.py --tessel build/bin/tessel [--model gpt2|llama]
  scripts/check-hf-interop.py --tessel build/bin/tessel --model-dir DIR --plan P --data TEXT
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

SKIP = 77
TOLERANCE = 1e-4

MODELS = {
    "gpt2": {"name": "interop", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 32},
    "llama": {"name": "interop-llama", "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn_hidden": 96,
              "vocab": 256, "seq_len": 32, "activation": "swiglu", "norm": "rmsnorm", "position_embedding": "rope",
              "tied_embeddings": False, "bias": False},
}


def plan_of(model):
    return {
        "model": model,
        "cluster": "local-cpu",
        "nodes": 1,
        "train": {"global_batch": 8, "precision": "fp32", "optimizer": "adamw"},
        "parallel": {"dp": 2, "micro_batch": 2},
    }


def sample_text():
    words = ["the", "cat", "sees", "a", "small", "dog", "runs", "far", "away", "and", "then", "sleeps."]
    out, state = [], 12345
    for _ in range(4000):
        state = (state * 1103515245 + 12345) % (1 << 31)  # a fixed sequence, no RNG library
        out.append(words[state % len(words)])
    return " ".join(out)


def tessel(args, binary, env):
    result = subprocess.run([binary] + args, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"check-hf-interop: tessel {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def tessel_step1_loss(binary, plan_file, weights, data, work, env):
    db = os.path.join(work, "interop-runs.db")
    tessel(["run", "--plan", plan_file, "--init", weights, "--steps", "1", "--data", data, "--db", db], binary, env)
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT loss FROM run_steps WHERE step = 1 ORDER BY run DESC LIMIT 1").fetchall()
    if not rows:
        sys.exit(f"check-hf-interop: no step-1 loss recorded in {db}")
    return rows[0][0]


def first_batch(data, global_batch, seq):
    """tessel's DataLoader: window w of step 1 starts at (w * seq) mod (len - seq)."""
    windows = len(data) - seq
    tokens, targets = [], []
    for w in range(global_batch):
        start = (w * seq) % windows
        tokens.append(list(data[start:start + seq]))
        targets.append(list(data[start + 1:start + seq + 1]))
    return tokens, targets


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessel", required=True, help="the tessel binary")
    parser.add_argument("--model", choices=["gpt2", "llama", "both"], default="both",
                        help="which shape of model to make and compare (without --model-dir)")
    parser.add_argument("--model-dir", help="folder with model.safetensors and config.json (default: make one)")
    parser.add_argument("--plan", help="plan the model trains under (with --model-dir)")
    parser.add_argument("--data", help="byte-level text whose first global batch is scored (with --model-dir)")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        print(f"check-hf-interop: skipped: {error} (needs python3 with torch and transformers)")
        return SKIP
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    failed = False
    with tempfile.TemporaryDirectory(prefix="tessel-hf-interop-") as work:
        env.setdefault("TESSEL_DB", os.path.join(work, "default.db"))
        if args.model_dir:
            if not (args.plan and args.data):
                sys.exit("check-hf-interop: --model-dir needs --plan and --data")
            failed = compare(args.tessel, args.model_dir, args.plan, args.data, work, env, "")
        else:
            data_file = os.path.join(work, "text.txt")
            with open(data_file, "w") as out:
                out.write(sample_text())
            for family in (["gpt2", "llama"] if args.model == "both" else [args.model]):
                folder = os.path.join(work, family)
                os.makedirs(folder)
                plan_file = os.path.join(folder, "plan.json")
                with open(plan_file, "w") as out:
                    json.dump(plan_of(MODELS[family]), out)
                checkpoint = os.path.join(folder, "checkpoint")
                tessel(["run", "--plan", plan_file, "--steps", "30", "--lr", "0.01", "--data", data_file,
                        "--checkpoint", checkpoint, "--db", os.path.join(folder, "train.db")], args.tessel, env)
                model_dir = os.path.join(folder, "model")
                os.makedirs(model_dir)
                tessel(["export-weights", "--checkpoint", checkpoint, "--out",
                        os.path.join(model_dir, "model.safetensors")], args.tessel, env)
                failed = compare(args.tessel, model_dir, plan_file, data_file, folder, env, f"{family}: ") or failed
    return 1 if failed else 0


def compare(binary, model_dir, plan_file, data_file, work, env, label):
    """Scores tessel's and transformers' loss both ways; prints a line each; True if any differs."""
    with open(plan_file) as f:
        plan = json.load(f)
    seq = plan["train"].get("seq_len") or plan["model"]["seq_len"]
    global_batch = plan["train"]["global_batch"]
    with open(data_file, "rb") as f:
        data = f.read()
    tokens, targets = first_batch(data, global_batch, seq)
    failed = False
    directions = [("tessel -> transformers", model_dir)]
    if isinstance(plan["model"], dict):  # an inline model: transformers can make one of its shape
        directions.append(("transformers -> tessel", hf_made_model(work, plan["model"])))
    for direction, folder in directions:
        want = tessel_step1_loss(binary, plan_file, os.path.join(folder, "model.safetensors"), data_file, work, env)
        got = hf_loss(folder, tokens, targets)
        relative = abs(got - want) / abs(want)
        failed = failed or relative > TOLERANCE
        verdict = "ok" if relative <= TOLERANCE else f"DIFFER (more than {TOLERANCE:g})"
        print(f"{label}{direction}: tessel loss {want:.7f}  transformers loss {got:.7f}  "
              f"relative difference {relative:.2e}  {verdict}")
    return failed


def hf_loss(folder, tokens, targets):
    import torch
    from transformers import AutoModelForCausalLM
    # eager attention: the plain softmax(q k^T / sqrt(d)) v tessel computes, no fused kernel's choices
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    with torch.no_grad():
        logits = model(torch.tensor(tokens)).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.tensor(targets).reshape(-1)).item()


def is_llama(model):
    return model.get("activation") == "swiglu"


def hf_made_model(work, model):
    """A model of the plan's shape (GPT-2 or LLaMA) as transformers initialises it, saved its own way."""
    import torch
    torch.manual_seed(0)
    last = model["vocab"] - 1
    if is_llama(model):
        from transformers import LlamaConfig, LlamaForCausalLM
        config = LlamaConfig(vocab_size=model["vocab"], hidden_size=model["hidden"],
                             intermediate_size=model["ffn_hidden"], num_hidden_layers=model["layers"],
                             num_attention_heads=model["heads"], num_key_value_heads=model.get("kv_heads", model["heads"]),
                             max_position_embeddings=model["seq_len"], rms_norm_eps=1e-5, rope_theta=10000.0,
                             hidden_act="silu", tie_word_embeddings=False, attention_bias=False,
                             bos_token_id=last, eos_token_id=last)
        made = LlamaForCausalLM(config)
    else:
        from transformers import GPT2Config, GPT2LMHeadModel
        config = GPT2Config(vocab_size=model["vocab"], n_positions=model["seq_len"], n_embd=model["hidden"],
                            n_layer=model["layers"], n_head=model["heads"], n_inner=model.get("ffn_hidden"),
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=last, eos_token_id=last)
        made = GPT2LMHeadModel(config)
    folder = os.path.join(work, "made-by-transformers")
    made.save_pretrained(folder)
    return folder


if __name__ == "__main__":
    sys.exit(main())
