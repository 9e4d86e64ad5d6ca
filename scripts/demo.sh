#!/usr/bin/env bash
# `make demo`: what tessel does, in the order a newcomer meets it: plan, measure this
# machine, predict with the measurement, simulate, train for real, set the measurement
# against the prediction, and the GUI. Each section has a heading, each result a sentence
# saying what it means (read off the output where it varies from machine to machine),
# long tables are cut to what matters, and the end says where the files are and what to
# try next. Everything it writes goes to BUILD/demo/. Grows with each capability.
set -euo pipefail
build_dir=${1:-build}
tessel="$build_dir/bin/tessel"
out="$build_dir/demo"
mkdir -p "$out"
last="$out/last-output.txt"
cores=$(nproc)
section_number=0

section() { section_number=$((section_number + 1)); printf '\n\n== %d. %s ==\n' "$section_number" "$1"; }
# Shows the command, runs it, keeps its output in $last for explain to read. stderr joins
# stdout line by line (stdbuf), so that a note on stderr never lands inside a stdout line.
run() { printf '\n$ tessel %s\n' "$*"; stdbuf -oL -eL "$tessel" "$@" 2>&1 | tee "$last"; }
explain() { printf '\n'; printf '  -> %s\n' "$*" | fold -s -w 100 | sed '2,$s/^/     /'; }
# The first number after a label in the last output ("step time      826.2 ms" -> "826.2 ms").
value_after() { grep -m1 "$1" "$2" | sed -E "s/.*$1[^0-9]*([0-9.,]+ ?[a-zA-Z%]*).*/\1/"; }

# Keeps each table of `profile show` to its header and first rows; the per-size
# collective samples (the longest table) are summarised by the alpha-beta fits below them.
trim_profile_show() {
  awk -v keep=4 '
    /^collectives/ { skipping = 1; print "collectives: per-size samples cut (see the alpha-beta fits below; `tessel profile show` lists them)"; next }
    skipping && /^$/ { skipping = 0; print; next }
    skipping { next }
    /^-+$/ { print; rows = 0; in_table = 1; next }
    in_table && /^$/ { if (rows > keep) printf "   ... %d more rows\n", rows - keep; in_table = 0; print; next }
    in_table { rows++; if (rows <= keep) print; next }
    { print }
    END { if (in_table && rows > keep) printf "   ... %d more rows\n", rows - keep }'
}

section "Plan: which layout is fastest, and does it fit"
run plan --model gpt2-1.5b --cluster dgx-h100 --nodes 4 --global-batch 512 --top 5
explain "Each row is one way to split GPT-2 1.5B over 32 H100s (dp/pp/tp: data, pipeline and tensor parallel ways; zero: how much optimizer state is sharded), fastest predicted step first; the rejected counts say why the other layouts cannot work (a head count that does not divide, memory that does not fit)."
run plan --model gpt3-175b --cluster dgx-a100 --nodes 128 --global-batch 1536 --top 5
best175=$(grep -m1 '^ *1 ' "$last" | awk '{print "dp" $2 " pp" $3 " tp" $4}')
explain "A 175B model does not fit by data parallelism alone: every plan shown shards it by tensor parallelism (tp, with sequence parallelism: +sp) and shards optimizer state and gradients by ZeRO, most cut it into pipeline stages (pp, interleaved chunks) or move part of the states to host memory (offload); the best here is ${best175}. The '!' marks an MFU above anything measured on A100 at this size, and the 'searched' line says how many layouts were priced, and in how little time."
run plan --model mixtral-8x7b --cluster dgx-h100 --nodes 8 --global-batch 256 --top 5
explain "A Mixture-of-Experts model (Mixtral 8x7B: 8 experts, 2 per token): ep shards the experts over ranks of the data-parallel group, and a2a is the share of the step the dispatch and combine all-to-alls take; layouts that shard experts over 8 ranks keep the most memory free."

section "Measure this machine"
db="$out/profiles.db"
rm -f "$db" "$db-wal" "$db-shm"
run profile --backend cpu --quick --db "$db"
explain "tessel timed GEMMs, memory-bound kernels and MPI collectives on these ${cores} cores and stored them as device local-cpu; samples whose repeats disagree are flagged noisy (other programs sharing the cores cause most of it)."
printf '\n$ tessel profile show --device local-cpu --db %s   # (tables cut to their first rows)\n' "$db"
"$tessel" profile show --device local-cpu --db "$db" | trim_profile_show
explain "'of peak' is each GEMM against the best one measured, and the alpha-beta fits turn the collective samples into a latency and a bandwidth, which is all the planner needs from them."

