#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "config/batch_plan.hpp"
#include "config/config.hpp"
#include "data/loader.hpp"
#include "data/shard.hpp"
#include "data/token_stream.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt::data;
using kgpt::test::TempDir;

namespace {

// Shards whose token at stream position p is p, so every token names its own position.
std::vector<std::string> positional_shards(const TempDir& dir, const std::vector<int>& sizes) {
  std::vector<std::string> files;
  int next = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    std::vector<std::uint16_t> tokens;
    for (int i = 0; i < sizes[s]; ++i) tokens.push_back(static_cast<std::uint16_t>(next++));
    files.push_back(dir.file("p_train_00000" + std::to_string(s) + ".bin"));
    write_shard(files.back(), tokens);
  }
  return files;
}

}  // namespace

TEST_CASE("the token stream crosses shards in order and wraps", "[data][stream]") {
  TempDir dir;
  const auto files = positional_shards(dir, {5, 7, 3});  // 15 tokens: 0..14
  TokenStream stream(files, 65536);
  CHECK(stream.total_tokens() == 15);
  std::vector<std::uint16_t> out(20);
  stream.take(20, out.data());
  for (int i = 0; i < 20; ++i) CHECK(out[i] == i % 15);
  CHECK(stream.tokens_consumed() == 20);

  // skip + take equals one take; seek lands where the same number of tokens would.
  TokenStream a(files, 65536), b(files, 65536);
  std::vector<std::uint16_t> whole(40), part(9);
  a.take(40, whole.data());
  b.skip(31);
  b.take(9, part.data());
  CHECK(std::equal(part.begin(), part.end(), whole.begin() + 31));
  TokenStream c(files, 65536);
  c.seek(33);
  c.take(5, part.data());
  CHECK(std::equal(part.begin(), part.begin() + 5, whole.begin() + 33));
  CHECK(c.tokens_consumed() == 38);
}

TEST_CASE("ranks take disjoint spans that tile the world-size-1 stream", "[data][loader]") {
  TempDir dir;
  const auto files = positional_shards(dir, {400, 300, 200});  // 900 tokens, so 5 steps wrap
  const int total_positions = 900;
  kgpt::config::TrainConfig train;
  train.seq_len = 4;
  train.global_batch_tokens = 256;
  train.accum_total = 8;
  const int steps = 5;

  // For each world size: step -> (first token -> span) over all ranks and micro-steps.
  std::map<int, std::vector<std::map<std::uint64_t, TokenBatch>>> by_world;
  for (int world : {1, 2, 4, 8}) {
    kgpt::config::BatchPlan plan;
    REQUIRE(kgpt::config::plan_batch(train, world, plan).empty());
    REQUIRE(plan.local_tokens == 32);
    std::vector<std::map<std::uint64_t, TokenBatch>> spans(steps);
    for (int rank = 0; rank < world; ++rank) {
      DistributedLoader loader(TokenStream(files, 65536), rank, world, plan.local_tokens, train.seq_len);
      for (int step = 0; step < steps; ++step) {
        for (int micro = 0; micro < plan.grad_accum_steps; ++micro) {
          TokenBatch batch;
          loader.next(batch);
          REQUIRE(batch.sequences == 8);
          REQUIRE(batch.seq_len == 4);
          REQUIRE(batch.inputs.size() == 32);
          // Rank r's span starts at r * (local + 1) within its micro-step's chunk.
          const std::uint64_t chunk = static_cast<std::uint64_t>(step * plan.grad_accum_steps + micro) * 33 * world;
          CHECK(batch.first_token == chunk + static_cast<std::uint64_t>(rank) * 33);
          REQUIRE(spans[step].count(batch.first_token) == 0);  // no overlap between ranks
          spans[step][batch.first_token] = batch;
        }
      }
    }
    by_world[world] = spans;
  }

  for (int world : {1, 2, 4, 8}) {
    INFO("world size " << world);
    for (int step = 0; step < steps; ++step) {
      const auto& spans = by_world[world][step];
      // Per optimizer step: 8 spans of 33 tokens, contiguous from step * 264.
      REQUIRE(spans.size() == 8);
      std::uint64_t expected_start = static_cast<std::uint64_t>(step) * 264;
      for (const auto& [first, batch] : spans) {
        CHECK(first == expected_start);
        expected_start += 33;
        for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
          CHECK(batch.inputs[i] == static_cast<int>((first + i) % total_positions));
          CHECK(batch.targets[i] == static_cast<int>((first + i + 1) % total_positions));
        }
      }
      // The same tokens in the same order as world size 1.
      auto one = by_world[1][step].begin();
      for (const auto& [first, batch] : spans) {
        CHECK(first == one->first);
        CHECK(batch.inputs == one->second.inputs);
        CHECK(batch.targets == one->second.targets);
        ++one;
      }
    }
  }
}

TEST_CASE("the loader refuses impossible splits", "[data][loader]") {
  TempDir dir;
  const auto files = positional_shards(dir, {100});
  CHECK_THROWS_WITH(DistributedLoader(TokenStream(files, 65536), 2, 2, 32, 4), Catch::Contains("rank 2 is outside world size 2"));
  CHECK_THROWS_WITH(DistributedLoader(TokenStream(files, 65536), 0, 1, 30, 4), Catch::Contains("multiple of seq_len"));
}
