// YAML input decks with --set overrides: lines of the input that start with "#set " (a YAML comment)
// are also given as overrides, so one input exercises both.
#include <sstream>
#include <vector>

#include "config/deck.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kgpt::config::DeckOptions options;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("#set ", 0) == 0) options.overrides.push_back(line.substr(5));
  }
  kgpt::fuzz::expect_clear_refusal([&] { kgpt::config::parse_deck(text, "fuzz.yaml", options); });
  return 0;
}
