#include "data/dataset_check.hpp"

#include <algorithm>
#include <fstream>

#include "core/error.hpp"
#include "data/deck_tokenizer.hpp"
#include "data/shard.hpp"
#include "parallel/watchdog.hpp"

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

std::vector<std::uint16_t> load_val_tokens(const config::ResolvedDeck& deck) {
  const auto files = find_shards(deck.config.data.val_files);
  std::vector<std::uint16_t> tokens;
  for (const auto& file : files) {
    parallel::progress_detail("reading " + file);
    std::vector<std::uint16_t> shard;
    try {
      shard = read_shard(file, deck.config.model.vocab_size);
    } catch (const InputError& e) {
      throw InputError(deck.where("data.val_files") + ": " + e.what());
    }
    tokens.insert(tokens.end(), shard.begin(), shard.end());
  }
  parallel::progress_detail("");
  const std::size_t seq = deck.config.train.seq_len;
  std::size_t usable = tokens.empty() ? 0 : (tokens.size() - 1) / seq * seq;
  if (deck.config.train.val_tokens > 0) {
    usable = std::min<std::size_t>(usable, static_cast<std::size_t>(deck.config.train.val_tokens) / seq * seq);
  }
  if (usable == 0) {
    throw InputError(deck.where("data.val_files") + ": the val split holds fewer than seq_len + 1 = " +
                     std::to_string(seq + 1) + " tokens");
  }
  tokens.resize(usable + 1);
  return tokens;
}

DatasetFiles check_dataset(const config::ResolvedDeck& deck) {
  const config::DataConfig& data = deck.config.data;
  DatasetFiles result;
  result.train = check_split(deck, "data.train_files", data.train_files);
  result.val = check_split(deck, "data.val_files", data.val_files);
  if (data.tokenizer != config::Tokenizer::byte) {
    if (!std::ifstream(data.vocab_file)) {
      throw InputError(deck.where("data.vocab_file") + ": cannot open '" + data.vocab_file + "'");
    }
    // Reading it finds a file that is not a vocabulary of its kind, or one with more ids than the model.
    try {
      deck_token_table(data, deck.config.model.vocab_size);
    } catch (const InputError& e) {
      throw InputError(deck.where("data.vocab_file") + ": " + e.what());
    }
  }
  // What training reads before its first step completes: the whole val split and the first shard.
  // After the tokenizer, whose size explains ids beyond model.vocab_size better than the ids do.
  result.val_evaluated = load_val_tokens(deck).size() - 1;
  try {
    read_shard(result.train.files.front(), deck.config.model.vocab_size);
  } catch (const InputError& e) {
    throw InputError(deck.where("data.train_files") + ": " + e.what());
  }
  return result;
}

}  // namespace kgpt::data
