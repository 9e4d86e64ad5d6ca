#!/usr/bin/env bash
# tessel GPU bundle launcher (the bundle's `run`; scripts/gpu-bundle.sh puts it there):
#   run PROGRAM [ARGS]    bin/PROGRAM (or any command) with the bundle's libraries,
#                         OpenMPI and the machine's CUDA libraries on the paths
#   run --libraries       where each CUDA library was found; exit 1 if a required one was not
# The environment the launcher was started with is kept in TESSEL_ORIGINAL_PATH and
# TESSEL_ORIGINAL_LD_LIBRARY_PATH: Python (PyTorch) must run with it, never the bundle's.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export TESSEL_ORIGINAL_PATH=${TESSEL_ORIGINAL_PATH-$PATH}
export TESSEL_ORIGINAL_LD_LIBRARY_PATH=${TESSEL_ORIGINAL_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
# shellcheck source=gpu_libraries.sh
. "$here/scripts/gpu_libraries.sh"
tessel_find_cuda_libraries
if [ "${1:-}" = --libraries ]; then
  tessel_print_cuda_libraries
  for library in "${tessel_cuda_required[@]}"; do [ -n "${tessel_cuda_found[$library]:-}" ] || exit 1; done
  exit 0
fi
mpi_lib=$here/openmpi/usr/lib/x86_64-linux-gnu/openmpi/lib
base_lib=$here/openmpi/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$here/lib:$mpi_lib:$base_lib${tessel_cuda_path:+:$tessel_cuda_path}${TESSEL_ORIGINAL_LD_LIBRARY_PATH:+:$TESSEL_ORIGINAL_LD_LIBRARY_PATH}"
export PATH="$here/bin:$here/openmpi/usr/bin${TESSEL_ORIGINAL_PATH:+:$TESSEL_ORIGINAL_PATH}"
export OPAL_PREFIX=$here/openmpi/usr
export OPAL_LIBDIR=$mpi_lib OPAL_PKGLIBDIR=$mpi_lib/openmpi3 OPAL_SYSCONFDIR=$here/openmpi/etc/openmpi
export OPAL_DATADIR=$here/openmpi/usr/share OPAL_PKGDATADIR=$here/openmpi/usr/share/openmpi
# Lent machines run commands as root; ranks sharing one GPU stay on this host.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export TESSEL_BUNDLE=$here
[ $# -gt 0 ] || { echo "usage: run PROGRAM [ARGS] | run --libraries  (programs: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
program=$1
shift
[ -x "$here/bin/$program" ] && program=$here/bin/$program
exec "$program" "$@"
