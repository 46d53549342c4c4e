#include <catch2/catch.hpp>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/elementwise.hpp"

#include <tuple>

using namespace kgpt;

TEST_CASE("residual mix backward matches finite differences", "[model][elementwise][gradcheck]") {
  Matrix<double> x("x", 5, 4), x0("x0", 5, 4), mix("mix", 2, 4), y("y", 5, 4);
  Matrix<double> dx("dx", 5, 4), dx0("dx0", 5, 4), dmix("dmix", 2, 4);
  random::fill_normal(x, 70, 0, 1.0);
  random::fill_normal(x0, 70, 1, 1.0);
  random::fill_normal(mix, 70, 2, 1.0);
  const auto w = test::random_like("w", y, 71);
  auto loss = [&] {
    model::ops::residual_mix_forward<double>(ExecSpace(), x, x0, mix, y);
    return test::dot(w, y);
  };
  loss();
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hx0 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x0);
  auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mix);
  CHECK(hy(3, 2) == hm(0, 2) * hx(3, 2) + hm(1, 2) * hx0(3, 2));
  model::ops::residual_mix_backward<double>(ExecSpace(), x, x0, mix, w, dx, dx0, dmix);
  test::check_gradient("residual_mix dx", x, dx, loss);
  test::check_gradient("residual_mix dx0", x0, dx0, loss);
  test::check_gradient("residual_mix dmix", mix, dmix, loss);
}

TEST_CASE("scaled residual add backward matches finite differences", "[model][elementwise][gradcheck]") {
  Matrix<double> x_in("x_in", 5, 4), x("x", 5, 4), y("y", 5, 4), dy("dy", 5, 4);
  Vector<double> s("s", 4), ds("ds", 4);
  random::fill_normal(x_in, 80, 0, 1.0);
  random::fill_normal(y, 80, 1, 1.0);
  random::fill_normal(s, 80, 2, 1.0);
  const auto w = test::random_like("w", x, 81);
  auto loss = [&] {
    Kokkos::deep_copy(x, x_in);
    model::ops::scaled_add_forward<double>(ExecSpace(), y, s, x);
    return test::dot(w, x);
  };
  loss();
  model::ops::scaled_add_backward<double>(ExecSpace(), y, s, w, dy, ds);
  test::check_gradient("scaled_add dy", y, dy, loss);
  test::check_gradient("scaled_add ds", s, ds, loss);
}

TEST_CASE("relu^2 and tanh-GELU match their definitions and finite differences", "[model][activations][gradcheck]") {
  Matrix<double> x("x", 6, 7), y("y", 6, 7), dx("dx", 6, 7);
  random::fill_normal(x, 90, 0, 1.5);
  const auto w = test::random_like("w", y, 91);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);

  model::ops::relu_squared_forward<double>(ExecSpace(), x, y);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (std::size_t i = 0; i < x.span(); ++i) {
    const double r = std::max(hx.data()[i], 0.0);
    CHECK(hy.data()[i] == r * r);
  }
  auto relu_loss = [&] {
    model::ops::relu_squared_forward<double>(ExecSpace(), x, y);
    return test::dot(w, y);
  };
  model::ops::relu_squared_backward<double>(ExecSpace(), x, w, dx);
  test::check_gradient("relu_squared dx", x, dx, relu_loss);

  model::ops::gelu_tanh_forward<double>(ExecSpace(), x, y);
  Kokkos::deep_copy(hy, y);
  for (std::size_t i = 0; i < x.span(); ++i) {
    // The definition in long double: 1 + tanh(u) cancels for negative x, and double would lose
    // the digits this comparison needs.
    const long double v = hx.data()[i];
    const long double expected = 0.5L * v * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846L) * (v + 0.044715L * v * v * v)));
    CHECK(hy.data()[i] == Approx(static_cast<double>(expected)).epsilon(1e-14));
  }
  auto gelu_loss = [&] {
    model::ops::gelu_tanh_forward<double>(ExecSpace(), x, y);
    return test::dot(w, y);
  };
  model::ops::gelu_tanh_backward<double>(ExecSpace(), x, w, dx);
  test::check_gradient("gelu dx", x, dx, gelu_loss);
}

TEST_CASE("residual mix, scaled add, add_into and bias in float agree with double", "[model][elementwise][float]") {
  const int n = 256, c = 48;
  Matrix<double> x("x", n, c), x0("x0", n, c), mix("mix", 2, c), dy("dy", n, c);
  Vector<double> s("s", c);
  random::fill_normal(x, 90, 0, 1.0);
  random::fill_normal(x0, 90, 1, 1.0);
  random::fill_normal(mix, 90, 2, 1.0);
  random::fill_normal(dy, 90, 3, 1.0);
  random::fill_normal(s, 90, 4, 1.0);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xt = test::converted<Matrix<T>>("x", x), x0t = test::converted<Matrix<T>>("x0", x0);
    const auto mixt = test::converted<Matrix<T>>("mix", mix), dyt = test::converted<Matrix<T>>("dy", dy);
    const auto st = test::converted<Vector<T>>("s", s);
    Matrix<T> y("y", n, c), dx("dx", n, c), dx0("dx0", n, c), dmix("dmix", 2, c), dys("dys", n, c);
    Vector<T> ds("ds", c), dbias("dbias", c);
    model::ops::residual_mix_forward<T>(ExecSpace(), xt, x0t, mixt, y);
    model::ops::residual_mix_backward<T>(ExecSpace(), xt, x0t, mixt, dyt, dx, dx0, dmix);
    model::ops::scaled_add_forward<T>(ExecSpace(), x0t, st, y);  // y = mix + s * x0
    model::ops::scaled_add_backward<T>(ExecSpace(), x0t, st, dyt, dys, ds);
    model::ops::add_into<T>(ExecSpace(), xt, dx0);
    model::ops::bias_forward<T>(ExecSpace(), st, y);
    model::ops::bias_backward<T>(ExecSpace(), dyt, dbias);
    return std::make_tuple(y, dx, dx0, dmix, dys, ds, dbias);
  };
  const auto r64 = run(0.0);
  const auto r32 = run(0.0f);
  CHECK(test::max_difference(std::get<0>(r32), std::get<0>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<1>(r32), std::get<1>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<2>(r32), std::get<2>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<4>(r32), std::get<4>(r64)) < 1e-6);
  // Column sums over 256 rows in float: rounding grows with the number of terms.
  CHECK(test::max_difference(std::get<3>(r32), std::get<3>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<5>(r32), std::get<5>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<6>(r32), std::get<6>(r64)) < 1e-5);
}
