# Finds the CUDA libraries tessel's GPU programs need on a machine tessel was not built on
# (sourced by the bundle's launcher `run`). A lent GPU machine has the toolkit's compiler
# but may hold cuBLAS, cuDNN and NCCL only in PyTorch's wheels, so both are searched: the
# toolkit folders ($TESSEL_CUDA_HOMES, default "$CUDA_HOME /usr/local/cuda"), then the
# `nvidia` namespace package and torch/lib of ${TESSEL_PYTHON:-python3}. cuDNN is optional
# (the CUDA backend loads it at run time and falls back to its own attention without it).
# Each library is taken from the first folder that has its exact soname.
tessel_cuda_libraries=(libcudart.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9)
tessel_cuda_required=(libcudart.so.13 libcublasLt.so.13 libnccl.so.2)

# Candidate folders, one per line, in search order.
tessel_cuda_candidate_dirs() {
  local home
  for home in ${TESSEL_CUDA_HOMES-${CUDA_HOME:-} /usr/local/cuda}; do
    [ -n "$home" ] || continue
    for sub in lib64 lib targets/x86_64-linux/lib; do
      [ -d "$home/$sub" ] && echo "$home/$sub"
    done
  done
  # The wheels, found by the machine's own Python in its own environment (never the
  # bundle's library path: PyTorch must load its own libraries).
  env PATH="${TESSEL_ORIGINAL_PATH:-$PATH}" LD_LIBRARY_PATH="${TESSEL_ORIGINAL_LD_LIBRARY_PATH:-}" \
    "${TESSEL_PYTHON:-python3}" - 2>/dev/null <<'PY' || true
import importlib.util, os
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
spec = importlib.util.find_spec("torch")
if spec and spec.submodule_search_locations:
    roots += [os.path.join(p, "lib") for p in spec.submodule_search_locations]
for root in roots:
    for folder, subfolders, files in os.walk(root):
        if folder[len(root):].count(os.sep) >= 3:
            subfolders[:] = []
        if any(f.startswith("lib") and ".so" in f for f in files):
            print(folder)
PY
}

# Sets tessel_cuda_found[library]=folder for each library found, and tessel_cuda_path to
# the distinct folders joined by ':' (search order kept).
declare -A tessel_cuda_found=()
tessel_cuda_path=""
tessel_find_cuda_libraries() {
  local dir library
  tessel_cuda_found=()
  tessel_cuda_path=""
  while read -r dir; do
    [ -n "$dir" ] || continue
    for library in "${tessel_cuda_libraries[@]}"; do
      if [ -z "${tessel_cuda_found[$library]:-}" ] && [ -e "$dir/$library" ]; then
        tessel_cuda_found[$library]=$dir
        case ":$tessel_cuda_path:" in *":$dir:"*) ;; *) tessel_cuda_path=${tessel_cuda_path:+$tessel_cuda_path:}$dir ;; esac
      fi
    done
  done < <(tessel_cuda_candidate_dirs)
}

# One line per library: where it was found, or that it was not (and whether that matters).
tessel_print_cuda_libraries() {
  local library required
  for library in "${tessel_cuda_libraries[@]}"; do
    required="optional"
    [[ " ${tessel_cuda_required[*]} " == *" $library "* ]] && required="required"
    echo "$library: ${tessel_cuda_found[$library]:-NOT FOUND} ($required)"
  done
}
