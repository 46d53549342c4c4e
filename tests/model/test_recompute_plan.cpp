#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "config/config.hpp"
#include "model/recompute.hpp"

using namespace kgpt;

// The plan's arithmetic against its definition, built block by block: blocks 0, N, 2N, ... are
// rebuilt and share one working set; every other block has its own; sets are numbered in the order
// blocks first use them.
TEST_CASE("the recompute plan numbers working sets as its definition says", "[model][recompute]") {
  for (int layers = 1; layers <= 9; ++layers) {
    for (int every = 0; every <= layers; ++every) {  // 0: train.recompute: none
      config::ModelConfig m;
      m.n_layer = layers;
      m.recompute = every == 0 ? config::Recompute::none : config::Recompute::block;
      m.recompute_every = every == 0 ? 1 : every;
      const model::RecomputePlan plan(m);
      INFO(layers << " layers, recompute_every " << every);
      std::map<int, int> set_of_first_user;  // the working set each first user starts, by the definition
      int next = 0, shared = -1, rebuilt = 0;
      for (int l = 0; l < layers; ++l) {
        const bool is_rebuilt = every > 0 && l % every == 0;
        CHECK(plan.rebuilt(l) == is_rebuilt);
        int expected;
        if (is_rebuilt) {
          ++rebuilt;
          if (shared < 0) shared = next++;
          expected = shared;
        } else {
          expected = next++;
        }
        CHECK(plan.set(l) == expected);
        CHECK(plan.first_user(l) == (!is_rebuilt || l == 0));
      }
      CHECK(plan.sets() == next);
      CHECK(plan.rebuilt_blocks() == rebuilt);
      // Every set has users, and exactly the blocks that map to it.
      for (int s = 0; s < plan.sets(); ++s) {
        const std::vector<int> users = plan.users(s);
        REQUIRE_FALSE(users.empty());
        for (int l : users) CHECK(plan.set(l) == s);
      }
    }
  }
}
