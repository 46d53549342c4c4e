#pragma once
// The run directory: one folder per run holding the resolved deck and the rank-0 log.

#include <string>

#include "config/deck.hpp"

namespace kgpt::io {

// The run directory for a deck: `requested` if given, else <run.out_dir>/<run.name><suffix>, where
// an empty run.name stands for the deck file's name without its extension. Throws InputError when
// the name (with its suffix) is not one plain folder name (config::run_name_problem), or when both
// `requested` and `suffix` are given.
std::string run_directory_path(const config::ResolvedDeck& deck, const std::string& requested,
                               const std::string& suffix = "");

// Creates the run directory (and its parents). Refuses a directory that already holds a
// resolved deck, so an earlier run's outputs are never overwritten.
void create_run_directory(const std::string& path);

// For --resume: the run directory must hold a run (its deck.yaml). Throws InputError otherwise.
void require_run_directory(const std::string& path);

// True when `path` holds a run (its deck.yaml).
bool holds_run(const std::string& path);

// For --auto-resume: the run in `path` must have been made from the same deck values. Throws
// InputError naming the keys that differ otherwise.
void require_same_run(const std::string& path, const config::ResolvedDeck& deck);

// "" when a file written at `out` (kgpt export's artifact or folder) harms no input and no run, else
// what `out` is, whatever path spells it (links, "..", a relative path): the file `input` itself,
// a file a run directory keeps (deck.yaml, deck.source.yaml, log.txt, history.h5, artifact.yaml,
// the checkpoints folder), or anything inside a run's checkpoints folder (its checkpoints, and the
// names later checkpoints take).
std::string output_clash(const std::string& out, const std::string& input);

// Writes <dir>/deck.yaml (the resolved deck) and <dir>/deck.source.yaml (the deck as given),
// each through a temporary file and a rename.
void write_resolved_deck(const std::string& dir, const config::ResolvedDeck& deck);

}  // namespace kgpt::io