section "Predict with the measurement"
printf '\n$ tessel estimate --plan examples/local-cpu-gpt-small.json   # the shipped datasheet profile\n'
TESSEL_DB="$out/none.db" "$tessel" estimate --plan examples/local-cpu-gpt-small.json | tee "$last" | head -4
shipped=$(value_after "step time" "$last")
rm -f "$out/none.db"
run estimate --plan examples/local-cpu-gpt-small.json --db "$db"
measured=$(value_after "step time" "$last")
explain "The same plan predicted from the shipped profile (${shipped}) and from this machine's measurement (${measured}): the planner believes what was measured, and its tables show where the step's time and memory go."

section "Simulate: replay the plan op by op"
run simulate --plan examples/gpt3-13b-dgx-h100.json --trace "$out/gpt3-13b-trace.json"
explain "The SimGrid replay (links, contention, overlap, pipeline bubbles) lands within a few percent of the analytic estimate; stage 0 idles longer in the pipeline bubble than stage 1, as 1F1B makes it; open $out/gpt3-13b-trace.json in Perfetto to see the timeline."
run plan --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256 --top 5 --refine 5
explain "--refine simulates the analytic top 5 and re-ranks them by simulated step: plans the formula ranks alike can differ once communication competes for the same links."

section "Train for real on CPU ranks"
run run --plan examples/local-cpu-gpt-small.json --steps 5 --db "$db"
explain "Two data-parallel ranks (tessel started mpirun itself) train a small GPT; the loss falls step by step, and the run is recorded in $db next to the profile."
run run --plan examples/local-cpu-gpt-pp-tp.json --steps 5 --db "$db" --trace "$out/measured-pp-tp-trace.json"
run_id=$(sed -nE 's/^wrote run ([0-9]+) to .*/\1/p' "$last" | tail -1)
explain "Four ranks, 2 pipeline stages x 2 tensor-parallel ways, with ZeRO 1 and selective recompute: every op was timed under the same op id the simulator uses, so the two timelines can be laid side by side."
run simulate --plan examples/local-cpu-gpt-pp-tp.json --db "$db" --trace "$out/predicted-pp-tp-trace.json"
explain "The prediction for that same plan from this machine's profile; with more ranks than cores it prices the ranks as taking turns on them, and says so."
run run --plan examples/local-cpu-llama-tiny.json --steps 5 --db "$db"
explain "A LLaMA-shaped model (RMSNorm, rotary positions, grouped-query attention with 2 kv heads for 4 query heads, SwiGLU, untied output embedding, no biases) on 4 ranks: pipeline, tensor and sequence parallel with ZeRO 1; every layout the executor runs equals one process for it, as for GPT-2 (ctest -R Llama)."

run run --plan examples/local-cpu-moe-tiny.json --steps 5 --db "$db"
explain "A Mixture-of-Experts model (4 experts, top 2, an MoE MLP every 2nd block) on 2 ranks with expert parallelism 2: each rank holds 2 experts and sends its tokens to the other's through the all-to-all; each step line shows the auxiliary load-balancing loss trained on beside the cross-entropy. Every MoE layout equals one process (ctest -R MoeTrainer)."
run run --plan examples/local-cpu-gpt-offload.json --steps 3 --db "$db"
explain "Offload: the chunk manager keeps a quarter of the model-state chunks in the (budgeted) device pool and the rest in host memory, fetching each before its layer and stepping host chunks with a host AdamW; the losses equal the run without offload to the bit, and the bytes moved each way are the Program's (tessel compare shows the copies as ops)."

section "Other engines: their launch configs, token files and weights"
run estimate --import tests/interop/fixtures/megatron_gpt3_175b.sh --cluster dgx-a100 --nodes 128
explain "Megatron-LM's own GPT-3 175B example script, read as it is: each option is mapped into a plan, listed as ignored (paths, logging, learning-rate schedule) or, had it changed the cost in a way tessel does not model (experts, fp8 parameters), refused by name; fp8 training itself is mapped; the cluster and node count come from tessel."
run plan --near tests/interop/fixtures/nemo_gpt3_175b.yaml --cluster dgx-a100 --nodes 128 --top 3 --emit megatron --emit-out "$out/best-gpt3-175b.sh"
explain "NeMo's GPT-3 175B recipe, searched around: the last lines set the recipe's own prediction beside the best plans, and the best plan was written as a Megatron-LM launch script ($out/best-gpt3-175b.sh) with a comment line for anything Megatron cannot express. NeMo YAML, DeepSpeed JSON (with the model's config.json) and torchtitan's Python config registry (TOML for its older releases) read and write the same way (tessel export --plan F --to ENGINE)."
python3 - README.md "$out/tokens.bin" <<'PYTHON'
import array, struct, sys
ids = array.array("H", list(open(sys.argv[1], "rb").read()))  # one id per byte: a stand-in for a tokenizer
with open(sys.argv[2], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *[0] * 253) + ids.tobytes())
PYTHON
rm -rf "$out/checkpoint" "$out/runs-interop.db"
run run --plan examples/local-cpu-gpt-small.json --data "$out/tokens.bin" --steps 3 --checkpoint "$out/checkpoint" --db "$out/runs-interop.db"
explain "Training on a pre-tokenised file ($out/tokens.bin: README.md byte by byte, written just now as an llm.c shard of uint16 ids); Megatron's .bin/.idx datasets and nanoGPT's flat files read the same way, each checked before any rank starts (ids inside the vocabulary, at least one global batch)."
mkdir -p "$out/gpt-small"
run export-weights --checkpoint "$out/checkpoint" --out "$out/gpt-small/model.safetensors"
run run --plan examples/local-cpu-gpt-small.json --init "$out/gpt-small/model.safetensors" --data "$out/tokens.bin" --steps 2 --db "$out/runs-interop.db"
explain "The checkpoint's weights, gathered from the ranks' shards, written as safetensors with Hugging Face's GPT-2 names and a config.json (transformers' GPT2LMHeadModel loads $out/gpt-small), then read back to start a new run (its first loss continues from where the first run ended, not from an untrained model's); scripts/check-hf-interop.py scores such an export in transformers and in tessel on the same tokens where PyTorch is installed."
rm -rf "$out/checkpoint" "$out/runs-interop.db"

