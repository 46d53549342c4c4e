// The split patterns, tiktoken's merge order, and the readers of rank files and of GPT-2's
// encoder.json + vocab.bpe on small files made here. The real encodings are checked token for
// token against npm's tiktoken by data/test_tiktoken_reference.py.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/prepare.hpp"
#include "data/shard.hpp"
#include "data/split_pattern.hpp"
#include "data/tiktoken.hpp"
#include "support/base64.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;
using kgpt::test::TempDir;
using kgpt::test::base64;
using kgpt::test::write_file;

namespace {

std::string pattern_of(const std::string& encoding) {
  for (const auto& e : tiktoken_encodings()) {
    if (e.name == encoding) return e.pattern;
  }
  FAIL("no encoding " << encoding);
  return "";
}

std::vector<std::string> pieces(const std::string& pattern, const std::string& text) {
  const SplitPattern split(pattern);
  std::vector<SplitPattern::Piece> found;
  split.split(text, found);
  std::vector<std::string> out;
  for (const auto& p : found) out.push_back(text.substr(p.begin, p.end - p.begin));
  return out;
}

using Pieces = std::vector<std::string>;

// A rank file of the 256 bytes (rank = byte) and then `merged` tokens, in order.
std::string rank_file(const std::vector<std::string>& merged) {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  int rank = 256;
  for (const auto& token : merged) text += base64(token) + " " + std::to_string(rank++) + "\n";
  return text;
}

std::string load_error(const std::string& path, const std::string& encoding = "gpt2") {
  try {
    TiktokenTokenizer::load(path, encoding);
  } catch (const kgpt::InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("gpt2's split pattern: contractions, a space before words, runs of spaces left one short") {
  const std::string p = pattern_of("gpt2");
  CHECK(pieces(p, "Hello world") == Pieces{"Hello", " world"});
  CHECK(pieces(p, "it's") == Pieces{"it", "'s"});
  CHECK(pieces(p, "IT'S") == Pieces{"IT", "'", "S"});  // contractions are lower case only
  CHECK(pieces(p, "a   b") == Pieces{"a", "  ", " b"});
  CHECK(pieces(p, "a \n b") == Pieces{"a", " \n", " b"});
  CHECK(pieces(p, "x  ") == Pieces{"x", "  "});  // at the end the whole run
  CHECK(pieces(p, "12345 67") == Pieces{"12345", " 67"});
  CHECK(pieces(p, "?!x") == Pieces{"?!", "x"});
  CHECK(pieces(p, "\n\nx") == Pieces{"\n", "\n", "x"});
}

TEST_CASE("cl100k_base's split pattern: digits in threes, any case contractions, line breaks kept together") {
  const std::string p = pattern_of("cl100k_base");
  CHECK(pieces(p, "1234567") == Pieces{"123", "456", "7"});
  CHECK(pieces(p, "IT'S") == Pieces{"IT", "'S"});
  CHECK(pieces(p, "x\xC5\xBF") == Pieces{"x\xC5\xBF"});          // U+017F is a letter
  CHECK(pieces(p, "'\xC5\xBF") == Pieces{"'\xC5\xBF"});          // ... and folds to s: a contraction
  CHECK(pieces(p, "\tfoo") == Pieces{"\tfoo"});                  // one non-letter before the letters
  CHECK(pieces(p, "a  \n\n  b") == Pieces{"a", "  \n\n", " ", " b"});
  CHECK(pieces(p, "!!\n\nx") == Pieces{"!!\n\n", "x"});
}

TEST_CASE("o200k_base's split pattern: a word's capitals stay with it, contractions join the word") {
  const std::string p = pattern_of("o200k_base");
  CHECK(pieces(p, "HTTPServer") == Pieces{"HTTPServer"});
  CHECK(pieces(p, "camelCase") == Pieces{"camel", "Case"});
  CHECK(pieces(p, "they're") == Pieces{"they're"});
  CHECK(pieces(p, "a/b//\n") == Pieces{"a", "/b", "//\n"});
}

TEST_CASE("split patterns: negated categories, ranges, counted repeats, and characters no alternative matches left out") {
  CHECK(pieces("\\P{L}+", "ab12!c") == Pieces{"12!"});
  CHECK(pieces("[a-c]{2}|\\d", "abcab9x") == Pieces{"ab", "ca", "9"});
  CHECK(pieces("(?:x|y)+(?!z)", "xyxz yy") == Pieces{"xy", "yy"});  // "x" before z matches nothing
  CHECK(pieces("(?i:k)", "kK\xE2\x84\xAA") == Pieces{"k", "K", "\xE2\x84\xAA"});  // the Kelvin sign folds to k
}

TEST_CASE("split patterns outside the syntax read are refused naming the character") {
  CHECK_THROWS_WITH(SplitPattern("(?<=a)b"), Catch::Contains("at character 3"));
  CHECK_THROWS_WITH(SplitPattern("a+?"), Catch::Contains("lazy"));
  CHECK_THROWS_WITH(SplitPattern("\\p{Xx}"), Catch::Contains("\\p{Xx}"));
  CHECK_THROWS_WITH(SplitPattern("[abc"), Catch::Contains("'['"));
  CHECK_THROWS_WITH(SplitPattern("(ab"), Catch::Contains("'('"));
  CHECK_THROWS_WITH(SplitPattern("\\w"), Catch::Contains("\\w"));
}

TEST_CASE("bytes that are not UTF-8 become one U+FFFD per maximal ill-formed sequence") {
  const std::string r = "\xEF\xBF\xBD";
  CHECK(decode_utf8_replacing("a\xE2\x82" "b") == "a" + r + "b");         // a truncated sequence: one
  CHECK(decode_utf8_replacing("\xF0\x80") == r + r);                      // F0 80 is never valid: two
  CHECK(decode_utf8_replacing("\xED\xA0\x80") == r + r + r);              // a surrogate: each byte
  CHECK(decode_utf8_replacing("\xC0\xAF") == r + r);                      // an overlong form
  CHECK(decode_utf8_replacing("\xE2\x82\xAC") == "\xE2\x82\xAC");         // valid text unchanged
  CHECK(decode_utf8_replacing("\xF4\x90\x80\x80") == r + r + r + r);      // beyond U+10FFFF
}

TEST_CASE("BPE merges the lowest rank first, the leftmost of equal ones, and takes a whole piece when it is a token") {
  TempDir dir;
  // 256 "aa", 257 "ab", 258 "bc", 259 "abc" (from ab + c), 260 "aaa"
  write_file(dir.file("toy.tiktoken"), rank_file({"aa", "ab", "bc", "abc", "aaa"}));
  const auto t = TiktokenTokenizer::load(dir.file("toy.tiktoken"), "gpt2");
  CHECK(t.rank_count() == 261);
  CHECK(t.encode("aaaa") == std::vector<int>{256, 256});
  CHECK(t.encode("aaaaa") == std::vector<int>{256, 260});  // aa|a|a|a, aa|aa|a, then aa + a beats none
  CHECK(t.encode("aaa") == std::vector<int>{260});  // the whole piece is a token
  CHECK(t.encode("abc") == std::vector<int>{259});
  CHECK(t.encode("xbc") == std::vector<int>{'x', 258});
  CHECK(t.encode("zabcz") == std::vector<int>{'z', 259, 'z'});
  CHECK(t.decode({256, 258, 'a'}) == "aabca");
  // Special tokens: text unless allowed, then the token.
  CHECK(t.encode("a<|endoftext|>").size() > 2);
  CHECK(t.encode("a<|endoftext|>b", true) == std::vector<int>{'a', 50256, 'b'});
  CHECK(t.is_special(50256));
  CHECK(t.vocab_size() == 50257);
  CHECK_THROWS_WITH(t.decode({261}), Catch::Contains("token 261 is no token"));
  const TokenByteTable table = t.byte_table(50304);
  CHECK(table.base_bytes[259] == 3);
  CHECK(table.base_bytes['a'] == 1);
  CHECK(table.is_boundary[50256] == 1);
  CHECK(table.is_boundary[50300] == 1);
  CHECK(table.document_start == 50256);
}

TEST_CASE("bad rank files are refused naming file:line") {
  TempDir dir;
  const std::string good = rank_file({"aa"});
  write_file(dir.file("base64.tiktoken"), good + "a$== 257\n");
  CHECK_THROWS_WITH(TiktokenTokenizer::load(dir.file("base64.tiktoken"), "gpt2"),
                    Catch::Contains("base64.tiktoken:258: 'a$==' is not base64"));
  write_file(dir.file("twice.tiktoken"), good + base64("xy") + " 256\n");
  CHECK(load_error(dir.file("twice.tiktoken")).find("twice.tiktoken:258: rank 256 is given twice (first at") !=
        std::string::npos);
  write_file(dir.file("same.tiktoken"), good + base64("aa") + " 257\n");
  CHECK(load_error(dir.file("same.tiktoken")).find("same.tiktoken:258: the token of rank 257 has the bytes of rank 256") !=
        std::string::npos);
  write_file(dir.file("gap.tiktoken"), good + base64("xy") + " 300\n");
  CHECK(load_error(dir.file("gap.tiktoken")).find("rank 257 is missing") != std::string::npos);
  write_file(dir.file("rank.tiktoken"), good + base64("xy") + " -3\n");
  CHECK(load_error(dir.file("rank.tiktoken")).find("rank.tiktoken:258: the rank '-3' is not a number") != std::string::npos);
  write_file(dir.file("fields.tiktoken"), good + base64("xy") + "\n");
  CHECK(load_error(dir.file("fields.tiktoken")).find("fields.tiktoken:258: expected 'BASE64 RANK'") != std::string::npos);
  std::string no_byte;
  for (int b = 1; b < 256; ++b) no_byte += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b - 1) + "\n";
  write_file(dir.file("byte.tiktoken"), no_byte);
  CHECK(load_error(dir.file("byte.tiktoken")).find("the byte 0 has no token of its own") != std::string::npos);
  // The special token's id must be free.
  std::string full = good;
  for (int r = 257; r <= 50256; ++r) full += base64("t" + std::to_string(r)) + " " + std::to_string(r) + "\n";
  write_file(dir.file("clash.tiktoken"), full);
  CHECK(load_error(dir.file("clash.tiktoken")).find("rank 50256 is a token of the file, but encoding gpt2 gives that id") !=
        std::string::npos);
  CHECK(load_error(dir.file("missing.tiktoken")).find("missing.tiktoken: cannot be read") != std::string::npos);
  // Unknown sizes need a named encoding.
  write_file(dir.file("odd.tiktoken"), good);
  CHECK(load_error(dir.file("odd.tiktoken"), "auto").find("257 ranks, which is no encoding kgpt knows") != std::string::npos);
  CHECK(load_error(dir.file("odd.tiktoken"), "cl99k").find("'cl99k' is not one of gpt2, r50k_base") != std::string::npos);
}

TEST_CASE("GPT-2's encoder.json and vocab.bpe give the ranks of their merges, and must agree") {
  TempDir dir;
  // GPT-2 spells the space as U+0120 (the 33rd byte that is not printable on its own).
  const std::string g = "\xC4\xA0";  // U+0120
  std::string encoder = "{";
  // Ranks of single bytes follow GPT-2's order: printable ones first.
  std::vector<int> order;
  for (int b = 0; b < 256; ++b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) order.push_back(b);
  }
  for (int b = 0; b < 256; ++b) {
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) order.push_back(b);
  }
  std::map<int, std::string> spelled;
  int extra = 0;
  for (int b : order) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    const unsigned code = printable ? static_cast<unsigned>(b) : 256u + static_cast<unsigned>(extra++);
    std::string utf8;
    if (code < 0x80) {
      utf8 = std::string(1, static_cast<char>(code));
    } else {
      utf8 = {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
    }
    spelled[b] = utf8;
  }
  for (std::size_t rank = 0; rank < order.size(); ++rank) {
    std::string key = spelled[order[rank]];
    if (key == "\"") key = "\\\"";
    if (key == "\\") key = "\\\\";
    encoder += "\"" + key + "\": " + std::to_string(rank) + ", ";
  }
  const std::string merges = "#version: 0.2\n" + g + " t\nh e\n" + g + "t he\n";
  write_file(dir.file("vocab.bpe"), merges);
  write_file(dir.file("encoder.json"), encoder + "\"" + g + "t\": 256, \"he\": 257, \"" + g + "the\": 258, \"<|endoftext|>\": 259}");
  const auto t = TiktokenTokenizer::load(dir.file("encoder.json"));
  CHECK(t.encoding() == "gpt2");
  CHECK(t.end_of_text() == 259);
  CHECK(t.encode(" the") == std::vector<int>{258});
  CHECK(t.token_bytes(256) == " t");
  CHECK(t.decode(t.encode("the theme")) == "the theme");

