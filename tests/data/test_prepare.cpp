#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/error.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/prepare.hpp"
#include "data/shard.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;
using kgpt::test::TempDir;

namespace {

// Splits a split's concatenated shards back into documents at the boundary token.
std::vector<std::string> documents_of(const std::vector<std::string>& shards) {
  std::vector<std::string> docs;
  for (const auto& shard : shards) {
    for (std::uint16_t t : read_shard(shard, kByteVocabSize)) {
      if (t == kByteDocumentBoundary) {
        docs.emplace_back();
      } else {
        REQUIRE_FALSE(docs.empty());  // every document starts with a boundary
        docs.back().push_back(static_cast<char>(t));
      }
    }
  }
  return docs;
}

PrepareOptions options_for(const TempDir& dir, std::vector<std::string> inputs) {
  PrepareOptions options;
  options.inputs = std::move(inputs);
  options.out_dir = dir.file("out");
  options.prefix = "t";
  return options;
}

}  // namespace

TEST_CASE("prepare splits delimited documents into train and val shards", "[data][prepare]") {
  TempDir dir;
  kgpt::test::write_file(dir.file("a.txt"), "first one\n%\nsecond\nhas two lines\n%\n%\nthird\r\n%\r\n");
  kgpt::test::write_file(dir.file("b.txt"), "fourth\n%\nfifth \xc3\xa9\n");  // UTF-8 passes through as bytes
  PrepareOptions options = options_for(dir, {dir.file("a.txt"), dir.file("b.txt")});
  options.doc_delimiter = "%";
  options.val_fraction = 0.4;
  const PrepareSummary summary = prepare_shards(options);

  CHECK(summary.documents == 5);
  CHECK(summary.val_documents == 2);  // about 0.4 x 5, the first document included
  const auto val = documents_of(summary.val_shards);
  const auto train = documents_of(summary.train_shards);
  CHECK(val == std::vector<std::string>{"first one\n", "third\r\n"});
  CHECK(train == std::vector<std::string>{"second\nhas two lines\n", "fourth\n", "fifth \xc3\xa9\n"});
  CHECK(summary.train_tokens == 3 + std::string("second\nhas two lines\nfourth\nfifth \xc3\xa9\n").size());
  CHECK(summary.train_shards == std::vector<std::string>{dir.file("out/t_train_000000.bin")});
  CHECK(summary.val_shards == std::vector<std::string>{dir.file("out/t_val_000000.bin")});
  const std::string meta = kgpt::test::read_file(summary.meta_file);
  CHECK(meta.find("tokenizer: byte") != std::string::npos);
  CHECK(meta.find("documents: 5") != std::string::npos);
}

TEST_CASE("prepare treats each file as a document and cuts shards at shard_tokens", "[data][prepare]") {
  TempDir dir;
  std::string big;
  for (int i = 0; i < 500; ++i) big += "line " + std::to_string(i) + "\n";
  kgpt::test::write_file(dir.file("big.txt"), big);
  kgpt::test::write_file(dir.file("empty.txt"), "");
  kgpt::test::write_file(dir.file("small.txt"), "tiny");
  PrepareOptions options = options_for(dir, {dir.file("big.txt"), dir.file("empty.txt"), dir.file("small.txt")});
  options.val_fraction = 0.0;
  options.shard_tokens = 1000;
  const PrepareSummary summary = prepare_shards(options);
  CHECK(summary.documents == 2);  // the empty file makes no document
  CHECK(summary.val_shards.empty());
  const std::uint64_t total = big.size() + 4 + 2;
  CHECK(summary.train_tokens == total);
  REQUIRE(summary.train_shards.size() == (total + 999) / 1000);
  for (std::size_t s = 0; s + 1 < summary.train_shards.size(); ++s) {
    CHECK(read_shard_header(summary.train_shards[s]).token_count == 1000);
  }
  CHECK(summary.train_shards[1] == dir.file("out/t_train_000001.bin"));
  CHECK(documents_of(summary.train_shards) == std::vector<std::string>{big, "tiny"});
}

