#!/usr/bin/env bash
# One-command setup on a fresh Debian 12 machine, safe to run again:
#   1. installs the Debian packages kgpt needs (apt-get update first),
#   2. configures and builds kgpt in Release into build/,
#   3. builds the fuzz harnesses with clang, AddressSanitizer and UndefinedBehaviorSanitizer into
#      build-fuzz/ (scripts/fuzz.sh), which ctest then runs for 30 s each,
#   4. makes the tiny deck's data (data/tiny_cpu/) from Debian's fortune files,
#   5. installs npm's tiktoken and js-tiktoken into <build>/npm-reference/, the reference the
#      tokenizer tests compare kgpt's BPE with, and @roboflow/tfrecords, which reads the framing of
#      kgpt's TensorBoard event files in their test (used at test time, never part of kgpt).
# Environment: BUILD_DIR (default build), JOBS (default: all cores), KGPT_SKIP_APT=1 to skip step 1,
# KGPT_SKIP_FUZZ=1 to skip step 3 (and those tests).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"

packages=(
  build-essential cmake git pkg-config
  libtrilinos-kokkos-dev libtrilinos-kokkos-kernels-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  libhdf5-dev libyaml-cpp-dev catch2
  libsentencepiece-dev sentencepiece zlib1g-dev libzstd-dev libbrotli-dev nlohmann-json3-dev
  clang libclang-rt-14-dev
  python3 python3-h5py python3-numpy python3-scipy python3-pandas python3-matplotlib python3-sentencepiece python3-zstandard python3-brotli
  python3-torch slurm-wlm munge iproute2
  fortunes fortunes-min fortunes-zh fortunes-ru fortunes-de fortunes-es fortunes-bg
  libicu-dev nodejs
  protobuf-compiler python3-protobuf python3-crc32c
)

if [[ "${KGPT_SKIP_APT:-0}" != 1 ]]; then
  sudo=""
  if [[ "$(id -u)" != 0 ]]; then sudo="sudo"; fi
  echo "== setup: installing Debian packages"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${packages[@]}"
  # npm, unless the nodejs installed already brings it (some nodejs builds conflict with Debian's npm).
  if ! command -v npm > /dev/null; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends npm
  fi
fi

fuzz_dir=""
if [[ "${KGPT_SKIP_FUZZ:-0}" != 1 ]]; then fuzz_dir="$root/build-fuzz"; fi

echo "== setup: configuring and building kgpt (Release) in $build_dir"
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKGPT_WARNINGS_AS_ERRORS=ON -DKGPT_FUZZ_SMOKE_DIR="$fuzz_dir"
cmake --build "$build_dir" -j "$jobs"

if [[ -n "$fuzz_dir" ]]; then
  echo "== setup: building the fuzz harnesses (clang, ASan, UBSan) in $fuzz_dir"
  FUZZ_BUILD_DIR="$fuzz_dir" JOBS="$jobs" bash scripts/fuzz.sh --build-only
fi

echo "== setup: making data/tiny_cpu from Debian's fortune files"
fortune_dir=/usr/share/games/fortunes
mapfile -t texts < <(bash scripts/english_fortunes.sh)
if [[ ${#texts[@]} -eq 0 ]]; then
  echo "setup: no fortune text files in $fortune_dir (are the packages 'fortunes' and 'fortunes-min' installed?)" >&2
  exit 1
fi
# --force: the output only depends on the inputs, so a second run writes the same shards again.
"$build_dir/kgpt" prepare --input "${texts[@]}" --out data/tiny_cpu --prefix fortunes \
  --val-fraction 0.05 --doc-delimiter % --force --quiet

npm_reference="$build_dir/npm-reference"
if [[ ! -d "$npm_reference/node_modules/tiktoken" || ! -d "$npm_reference/node_modules/js-tiktoken" ||
      ! -d "$npm_reference/node_modules/@roboflow/tfrecords" ]]; then
  echo "== setup: npm's tiktoken, js-tiktoken and @roboflow/tfrecords (test references) into $npm_reference"
  mkdir -p "$npm_reference"
  npm install --prefix "$npm_reference" --no-audit --no-fund --no-package-lock --silent \
    tiktoken@1.0.22 js-tiktoken@1.0.21 @roboflow/tfrecords@1.0.4
fi

echo "== setup: done. Next: $build_dir/kgpt check inputs/tiny_cpu.yaml"