  write_file(dir.file("encoder.json"), encoder + "\"" + g + "t\": 257, \"he\": 256, \"" + g + "the\": 258}");
  CHECK(load_error(dir.file("encoder.json"), "auto").find("encoder.json: 'he' is id 256, but " + dir.file("vocab.bpe") +
                                                         ":3 makes it rank 257: the two files disagree") != std::string::npos);
  write_file(dir.file("encoder.json"), encoder + "\"" + g + "t\": 256, \"he\": 257}");
  CHECK(load_error(dir.file("encoder.json"), "auto").find("vocab.bpe:4: rank 258 is not in") != std::string::npos);
  write_file(dir.file("vocab.bpe"), "#version: 0.2\n" + g + " t\nh e\nhe x y\n");
  CHECK(load_error(dir.file("encoder.json"), "auto").find("vocab.bpe:4: expected 'FIRST SECOND'") != std::string::npos);
  write_file(dir.file("vocab.bpe"), "#version: 0.2\n" + g + " t\nh e\n" + g + "t he\nh e\n");
  CHECK(load_error(dir.file("vocab.bpe"), "auto").find("vocab.bpe:5: the merge makes the token of rank 257 again") !=
        std::string::npos);
  write_file(dir.file("encoder.json"), "{\"a\": ");
  write_file(dir.file("vocab.bpe"), merges);
  CHECK(load_error(dir.file("encoder.json"), "auto").find("encoder.json: not JSON") != std::string::npos);
}

