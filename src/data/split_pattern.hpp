#pragma once
// The pre-tokenization split of tiktoken-style BPE: a regular expression over Unicode text whose
// matches, taken leftmost-first from the start of the text, are the pieces BPE then encodes one by
// one. kgpt compiles the encodings' own pattern strings (gpt2's, cl100k_base's, o200k_base's) with
// the semantics of the regex engines tiktoken uses: alternatives tried in order, greedy quantifiers
// that give back characters only when what follows fails.
//
// The syntax understood is what those patterns use: literals and escapes (\r \n \t \' \/ ...),
// classes [...] and [^...] of characters, ranges and \s \S \d \p{..} \P{..}, alternation, groups
// (...) (?:...) (?i:...) and negative lookahead (?!...), and the greedy quantifiers ? * + {m} {m,}
// {m,n}. \p{} names Unicode general categories (L, Lu, Ll, Lt, Lm, Lo, M, Mn, Mc, Me, N, Nd, Nl,
// No, P, S, Z, C and their two-letter members). (?i:) folds literals by Unicode simple case folding,
// so (?i:'s) also matches 'S and U+017F. Categories and White_Space come from Debian's ICU (libicu):
// a maintained Unicode database (Unicode 15.0 in Debian 12's ICU 72) rather than tables generated
// into the repository. Anything else is an InputError naming the character of the pattern.

#include <cstdint>
#include <string>
#include <vector>

namespace kgpt::data {

class SplitPattern {
 public:
  // Throws InputError ("split pattern: ...") for syntax outside the subset above.
  explicit SplitPattern(const std::string& pattern);
  ~SplitPattern();
  SplitPattern(SplitPattern&&) noexcept;
  SplitPattern& operator=(SplitPattern&&) noexcept;

  const std::string& text() const { return text_; }

  // Byte offsets where the pieces of `text` end, in order; the pieces cover the whole text when
  // every character is matched by some alternative (true of the encodings' patterns). `text` must
  // be valid UTF-8 (decode_utf8_replacing makes it so). Characters no alternative matches are left
  // out, as the regex engines' find-all leaves them out.
  struct Piece {
    std::uint32_t begin, end;  // byte offsets
  };
  void split(const std::string& text, std::vector<Piece>& pieces) const;

  struct Instruction;
  struct CharClass;

 private:
  std::string text_;
  std::vector<CharClass> classes_;
  std::vector<Instruction> program_;
  // The top-level alternatives, each its own program, tried in order at every position; those
  // that cannot start with the character there are skipped without running (most are, at most
  // characters). For characters below 128 that is one bit of `ascii_starts_`.
  struct Alternative {
    int start = 0;
    bool nullable = false;  // may match nothing: always run
    std::vector<int> first_classes;  // indexes into classes_
    std::vector<std::pair<std::uint32_t, bool>> first_literals;  // code, folded
    std::uint64_t ascii_starts[2] = {0, 0};
  };
  std::vector<Alternative> alternatives_;
  bool may_start(const Alternative& a, std::uint32_t c) const;
  struct Backtrack {
    int pc;
    std::uint32_t position, lowest;  // retries position, position - 1, ..., lowest
  };
  // The end of the leftmost-first match of the program at `pc` that starts at `begin`, or -1.
  long match(const std::vector<std::uint32_t>& chars, std::uint32_t begin, int pc, std::vector<Backtrack>& stack) const;
};

// Valid UTF-8 of `bytes`: each maximal ill-formed subsequence becomes U+FFFD, as WHATWG decoders
// (node's, Python's errors="replace") read bytes that are not UTF-8, which is how tiktoken's
// callers hand it such text.
std::string decode_utf8_replacing(const std::string& bytes);

// The code points of valid UTF-8 (decode_utf8_replacing's output), and where each starts in bytes
// (one more entry: the end).
void decode_valid_utf8(const std::string& text, std::vector<std::uint32_t>& chars, std::vector<std::uint32_t>& offsets);

}  // namespace kgpt::data
