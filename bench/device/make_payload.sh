#!/usr/bin/env bash
# Packs what bench/device/run_cuda_checks.sh needs on a GPU machine that has the CUDA toolkit, cuDNN,
# NCCL and PyTorch but none of kgpt's Debian packages, and checks the pack on this machine:
#
#   bash bench/device/make_payload.sh PAYLOAD_DIR    # after building build/ (CPU) and build-cuda/
#                                                    # (targets kgpt, kgpt_tests, reference_dump)
#
# PAYLOAD_DIR/payload.tar.xz unpacks (tar -xJf ... -C /) to /tmp/kgpt-payload:
#   bin/          the CUDA build's kgpt, kgpt_tests (every Catch2 test, one copy of the device code)
#                 and reference_dump, host symbols stripped
#   test_groups   the ctest groups of kgpt_tests: name and Catch2 tags, one per line
#   lib/          the Debian libraries they load that a GPU machine lacks (HDF5, yaml-cpp, Open MPI and
#                 its components, SentencePiece, and what those load): never glibc, libstdc++ or a
#                 CUDA library (cudart, cuBLAS(Lt), cuDNN, NCCL, NVRTC, cuSPARSE, cuSOLVER, cuRAND,
#                 cuFFT, nvJitLink, CUPTI), which are the GPU machine's
#   openmpi/      Open MPI's components, help texts and configuration, found through OPAL_PREFIX
#   data/         data/tiny_cpu, the tiny deck's shards
#   cpu_runs/     the CPU build's 10-step runs of the decks run_cuda_checks.sh trains on the GPU (golf and
#                 gpt2 in fp32 and bf16; golf with the EMA, SWA and late QAT; golf with SmearGate,
#                 parallel residuals and the evaluation with documents apart)
#   payload.env   where the test executables expect the source tree and kgpt (they were built there)
# The working tree itself travels with the device call. The pack must stay under 60 MiB.
#
# Before packing, bench/device/check_lambda_linkage.sh: no host-device lambda wrapper defined by two
# object files of the CUDA build (core/kernel.hpp). Then a dry run: the pack unpacked into a root of its own with only glibc, libstdc++, the CUDA
# toolkit's libraries and the driver's stub (a GPU machine's part), where every executable's
# libraries must resolve, `kgpt --version` must run, and `kgpt train` must get through MPI's start
# and stop only where it asks for a GPU.
set -euo pipefail
payload=$(mkdir -p "${1:?payload folder}" && cd "$1" && pwd)
tree=$(cd "$(dirname "$0")/../.." && pwd)
cpu_build=${KGPT_CPU_BUILD:-$tree/build}
cuda_build=${KGPT_CUDA_BUILD:-$tree/build-cuda}
stage=/tmp/kgpt-payload
multiarch=usr/lib/x86_64-linux-gnu
limit_mib=60

for exe in "$cpu_build/kgpt" "$cuda_build/kgpt" "$cuda_build/tests/kgpt_tests" "$cuda_build/tests/reference_dump"; do
  [ -x "$exe" ] || { echo "make_payload.sh: $exe is not built" >&2; exit 2; }
done
[ -d "$tree/data/tiny_cpu" ] || { echo "make_payload.sh: $tree/data/tiny_cpu is missing (scripts/setup.sh makes it)" >&2; exit 2; }
# A lambda wrapper that two object files define crashes on the GPU machine only: refuse to pack it.
bash "$tree/bench/device/check_lambda_linkage.sh" "$cuda_build"
rm -rf "$stage"
mkdir -p "$stage"/{bin,lib,openmpi,cpu_runs,data}

echo "== executables (host symbols stripped; the device code stays)"
for exe in "$cuda_build/kgpt" "$cuda_build/tests/kgpt_tests" "$cuda_build/tests/reference_dump"; do
  strip --strip-unneeded -o "$stage/bin/$(basename "$exe")" "$exe"
  awk -v name="$(basename "$exe")" -v built="$(stat -c %s "$exe")" -v kept="$(stat -c %s "$stage/bin/$(basename "$exe")")" \
    'BEGIN { printf "%-16s %6.1f MiB built, %6.1f MiB stripped\n", name, built / 1048576, kept / 1048576 }'
done
# The ctest groups of the CUDA build: add_test([=[test_core]=] ".../kgpt_tests" "-#" "[#a],[#b]")
sed -n 's/^add_test(\[=\[\([^]]*\)\]=\] "[^"]*kgpt_tests" "-#" "\([^"]*\)".*/\1 \2/p' \
  "$cuda_build/tests/CTestTestfile.cmake" > "$stage/test_groups"
