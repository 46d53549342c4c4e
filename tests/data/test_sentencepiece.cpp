// SentencePiece models through kgpt: training (byte fallback, the special pieces, kept whitespace),
// lossless encoding and decoding of text with line breaks, byte counts from the model equal to
// those from its .vocab, shards of the same documents as the byte tokenizer's, and bad inputs.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "data/prepare.hpp"
#include "data/sentencepiece.hpp"
#include "data/shard.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;
using kgpt::test::TempDir;

namespace {

// Text that exists on every Debian machine, with some lines that stress the tokenizer added.
std::string training_text() {
  std::ifstream in("/usr/share/common-licenses/GPL-3");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(text.size() > 10000);
  return text + "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 \xe2\x80\x9cquoted\xe2\x80\x9d\n    indented\tand\ttabbed\n%\n";
}

// One model for the whole file: training takes about a second.
const std::string& model_path() {
  static TempDir dir;
  static const std::string path = [] {
    kgpt::test::write_file(dir.file("text.txt"), training_text());
    TokenizerTrainOptions options;
    options.inputs = {dir.file("text.txt")};
    options.vocab_size = 400;
    options.out_prefix = dir.file("tok/m");
    options.doc_delimiter = "%";
    const TokenizerTrainSummary s = train_sentencepiece(options);
    CHECK(s.pieces == 400);
    CHECK(s.model_file == dir.file("tok/m.model"));
    CHECK(kgpt::test::file_exists(s.vocab_file));
    return s.model_file;
  }();
  return path;
}

}  // namespace

TEST_CASE("a trained tokenizer has byte fallback and parameter-golf's special pieces", "[data][sentencepiece]") {
  const SentencePieceModel model = SentencePieceModel::load(model_path());
  CHECK(model.vocab_size() == 400);
  CHECK(model.piece(0) == "<pad>");
  CHECK(model.piece(1) == "<s>");
  CHECK(model.piece(2) == "</s>");
  CHECK(model.piece(3) == "<unk>");
  CHECK(model.bos_id() == 1);
  CHECK(model.eos_id() == 2);
  for (int id = 0; id < 4; ++id) CHECK(model.is_boundary(id));
  for (int b = 0; b < 256; ++b) {
    CHECK(model.byte_value(4 + b) == b);  // <0x00>..<0xFF> follow the special pieces
    CHECK_FALSE(model.is_boundary(4 + b));
  }
  CHECK(model.newline_id() == 4 + '\n');
  CHECK(model.byte_value(300) == -1);
  CHECK(model.is_boundary(400));  // past the model
}

TEST_CASE("UTF-8 text with line breaks, runs of spaces and tabs round-trips exactly", "[data][sentencepiece]") {
  const SentencePieceModel model = SentencePieceModel::load(model_path());
  for (const std::string& text :
       {std::string("This License applies to any program."), std::string("two\nlines\n"), std::string("\n\n  x  \n"),
        std::string("tab\there  and   spaces "), std::string("\xc3\xa9t\xc3\xa9 \xe2\x82\xac 12345 \xf0\x9f\x98\x80"),
        std::string("\x01\x7f control bytes"), std::string("")}) {
    INFO(text);
    const std::vector<int> ids = model.encode_text(text);
    CHECK(model.decode(ids) == text);
    // Each line is encoded on its own, a line break is <0x0A>, and nothing else is.
    std::vector<int> expected;
    std::size_t start = 0;
    while (true) {
      const std::size_t end = text.find('\n', start);
      const auto line = model.encode_line(text.substr(start, end == std::string::npos ? end : end - start));
      expected.insert(expected.end(), line.begin(), line.end());
      if (end == std::string::npos) break;
      expected.push_back(model.newline_id());
      start = end + 1;
    }
    CHECK(ids == expected);
  }
  // SentencePiece (spm_encode too) reads each byte that is not UTF-8 as U+FFFD, so that is what
  // such bytes encode and decode to.
  const std::vector<int> raw = model.encode_line("ok \xff\xfe");
  CHECK(raw == model.encode_line("ok \xef\xbf\xbd\xef\xbf\xbd"));
  CHECK(model.decode(raw) == "ok \xef\xbf\xbd\xef\xbf\xbd");
  // Learned pieces are used: common words take fewer tokens than bytes.
  const std::string sentence = "the terms and conditions of this License";
  CHECK(model.encode_line(sentence).size() * 2 < sentence.size());
}