TEST_CASE("prepare never overwrites shards unless forced, and checks inputs first", "[data][prepare]") {
  TempDir dir;
  kgpt::test::write_file(dir.file("a.txt"), "alpha\n%\nbeta\n%\ngamma\n");
  PrepareOptions options = options_for(dir, {dir.file("a.txt")});
  options.doc_delimiter = "%";
  options.val_fraction = 0.3;
  const PrepareSummary first = prepare_shards(options);
  const std::string before = kgpt::test::read_file(first.train_shards[0]);

  kgpt::test::write_file(dir.file("a.txt"), "changed\n%\ntext\n");
  try {
    prepare_shards(options);
    FAIL("existing shards were overwritten");
  } catch (const kgpt::InputError& e) {
    CHECK(std::string(e.what()).find("pass --force to replace them") != std::string::npos);
    CHECK(std::string(e.what()).rfind(dir.file("out/t_train_000000.bin") + ":", 0) == 0);
  }
  CHECK(kgpt::test::read_file(first.train_shards[0]) == before);

  options.force = true;
  const PrepareSummary second = prepare_shards(options);
  CHECK(documents_of(second.train_shards) == std::vector<std::string>{"text\n"});

  PrepareOptions missing = options_for(dir, {dir.file("a.txt"), dir.file("nope.txt")});
  missing.out_dir = dir.file("never");
  CHECK_THROWS_WITH(prepare_shards(missing), dir.file("nope.txt") + ": cannot read input file: No such file or directory");
  CHECK_FALSE(kgpt::test::file_exists(dir.file("never")));

  PrepareOptions bad_fraction = options_for(dir, {dir.file("a.txt")});
  bad_fraction.val_fraction = 1.0;
  CHECK_THROWS_WITH(prepare_shards(bad_fraction), Catch::Contains("--val-fraction 1.0 must be in [0, 1)"));

  kgpt::test::write_file(dir.file("one.txt"), "only one document");
  PrepareOptions all_val = options_for(dir, {dir.file("one.txt")});
  all_val.out_dir = dir.file("all_val");
  all_val.val_fraction = 0.5;
  all_val.val_split = ValSplit::documents;
  CHECK_THROWS_WITH(prepare_shards(all_val), Catch::Contains("went to the val split") &&
                                                 Catch::Contains("--val-split tail"));

  PrepareOptions both = options_for(dir, {dir.file("one.txt")});
  both.doc_delimiter = "%";
  both.paragraphs = true;
  CHECK_THROWS_WITH(prepare_shards(both), Catch::Contains("--doc-delimiter TEXT or --paragraphs, not both"));
}

TEST_CASE("prepare takes one file's val split from its end, by bytes", "[data][prepare]") {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "sentence " + std::to_string(i) + " of the only file.\n";
  kgpt::test::write_file(dir.file("mine.txt"), text);
  for (const std::size_t chunk_cut : {std::size_t(0), std::size_t(1)}) {
    // One file, nothing to separate documents: `auto` takes the tail, 10% of the bytes.
    PrepareOptions options = options_for(dir, {dir.file("mine.txt")});
    options.force = true;
    if (chunk_cut == 1) options.val_fraction = 0.37;  // a cut that falls inside a 64 KiB read
    const PrepareSummary summary = prepare_shards(options);
    const double f = options.val_fraction;
    const std::size_t val_bytes = static_cast<std::size_t>(std::llround(static_cast<double>(text.size()) * f));
    CHECK(summary.val_split == ValSplit::tail);
    CHECK(summary.documents == 1);
    CHECK(summary.val_documents == 1);  // the document cut at the tail goes on in val
    CHECK(summary.val_bytes == val_bytes);
    const auto train = documents_of(summary.train_shards);
    const auto val = documents_of(summary.val_shards);
    REQUIRE(train.size() == 1);
    REQUIRE(val.size() == 1);
    CHECK(train[0] == text.substr(0, text.size() - val_bytes));
    CHECK(val[0] == text.substr(text.size() - val_bytes));
    CHECK(kgpt::test::read_file(summary.meta_file).find("val_split: tail") != std::string::npos);
  }
}

TEST_CASE("prepare separates documents at blank lines, and takes a tail across files and documents", "[data][prepare]") {
  TempDir dir;
  kgpt::test::write_file(dir.file("a.txt"), "one\nstill one\n\n\n  \ntwo\n\t\nthree\n");
  kgpt::test::write_file(dir.file("b.txt"), "four\n\nfive, a longer one\n");
  PrepareOptions paragraphs = options_for(dir, {dir.file("a.txt"), dir.file("b.txt")});
  paragraphs.paragraphs = true;
  paragraphs.val_fraction = 0.4;
  const PrepareSummary by_documents = prepare_shards(paragraphs);
  // Several documents: `auto` splits by documents (the first and the third of five to val).
  CHECK(by_documents.val_split == ValSplit::documents);
  CHECK(documents_of(by_documents.val_shards) == std::vector<std::string>{"one\nstill one\n", "three\n"});
  CHECK(documents_of(by_documents.train_shards) == std::vector<std::string>{"two\n", "four\n", "five, a longer one\n"});

  // The tail of the same 56 bytes. Its last 19 are b.txt's last line, a document of its own: the cut
  // falls between documents.
  PrepareOptions tail = paragraphs;
  tail.val_split = ValSplit::tail;
  tail.force = true;
  tail.val_fraction = 19.0 / 56.0;
  const PrepareSummary between = prepare_shards(tail);
  CHECK(between.bytes_read == 56);
  CHECK(documents_of(between.train_shards) == std::vector<std::string>{"one\nstill one\n", "two\n", "three\n", "four\n"});
  CHECK(documents_of(between.val_shards) == std::vector<std::string>{"five, a longer one\n"});
  CHECK(between.val_documents == 1);
  // The last 52: the cut falls after the first line of the first document, which goes on in val.
  tail.val_fraction = 52.0 / 56.0;
  const PrepareSummary inside = prepare_shards(tail);
  CHECK(documents_of(inside.train_shards) == std::vector<std::string>{"one\n"});
  CHECK(documents_of(inside.val_shards) ==
        std::vector<std::string>{"still one\n", "two\n", "three\n", "four\n", "five, a longer one\n"});
  CHECK(inside.val_documents == 5);
  CHECK(inside.documents == 5);
}
