// Every deck in bad_decks/ must be refused with a message that names the key and its
// line:column. Each file states what is expected in its first lines:
//   # expect: LINE:COL | text | text ...   (LINE:COL is left out for a key that was not written)
//   # world_size: N                         (optional, default 1)
#include <catch2/catch.hpp>

#include <dirent.h>

#include <algorithm>
#include <regex>
#include <sstream>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "support/temp_dir.hpp"

namespace {

struct BadDeck {
  std::string name;
  std::string display;  // "bad_decks/<name>", as messages show it
  std::string text;
  int world_size = 1;
  std::string location;  // "bad_decks/<name>:L:C" or ""
  std::vector<std::string> fragments;
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<BadDeck> load_bad_decks() {
  const std::string dir = std::string(KGPT_SOURCE_DIR) + "/tests/config/bad_decks";
  std::vector<BadDeck> decks;
  DIR* listing = ::opendir(dir.c_str());
  REQUIRE(listing != nullptr);
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name.size() < 6 || name.substr(name.size() - 5) != ".yaml") continue;
    BadDeck deck;
    deck.name = name;
    deck.display = "bad_decks/" + name;
    deck.text = kgpt::test::read_file(dir + "/" + name);
    std::istringstream lines(deck.text);
    std::string line;
    while (std::getline(lines, line) && line.rfind("#", 0) == 0) {
      if (line.rfind("# world_size:", 0) == 0) deck.world_size = std::stoi(line.substr(13));
      if (line.rfind("# expect:", 0) != 0) continue;
      std::string rest = line.substr(9) + " |";
      for (std::size_t bar; (bar = rest.find(" |")) != std::string::npos; rest = rest.substr(bar + 2)) {
        const std::string part = trim(rest.substr(0, bar));
        if (part.empty()) continue;
        if (deck.location.empty() && deck.fragments.empty() && std::regex_match(part, std::regex("[0-9]+:[0-9]+"))) {
          deck.location = deck.display + ":" + part;
        } else {
          deck.fragments.push_back(part);
        }
      }
    }
    decks.push_back(deck);
  }
  ::closedir(listing);
  std::sort(decks.begin(), decks.end(), [](const BadDeck& a, const BadDeck& b) { return a.name < b.name; });
  return decks;
}

}  // namespace

TEST_CASE("every bad deck is refused with its key and line:column", "[config][bad]") {
  const auto decks = load_bad_decks();
  REQUIRE(decks.size() >= 15);
  for (const auto& deck : decks) {
    INFO("deck " << deck.name);
    REQUIRE_FALSE(deck.fragments.empty());  // each file must say what it expects
    kgpt::config::DeckOptions options;
    options.world_size = deck.world_size;
    std::string message;
    try {
      kgpt::config::parse_deck(deck.text, deck.display, options);
    } catch (const kgpt::InputError& e) {
      message = e.what();
      CHECK(e.code() == kgpt::ExitCode::bad_input);
    }
    INFO("message: " << message);
    REQUIRE_FALSE(message.empty());
    if (!deck.location.empty()) CHECK(message.rfind(deck.location + ":", 0) == 0);
    for (const auto& fragment : deck.fragments) CHECK(message.find(fragment) != std::string::npos);
  }
}

TEST_CASE("a deck with several mistakes reports all of them", "[config][bad]") {
  const std::string text =
      "model:\n"
      "  dmodel: 64\n"
      "  n_layer: many\n"
      "train:\n"
      "  seq_len: 0\n";
  try {
    kgpt::config::parse_deck(text, "multi.yaml", {});
    FAIL("the deck was accepted");
  } catch (const kgpt::InputError& e) {
    REQUIRE(e.problems().size() == 3);
    CHECK(e.problems()[0].rfind("multi.yaml:2:3: unknown key 'model.dmodel'", 0) == 0);
    CHECK(e.problems()[1].rfind("multi.yaml:3:12: model.n_layer: expected an integer", 0) == 0);
    CHECK(e.problems()[2].rfind("multi.yaml:5:12: train.seq_len: value 0 is out of range", 0) == 0);
  }
}
