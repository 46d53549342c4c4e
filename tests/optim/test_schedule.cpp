#include <catch2/catch.hpp>

#include <cmath>

#include "optim/schedule.hpp"

using kgpt::config::TrainConfig;
using kgpt::optim::lr_multiplier;

TEST_CASE("constant schedule with parameter-golf's step warmdown", "[optim][schedule]") {
  TrainConfig t;
  t.iterations = 100;
  t.warmdown_iters = 20;
  CHECK(lr_multiplier(t, 0, 0) == 1.0);
  CHECK(lr_multiplier(t, 79, 0) == 1.0);
  CHECK(lr_multiplier(t, 80, 0) == 1.0);   // (100 - 80) / 20
  CHECK(lr_multiplier(t, 90, 0) == 0.5);
  CHECK(lr_multiplier(t, 99, 0) == 0.05);
  t.warmdown_iters = 0;
  CHECK(lr_multiplier(t, 99, 0) == 1.0);
}

TEST_CASE("warmdown by wall clock follows the mean step time", "[optim][schedule]") {
  TrainConfig t;
  t.iterations = 100000;
  t.warmdown_iters = 10;
  t.max_wallclock_seconds = 60;
  // 50 steps in 30 s: 0.6 s per step, so the warmdown spans the last 6 s.
  CHECK(lr_multiplier(t, 50, 30.0) == 1.0);
  CHECK(lr_multiplier(t, 90, 54.0) == Approx(1.0));
  CHECK(lr_multiplier(t, 95, 57.0) == Approx(0.5));
  CHECK(lr_multiplier(t, 100, 60.0) == 0.0);
  CHECK(lr_multiplier(t, 101, 61.0) == 0.0);
}

TEST_CASE("linear warmup then cosine to the floor", "[optim][schedule]") {
  TrainConfig t;
  t.iterations = 110;
  t.warmup_steps = 10;
  t.warmdown_iters = 0;
  t.schedule = kgpt::config::Schedule::cosine;
  t.min_lr_fraction = 0.1;
  CHECK(lr_multiplier(t, 0, 0) == Approx(1.0 / 11));
  CHECK(lr_multiplier(t, 9, 0) == Approx(10.0 / 11));
  CHECK(lr_multiplier(t, 10, 0) == Approx(1.0));
  CHECK(lr_multiplier(t, 60, 0) == Approx(0.1 + 0.9 * 0.5));
  CHECK(lr_multiplier(t, 110, 0) == Approx(0.1));
  CHECK(lr_multiplier(t, 500, 0) == Approx(0.1));
}
