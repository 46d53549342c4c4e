#include <catch2/catch.hpp>

#include <cmath>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/rope.hpp"

using namespace kgpt;

TEST_CASE("rope rotates half-split pairs by position-dependent angles", "[model][rope]") {
  const int b = 2, h = 3, t = 5, d = 8;
  Matrix<double> cos_table("cos", 7, d / 2), sin_table("sin", 7, d / 2);
  model::ops::rope_tables(cos_table, sin_table, 10000.0);
  Tensor4<double> x("x", b, h, t, d), y("y", b, h, t, d);
  random::fill_normal(x, 4, 0, 1.0);
  model::ops::rope_forward<double>(ExecSpace(), cos_table, sin_table, x, y);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (int i = 0; i < b; ++i)
    for (int j = 0; j < h; ++j)
      for (int k = 0; k < t; ++k) {
        double norm_x = 0, norm_y = 0;
        for (int l = 0; l < d / 2; ++l) {
          const double angle = k * std::pow(10000.0, -2.0 * l / d);
          const double x1 = hx(i, j, k, l), x2 = hx(i, j, k, l + d / 2);
          CHECK(hy(i, j, k, l) == Approx(x1 * std::cos(angle) + x2 * std::sin(angle)).epsilon(1e-12));
          CHECK(hy(i, j, k, l + d / 2) == Approx(-x1 * std::sin(angle) + x2 * std::cos(angle)).epsilon(1e-12));
        }
        for (int l = 0; l < d; ++l) {
          norm_x += hx(i, j, k, l) * hx(i, j, k, l);
          norm_y += hy(i, j, k, l) * hy(i, j, k, l);
        }
        CHECK(norm_y == Approx(norm_x).epsilon(1e-12));  // a rotation keeps the norm
        if (k == 0) {
          for (int l = 0; l < d; ++l) CHECK(hy(i, j, k, l) == hx(i, j, k, l));  // position 0: no rotation
        }
      }
  // In place gives the same result.
  model::ops::rope_forward<double>(ExecSpace(), cos_table, sin_table, x, x);
  Kokkos::deep_copy(hx, x);
  for (std::size_t n = 0; n < x.span(); ++n) CHECK(hx.data()[n] == hy.data()[n]);
}

TEST_CASE("rope backward matches finite differences", "[model][rope][gradcheck]") {
  Matrix<double> cos_table("cos", 6, 3), sin_table("sin", 6, 3);
  model::ops::rope_tables(cos_table, sin_table, 500.0);
  Tensor4<double> x("x", 1, 2, 6, 6), y("y", 1, 2, 6, 6), dx("dx", 1, 2, 6, 6);
  random::fill_normal(x, 5, 0, 1.0);
  const auto w = test::random_like("w", y, 6);
  auto loss = [&] {
    model::ops::rope_forward<double>(ExecSpace(), cos_table, sin_table, x, y);
    return test::dot(w, y);
  };
  model::ops::rope_backward<double>(ExecSpace(), cos_table, sin_table, w, dx);
  test::check_gradient("rope dx", x, dx, loss);
}

TEST_CASE("rope in float agrees with double", "[model][rope][float]") {
  const int b = 2, h = 3, t = 64, d = 16;
  Tensor4<double> x("x", b, h, t, d), dy("dy", b, h, t, d);
  random::fill_normal(x, 5, 0, 2.0);
  random::fill_normal(dy, 5, 1, 1.0);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    Matrix<T> cos_table("cos", t, d / 2), sin_table("sin", t, d / 2);
    model::ops::rope_tables(cos_table, sin_table, 10000.0);
    const auto xt = test::converted<Tensor4<T>>("x", x);
    const auto dyt = test::converted<Tensor4<T>>("dy", dy);
    Tensor4<T> y("y", b, h, t, d), dx("dx", b, h, t, d);
    model::ops::rope_forward<T>(ExecSpace(), cos_table, sin_table, xt, y);
    model::ops::rope_backward<T>(ExecSpace(), cos_table, sin_table, dyt, dx);
    return std::make_pair(y, dx);
  };
  const auto [y64, dx64] = run(0.0);
  const auto [y32, dx32] = run(0.0f);
  // A rotation: each output is two products of rounded inputs and rounded table entries.
  CHECK(test::max_difference(y32, y64) < 1e-6);
  CHECK(test::max_difference(dx32, dx64) < 1e-6);
}
