#include <catch2/catch.hpp>

#include <cmath>

#include "core/error.hpp"
#include "data/token_bytes.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;

TEST_CASE("byte tokenizer: one byte per byte token, the boundary counts none", "[data][bpb]") {
  const auto table = byte_tokenizer_table(257);
  CHECK(table.bytes(256, 'a') == 1);
  CHECK(table.bytes('a', 256) == 0);
  CHECK(table.bytes('a', 0) == 1);
  CHECK(bits_per_byte(std::log(2.0), 100, 100) == Approx(1.0));
  CHECK(bits_per_byte(std::log(2.0) * 2, 100, 400) == Approx(0.5));
  CHECK(table.document_start == 256);                       // what kgpt prepare places before a document
  CHECK(byte_tokenizer_table(256).document_start == -1);    // no room for the boundary
}

TEST_CASE("SentencePiece vocab: control, byte, and word-start pieces", "[data][bpb]") {
  kgpt::test::TempDir dir;
  // ids: 0 <unk>, 1 <s>, 2 </s>, 3 <0x41>, 4 "▁the", 5 "ing", 6 "▁é" (2 UTF-8 bytes), 7 "<pad>"
  kgpt::test::write_file(dir.file("sp.vocab"),
                         "<unk>\t0\n<s>\t0\n</s>\t0\n<0x41>\t0\n\xe2\x96\x81the\t-1.5\ning\t-2\n\xe2\x96\x81\xc3\xa9\t-3\n<pad>\t0\n");
  const auto table = load_sentencepiece_vocab(dir.file("sp.vocab"), 10);
  CHECK(table.bytes(5, 0) == 0);  // <unk>
  CHECK(table.bytes(5, 1) == 0);  // <s>
  CHECK(table.bytes(5, 3) == 1);  // byte fallback
  CHECK(table.bytes(5, 4) == 4);  // " the" after a word
  CHECK(table.bytes(1, 4) == 3);  // "the" right after <s>: no space
  CHECK(table.bytes(4, 5) == 3);  // "ing"
  CHECK(table.bytes(5, 6) == 3);  // " é"
  CHECK(table.bytes(5, 7) == 0);  // <pad>
  CHECK(table.bytes(5, 9) == 0);  // past the file: nothing
  CHECK(table.document_start == 1);  // <s>
  CHECK_THROWS_WITH(load_sentencepiece_vocab(dir.file("sp.vocab"), 5),
                    dir.file("sp.vocab") + ":6: the vocab file has more pieces than model.vocab_size = 5");
  kgpt::test::write_file(dir.file("bad.vocab"), "<unk>\t0\nno tab here\n");
  CHECK_THROWS_WITH(load_sentencepiece_vocab(dir.file("bad.vocab"), 10), dir.file("bad.vocab") + ":2: expected 'piece<TAB>score'");
  CHECK_THROWS_AS(load_sentencepiece_vocab(dir.file("none.vocab"), 10), kgpt::InputError);
}