[ -s "$stage/test_groups" ] || { echo "make_payload.sh: no kgpt_tests groups in $cuda_build/tests/CTestTestfile.cmake" >&2; exit 2; }

echo "== CPU runs to compare with (10 steps of inputs/tiny_cpu.yaml, golf and gpt2, fp32 and bf16)"
# The options run_cuda_checks.sh's train step uses; keep the two lists the same.
common=(--set train.iterations=10 --set train.log_every=1 --set train.warmdown_iters=0 --set train.eval_every=10)
gpt2=(--set model.family=gpt2 --set model.n_kv_head=4 --set model.logit_softcap=0 --set optim.matrix_lr=0.001
      --set optim.embed_lr=0.001 --set optim.scalar_lr=0.001)
bf16=(--set train.precision=bf16)
# The weight averages and late QAT on every step (their kernels, and the EMA's evaluation, on the GPU).
averages=(--set train.ema_decay=0.9 --set train.swa_every=2 --set train.swa_start_lr=1.5 --set train.qat_start_lr=1.5
          --set train.eval_weights=ema)
# The records' architecture options (SmearGate, parallel residuals, BigramHash, depth recurrence)
# and the evaluation with documents apart.
architecture=(--set model.smear_gate=true --set model.parallel_residual_start=2 --set train.eval_isolate_documents=true
              --set model.bigram_buckets=64 --set model.bigram_dim=16 --set model.recur_start=1 --set model.recur_count=2)
