#pragma once
// Input decks: YAML in, a validated Config out, with the place every value came from.

#include <map>
#include <string>
#include <vector>

#include "config/batch_plan.hpp"
#include "config/config.hpp"

namespace kgpt::config {

// Where a value came from, for messages and for the resolved deck's comments.
struct Origin {
  enum class Kind { default_value, deck, override_flag };
  Kind kind = Kind::default_value;
  std::string file;  // deck path (deck) or the --set text (override_flag)
  int line = 0;      // 1-based, deck only
  int column = 0;    // 1-based, deck only

  // "inputs/a.yaml:4:3", "--set train.seq_len=64" or "default".
  std::string describe() const;
};

struct DeckOptions {
  int world_size = 1;
  std::vector<std::string> overrides;  // "section.key=value", applied in order after the deck
  // Where each override was written, when it came from a file (a sweep): messages and the resolved
  // deck then name that file's line:column instead of "--set". Empty, or one per override.
  std::vector<Origin> override_origins;
};

struct ResolvedDeck {
  Config config;
  BatchPlan plan;
  std::string path;       // the deck file as given
  std::string text;       // the deck file's text, kept for run directories and checkpoints
  DeckOptions options;
  std::map<std::string, Origin> origins;  // every key, by "section.key"
  // Keys set to a value that changes nothing in this configuration ("file:line:col: key ... has no
  // effect here: ..."), for the check and the run log.
  std::vector<std::string> notes;

  const Origin& origin(const std::string& key) const;
  // "inputs/a.yaml:9:16: data.train_files" (or "--set ...: key", or "data.train_files (default)"):
  // the prefix of a message about one key.
  std::string where(const std::string& key) const;
};

// Reads, validates and resolves a deck. Throws InputError listing every problem found.
ResolvedDeck load_deck(const std::string& path, const DeckOptions& options);
// The same for deck text held elsewhere (a checkpoint's resolved deck); `name` stands for the file
// in messages.
ResolvedDeck load_deck_text(const std::string& text, const std::string& name, const DeckOptions& options);
// The same for deck text that did not come from a file; `display_name` stands in for the path.
ResolvedDeck parse_deck(const std::string& text, const std::string& display_name, const DeckOptions& options);

// The fully resolved deck as YAML: every key, its value and where it came from. Reading it back
// gives the same Config.
std::string render_resolved(const ResolvedDeck& deck);

// The same values with nothing of how the run was started (no comments: not the deck's path, the
// overrides, the world size or where each value came from), so that one deck renders the same text
// however it was given. What an exported artifact stores. Reading it back gives the same Config.
std::string render_values(const ResolvedDeck& deck);

// Markdown reference of every key: type, default, allowed values, meaning.
std::string render_reference();

// Checks one override before any deck is read: "" when `key` exists and `raw` is a valid value for
// it, else the reason (with a suggestion for a misspelt key).
std::string check_override(const std::string& key, const std::string& raw);

// The keys whose values differ between two configurations, in reference order.
std::vector<std::string> differing_keys(const Config& a, const Config& b);

// Every key as "section.key", in reference order.
std::vector<std::string> all_keys();

// "" when `name` can name a run directory inside run.out_dir (one plain folder name: not empty, no
// '/', not "." or ".."), else why not. run.name, the deck file's name standing for it and
// `kgpt train --run-suffix` are all held to it, so that no run is written outside run.out_dir.
std::string run_name_problem(const std::string& name);

}  // namespace kgpt::config
