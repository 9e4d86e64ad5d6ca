# Sourced by the tests of the scripts that must refuse in one line when they cannot run.
# refuse_check LABEL EXPECTED-TEXT ARGS... runs "$script" ARGS with TMPDIR="$scratch" and no
# debootstrap, and fails the test unless it exits non-zero ("$want_status" when set), prints
# one line that starts with "$prefix: " and holds EXPECTED-TEXT, and leaves "$scratch" empty.
fail() { echo "FAIL: $*"; exit 1; }
refuse_check() {
  local label=$1 expected=$2
  shift 2
  local output status
  output=$(TMPDIR="$scratch" DEBOOTSTRAP=/nonexistent/debootstrap bash "$script" "$@" 2>&1)
  status=$?
  [ "$status" -ne 0 ] || fail "$label: exit status 0"
  [ -z "${want_status:-}" ] || [ "$status" -eq "$want_status" ] || fail "$label: exit status $status, not $want_status"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "$label: more than one line: $output"
  [[ $output == "$prefix: "*"$expected"* ]] || fail "$label: unexpected line: $output"
  [ -z "$(ls -A "$scratch")" ] || fail "$label: left files: $(ls -A "$scratch")"
  echo "ok: $label: $output (status $status)"
}
