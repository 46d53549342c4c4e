// kgpt check: validate a deck (and its data) and print the fully resolved deck.

#include <iostream>

#include "commands.hpp"
#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/dataset_check.hpp"

namespace kgpt::app {

const CommandSpec& check_spec() {
  static const CommandSpec spec{
      "check",
      "DECK [--set section.key=value]... [--world-size N] [--no-data]\n       kgpt check --reference",
      "validate a deck and its data, print the resolved deck",
      "Reads DECK, applies the --set overrides, validates every key and the rules between keys for\n"
      "the given world size, checks that the train and val shards exist and have valid headers, and\n"
      "prints the fully resolved deck (every key, its value, and where it came from) on stdout.\n"
      "Nothing is written. Exit code 0 when the deck is valid, 2 with one message per problem if not.",
      {
          {"set", "section.key=value", "override a deck key (repeatable; validated like the deck)"},
          {"world-size", "N", "number of MPI ranks the deck is meant for (default 1)"},
          {"no-data", "", "skip the check of the data files"},
          {"reference", "", "print the Markdown reference of every deck key and exit"},
      },
      0,
      1};
  return spec;
}

config::ResolvedDeck load_deck_from_args(const ParsedArgs& args, int world_size) {
  config::DeckOptions options;
  options.world_size = world_size;
  options.overrides = args.all("set");
  return config::load_deck(args.positional().at(0), options);
}

int run_check(const ParsedArgs& args) {
  if (args.has("reference")) {
    std::cout << config::render_reference();
    return 0;
  }
  if (args.positional().empty()) throw InputError("missing argument; usage: kgpt check " + check_spec().synopsis);
  const int world_size = static_cast<int>(int_option(args, "world-size", 1, 1, 1 << 20));
  const config::ResolvedDeck deck = load_deck_from_args(args, world_size);
  std::string data_note = "data not checked (--no-data)";
  if (!args.has("no-data")) {
    const data::DatasetFiles files = data::check_dataset(deck);
    data_note = std::to_string(files.train.files.size()) + " train shards (" + text::with_thousands(files.train.tokens) +
                " tokens), " + std::to_string(files.val.files.size()) + " val shards (" +
                text::with_thousands(files.val.tokens) + " tokens)";
  }
  std::cout << config::render_resolved(deck);
  for (const auto& note : deck.notes) std::cerr << "kgpt check: note: " << note << "\n";
  std::cerr << "kgpt check: " << deck.path << " is valid for world size " << world_size << "; " << data_note << "\n";
  return 0;
}

}  // namespace kgpt::app
