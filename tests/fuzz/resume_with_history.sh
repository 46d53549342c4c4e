#!/usr/bin/env bash
# A run resumed over a history.h5 that a fuzz finding corrupted: kgpt train --resume must exit with
# code 2 and kgpt's message, and leave the history as it was.
#   resume_with_history.sh KGPT DECK CHECKPOINT HISTORY WORKDIR
set -u
kgpt="$1" deck="$2" checkpoint="$3" history="$4" run="$5/resume_with_$(basename "$history" .h5)"
rm -rf "$run" && mkdir -p "$run/checkpoints"
cp "$deck" "$run/deck.yaml"
cp "$checkpoint" "$run/checkpoints/ckpt_00000001.h5"
cp "$history" "$run/history.h5"
"$kgpt" train "$deck" --run-dir "$run" --resume --set train.iterations=2 2>&1
echo "exit=$?"
cmp -s "$history" "$run/history.h5" && echo "history unchanged"
