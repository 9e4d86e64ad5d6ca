# Sourced by scripts/demo.sh (`source scripts/demo_cpu_loop_section.sh`): the loop from
# measurement back to prediction, on this machine, in one section. It uses demo.sh's
# helpers and variables (section, run, explain, value_after, $tessel, $out, $last) so it
# reads like the rest of the demo. Two plans are run and compared, the profile is
# calibrated on them, a third plan is predicted before it is run, then run and compared.
# The fit is limited to the parameters the simulator reads, because `tessel compare`
# sets the measurement against the simulator (overlap and layer overhead are the
# analytic planner's alone); that choice does not depend on how the third plan comes out.

section "Close the loop: measure, calibrate, predict a new plan, measure it"
loop_db="$out/loop.db"
rm -f "$loop_db" "$loop_db-wal" "$loop_db-shm"
printf '\n$ tessel profile --backend cpu --quick --db %s   # (its progress lines hidden)\n' "$loop_db"
"$tessel" profile --backend cpu --quick --db "$loop_db" 2>/dev/null | grep '^measured'
suite=examples/cpu-suite
run_id_of_last() { sed -nE 's/^wrote run ([0-9]+) to .*/\1/p' "$last" | tail -1; }
run run --plan "$suite/02-dp2-medium.json" --steps 5 --db "$loop_db"
fitted_a=$(run_id_of_last)
run run --plan "$suite/04-tp2-1d-medium.json" --steps 5 --db "$loop_db"
fitted_b=$(run_id_of_last)
run compare --run "$fitted_b" --db "$loop_db" --top 4
ratio_before=$(sed -nE 's/.*measured \/ simulated ([0-9.]+).*/\1/p' "$last" | head -1)
run calibrate --runs "$fitted_a,$fitted_b" --db "$loop_db" --device local-cpu \
  --fit gemm_efficiency_scale,memory_efficiency_scale,attention_efficiency_scale,intra_bus_efficiency,collective_call_overhead_s
printf '\n$ tessel estimate --plan %s/03-pp2-medium.json --db %s   # a plan not run yet\n' "$suite" "$loop_db"
"$tessel" estimate --plan "$suite/03-pp2-medium.json" --db "$loop_db" | tee "$last" | head -3
predicted=$(value_after "step time" "$last")
run run --plan "$suite/03-pp2-medium.json" --steps 5 --db "$loop_db"
run compare --run "$(run_id_of_last)" --db "$loop_db" --top 4
ratio_after=$(sed -nE 's/.*measured \/ simulated ([0-9.]+).*/\1/p' "$last" | head -1)
explain "Before calibration this machine's profile alone put the tensor-parallel run's step ${ratio_before:-several}x below what was measured; calibrated on two recorded runs (data and tensor parallel), it predicted ${predicted} for a pipeline plan it had never seen, and that plan's measured / simulated is ${ratio_after:-the ratio above}: what recorded runs teach the profile carries to plans not yet run (scripts/cpu-loop.sh does it for the 16-plan suite: fit on half, predict the other half)."
if awk -v c="$(nproc)" '$1 > c { exit 0 } { exit 1 }' /proc/loadavg; then
  explain "This machine is busy (load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores): other programs' turns on the cores stretch every measured step, blocking collectives most, and change from run to run, which no profile can predict; on a quiet machine the ratios come closer to 1."
fi
rm -f "$loop_db" "$loop_db-wal" "$loop_db-shm"