TEST_CASE("bytes per token from the model equal those from its .vocab", "[data][sentencepiece][bpb]") {
  const SentencePieceModel model = SentencePieceModel::load(model_path());
  std::string vocab = model_path();
  vocab.replace(vocab.size() - 6, 6, ".vocab");
  for (const int vocab_size : {400, 512}) {
    const TokenByteTable from_model = load_sentencepiece_table(model_path(), vocab_size);
    const TokenByteTable from_vocab = load_sentencepiece_table(vocab, vocab_size);
    CHECK(from_model.base_bytes == from_vocab.base_bytes);
    CHECK(from_model.has_leading_space == from_vocab.has_leading_space);
    CHECK(from_model.is_boundary == from_vocab.is_boundary);
  }
  // And the counts are the text's bytes: summed over a text's tokens (no boundary before the
  // first), they give its length whenever it does not start with a space.
  const TokenByteTable table = model.byte_table(400);
  CHECK(table.document_start == model.bos_id());  // what kgpt prepare places before a document
  for (const std::string& text : {std::string("Everyone is permitted to copy  and distribute\nverbatim copies."),
                                 std::string("caf\xc3\xa9 \xe2\x80\x94 tabs\tand    spaces\n")}) {
    const std::vector<int> ids = model.encode_text(text);
    std::size_t bytes = 0;
    int previous = model.bos_id();
    for (int id : ids) {
      bytes += static_cast<std::size_t>(table.bytes(previous, id));
      previous = id;
    }
    CHECK(bytes == text.size());
  }
  CHECK_THROWS_WITH(load_sentencepiece_table(model_path(), 300), Catch::Contains("400 pieces, more than model.vocab_size = 300"));
}

