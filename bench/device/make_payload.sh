#!/usr/bin/env bash
# Packs what bench/device/run_cuda_checks.sh needs on a GPU machine that has the CUDA toolkit, cuDNN
# and PyTorch but none of kgpt's Debian packages, into PAYLOAD_DIR/payload.tar.xz and payload.env:
#
#   bash bench/device/make_payload.sh PAYLOAD_DIR      # after building build/ (CPU) and build-cuda/
#
# - the kgpt tree's tracked files, data/tiny_cpu and the CUDA build's executables, at the paths they
#   were built in (the test executables hold their source folder's path);
# - the Debian libraries those executables load that a GPU machine lacks (HDF5, yaml-cpp, Open MPI
#   with its components and help files, and what they load), under a prefix of their own: glibc and
#   the CUDA libraries (cudart, cuBLAS, cuDNN, NCCL) are the GPU machine's;
# - the CPU build's 10-step runs of the decks run_cuda_checks.sh trains, fp32 and bf16, to compare
#   the CUDA runs with.
# Unpack with `tar -xJf PAYLOAD_DIR/payload.tar.xz -C /`.
set -euo pipefail
payload=$(mkdir -p "${1:?payload folder}" && cd "$1" && pwd)
tree=$(cd "$(dirname "$0")/../.." && pwd)
cpu_build=${KGPT_CPU_BUILD:-$tree/build}
cuda_build=${KGPT_CUDA_BUILD:-$tree/build-cuda}
stage=/tmp/kgpt-payload          # where the libraries and CPU runs unpack on the GPU machine
libroot=$stage/libroot
cpu_runs=$stage/cpu_runs
multiarch=usr/lib/x86_64-linux-gnu

for exe in "$cpu_build/kgpt" "$cuda_build/kgpt"; do
  [ -x "$exe" ] || { echo "make_payload.sh: $exe is not built" >&2; exit 2; }
done
[ -d "$tree/data/tiny_cpu" ] || { echo "make_payload.sh: $tree/data/tiny_cpu is missing (scripts/setup.sh makes it)" >&2; exit 2; }
rm -rf "$stage"
mkdir -p "$libroot/$multiarch" "$cpu_runs"

echo "== CPU runs to compare with (10 steps of inputs/tiny_cpu.yaml, golf and gpt2, fp32 and bf16)"
# The same options as run_cuda_checks.sh's train step.
common=(--set train.iterations=10 --set train.log_every=1 --set train.warmdown_iters=0 --set train.eval_every=10)
gpt2=(--set model.family=gpt2 --set model.n_kv_head=4 --set model.logit_softcap=0 --set optim.matrix_lr=0.001
      --set optim.embed_lr=0.001 --set optim.scalar_lr=0.001)
bf16=(--set train.precision=bf16)
(
  cd "$tree"
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" --run-dir "$cpu_runs/golf" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" --run-dir "$cpu_runs/gpt2" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${bf16[@]}" --run-dir "$cpu_runs/golf_bf16" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" "${bf16[@]}" --run-dir "$cpu_runs/gpt2_bf16" > /dev/null
)

echo "== libraries"
# Everything the executables and Open MPI's components load from the system's folders, except glibc,
# which must be the GPU machine's own, and CUDA's, which come with its driver and toolkit.
skip='^(libc|libm|libdl|librt|libpthread|ld-linux-x86-64|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc.*)\.so'
binaries=("$cuda_build/kgpt" "$cuda_build"/tests/test_* "$cuda_build/tests/reference_dump")
mapfile -t components < <(find /$multiarch/openmpi /$multiarch/pmix2 -name '*.so' 2>/dev/null)
ldd "${binaries[@]}" "${components[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r library; do
    name=$(basename "$library")
    [[ $name =~ $skip ]] && continue
    cp -L "$library" "$libroot/$multiarch/$name"
  done
cp -a /$multiarch/openmpi "$libroot/$multiarch/"
[ -d /$multiarch/pmix2 ] && cp -a /$multiarch/pmix2 "$libroot/$multiarch/"
mkdir -p "$libroot/usr/share" "$libroot/etc"
for shared in openmpi pmix; do [ -d /usr/share/$shared ] && cp -a /usr/share/$shared "$libroot/usr/share/"; done
[ -d /etc/openmpi ] && cp -a /etc/openmpi "$libroot/etc/"
# HDF5's serial libraries live in a folder of their own.
[ -d /$multiarch/hdf5/serial ] && cp -a /$multiarch/hdf5 "$libroot/$multiarch/"

cat > "$payload/payload.env" <<EOF
KGPT_TREE=$tree
KGPT_BUILD=$cuda_build
KGPT_LIBROOT=$libroot
KGPT_CPU_RUNS=$cpu_runs
EOF

echo "== archive"
files=$(mktemp)
(cd "$tree" && git ls-files | sed "s|^|$tree/|") > "$files"
{
  find "$tree/data/tiny_cpu" -type f
  echo "$cuda_build/kgpt"
  find "$cuda_build/tests" -maxdepth 1 -type f \( -name 'test_*' -o -name reference_dump \) -perm -u+x
  echo "$stage"
} >> "$files"
tar -cJf "$payload/payload.tar.xz" --absolute-names -T "$files"
rm -f "$files"
ls -l "$payload"
