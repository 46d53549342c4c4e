#!/usr/bin/env bash
# The checks of a CUDA build of kgpt on a GPU machine (CUDA toolkit or wheels, cuDNN, NCCL, PyTorch;
# none of kgpt's Debian libraries), in the working tree's root, after make_payload.sh:
#
#   bash bench/device/run_cuda_checks.sh PAYLOAD_DIR STEP... [--budget SECONDS]
#
# Steps, in the order given, each with its own time limit inside the budget (default 530 s, for a
# command that must end within 9 minutes):
#   device  the GPU, `kgpt --version` (cuDNN at run time beside the one built against), and
#           `kgpt check --device` on golf's and gpt2's bench decks: cuDNN's forward and backward
#           graphs at their micro-batch, compared with the gemm attention; the output head's
#           products with padded and unpadded logits rows, timed; for gpt2, its MLP's products with
#           GELU in them (cuBLASLt's epilogues) and apart, timed and compared. If the attention
#           cannot run, the same with cuDNN's non-deterministic backward, then with the gemm
#           attention; the first that runs is what the later steps of the command use (said in the
#           summary). If GELU cannot ride in gpt2's products, the later gpt2 steps run it apart
#           (model.gelu_epilogue: false, said in the summary).
#           Stops everything if no attention runs.
#   tests   every ctest group of kgpt_tests, and the PyTorch reference comparison (reference_dump)
#   train   10 steps of inputs/tiny_cpu.yaml (golf and gpt2, fp32 and bf16; golf with the EMA, SWA
#           and late QAT on every step, its val loss scored on the EMA; golf with SmearGate, parallel
#           residuals from block 2 and its val loss with documents apart) against the CPU runs; the
#           bf16 runs' TensorBoard event files read by TensorBoard's EventAccumulator against their
#           history.h5 (bench/device/read_tensorboard.py)
#   bench   kgpt bench --profile of golf 64x1024 (accum 8) and gpt2-124M 16x1024 in bf16 with cuDNN's
#           non-deterministic backward (PyTorch's flash backward is not deterministic either):
#           tokens/s, the ceilings measured in the same run, the five costliest ops
#   variants  the same benches with the decks' deterministic backward, with Zipf tokens, in fp32,
#           for golf as one rank of 8 sharing Muon (--muon-share 8) and at parallel.zero_stage: 1,
#           for gpt2 with GELU apart from its products, for golf with the EMA, SWA and late QAT on
#           every step and with SmearGate and parallel residuals, and both with model.fp8: mlp and all (KGPT_VARIANTS="fp8_all zero1 ...":
#           only those labels)
#   fp8     kgpt bench --profile of both with model.fp8: all: the FP8 passes' rows (amax, encoding)
#   train_bench  kgpt train of the golf deck for 12 steps (tokens/s against the bench's)
#   torch   bench/torch_reference.py (compiled whole, flash SDPA pinned, Newton-Schulz compiled, gpt2
#           padded to 50,304) for golf, golf as one rank of 8 sharing Muon, gpt2-124M and the 1.3B
#           shape, on the same GPU (KGPT_TORCH_JOBS="golf gpt2": only those labels)
#   torch_fp8  the same for gpt2-124M, 1.3B and golf with every block's linear layer on FP8
#           products (--fp8 all)
#   world8  one rank of an 8-GPU golf job without its communication (one micro-step, a share of
#           Muon), kgpt and PyTorch: the per-rank figures of bench/scaling.py's 8-GPU model
#   scale   the 1.3B deck: its memory plan against this GPU's memory (kgpt check), then kgpt bench
#           of it on one GPU (8 micro-steps of 4 x 2048, non-deterministic backward) with
#           train.recompute none and block, and with model.fp8: all: the plan beside the measured
#           view_peak_mb (cuDNN's real workspace), tokens/s, MFU
# A device call runs "device tests train bench torch train_bench variants --budget 340" in one
# command (247 s on an H100) and "scale" in a second (docs/cuda.md); with the torch jobs and the
# variants narrowed, "device tests train bench torch fp8 variants train_bench world8" took 309 s.
#
# Output in $OUT (default /tmp/kgpt-cuda), three files, each rewritten after every step so that a
# command stopped at its limit still brings back what it did: summary.txt (the lines printed on
# stdout), details.log (every command's full output) and files.tar.gz (run directories, Catch2
# reports, profiles).
set -uo pipefail
payload_dir=$(cd "${1:?payload folder}" && pwd)
shift
budget=530
steps=()
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    *) steps+=("$1"); shift ;;
  esac
