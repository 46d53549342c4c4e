#!/usr/bin/env bash
# Checks a CUDA build for nvcc lambda wrappers that more than one object file defines:
#
#   bash bench/device/check_lambda_linkage.sh BUILD_DIR
#
# A __host__ __device__ lambda (KOKKOS_LAMBDA) is copied and destroyed on the host through function
# pointers private to the translation unit that made it. When a function that makes one is defined
# in a header with external linkage, every unit that uses it emits the wrapper's copy constructor
# as a weak symbol, the linker keeps one, and a unit can end up copying through another unit's
# pointer, never set: a jump to address 0 at run time, on a GPU machine only (core/kernel.hpp).
# Such kernels belong in unnamed namespaces. Prints each wrapper defined by more than one object
# file (at most 20) and exits 1 if there is any; 0 otherwise. Needs nm (binutils).
set -euo pipefail
build=${1:?build folder of a CUDA build}
objects=$(find "$build" -name '*.o' -path '*CMakeFiles*')
[ -n "$objects" ] || { echo "check_lambda_linkage.sh: no object files under $build" >&2; exit 2; }
list=$(mktemp)
trap 'rm -f "$list"' EXIT
for object in $objects; do
  # Weak (W, V) definitions of the wrapper's members; each object file counted once per symbol.
  nm --defined-only "$object" 2>/dev/null | awk '$2 == "W" || $2 == "V" {print $3}' | grep '__nv_hdl_wrapper_t' | sort -u || true
done > "$list"
shared=$(sort "$list" | uniq -d | wc -l)
wrappers=$(sort -u "$list" | wc -l)
if [ "$shared" -gt 0 ]; then
  echo "check_lambda_linkage.sh: $shared of $wrappers host-device lambda wrapper symbols are defined by more than one object file:"
  sort "$list" | uniq -d | head -n 20 | c++filt | cut -c1-300
  exit 1
fi
echo "check_lambda_linkage.sh: $wrappers host-device lambda wrapper symbols, each defined by one object file"