(
  cd "$tree"
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2}
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" --run-dir "$stage/cpu_runs/golf" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" --run-dir "$stage/cpu_runs/gpt2" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${bf16[@]}" --run-dir "$stage/cpu_runs/golf_bf16" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" "${bf16[@]}" --run-dir "$stage/cpu_runs/gpt2_bf16" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${averages[@]}" --run-dir "$stage/cpu_runs/golf_averages" > /dev/null
  "$cpu_build/kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${architecture[@]}" --run-dir "$stage/cpu_runs/golf_options" > /dev/null
)
rm -rf "$stage"/cpu_runs/*/checkpoints  # the comparison reads history.h5 only
cp -a "$tree/data/tiny_cpu" "$stage/data/"

echo "== libraries"
# What the executables and Open MPI's components load from the system's folders, but for the GPU
# machine's own: glibc, the C++ runtime, the driver and every CUDA library.
skip='^(libc|libm|libdl|librt|libpthread|libresolv|libutil|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libnccl|libnvrtc.*|libcusparse|libcusolver.*|libcurand|libcufft.*|libnvJitLink|libcupti|libnvperf.*)\.so'
mapfile -t components < <(find /$multiarch/openmpi/lib/openmpi3 /$multiarch/pmix2 -name '*.so' 2>/dev/null)
ldd "$stage"/bin/* "${components[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r library; do
    name=$(basename "$library")
    [[ $name =~ $skip ]] && continue
    cp -L "$library" "$stage/lib/$name"
  done
# Open MPI relocated: OPAL_PREFIX=$stage/openmpi/usr finds lib/openmpi3 (the components), share/openmpi
# (help texts) and etc (its defaults); PMIx's components likewise.
mkdir -p "$stage/openmpi/$multiarch" "$stage/openmpi/usr/share" "$stage/openmpi/etc"
cp -a /$multiarch/openmpi "$stage/openmpi/$multiarch/"
[ -d /$multiarch/pmix2 ] && cp -a /$multiarch/pmix2 "$stage/openmpi/$multiarch/"
for shared in openmpi pmix; do [ -d /usr/share/$shared ] && cp -a /usr/share/$shared "$stage/openmpi/usr/share/"; done
[ -d /etc/openmpi ] && cp -a /etc/openmpi "$stage/openmpi/etc/"
# The components are read from the prefix; their libraries are in lib/ already.
find "$stage/openmpi" -name '*.a' -delete
find "$stage/openmpi" -name '*.la' -delete

cat > "$stage/payload.env" <<EOF
KGPT_SOURCE_DIR=$tree
KGPT_BUILT_EXE=$cuda_build/kgpt
EOF

echo "== archive"
tar -C / -cJf "$payload/payload.tar.xz" "${stage#/}"
bytes=$(stat -c %s "$payload/payload.tar.xz")
awk -v bytes="$bytes" -v limit="$limit_mib" -v unpacked="$(du -sh "$stage" | cut -f1)" \
  'BEGIN { printf "payload.tar.xz: %.1f MiB (limit %d MiB); unpacked %s\n", bytes / 1048576, limit, unpacked }'
du -sh "$stage"/* | sed 's|/tmp/kgpt-payload/||'
if [ "$bytes" -gt $((limit_mib * 1048576)) ]; then
  echo "make_payload.sh: the payload is over $limit_mib MiB" >&2
  exit 1
fi

echo "== dry run: the payload in a root with only glibc, libstdc++, CUDA's libraries and the driver's stub"
root=$(mktemp -d /tmp/kgpt-dry-run.XXXXXX)
trap 'rm -rf "$root"' EXIT
tar -xJf "$payload/payload.tar.xz" -C "$root"
mkdir -p "$root/$multiarch" "$root/lib64" "$root/usr/local/cuda/lib64" "$root/tmp" "$root/dev" "$root/proc" "$root/sys"
for pattern in 'ld-linux-x86-64.so.2' 'libc.so.6' 'libm.so.6' 'libdl.so.2' 'librt.so.1' 'libpthread.so.0' \
               'libresolv.so.2' 'libutil.so.1' 'libstdc++.so.6' 'libgcc_s.so.1'; do
  cp -L "/$multiarch/$pattern" "$root/$multiarch/" 2>/dev/null || cp -L "/lib/x86_64-linux-gnu/$pattern" "$root/$multiarch/"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$root/lib64/"
cp -L /usr/local/cuda/lib64/lib{cudart,cublas,cublasLt,nccl,nvrtc,nvrtc-builtins}.so.1[0-9]* "$root/usr/local/cuda/lib64/" 2>/dev/null || true
cp -L /usr/local/cuda/lib64/libcudnn*.so.9 /usr/local/cuda/lib64/libnccl.so.2 "$root/usr/local/cuda/lib64/"
cp -L /usr/local/cuda/lib64/stubs/libcuda.so "$root/usr/local/cuda/lib64/libcuda.so.1"
mkdir -p "$root$tree"
(cd "$tree" && git ls-files -z | xargs -0 cp --parents -t "$root$tree")
# What a GPU machine has mounted (hwloc reads /sys and /proc); where mounting is refused, the run
# below shows hwloc's complaint and goes on.
mount --bind /dev "$root/dev" 2>/dev/null || true
mount -t proc proc "$root/proc" 2>/dev/null || true
mount --bind /sys "$root/sys" 2>/dev/null || true
trap 'for m in proc dev sys; do mountpoint -q "$root/$m" && umount "$root/$m"; done; rm -rf "$root"' EXIT
in_root=(env -i PATH=/usr/bin:/bin HOME=/tmp
  LD_LIBRARY_PATH=$stage/lib:/usr/local/cuda/lib64
  OPAL_PREFIX=$stage/openmpi/usr OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_show_load_errors=0
  /usr/sbin/chroot "$root")
unresolved=0
for exe in "$stage"/bin/*; do
  missing=$("${in_root[@]}" /lib64/ld-linux-x86-64.so.2 --list "$exe" 2>&1 | grep 'not found' || true)
  glibc=$(objdump -T "$exe" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
  glibcxx=$(objdump -T "$exe" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -n 1)
  echo "$(basename "$exe"): $(echo -n "$missing" | grep -c . || true) libraries not found; needs $glibc, $glibcxx"
  [ -n "$missing" ] && { echo "$missing"; unresolved=1; }
done
set +e
"${in_root[@]}" "$stage/bin/kgpt" --version
version_status=$?
train=$("${in_root[@]}" "$stage/bin/kgpt" train "$tree/inputs/tiny_cpu.yaml" \
  --set data.train_files=$stage/data/tiny_cpu/fortunes_train_000000.bin \
  --set data.val_files=$stage/data/tiny_cpu/fortunes_val_000000.bin --run-dir /tmp/dry_run 2>&1)
set -e
echo "kgpt train without a GPU: $(echo "$train" | tail -n 3 | tr '\n' ' ')"
if [ "$unresolved" -ne 0 ] || [ "$version_status" -ne 0 ]; then
  echo "make_payload.sh: the dry run failed" >&2
  exit 1
fi
if echo "$train" | grep -qiE 'orte|pmix|opal|mca_|mpi_init'; then
  echo "make_payload.sh: MPI did not start from the relocated Open MPI" >&2
  exit 1
fi
echo "make_payload.sh: $payload/payload.tar.xz is ready"