section "Measured against predicted, op kind by op kind"
run compare --run "${run_id:-2}" --db "$db" --top 8
ratio=$(sed -nE 's/.*measured \/ simulated ([0-9.]+).*/\1/p' "$last" | head -1)
if [ "$cores" -lt 4 ]; then
  explain "Measured is ${ratio:-several}x the prediction because 4 ranks share ${cores} cores: they take turns, so each tensor-parallel all-reduce (the top rows) waits until its partner rank is scheduled again, which the prediction prices only on average (every time x ranks / cores); on a machine with a core per rank the ratio comes close to 1."
else
  explain "Measured / simulated is ${ratio:-the ratio above}: with a core per rank what remains is the noise of the quick profile and the ops it extrapolated; the top rows are where the cost model misses most."
fi
# The memory table's total measured/predicted per rank (its 14th column), lowest and highest.
memory_ratios=$(awk '/^peak memory per rank/ { table = 1; next } table && $1 ~ /^[0-9]+$/ { print $14 }' "$last" |
  sort -n | sed -n '1p;$p' | paste -sd- -)
explain "Peak memory per rank, measured over predicted, is ${memory_ratios:-near 1} in total: each category's tensors as the planner counts them, and the workspace's runtime (MPI and the libraries a rank loads, beyond its tensors) as tessel profile measured it for this build, with or without the CUDA libraries linked."
run gui --screenshot "$out/gui-compare.png" --tab compare --db "$db" --run "${run_id:-2}"
explain "The same comparison (run ${run_id:-2}) drawn: a parity scatter per op kind (on y = x when the prediction is right) and the measured timeline over the predicted one."

source scripts/demo_cpu_loop_section.sh
source scripts/demo_corpus_section.sh

section "The plan explorer (GUI), rendered offscreen"
run gui --screenshot "$out/gui-plans.png"
run gui --screenshot "$out/gui-timeline.png" --tab timeline --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256
explain "The window's plans tab (every priced plan, step time against memory, the Pareto frontier drawn) and the timeline of the selected plan's simulation; \`tessel gui\` opens it on a display."

rm -f "$last"
runs_recorded=$(sqlite3 "$db" 'SELECT count(*) FROM runs')
section "Summary: where things are, what to try next"
cat <<EOF

Files written by this demo (in $out/):
  profiles.db                  this machine's measured profile and the ${runs_recorded} runs recorded in it
  gpt3-13b-trace.json          the simulated GPT-3 13B step (open in Perfetto or chrome://tracing)
  measured-pp-tp-trace.json    the measured 4-rank step, and predicted-pp-tp-trace.json its prediction
  gui-plans.png, gui-timeline.png, gui-compare.png   the GUI's tabs, rendered offscreen
  best-gpt3-175b.sh            the best GPT-3 175B plan as a Megatron-LM launch script
  tokens.bin, gpt-small/       an llm.c token shard, and trained weights as safetensors + config.json
  corpus.db, corpus-calibration.txt   the H100 profile calibrated on published runs, every run's errors

Try next:
  a model of your own (a preset, a tessel model JSON, or a Hugging Face config.json):
    $tessel plan --model llama2-7b --cluster dgx-h100 --nodes 2 --global-batch 256 --top 10
  what more nodes would buy:
    $tessel sweep --plan examples/gpt3-13b-dgx-h100.json --vary nodes=1,2,4,8
  the plan explorer, on a display:
    $tessel gui
  install it (docs/INSTALL.md), or build a Debian package:
    cmake --install $build_dir --prefix ~/.local    or    make package
  every test, and what each promise rests on (docs/RELIABILITY.md):
    make test
Every subcommand has --help; docs/USAGE.md walks through each of them.
EOF
