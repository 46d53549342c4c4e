#include "data/dataset_check.hpp"

#include <fstream>

#include "core/error.hpp"
#include "data/sentencepiece.hpp"
#include "data/shard.hpp"

namespace kgpt::data {

namespace {

SplitFiles check_split(const config::ResolvedDeck& deck, const std::string& key, const std::string& pattern) {
  SplitFiles split;
  split.files = find_shards(pattern);
  if (split.files.empty()) {
    throw InputError(deck.where(key) + ": no file matches '" + pattern +
                     "' (relative paths are relative to the working directory; `kgpt prepare` makes shards)");
  }
  std::vector<std::string> problems;
  for (const auto& file : split.files) {
    try {
      const ShardHeader header = read_shard_header(file);
      if (header.token_count == 0) throw InputError(file + ": shard holds no tokens");
      split.tokens += header.token_count;
    } catch (const InputError& e) {
      problems.push_back(deck.where(key) + ": " + e.what());
    }
  }
  if (!problems.empty()) throw InputError(problems);
  return split;
}

}  // namespace

DatasetFiles check_dataset(const config::ResolvedDeck& deck) {
  const config::DataConfig& data = deck.config.data;
  DatasetFiles result;
  result.train = check_split(deck, "data.train_files", data.train_files);
  result.val = check_split(deck, "data.val_files", data.val_files);
  if (data.tokenizer == config::Tokenizer::sentencepiece) {
    if (!std::ifstream(data.vocab_file)) {
      throw InputError(deck.where("data.vocab_file") + ": cannot open '" + data.vocab_file + "'");
    }
    // Reading it finds a file that is not a model or vocabulary, or one with more pieces than ids.
    try {
      load_sentencepiece_table(data.vocab_file, deck.config.model.vocab_size);
    } catch (const InputError& e) {
      throw InputError(deck.where("data.vocab_file") + ": " + e.what());
    }
  }
  return result;
}

}  // namespace kgpt::data
