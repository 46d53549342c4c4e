#pragma once
// The run directory: one folder per run holding the resolved deck and the rank-0 log.

#include <string>

#include "config/deck.hpp"

namespace kgpt::io {

// The run directory for a deck: `requested` if given, else <run.out_dir>/<run.name>, where an
// empty run.name stands for the deck file's name without its extension.
std::string run_directory_path(const config::ResolvedDeck& deck, const std::string& requested);

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

// Writes <dir>/deck.yaml (the resolved deck) and <dir>/deck.source.yaml (the deck as given),
// each through a temporary file and a rename.
void write_resolved_deck(const std::string& dir, const config::ResolvedDeck& deck);

}  // namespace kgpt::io
