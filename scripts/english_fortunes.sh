#!/usr/bin/env bash
# Prints the English fortune files (Debian's packages fortunes and fortunes-min), one path a line,
# sorted: the text of the tiny decks. The other languages' packages (fortunes-zh, ...) put files in
# the same folder, so the list comes from the packages, not the folder.
set -euo pipefail
fortune_dir=/usr/share/games/fortunes
dpkg-query -L fortunes fortunes-min | grep "^$fortune_dir/[^/]*\$" | grep -v '\.dat$' |
  while read -r f; do
    if [[ -f "$f" && ! -L "$f" ]]; then echo "$f"; fi
  done | sort
