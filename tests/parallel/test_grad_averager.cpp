#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "parallel/grad_averager.hpp"

using namespace kgpt;
using Range = std::pair<std::size_t, std::size_t>;

namespace {

// A transport that records the ranges the bucket logic hands it, in order, and the waits.
class RecordingAverager final : public parallel::GradientAverager<float> {
 public:
  RecordingAverager(const Vector<float>& grads, parallel::AveragingSettings settings, int world_size = 2)
      : GradientAverager<float>(grads, world_size, settings), base_(grads.data()) {}
  double backward_scale_factor() const override { return 0.5; }
  const char* transport() const override { return "recording"; }
  void sum_scalar(const ExecSpace&, double*) override {}

  std::vector<Range> sent;
  std::vector<int> roots;
  int waits = 0, gathers = 0;

 protected:
  void start(const ExecSpace&, float* data, std::size_t count, int root) override {
    const auto begin = static_cast<std::size_t>(data - base_);
    sent.emplace_back(begin, begin + count);
    roots.push_back(root);
  }
  int gather(const ExecSpace&, const Vector<float>&, const std::vector<parallel::OwnedSpan>& owners) override {
    ++gathers;
    return static_cast<int>(owners.size());
  }
  int combine_bytes(const ExecSpace&, unsigned char*, std::size_t) override { return 1; }
  void wait(const ExecSpace&) override { ++waits; }

 private:
  const float* base_;
};

parallel::AveragingSettings buckets_of(std::size_t elements, bool overlap = true) {
  parallel::AveragingSettings s;
  s.bucket_elements = elements;
  s.overlap = overlap;
  return s;
}

// Every element of [0, size) appears in exactly one range.
bool covers_once(std::vector<Range> ranges, std::size_t size) {
  std::sort(ranges.begin(), ranges.end());
  std::size_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b != at || e <= b) return false;
    at = e;
  }
  return at == size;
}

}  // namespace

TEST_CASE("gradient buckets: touching ranges merge, full buckets start, the rest goes in finish",
          "[parallel][averager]") {
  Vector<float> grads("grads", 100);
  RecordingAverager a(grads, buckets_of(10));
  const ExecSpace exec;
  a.begin_step();
  a.begin_micro_step(true);
  a.ready(exec, 80, 100);  // 20 elements: a bucket on its own
  a.ready(exec, 70, 80);   // exactly 10
  a.ready(exec, 60, 65);   // 5: pending
  a.ready(exec, 65, 70);   // touches the pending end: [60, 70) is full
  a.ready(exec, 50, 52);   // pending
  a.ready(exec, 30, 40);   // does not touch [50, 52): that one goes, then [30, 40) is full
  CHECK(a.sent == std::vector<Range>{{80, 100}, {70, 80}, {60, 70}, {50, 52}, {30, 40}});
  CHECK(a.waits == 0);
  a.finish(exec);
  // The ranges nobody reported, in buffer order.
  CHECK(a.sent == std::vector<Range>{{80, 100}, {70, 80}, {60, 70}, {50, 52}, {30, 40}, {0, 30}, {40, 50}, {52, 60}});
  CHECK(covers_once(a.sent, 100));
  CHECK(a.waits == 1);
  CHECK(a.step_counters().calls == 8);
  CHECK(a.step_counters().bytes == 100 * static_cast<long long>(sizeof(float)));
  CHECK(a.step_counters().calls_before_last_micro_step == 0);
}

TEST_CASE("gradient buckets: a range that ends where the pending one starts merges on the left",
          "[parallel][averager]") {
  Vector<float> grads("grads", 64);
  RecordingAverager a(grads, buckets_of(25));
  const ExecSpace exec;
  a.begin_step();
  a.begin_micro_step(true);
  a.ready(exec, 40, 52);
  a.ready(exec, 30, 40);  // [30, 52): 22, still pending
  CHECK(a.sent.empty());
  a.ready(exec, 20, 30);  // [20, 52): 32, sent as one bucket
  CHECK(a.sent == std::vector<Range>{{20, 52}});
  a.finish(exec);
  CHECK(a.sent == std::vector<Range>{{20, 52}, {0, 20}, {52, 64}});
  CHECK(covers_once(a.sent, 64));
}

