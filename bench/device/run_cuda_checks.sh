#!/usr/bin/env bash
# Checks of a CUDA build of kgpt on a GPU machine that has the CUDA toolkit, cuDNN and PyTorch but
# none of kgpt's Debian libraries: the unit tests, 10 training steps compared with CPU runs of the
# same deck, `kgpt bench --profile` and bench/torch_reference.py on the same GPU in the same run.
# Logs go to $OUT (default /tmp/kgpt-cuda).
#
#   tar -xJf PAYLOAD_DIR/payload.tar.xz -C / && bash bench/device/run_cuda_checks.sh PAYLOAD_DIR [tests] [train] [bench] [torch]
#
# bench/device/make_payload.sh makes PAYLOAD_DIR: the kgpt tree and its CUDA executables at the
# paths they were built in, the Debian libraries they load under a prefix of their own, data/tiny_cpu
# and the CPU runs' history.h5 files; payload.env names them: KGPT_TREE, KGPT_BUILD, KGPT_LIBROOT,
# KGPT_CPU_RUNS. cuDNN comes from the machine: the toolkit's folders, or PyTorch's nvidia-cudnn wheel.
set -uo pipefail
payload=$(cd "${1:?payload folder}" && pwd)
shift
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests train bench torch)
out=${OUT:-/tmp/kgpt-cuda}
mkdir -p "$out"
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }
wants() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

# shellcheck disable=SC1091
source "$payload/payload.env"
here=$(pwd)

# Libraries: Debian's (unpacked under KGPT_LIBROOT), then the GPU machine's CUDA, cuBLAS and NCCL.
lib=$KGPT_LIBROOT/usr/lib/x86_64-linux-gnu
found_dir() { dirname "$(find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt /root -name "$1" 2>/dev/null | head -n 1)"; }
nccl_dir=$(found_dir 'libnccl.so.2')
cudnn_dir=$(found_dir 'libcudnn.so.9')
nvrtc_dir=$(found_dir 'libnvrtc.so.1[23]')
export LD_LIBRARY_PATH=$lib:$lib/hdf5/serial:$lib/openmpi/lib:/usr/local/cuda/lib64:$nccl_dir:$cudnn_dir:$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Open MPI unpacked away from /usr: one rank without mpiexec (singleton), components from the prefix.
export OPAL_PREFIX=$KGPT_LIBROOT/usr OMPI_MCA_ess_singleton_isolated=1
export OMPI_MCA_mca_base_component_path=$lib/openmpi/lib/openmpi3 OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export PYTHONUNBUFFERED=1
kgpt=$KGPT_BUILD/kgpt

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
say "nccl: $nccl_dir cudnn: $cudnn_dir"
"$kgpt" --version 2>&1 | tee -a "$summary"
missing=$(ldd "$kgpt" | grep 'not found')
[ -n "$missing" ] && say "missing libraries: $missing"

if wants tests; then
  say "== unit tests (each Catch2 executable of the build, as ctest runs them in CUDA builds)"
  for exe in "$KGPT_BUILD"/tests/test_*; do
    [ -x "$exe" ] || continue
    (cd "$KGPT_BUILD/tests" && timeout 300 "$exe" > "$out/catch_$(basename "$exe").txt" 2>&1)
    say "$(basename "$exe"): exit $? $(grep -E 'test cases|All tests passed' "$out/catch_$(basename "$exe").txt" | tail -n 1)"
  done
  (cd "$out" && tar -czf catch_logs.tar.gz catch_*.txt && rm -f catch_*.txt)
  if [ -x "$KGPT_BUILD/tests/reference_dump" ]; then
    for family in golf gpt2; do
      "$KGPT_BUILD/tests/reference_dump" $family /tmp/${family}_reference.h5 > /dev/null 2>&1 &&
        timeout 300 python3 "$KGPT_TREE/tests/reference/compare.py" /tmp/${family}_reference.h5 > "$out/reference_$family.txt" 2>&1
      say "reference $family against PyTorch: exit $? $(tail -n 1 "$out/reference_$family.txt" 2>/dev/null)"
    done
  fi
fi

