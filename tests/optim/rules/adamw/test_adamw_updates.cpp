// Adam(W)'s kernel against values computed by hand (rules/adamw/).
#include <catch2/catch.hpp>

#include <cmath>

#include "optim/rules/adamw/updates.hpp"

using namespace kgpt;

TEST_CASE("Adam and AdamW steps against hand-computed values", "[optim][adam]") {
  Vector<double> p("p", 2), g("g", 2), m("m", 2), v("v", 2);
  auto hp = Kokkos::create_mirror_view(p);
  auto hg = Kokkos::create_mirror_view(g);
  hp(0) = 1.0, hp(1) = -2.0, hg(0) = 0.5, hg(1) = -0.1;
  Kokkos::deep_copy(p, hp);
  Kokkos::deep_copy(g, hg);
  optim::AdamSettings s;
  s.lr = 0.1, s.beta1 = 0.9, s.beta2 = 0.95, s.eps = 1e-8;
  // Step 1: m = 0.1 g, v = 0.05 g^2, m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps).
  optim::adam_update<double>(ExecSpace(), p, g, m, v, s, 1);
  Kokkos::deep_copy(hp, p);
  CHECK(hp(0) == Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
  CHECK(hp(1) == Approx(-2.0 + 0.1 * 0.1 / (0.1 + 1e-8)).epsilon(1e-14));
  // Step 2 with the same gradient, written out for element 0.
  const double p1 = hp(0);
  optim::adam_update<double>(ExecSpace(), p, g, m, v, s, 2);
  Kokkos::deep_copy(hp, p);
  const double m2 = 0.9 * 0.05 + 0.1 * 0.5, v2 = 0.95 * 0.0125 + 0.05 * 0.25;
  const double expected = p1 - 0.1 * (m2 / (1 - 0.81)) / (std::sqrt(v2 / (1 - 0.9025)) + 1e-8);
  CHECK(hp(0) == Approx(expected).epsilon(1e-14));

  // AdamW: decoupled decay first, p = p (1 - lr wd), then the Adam step.
  Vector<double> p2("p2", 1), g2("g2", 1), m2v("m2", 1), v2v("v2", 1);
  Kokkos::deep_copy(p2, 3.0);
  Kokkos::deep_copy(g2, -0.2);
  s.weight_decay = 0.5;
  optim::adam_update<double>(ExecSpace(), p2, g2, m2v, v2v, s, 1);
  auto hp2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p2);
  CHECK(hp2(0) == Approx(3.0 * (1 - 0.1 * 0.5) + 0.1 * 0.2 / (0.2 + 1e-8)).epsilon(1e-14));
}