done
[ ${#steps[@]} -eq 0 ] && steps=(device tests train)
start_s=$(date +%s)
deadline=$((start_s + budget))
out=${OUT:-/tmp/kgpt-cuda}
mkdir -p "$out"
summary=$out/summary.txt details=$out/details.log
touch "$details"
work=/tmp/kgpt-check   # run directories, reports: what files.tar.gz packs
mkdir -p "$work"
say() { echo "$*" | tee -a "$summary"; }
log() { echo "$*" >> "$details"; }
# files.tar.gz: logs, histories, reports and profiles; no checkpoint (a device call brings back files
# of at most 16 MiB).
pack() {
  (cd "$work" && tar -czf "$out/files.tar.gz.part" --exclude=checkpoints --exclude='*_reference.h5' . 2>/dev/null &&
    mv "$out/files.tar.gz.part" "$out/files.tar.gz")
}
# Seconds a step may take: its own limit, or what the budget has left (keeping 15 s to pack up).
limit() {
  local left=$((deadline - $(date +%s) - 15))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
# wanted LABEL LIST: whether LABEL is in the space-separated LIST, or LIST is empty (everything).
wanted() {
  [ -z "$2" ] && return 0
  [[ " $2 " == *" $1 "* ]]
}
# What the last command run printed (its part of details.log), for the summary's lines.
output_from=1
output() { tail -c +"$output_from" "$details"; }
# run NAME LIMIT COMMAND...: the command's output to details.log, its exit status in $status.
run() {
  local name=$1 seconds
  seconds=$(limit "$2")
  shift 2
  output_from=$(($(stat -c %s "$details") + 1))
  if [ "$seconds" -le 5 ]; then
    status=124
    say "$name: skipped, the budget is spent"
    return
  fi
  log "== $name ($(date -u +%T), limit ${seconds}s): $*"
  output_from=$(($(stat -c %s "$details") + 1))   # after the header
  timeout -k 5 "$seconds" "$@" < /dev/null >> "$details" 2>&1   # stdin: not the loop's list of test groups
  status=$?
  [ "$status" -eq 124 ] && log "== $name: stopped at its limit of ${seconds}s"
}

# The payload: unpacked once per machine; the test executables look for the tree and for kgpt
# where they were built.
if [ ! -x /tmp/kgpt-payload/bin/kgpt ]; then
  tar -xJf "$payload_dir/payload.tar.xz" -C / || { say "payload: cannot unpack $payload_dir/payload.tar.xz"; exit 2; }
fi
stage=/tmp/kgpt-payload
# shellcheck disable=SC1091
source "$stage/payload.env"
tree=$(pwd)
if [ "$KGPT_SOURCE_DIR" != "$tree" ] && [ ! -e "$KGPT_SOURCE_DIR" ]; then
  mkdir -p "$(dirname "$KGPT_SOURCE_DIR")" && ln -s "$tree" "$KGPT_SOURCE_DIR"
fi
mkdir -p "$(dirname "$KGPT_BUILT_EXE")"
[ -e "$KGPT_BUILT_EXE" ] || ln -s "$stage/bin/kgpt" "$KGPT_BUILT_EXE"
[ -e "$tree/data/tiny_cpu" ] || { mkdir -p "$tree/data" && ln -s "$stage/data/tiny_cpu" "$tree/data/tiny_cpu"; }

# Libraries: the payload's Debian ones first, then the GPU machine's CUDA, cuDNN, NCCL and NVRTC (the
# toolkit's folders or PyTorch's nvidia-* wheels). Only kgpt's processes see them (kgpt_env), so that
# Python keeps its own.
found_dir() {
  local hit
  hit=$(find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt /root -name "$1" 2>/dev/null | head -n 1)
  [ -n "$hit" ] && dirname "$hit"
}
cuda_dirs=$(for lib in 'libcudart.so.1[23]' 'libcublasLt.so.1[23]' 'libcudnn.so.9' 'libnccl.so.2' 'libnvrtc.so.1[23]'; do
              found_dir "$lib"; done | awk '!seen[$0]++' | paste -sd:)
kgpt_env=(env "LD_LIBRARY_PATH=$stage/lib:$cuda_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
          "OPAL_PREFIX=$stage/openmpi/usr" OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
          OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mca_base_component_show_load_errors=0)
kgpt=$stage/bin/kgpt
export PYTHONUNBUFFERED=1
python=${PYTHON:-python3}   # the machine's, with PyTorch, h5py and numpy

# The two bench decks as deck_args: golf 64 x 1024 with 8 micro-steps, gpt2-124M 16 x 1024.
bench_deck() {
  case $1 in
    golf) deck_args=(inputs/golf_8xh100.yaml) ;;
    gpt2) deck_args=(inputs/gpt2_124m_bench.yaml --set train.seq_len=1024 --set train.global_batch_tokens=16384) ;;
  esac
}
attention=()   # deck settings every step adds: the fallback the device step chose, if any
# What the benches compared with PyTorch add: its flash backward is not deterministic, so neither is
# cuDNN's here (unless the fallback already chose an attention).
like_torch=(--set model.attention_deterministic=false)
gelu=()        # and those every gpt2 step adds: GELU apart if it cannot ride in the products here
say "== $(date -u +%FT%TZ) steps: ${steps[*]} (budget ${budget}s)"
for step in "${steps[@]}"; do
  case $step in
    device)
      say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1)"
      say "libraries: $cuda_dirs"
      run version 30 "${kgpt_env[@]}" "$kgpt" --version
      say "kgpt --version: exit $status; $(output | grep -E '^(Kokkos |NCCL|cuDNN)' | tail -n 3 | paste -sd';')"
      # The attention the later steps run: the decks' own (cuDNN, deterministic backward); where that
      # cannot run here, cuDNN's other backward; else the gemm attention. One library failing then
      # still leaves the benches something to measure, and the summary says which ran.
      attention=()
      for fallback in "" model.attention_deterministic=false model.attention=gemm; do
        settings=()
        [ -n "$fallback" ] && settings=(--set "$fallback")
        runs=1
        for deck in golf gpt2; do
          bench_deck "$deck"
          run "check $deck --device ${fallback:-as the deck says}" 120 "${kgpt_env[@]}" "$kgpt" check "${deck_args[@]}" \
            --set train.precision=bf16 "${settings[@]}" --no-data --device
          say "kgpt check --device $deck bf16 ${fallback:-as the deck says}: exit $status; $(output | grep -E '^kgpt check: (attention|head|fp8|gelu|device|error)' | tail -n 5 | paste -sd' ')"
          # The attention ran if it printed its figures (the head's products are timed after it, and
          # their failure is no reason to change the attention).
          output | grep '^kgpt check: attention ' > /dev/null || { runs=0; break; }
        done
        if [ "$runs" -eq 1 ]; then
          attention=("${settings[@]}")
          [ -n "$fallback" ] && like_torch=()
          [ -n "$fallback" ] && say "FALLBACK: the decks' attention cannot run here; every later step runs with --set $fallback"
          break
        fi
      done
      if [ "$runs" -eq 0 ]; then
        say "STOP: no attention runs on this machine (cuDNN either way, nor gemm); the other steps would fail the same way"
        pack
        exit 1
      fi
      # The last command run was gpt2's check: its GELU line comes after the attention's and the head's.
      gelu=()
      if ! output | grep '^kgpt check: gelu products' > /dev/null; then
        gelu=(--set model.gelu_epilogue=false)
        say "FALLBACK: GELU cannot ride in gpt2's products here; every later gpt2 step runs with --set model.gelu_epilogue=false"
      fi
      ;;
    tests)
      mkdir -p "$work/catch"
      passed=0 failed=0
      while read -r name tags; do
        run "$name" 240 "${kgpt_env[@]}" "KGPT_TEST_PYTHON=$(command -v "$python")" "$stage/bin/kgpt_tests" "-#" "$tags" \
          -r junit -o "$work/catch/$name.xml"
        # The junit report's totals (Catch2 counts assertions as its "tests").
        result=$(grep -o '<testsuite [^>]*>' "$work/catch/$name.xml" 2>/dev/null | grep -oE '(failures|tests)="[0-9]+"' |
                 sed 's/tests=/assertions=/' | paste -sd' ')
        say "$name: exit $status ${result:-no report}"
        [ "$status" -eq 0 ] && passed=$((passed + 1)) || failed=$((failed + 1))
        pack
      done < "$stage/test_groups"
      say "test groups: $passed passed, $failed failed"
      for family in golf gpt2 golf-untied gpt2-muon; do
        run "reference $family dump" 120 "${kgpt_env[@]}" "$stage/bin/reference_dump" "$family" "$work/${family}_reference.h5"
        if [ "$status" -eq 0 ]; then
          run "reference $family compare" 180 "$python" "$tree/tests/reference/compare.py" "$work/${family}_reference.h5"
        fi
        say "reference $family against PyTorch: exit $status $(output | tail -n 1)"
        pack
      done
      ;;
    train)
      rm -rf "$work/runs"
      common=(--set train.iterations=10 --set train.log_every=1 --set train.warmdown_iters=0 --set train.eval_every=10)
      gpt2=(--set model.family=gpt2 --set model.n_kv_head=4 --set model.logit_softcap=0 --set optim.matrix_lr=0.001
            --set optim.embed_lr=0.001 --set optim.scalar_lr=0.001)
      bf16=(--set train.precision=bf16)
      averages=(--set train.ema_decay=0.9 --set train.swa_every=2 --set train.swa_start_lr=1.5 --set train.qat_start_lr=1.5
                --set train.eval_weights=ema)
      architecture=(--set model.smear_gate=true --set model.parallel_residual_start=2 --set train.eval_isolate_documents=true
                    --set model.bigram_buckets=64 --set model.bigram_dim=16 --set model.recur_start=1 --set model.recur_count=2)
      for run_name in golf gpt2 golf_bf16 gpt2_bf16 golf_averages golf_options; do
        options=("${common[@]}")
        [[ $run_name == gpt2* ]] && options+=("${gpt2[@]}" "${gelu[@]}")
        [[ $run_name == *bf16 ]] && options+=("${bf16[@]}")
        [[ $run_name == *averages ]] && options+=("${averages[@]}")
        [[ $run_name == *options ]] && options+=("${architecture[@]}")
        run "train $run_name" 120 "${kgpt_env[@]}" "$kgpt" train inputs/tiny_cpu.yaml "${options[@]}" "${attention[@]}" \
          --run-dir "$work/runs/$run_name"
        say "train $run_name: exit $status $(grep -o 'step:10/10 train_loss:[0-9.]*.*tok/s:[0-9]*' "$work/runs/$run_name/log.txt" 2>/dev/null)"
        pack
      done
      # golf_averages at 2e-4: late QAT rounds every matrix row to 255 levels (8 bits here), and a
      # weight one ulp off the CPU's (the sums' order) can round to the next step. Its first step,
      # before the weights differ, agreed to 5.8e-9 on an H100, and the later ones grew to 4.2e-5.
      run compare 60 "$python" "$tree/bench/device/compare_losses.py" "$stage/cpu_runs" "$work/runs" golf@1e-5 gpt2@1e-5 \
        golf_bf16@2e-2 gpt2_bf16@2e-2 golf_averages@2e-4 golf_options@1e-5 golf:golf_bf16@0 gpt2:gpt2_bf16@0
      say "compare_losses: exit $status"
      output | grep 'loss agreement' | tee -a "$summary"
      # TensorBoard's EventAccumulator over the GPU runs' event files, against their history.h5.
      run tensorboard 60 "$python" "$tree/bench/device/read_tensorboard.py" "$work/runs/golf_bf16" "$work/runs/gpt2_bf16"
      say "read_tensorboard: exit $status"
      output | grep '^tensorboard ' | tee -a "$summary"
      ;;
    bench)
      mkdir -p "$work/bench"
      for deck in golf gpt2; do
        bench_deck "$deck"
        [ "$deck" = gpt2 ] && deck_args+=("${gelu[@]}")
        run "bench $deck bf16 profile" 200 "${kgpt_env[@]}" "$kgpt" bench "${deck_args[@]}" --set train.precision=bf16 \
          "${attention[@]}" "${like_torch[@]}" --steps 5 --warmup 2 --profile
        output > "$work/bench/${deck}_bf16_profile.txt"
        say "bench $deck bf16 --profile: exit $status"
        grep -E '^(tok/s|view_peak|device_mem|profile steps|gemm choice)' "$work/bench/${deck}_bf16_profile.txt" | tee -a "$summary"
        # The five costliest ops (the table's ms/step column starts at character 90).
        grep -E '^(forward|backward|optimizer) ' "$work/bench/${deck}_bf16_profile.txt" | grep -v '(phase total)' |
          awk '{print substr($0, 90, 10) "|" $0}' | sort -g -r | head -n 5 | cut -d'|' -f2- | tee -a "$summary"
        pack
      done
      ;;
    fp8)
      # The FP8 products' passes (amax, encoding) in the fenced profile, golf and gpt2 with model.fp8: all.
      mkdir -p "$work/bench"
      for deck in golf gpt2; do
        bench_deck "$deck"
        [ "$deck" = gpt2 ] && deck_args+=("${gelu[@]}")
        run "bench $deck fp8 profile" 200 "${kgpt_env[@]}" "$kgpt" bench "${deck_args[@]}" --set train.precision=bf16 \
          --set model.fp8=all "${attention[@]}" "${like_torch[@]}" --steps 3 --warmup 1 --profile
        output > "$work/bench/${deck}_fp8_profile.txt"
        say "bench $deck fp8 all --profile: exit $status"
        grep -E '^(tok/s|view_peak|device_mem)' "$work/bench/${deck}_fp8_profile.txt" | tee -a "$summary"
        grep -E 'fp8' "$work/bench/${deck}_fp8_profile.txt" | grep -v '^kgpt' | head -n 12 | tee -a "$summary"
        pack
      done
      ;;
    variants)
      for deck in golf gpt2; do
        bench_deck "$deck"
        variants=("deterministic:--set model.attention_deterministic=true" "zipf:--tokens zipf"
                  "fp32:--set train.precision=fp32" "fp8_mlp:--set model.fp8=mlp" "fp8_all:--set model.fp8=all")
        if [ "$deck" = gpt2 ]; then
          deck_args+=("${gelu[@]}")
          [ ${#gelu[@]} -eq 0 ] && variants=("gelu_apart:--set model.gelu_epilogue=false" "${variants[@]}")
        else
          # One rank of 8 sharing Muon (its Newton-Schulz share, every update applied), and the
          # optimizer's stage-1 path, which one rank runs whole.
          variants=("muon_share8:--muon-share 8" "zero1:--set parallel.zero_stage=1" "${variants[@]}")
          # The records' options on every step: the EMA and the SWA updated, the matrices fake-quantized.
          variants+=("averages_qat:--set train.ema_decay=0.997 --set train.swa_every=1 --set train.swa_start_lr=1.5 --set train.qat_start_lr=1.5")
          # SmearGate and parallel residuals from block 5 of 9.
          variants+=("smear_parallel:--set model.smear_gate=true --set model.parallel_residual_start=5")
          # BigramHash (the 2026-03-31 record's 2816 x 112) and blocks 4 and 5 run twice, with those two.
          variants+=("record_options:--set model.smear_gate=true --set model.parallel_residual_start=5 --set model.bigram_buckets=2816 --set model.bigram_dim=112 --set model.recur_start=4 --set model.recur_count=2")
        fi
        for variant in "${variants[@]}"; do
          label=${variant%%:*} variant_options=${variant#*:}
          wanted "$label" "${KGPT_VARIANTS:-}" || continue
          precision=(--set train.precision=bf16)
          [ "$label" = fp32 ] && precision=()
          # shellcheck disable=SC2086
          like=("${like_torch[@]}")
          [ "$label" = deterministic ] && like=()
          run "bench $deck $label" 120 "${kgpt_env[@]}" "$kgpt" bench "${deck_args[@]}" "${precision[@]}" "${attention[@]}" "${like[@]}" $variant_options \
            --steps 3 --warmup 1
          say "bench $deck $label: exit $status $(output | grep -E '^(tok/s|view_peak|muon_share)|error' | tail -n 4 | paste -sd' ')"
          pack
        done
      done
      ;;
    train_bench)
      # kgpt train on the same deck and GPU: tokens/s of steps 3..12 against the bench's.
      run "train golf" 180 "${kgpt_env[@]}" "$kgpt" train inputs/golf_8xh100.yaml --set data.tokenizer=byte \
        --set data.train_files=data/tiny_cpu/fortunes_train_000000.bin --set data.val_files=data/tiny_cpu/fortunes_val_000000.bin \
        --set train.iterations=12 --set train.log_every=1 --set train.eval_every=0 --set train.val_tokens=65536 \
        --set train.max_wallclock_seconds=0 "${attention[@]}" --run-dir "$work/train_golf"
      say "train golf (12 steps): exit $status; tok/s of steps 3-12: $(grep -o 'tok/s:[0-9]*' "$work/train_golf/log.txt" 2>/dev/null | tail -n 10 | cut -d: -f2 | sort -n | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)] " (median)"}')"
      pack
      ;;
    torch|torch_fp8)
      mkdir -p "$work/torch"
      jobs=("golf:golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3"
            "golf_muon8:golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3 --muon-world 8"
            "gpt2:gpt2 --batch 16 --seq 1024 --accum 1 --steps 10 --warmup 3"
            "gpt2_1p3b:gpt2 --size 1p3b --batch 4 --seq 2048 --accum 8 --steps 3 --warmup 2")
      if [ "$step" = torch_fp8 ]; then
        jobs=("gpt2_fp8:gpt2 --batch 16 --seq 1024 --accum 1 --steps 10 --warmup 3 --fp8 all"
              "gpt2_1p3b_fp8:gpt2 --size 1p3b --batch 4 --seq 2048 --accum 8 --steps 3 --warmup 2 --fp8 all"
              "golf_fp8:golf --batch 64 --seq 1024 --accum 8 --steps 5 --warmup 3 --fp8 all")
      fi
      for job in "${jobs[@]}"; do
        label=${job%%:*} job_args=${job#*:}
        wanted "$label" "${KGPT_TORCH_JOBS:-}" || continue
        # shellcheck disable=SC2086
        run "torch $label" 240 "$python" "$tree/bench/torch_reference.py" $job_args --json "$work/torch/$label.json"
        say "torch $label: exit $status $(output | grep torch_reference | tail -n 2 | paste -sd' ')"
        pack
      done
      ;;
    world8)
      # One rank of an 8-GPU golf job, less its communication: one micro-step of 64 x 1024 (accum 8
      # over 8 ranks) and its share of Muon, kgpt and PyTorch on the same GPU; bench/scaling.py adds
      # the all-reduce and the Muon exchange at NVLink bandwidth.
      bench_deck golf
      mkdir -p "$work/torch" "$work/bench"
      run "bench golf one rank of 8" 120 "${kgpt_env[@]}" "$kgpt" bench "${deck_args[@]}" --set train.precision=bf16 \
        --set train.accum_total=1 --set train.global_batch_tokens=65536 "${attention[@]}" "${like_torch[@]}" \
        --muon-share 8 --steps 20 --warmup 3 --profile
      output > "$work/bench/golf_rank_of_8_profile.txt"
      say "bench golf one rank of 8 (1 micro-step, Muon share of 8): exit $status $(output | grep -E '^(tok/s|muon_share|profile steps)|error' | paste -sd' ')"
      run "torch golf one rank of 8" 240 "$python" "$tree/bench/torch_reference.py" golf --batch 64 --seq 1024 --accum 1 \
        --steps 20 --warmup 5 --muon-world 8 --json "$work/torch/golf_rank_of_8.json"
      say "torch golf one rank of 8: exit $status $(output | grep 'torch_reference family' | tail -n 1)"
      pack
      ;;
    scale)
      big=(inputs/llm_1p3b_8xh100.yaml --set parallel.device_memory_gib=0 "${gelu[@]}")   # a gpt2 deck
      run "check 1.3B plan" 60 "${kgpt_env[@]}" "$kgpt" check "${big[@]}" --world-size 8 --no-data
      say "kgpt check 1.3B (world size 8, this GPU's memory): exit $status"
      output | grep -E '^  (parameters|optimizer|activations|library|total|budget)' | tee -a "$summary"
      pack
      for variant in none block fp8; do
        options=(--set train.recompute=$variant)
        [ "$variant" = fp8 ] && options=(--set train.recompute=none --set model.fp8=all)
        run "bench 1.3B $variant" 200 "${kgpt_env[@]}" "$kgpt" bench "${big[@]}" --set train.global_batch_tokens=65536 \
          --set train.accum_total=8 "${options[@]}" "${attention[@]}" "${like_torch[@]}" --steps 2 --warmup 1 --memory
        say "bench 1.3B 8 x (4 x 2048) ${options[*]}: exit $status"
        output | grep -E '^(tok/s|view_peak|device_mem)' | tee -a "$summary"
        pack
      done
      ;;
    *) say "unknown step '$step' (device, tests, train, bench, fp8, variants, train_bench, torch, torch_fp8, world8, scale)" ;;
  esac
done
say "== done in $(($(date +%s) - start_s))s"
pack
