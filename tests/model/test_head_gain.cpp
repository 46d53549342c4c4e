#include <catch2/catch.hpp>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/head_gain.hpp"

#include <tuple>

using namespace kgpt;

TEST_CASE("head gain scales each head and its backward matches finite differences", "[model][head_gain]") {
  Tensor4<double> x("x", 2, 3, 4, 5), y("y", 2, 3, 4, 5), dx("dx", 2, 3, 4, 5);
  Vector<double> g("g", 3), dg("dg", 3);
  Matrix<double> slice_sums("slice_sums", 3, 2);
  random::fill_normal(x, 9, 0, 1.0);
  random::fill_normal(g, 9, 1, 1.0);
  model::ops::head_gain_forward<double>(ExecSpace(), x, g, y);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < 5; ++l) CHECK(hy(i, j, k, l) == hg(j) * hx(i, j, k, l));

  const auto w = test::random_like("w", y, 11);
  auto loss = [&] {
    model::ops::head_gain_forward<double>(ExecSpace(), x, g, y);
    return test::dot(w, y);
  };
  model::ops::head_gain_backward<double>(ExecSpace(), x, g, w, dx, dg, slice_sums);
  test::check_gradient("head_gain dx", x, dx, loss);
  test::check_gradient("head_gain dg", g, dg, loss);
  // The gain gradient accumulates.
  auto first = Kokkos::create_mirror(dg);  // a real copy: a host mirror view would alias dg
  Kokkos::deep_copy(first, dg);
  model::ops::head_gain_backward<double>(ExecSpace(), x, g, w, dx, dg, slice_sums);
  auto second = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dg);
  for (int j = 0; j < 3; ++j) CHECK(second(j) == Approx(2 * first(j)));
}

TEST_CASE("head gain in float agrees with double", "[model][head_gain][float]") {
  const int b = 3, h = 4, t = 32, d = 16;
  Tensor4<double> x("x", b, h, t, d), dy("dy", b, h, t, d);
  Vector<double> g("g", h);
  random::fill_normal(x, 12, 0, 1.0);
  random::fill_normal(dy, 12, 1, 1.0);
  random::fill_normal(g, 12, 2, 1.0);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xt = test::converted<Tensor4<T>>("x", x);
    const auto dyt = test::converted<Tensor4<T>>("dy", dy);
    const auto gt = test::converted<Vector<T>>("g", g);
    Tensor4<T> y("y", b, h, t, d), dx("dx", b, h, t, d);
    Vector<T> dg("dg", h);
    Matrix<T> slices("slices", h, b);
    model::ops::head_gain_forward<T>(ExecSpace(), xt, gt, y);
    model::ops::head_gain_backward<T>(ExecSpace(), xt, gt, dyt, dx, dg, slices);
    return std::make_tuple(y, dx, dg);
  };
  const auto [y64, dx64, dg64] = run(0.0);
  const auto [y32, dx32, dg32] = run(0.0f);
  CHECK(test::max_difference(y32, y64) < 1e-6);
  CHECK(test::max_difference(dx32, dx64) < 1e-6);
  // dg sums b t d = 1,536 products per head in float: rounding grows with the sum's length.
  CHECK(test::max_difference(dg32, dg64) < 1e-5);
}
