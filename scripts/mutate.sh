#!/usr/bin/env bash
# Plants one-line bugs, one at a time, and checks that the tests catch each (on demand, not in CI;
# Debian packages no mutation tool for C++, so the bugs are a scripted list: scripts/mutations.txt).
#
#   bash scripts/mutate.sh [NAME...]        # every bug of the list, or those named
#
# In a scratch copy of this checkout's tracked files (MUTATE_DIR, default /tmp/kgpt-mutate; its
# data/ is this checkout's), built once in Release: for each bug, the file's first occurrence of
# the text is replaced, the build is brought up to date, the tests the list names run (ctest -R),
# the file is restored. A bug is "caught" when one of those tests fails, "missed" when all pass,
# "no build" when the planted line does not compile, and "stale" when its text is no longer in its
# file (the list needs updating). A table of the results is printed last; the exit code is the
# number of bugs not caught.
set -euo pipefail
tree=$(cd "$(dirname "$0")/.." && pwd)
scratch=${MUTATE_DIR:-/tmp/kgpt-mutate}
jobs=${JOBS:-$(nproc)}
list=$tree/scripts/mutations.txt
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "== scratch copy in $scratch"
mkdir -p "$scratch/src"
(cd "$tree" && git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$scratch/src")
[ -e "$scratch/src/data" ] || ln -s "$tree/data" "$scratch/src/data"
# The tokenizer tests' reference (npm's tiktoken), as the setup installed it for the tree's build.
npm_reference=${BUILD_DIR:-$tree/build}/npm-reference
cmake -S "$scratch/src" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Release -DKGPT_NPM_REFERENCE="$npm_reference" \
  > "$scratch/configure.log"
echo "== building the unchanged copy"
cmake --build "$scratch/build" -j "$jobs" > "$scratch/build.log" 2>&1 || { tail -n 30 "$scratch/build.log"; exit 2; }

# The list's blocks as NAME<US>FILE<US>FIND<US>REPLACE<US>TESTS<US>WHY lines.
mapfile -t bugs < <(/usr/bin/python3 "$tree/scripts/mutation_list.py" fields "$list")

results=()
missed=0
for bug in "${bugs[@]}"; do
  IFS=$'\x1f' read -r name file find replace tests why <<< "$bug"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  target=$scratch/src/$file
  cp "$tree/$file" "$target"  # the checkout's version, whatever an earlier run left
  if ! /usr/bin/python3 - "$target" "$find" "$replace" <<'PY'
import sys
path, find, replace = sys.argv[1:4]
text = open(path, encoding="utf-8").read()
if find not in text:
    sys.exit(1)
open(path, "w", encoding="utf-8").write(text.replace(find, replace, 1))
PY
  then
    results+=("$name|stale|$file: the text is no longer there|$why")
    missed=$((missed + 1))
    continue
  fi
  echo "== $name: $why ($file)"
  if ! cmake --build "$scratch/build" -j "$jobs" > "$scratch/build_$name.log" 2>&1; then
    results+=("$name|no build|$file|$why")
    missed=$((missed + 1))
  else
    # ctest fails when a test catches the bug: that is the point, not an error of this script.
    ctest --test-dir "$scratch/build" -R "$tests" -j "$jobs" --timeout 900 > "$scratch/ctest_$name.log" 2>&1 || true
    failed=$(sed -n 's/^[[:space:]]*[0-9]* - \(.*\) (Failed.*/\1/p' "$scratch/ctest_$name.log" | head -n 3 | paste -sd';')
    ran=$(grep -c 'Test *#' "$scratch/ctest_$name.log" || true)
    if [ "$ran" -eq 0 ]; then
      results+=("$name|missed|no test matches '$tests'|$why")
      missed=$((missed + 1))
    elif [ -n "$failed" ]; then
      results+=("$name|caught|$failed|$why")
    else
      results+=("$name|missed|$ran tests passed|$why")
      missed=$((missed + 1))
    fi
  fi
  cp "$tree/$file" "$target"
  echo "   ${results[-1]}"
done
# Back to the unchanged build, so that a later run starts from it.
cmake --build "$scratch/build" -j "$jobs" > "$scratch/build.log" 2>&1 || true

echo
echo "| bug | result | caught by | what it is |"
echo "|---|---|---|---|"
for row in "${results[@]}"; do
  IFS='|' read -r name result detail why <<< "$row"
  echo "| $name | $result | $detail | $why |"
done
echo "$((${#results[@]} - missed)) of ${#results[@]} caught"
exit "$missed"