TEST_CASE("prepare with a SentencePiece model writes the same documents as lines of pieces", "[data][sentencepiece][prepare]") {
  TempDir dir;
  kgpt::test::write_file(dir.file("a.txt"), "first doc\nline two\n%\nsecond  doc\n%\nthird\r\n");
  kgpt::test::write_file(dir.file("whole.txt"), "no delimiter\nlast line without a break");
  const SentencePieceModel model = SentencePieceModel::load(model_path());
  PrepareOptions options;
  options.inputs = {dir.file("a.txt")};
  options.out_dir = dir.file("out");
  options.prefix = "sp";
  options.tokenizer = PrepareTokenizer::sentencepiece;
  options.model_file = model_path();
  options.doc_delimiter = "%";
  options.val_fraction = 0.0;
  const PrepareSummary s = prepare_shards(options);
  CHECK(s.documents == 3);
  std::vector<int> expected;
  for (const char* doc : {"first doc\nline two\n", "second  doc\n", "third\r\n"}) {
    expected.push_back(model.bos_id());
    const auto ids = model.encode_text(doc);
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  const auto tokens = read_shard(s.train_shards.at(0), 400);
  CHECK(std::vector<int>(tokens.begin(), tokens.end()) == expected);
  CHECK(kgpt::test::read_file(s.meta_file).find("tokenizer: sentencepiece") != std::string::npos);

  // A whole file is one document with exactly its line breaks.
  options.inputs = {dir.file("whole.txt")};
  options.doc_delimiter.clear();
  options.prefix = "whole";
  const PrepareSummary w = prepare_shards(options);
  const auto whole = read_shard(w.train_shards.at(0), 400);
  std::vector<int> expected_whole = {model.bos_id()};
  const auto ids = model.encode_text("no delimiter\nlast line without a break");
  expected_whole.insert(expected_whole.end(), ids.begin(), ids.end());
  CHECK(std::vector<int>(whole.begin(), whole.end()) == expected_whole);
}

TEST_CASE("bad tokenizer inputs are named", "[data][sentencepiece]") {
  TempDir dir;
  CHECK_THROWS_WITH(SentencePieceModel::load(dir.file("none.model")), Catch::StartsWith(dir.file("none.model") + ": cannot open"));
  kgpt::test::write_file(dir.file("text.model"), "this is not a model\n");
  CHECK_THROWS_WITH(SentencePieceModel::load(dir.file("text.model")),
                    Catch::StartsWith(dir.file("text.model") + ": not a SentencePiece model"));
  std::string vocab = model_path();
  vocab.replace(vocab.size() - 6, 6, ".vocab");
  CHECK_THROWS_WITH(SentencePieceModel::load(vocab), Catch::Contains("not a SentencePiece model"));

  kgpt::test::write_file(dir.file("in.txt"), "some text\n");
  TokenizerTrainOptions options;
  options.inputs = {dir.file("in.txt")};
  options.out_prefix = dir.file("m");
  options.vocab_size = 100;
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::Contains("--vocab-size 100 must be in [261, 65536]"));
  options.vocab_size = 70000;
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::Contains("must be in [261, 65536]"));
  options.vocab_size = 300;
  options.inputs = {dir.file("missing.txt")};
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::StartsWith(dir.file("missing.txt") + ": cannot read input file"));
  // Too little text for the pieces asked for: named before SentencePiece runs, no files left behind.
  options.inputs = {dir.file("in.txt")};
  options.vocab_size = 5000;
  CHECK_THROWS_WITH(train_sentencepiece(options),
                    Catch::Contains("--vocab-size 5000 is more than the text of " + dir.file("in.txt") + " can give"));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("m.model")));
  // An existing model is never replaced.
  kgpt::test::write_file(dir.file("m.model"), "keep me");
  options.vocab_size = 300;
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::Contains("m.model: already exists"));
  CHECK(kgpt::test::read_file(dir.file("m.model")) == "keep me");

  // The class that once crashed SentencePiece's BPE trainer (a segmentation fault with its log on):
  // two one-letter lines leave no pair to merge. With kgpt's progress on, as `kgpt tokenizer train`
  // runs without --quiet.
  std::ostringstream log;
  kgpt::test::write_file(dir.file("two_lines.txt"), "a\nb\n");
  options.inputs = {dir.file("two_lines.txt")};
  options.out_prefix = dir.file("tk");
  options.progress = &log;
  options.vocab_size = 1024;
  CHECK_THROWS_WITH(train_sentencepiece(options),
                    Catch::Contains("--vocab-size 1024 is more than the text of " + dir.file("two_lines.txt") +
                                    " can give: at most 262 pieces"));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("tk.model")));
  options.vocab_size = 262;  // all it can give: trains
  CHECK(train_sentencepiece(options).pieces == 262);
  // Nothing to train on: empty, delimiters only, or every line beyond SentencePiece's 4192 bytes.
  kgpt::test::write_file(dir.file("empty.txt"), "");
  kgpt::test::write_file(dir.file("delimiters.txt"), "%\n\n%\n" + std::string(5000, 'x') + "\n");
  options.out_prefix = dir.file("none");
  options.doc_delimiter = "%";
  options.vocab_size = 300;
  options.inputs = {dir.file("empty.txt")};
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::StartsWith(dir.file("empty.txt") + ": no line to train a tokenizer on"));
  options.inputs = {dir.file("delimiters.txt")};
  CHECK_THROWS_WITH(train_sentencepiece(options), Catch::Contains("longer than 4192 bytes, which SentencePiece skips (1 of them)"));
  // What only SentencePiece can tell (unigram keeps fewer pieces than the substrings allow), in kgpt's words.
  kgpt::test::write_file(dir.file("words.txt"), "ab\ncab\ndab\n");
  options.inputs = {dir.file("words.txt")};
  options.type = SentencePieceType::unigram;
  options.doc_delimiter.clear();
  options.vocab_size = 269;
  CHECK_THROWS_WITH(train_sentencepiece(options),
                    Catch::Contains("--vocab-size 269 is more than the text of " + dir.file("words.txt") +
                                    " gives: SentencePiece can make at most 264 pieces of it"));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("none.model")));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("none.vocab")));

  PrepareOptions prepare;
  prepare.inputs = {dir.file("in.txt")};
  prepare.out_dir = dir.file("out");
  prepare.tokenizer = PrepareTokenizer::sentencepiece;
  CHECK_THROWS_WITH(prepare_shards(prepare), Catch::Contains("--tokenizer sentencepiece needs --model"));
  prepare.model_file = dir.file("text.model");
  CHECK_THROWS_WITH(prepare_shards(prepare), Catch::Contains("not a SentencePiece model"));
  CHECK_FALSE(kgpt::test::file_exists(dir.file("out")));
}