TEST_CASE("kgpt prepare with tiktoken refuses text with a NUL byte, naming file:line:column, before writing") {
  TempDir dir;
  write_file(dir.file("toy.tiktoken"), rank_file({"aa"}));
  write_file(dir.file("text.txt"), std::string("first line\nsecond\0line\n", 24));
  PrepareOptions options;
  options.inputs = {dir.file("text.txt")};
  options.out_dir = dir.file("out");
  options.tokenizer = PrepareTokenizer::tiktoken;
  options.vocab_file = dir.file("toy.tiktoken");
  options.encoding = "gpt2";
  CHECK_THROWS_WITH(prepare_shards(options), Catch::Contains("text.txt:2:7: a NUL byte"));
  CHECK(find_shards(dir.file("out") + "/*.bin").empty());
  // Ids beyond uint16 cannot be shards.
  options.encoding = "cl100k_base";
  write_file(dir.file("text.txt"), "fine\n");
  CHECK_THROWS_WITH(prepare_shards(options), Catch::Contains("ids up to 100276") && Catch::Contains("uint16"));
  // Every document starts with <|endoftext|>, and its whole text is encoded.
  options.encoding = "gpt2";
  options.doc_delimiter = "%";
  options.val_fraction = 0;
  write_file(dir.file("text.txt"), "aaa\n%\naa\n");
  const PrepareSummary s = prepare_shards(options);
  CHECK(s.documents == 2);
  const auto tokens = read_shard(s.train_shards.at(0), 50257);
  CHECK(std::vector<int>(tokens.begin(), tokens.end()) == std::vector<int>{50256, 256, 'a', '\n', 50256, 256, '\n'});
}