TEST_CASE("gradient buckets: nothing before the last micro-step, one call without overlap", "[parallel][averager]") {
  Vector<float> grads("grads", 50);
  const ExecSpace exec;
  SECTION("earlier micro-steps report ranges that are not final: ignored") {
    RecordingAverager a(grads, buckets_of(5));
    a.begin_step();
    a.begin_micro_step(false);
    a.ready(exec, 40, 50);
    a.ready(exec, 30, 40);
    CHECK(a.sent.empty());
    a.begin_micro_step(true);
    a.ready(exec, 40, 50);
    a.finish(exec);
    CHECK(a.sent == std::vector<Range>{{40, 50}, {0, 40}});
    CHECK(a.step_counters().calls_before_last_micro_step == 0);
  }
  SECTION("overlap off: the whole buffer in one call after the backward") {
    RecordingAverager a(grads, buckets_of(5, false));
    a.begin_step();
    a.begin_micro_step(true);
    a.ready(exec, 40, 50);
    CHECK(a.sent.empty());
    a.finish(exec);
    CHECK(a.sent == std::vector<Range>{{0, 50}});
    CHECK(a.step_counters().calls == 1);
  }
  SECTION("a new step starts from nothing") {
    RecordingAverager a(grads, buckets_of(5));
    a.begin_step();
    a.begin_micro_step(true);
    a.ready(exec, 45, 50);
    a.finish(exec);
    a.sent.clear();
    a.begin_step();
    CHECK(a.step_counters().calls == 0);
    a.begin_micro_step(true);
    a.finish(exec);
    CHECK(a.sent == std::vector<Range>{{0, 50}});
  }
}

TEST_CASE("a world of one rank averages nothing and counts nothing", "[parallel][averager]") {
  Vector<float> grads("grads", 50);
  const auto a = parallel::make_gradient_averager<float>(ExecSpace(), grads, 1, buckets_of(5));
  CHECK(std::string(a->transport()) == "none");
  CHECK(a->backward_scale_factor() == 1.0);
  a->begin_step();
  a->begin_micro_step(true);
  a->ready(ExecSpace(), 0, 50);
  a->finish(ExecSpace());
  CHECK(a->step_counters().calls == 0);
  CHECK(a->step_counters().bytes == 0);
}

TEST_CASE("zero stage 1: each bucket is reduced piece by piece to the rank that owns the piece",
          "[parallel][averager]") {
  Vector<float> grads("grads", 100);
  const ExecSpace exec;
  parallel::AveragingSettings settings = buckets_of(30);
  settings.owners = {{0, 45}, {45, 70}, {70, 70}, {70, 100}};  // rank 2 owns nothing
  RecordingAverager a(grads, settings, 4);
  a.begin_step();
  a.begin_micro_step(true);
  a.ready(exec, 60, 100);  // crosses the boundary of ranks 1 and 3
  CHECK(a.sent == std::vector<Range>{{60, 70}, {70, 100}});
  CHECK(a.roots == std::vector<int>{1, 3});
  a.finish(exec);  // [0, 60) was never reported: ranks 0 and 1
  CHECK(a.sent == std::vector<Range>{{60, 70}, {70, 100}, {0, 45}, {45, 60}});
  CHECK(a.roots == std::vector<int>{1, 3, 0, 1});
  CHECK(covers_once(a.sent, 100));
  CHECK(a.step_counters().calls == 4);
  CHECK(a.step_counters().bytes == 100 * static_cast<long long>(sizeof(float)));
  CHECK(a.step_counters().gather_calls == 0);
  Vector<float> values("values", 100);
  a.gather_parameters(exec, values);
  CHECK(a.gathers == 1);
  CHECK(a.step_counters().gather_calls == 4);
  CHECK(a.step_counters().gather_bytes == 100 * static_cast<long long>(sizeof(float)));
  a.begin_step();
  CHECK(a.step_counters().gather_calls == 0);
  Vector<float> other("other", 99);
  CHECK_THROWS_WITH(a.gather_parameters(exec, other), Catch::Contains("differs from the gradients"));
}

TEST_CASE("zero stage 1: owned spans must tile the buffer, one per rank", "[parallel][averager]") {
  Vector<float> grads("grads", 100);
  parallel::AveragingSettings settings = buckets_of(30);
  settings.owners = {{0, 40}, {50, 100}};  // a gap
  CHECK_THROWS_WITH(RecordingAverager(grads, settings), Catch::Contains("do not tile"));
  settings.owners = {{0, 40}, {40, 90}};  // short of the end
  CHECK_THROWS_WITH(RecordingAverager(grads, settings), Catch::Contains("the owned spans end at 90, the buffer at 100"));
  settings.owners = {{0, 100}};  // one span for two ranks
  CHECK_THROWS_WITH(RecordingAverager(grads, settings), Catch::Contains("1 owned spans for 2 ranks"));
  RecordingAverager plain(grads, buckets_of(30));
  CHECK_THROWS_WITH(plain.gather_parameters(ExecSpace(), grads), Catch::Contains("without owned spans"));
}
