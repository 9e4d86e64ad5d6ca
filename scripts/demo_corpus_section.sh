# Sourced by scripts/demo.sh (`source scripts/demo_corpus_section.sh`): calibration on the
# published corpus (corpus/published), then one search planned for two frameworks under
# the calibrated profile. It uses demo.sh's helpers and variables (section, run, explain,
# $tessel, $out, $last). The corpus calibration prints every run; the demo keeps the
# fitted parameters and the summary lines (the full table is in $out/corpus-calibration.txt).

section "Calibrate on published runs, plan for the framework that will train"
corpus_db="$out/corpus.db"
rm -f "$corpus_db" "$corpus_db-wal" "$corpus_db-shm"
printf '\n$ tessel calibrate --published corpus/published --device H100-SXM --db %s   # (per-run rows cut)\n' \
  "$corpus_db"
"$tessel" calibrate --published corpus/published --device H100-SXM --db "$corpus_db" >"$out/corpus-calibration.txt"
grep -E '^(== |fitted parameters|verdict|calibration runs|leave-one-out|leave-one-source-out|held out|band|wall time)' \
  "$out/corpus-calibration.txt" | tee "$last"
loso=$(sed -nE 's/^leave-one-source-out, by source: +MAPE +([0-9.]+%).*/\1/p' "$last")
held_before=$(sed -nE 's/^held out, before: +MAPE +([0-9.]+%).*/\1/p' "$last")
held_after=$(sed -nE 's/^held out, after: +MAPE +([0-9.]+%).*/\1/p' "$last")
# The held-out row furthest off after the fit: its id and its error (the row's last
# columns: after, its error, then "held out" for both leave-out figures).
worst_held_out=$(awk '$NF == "out" && $(NF-1) == "held" && $(NF-3) == "held" { e = $(NF-4); a = e; sub(/^[-+]/, "", a);
  sub(/%$/, "", a); if (a + 0 > best) { best = a + 0; line = $1 " at " e } } END { print line }' "$out/corpus-calibration.txt")
explain "Fitted on the H100 runs others published (held-out sources only predicted): each source is predicted by a fit that never saw it within ${loso:-some percent} on average, every source weighing the same; the error band comes from those errors. The megatron_memory_factor and compiled_memory_factor say Megatron-LM's and torch.compile's fused kernels run the ops between the GEMMs faster than eager PyTorch."
explain "The held-out sources (runs no fit ever sees) err ${held_before:-?} before the fit and ${held_after:-?} after it, worst ${worst_held_out:-?} ($out/corpus-calibration.txt lists each run): the fit is judged on the corpus's sources it left out (the verdict above), and a source unlike all of them can move the other way; the held-out error is the honest figure for runs unlike the corpus's."
search=(plan --model gpt3-13b --cluster dgx-h100 --nodes 4 --global-batch 256 --top 1 --db "$corpus_db")
run "${search[@]}" --kernels fused
run "${search[@]}" --kernels fused --framework megatron
explain "The same search for flash attention in eager PyTorch, then in Megatron-LM: the calibrated profile prices each framework's own kernels, each step time carries its band from the leave-one-source-out errors, and an MFU above what the corpus measured for this size is marked '!'."
printf '\n$ tessel estimate --import tests/interop/real/torchtitan/llama3_8b.toml --cluster dgx-h100 --nodes 8 --db %s   # (lines cut)\n' \
  "$corpus_db"
"$tessel" estimate --import tests/interop/real/torchtitan/llama3_8b.toml --cluster dgx-h100 --nodes 8 \
  --db "$corpus_db" | grep -E '^(  mapped   activation_checkpoint|llama3-8b on|step time|memory/GPU|recompute )'
explain "torchtitan's Llama 3 8B config checkpoints activations op by op (mode selective, option op): every other matmul's output and the attention output are kept, the rest is replayed in the backward. tessel prices that policy as recompute selective-op, as it prices the corpus's torchtitan 8B rows; its executor runs none, selective and full."
