// The windows of the val split's evaluation (train.eval_stride), from their definition.
#include <catch2/catch.hpp>

#include <vector>

#include "inference/evaluator.hpp"

using kgpt::inference::eval_windows;
using kgpt::inference::EvalWindow;

TEST_CASE("evaluation windows score every val position once, each with the context its stride allows", "[eval]") {
  for (const int seq : {4, 16}) {
    for (const std::size_t targets : {std::size_t(seq), std::size_t(3 * seq), std::size_t(10 * seq)}) {
      for (const int stride : {0, 1, 3, seq - 1, seq}) {
        INFO("seq " << seq << ", " << targets << " positions, stride " << stride);
        const std::vector<EvalWindow> windows = eval_windows(targets, seq, stride);
        std::vector<int> scored(targets, 0);
        for (std::size_t k = 0; k < windows.size(); ++k) {
          const EvalWindow& w = windows[k];
          REQUIRE(w.start + seq <= targets);
          REQUIRE(w.scored_from >= 0);
          REQUIRE(w.scored_from < seq);
          // Every scored position but the first window's sees at least seq - stride earlier tokens.
          if (k > 0) CHECK(w.scored_from >= seq - (stride == 0 ? seq : stride));
          for (int t = w.scored_from; t < seq; ++t) ++scored[w.start + t];
        }
        CHECK(windows.front().start == 0);
        CHECK(windows.front().scored_from == 0);
        CHECK(windows.back().start + seq == targets);
        for (std::size_t p = 0; p < targets; ++p) REQUIRE(scored[p] == 1);
        if (stride == 0 || stride == seq) {
          CHECK(windows.size() == targets / seq);
          for (const EvalWindow& w : windows) CHECK(w.scored_from == 0);
        }
      }
    }
  }
  // The last window ends where the split does and scores what the one before left.
  const auto windows = eval_windows(40, 16, 10);
  REQUIRE(windows.size() == 4);
  const std::size_t starts[] = {0, 10, 20, 24};
  const int scored_from[] = {0, 6, 6, 12};
  for (int k = 0; k < 4; ++k) {
    CHECK(windows[k].start == starts[k]);
    CHECK(windows[k].scored_from == scored_from[k]);
  }
}