if wants train; then
  say "== 10 training steps on CUDA, compared with the CPU run of the same deck (history.h5 train/loss)"
  cd "$KGPT_TREE"
  common=(--set train.iterations=10 --set train.log_every=1 --set train.warmdown_iters=0 --set train.eval_every=10)
  gpt2=(--set model.family=gpt2 --set model.n_kv_head=4 --set model.logit_softcap=0 --set optim.matrix_lr=0.001
        --set optim.embed_lr=0.001 --set optim.scalar_lr=0.001)
  rm -rf /tmp/kgpt_runs
  timeout 300 "$kgpt" train inputs/tiny_cpu.yaml "${common[@]}" --run-dir /tmp/kgpt_runs/golf > "$out/train.log" 2>&1
  say "train golf: exit $?"
  timeout 300 "$kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" --run-dir /tmp/kgpt_runs/gpt2 >> "$out/train.log" 2>&1
  say "train gpt2: exit $?"
  # The same decks with bf16 activations (cuDNN attention where built): compared with the CPU build's
  # bf16 path (same roundings, other summation orders) and, for scale, with the fp32 runs.
  bf16=(--set train.precision=bf16)
  timeout 300 "$kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${bf16[@]}" --run-dir /tmp/kgpt_runs/golf_bf16 >> "$out/train.log" 2>&1
  say "train golf bf16: exit $?"
  timeout 300 "$kgpt" train inputs/tiny_cpu.yaml "${common[@]}" "${gpt2[@]}" "${bf16[@]}" --run-dir /tmp/kgpt_runs/gpt2_bf16 >> "$out/train.log" 2>&1
  say "train gpt2 bf16: exit $?"
  python3 "$KGPT_TREE/bench/device/compare_losses.py" "$KGPT_CPU_RUNS" /tmp/kgpt_runs golf@1e-5 gpt2@1e-5 \
    golf_bf16@2e-2 gpt2_bf16@2e-2 golf:golf_bf16@0 gpt2:gpt2_bf16@0 > "$out/compare_losses.txt" 2>&1
  say "compare_losses: exit $?"
  grep 'loss agreement' "$out/compare_losses.txt" | tee -a "$summary"
  (cd /tmp/kgpt_runs && tar -czf "$out/cuda_runs.tar.gz" */log.txt */history.h5)
  cd "$here"
fi

if wants bench; then
  say "== kgpt bench (bf16 with the attention auto picks, and the profile; then bf16 gemm attention and fp32)"
  cd "$KGPT_TREE"
  golf=(inputs/golf_8xh100.yaml)
  gpt2=(inputs/gpt2_124m_bench.yaml --set train.seq_len=1024 --set train.global_batch_tokens=16384)
  for deck in golf gpt2; do
    declare -n args=$deck
    timeout 200 "$kgpt" bench "${args[@]}" --set train.precision=bf16 --steps 5 --warmup 2 --profile \
      > "$out/bench_${deck}_bf16_profile.txt" 2>&1
    say "bench $deck bf16 --profile: exit $?"
    grep -E '^(bench|tok/s|view_peak|device_mem|profile)' "$out/bench_${deck}_bf16_profile.txt" | tee -a "$summary"
    for options in "--set train.precision=bf16 --set model.attention=gemm" "--set train.precision=fp32"; do
      # shellcheck disable=SC2086
      timeout 150 "$kgpt" bench "${args[@]}" $options --steps 3 --warmup 1 2>&1 | tee -a "$out/bench.log" | tee -a "$summary"
    done
    unset -n args
  done
  cd "$here"
fi

if wants torch; then
  say "== PyTorch reference (torch.compile, bf16 autocast, SDPA)"
  timeout 300 python3 "$KGPT_TREE/bench/torch_reference.py" golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3 \
    2>&1 | tee -a "$out/torch.log" | grep torch_reference | tee -a "$summary"
  timeout 240 python3 "$KGPT_TREE/bench/torch_reference.py" gpt2 --batch 16 --seq 1024 --accum 1 --steps 10 --warmup 3 \
    2>&1 | tee -a "$out/torch.log" | grep torch_reference | tee -a "$summary"
fi
say "== done $(date -u +%FT%TZ)"
