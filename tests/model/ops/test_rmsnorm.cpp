#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/embedding.hpp"
#include "model/ops/rmsnorm.hpp"

using namespace kgpt;

TEST_CASE("rmsnorm forward matches its definition", "[model][rmsnorm]") {
  Matrix<double> x("x", 3, 5), y("y", 3, 5);
  Vector<double> rstd("rstd", 3);
  random::fill_normal(x, 1, 0, 2.0);
  model::ops::rmsnorm_forward<double>(ExecSpace(), x, y, rstd, 1e-6);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (int i = 0; i < 3; ++i) {
    double mean_sq = 0;
    for (int j = 0; j < 5; ++j) mean_sq += hx(i, j) * hx(i, j) / 5;
    for (int j = 0; j < 5; ++j) CHECK(hy(i, j) == Approx(hx(i, j) / std::sqrt(mean_sq + 1e-6)).epsilon(1e-12));
  }
}

TEST_CASE("rmsnorm backward matches finite differences", "[model][rmsnorm][gradcheck]") {
  const int n = 6, c = 16;
  Matrix<double> x("x", n, c), y("y", n, c), dx("dx", n, c);
  Vector<double> rstd("rstd", n);
  random::fill_normal(x, 2, 0, 1.5);
  const auto w = test::random_like("w", y, 7);
  auto loss = [&] {
    model::ops::rmsnorm_forward<double>(ExecSpace(), x, y, rstd, 1e-5);
    return test::dot(w, y);
  };
  loss();
  model::ops::rmsnorm_backward<double>(ExecSpace(), x, rstd, w, dx);
  test::check_gradient("rmsnorm dx", x, dx, loss);
}

TEST_CASE("rmsnorm in float agrees with double", "[model][rmsnorm][float]") {
  const int n = 8, c = 96;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  random::fill_normal(x, 3, 0, 3.0);
  random::fill_normal(dy, 3, 1, 1.0);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xt = test::converted<Matrix<T>>("x", x);
    const auto dyt = test::converted<Matrix<T>>("dy", dy);
    Matrix<T> y("y", n, c), dx("dx", n, c);
    Vector<T> rstd("rstd", n);
    model::ops::rmsnorm_forward<T>(ExecSpace(), xt, y, rstd, T(1.1920928955078125e-07));
    model::ops::rmsnorm_backward<T>(ExecSpace(), xt, rstd, dyt, dx);
    return std::make_tuple(y, rstd, dx);
  };
  const auto [y64, rstd64, dx64] = run(0.0);
  const auto [y32, rstd32, dx32] = run(0.0f);
  // Float rounds inputs and each operation at about 6e-8; a row's sum of 96 squares adds a few.
  CHECK(test::max_difference(y32, y64) < 1e-6);
  CHECK(test::max_difference(rstd32, rstd64) < 1e-6);
  CHECK(test::max_difference(dx32, dx64) < 1e-6);
}

TEST_CASE("the fused norms: embedding, mix and residual forms equal their parts", "[model][rmsnorm]") {
  const int b = 2, t = 3, n = b * t, c = 8, v = 11;
  Matrix<double> table("table", v, c), gathered("gathered", n, c), y("y", n, c), y_fused("y_fused", n, c);
  Vector<double> rstd("rstd", n), rstd_fused("rstd_fused", n);
  random::fill_normal(table, 40, 0, 1.0);
  TokenMatrix tokens("tokens", b, t);
  auto ht = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < n; ++i) ht.data()[i] = (5 * i + 2) % v;
  Kokkos::deep_copy(tokens, ht);
  // embedding_rmsnorm = rmsnorm(table[tokens]).
  auto hg = Kokkos::create_mirror_view(gathered);
  auto htab = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j) hg(i, j) = htab(ht.data()[i], j);
  Kokkos::deep_copy(gathered, hg);
  model::ops::rmsnorm_forward<double>(ExecSpace(), gathered, y, rstd, 1e-6);
  model::ops::embedding_rmsnorm_forward<double>(ExecSpace(), tokens, table, y_fused, rstd_fused, 1e-6);
  CHECK(test::max_difference(y_fused, y) == 0.0);
  CHECK(test::max_difference(rstd_fused, rstd) == 0.0);
  // residual_rmsnorm = rmsnorm(base + s * x), with base + s * x kept.
  Matrix<double> base("base", n, c), sum("sum", n, c), sum_fused("sum_fused", n, c);
  Vector<double> s("s", c);
  random::fill_normal(base, 41, 0, 1.0);
  random::fill_normal(s, 41, 1, 1.0);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s);
  auto hsum = Kokkos::create_mirror_view(sum);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < c; ++j) hsum(i, j) = hb(i, j) + hs(j) * hg(i, j);
  Kokkos::deep_copy(sum, hsum);
  model::ops::rmsnorm_forward<double>(ExecSpace(), sum, y, rstd, 1e-6);
  model::ops::residual_rmsnorm_forward<double>(ExecSpace(), base, s, gathered, sum_fused, y_fused, rstd_fused, 1e-6);
  // The reference sum is the host's; a GPU's kernel fuses base + s * x into one multiply-add.
  CHECK(test::max_difference(sum_fused, sum) < 1e-14);
  CHECK(test::max_difference(y_fused, y) < 1e-14);
}

TEST_CASE("rmsnorm backward adds when asked, and the embedding form matches finite differences",
          "[model][rmsnorm][gradcheck]") {
  const int b = 2, t = 3, n = b * t, c = 8, v = 5;
  Matrix<double> x("x", n, c), y("y", n, c), dy("dy", n, c), dx("dx", n, c), dx_sum("dx_sum", n, c);
  Vector<double> rstd("rstd", n);
  random::fill_normal(x, 42, 0, 1.0);
  random::fill_normal(dy, 42, 1, 1.0);
  random::fill_normal(dx_sum, 42, 2, 1.0);
  const auto start = test::converted<Matrix<double>>("start", dx_sum);
  model::ops::rmsnorm_forward<double>(ExecSpace(), x, y, rstd, 1e-6);
  model::ops::rmsnorm_backward<double>(ExecSpace(), x, rstd, dy, dx);
  model::ops::rmsnorm_backward<double>(ExecSpace(), x, rstd, dy, dx_sum, true);
  model::ops::add_into<double>(ExecSpace(), start, dx);
  CHECK(test::max_difference(dx_sum, dx) < 1e-15);

  // d/d table of sum(w * embedding_rmsnorm(tokens, table)): the per-row gradient, then the scatter.
  Matrix<double> table("table", v, c), dtable("dtable", v, c), rows("rows", n, c);
  random::fill_normal(table, 43, 0, 1.0);
  TokenMatrix tokens("tokens", b, t);
  auto ht = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < n; ++i) ht.data()[i] = (3 * i + 1) % v;  // tokens repeat
  Kokkos::deep_copy(tokens, ht);
  const auto w = test::random_like("w", y, 44);
  auto loss = [&] {
    model::ops::embedding_rmsnorm_forward<double>(ExecSpace(), tokens, table, y, rstd, 1e-6);
    return test::dot(w, y);
  };
  loss();
  model::ops::embedding_rmsnorm_backward<double>(ExecSpace(), tokens, table, rstd, w, rows);
  model::ops::embedding_backward<double>(ExecSpace(), tokens, rows, dtable, model::ops::EmbeddingSortSpace<double>(n, v, c));
  test::check_gradient("embedding_rmsnorm dtable", table, dtable, loss);
}

TEST_CASE("rmsnorm forms in bf16 agree with double", "[model][rmsnorm][bf16]") {
  const int n = 8, c = 96;
  Matrix<double> x("x", n, c), base("base", n, c), dy("dy", n, c);
  Vector<double> s("s", c);
  random::fill_normal(x, 45, 0, 3.0);
  random::fill_normal(base, 45, 1, 1.0);
  random::fill_normal(dy, 45, 2, 1.0);
  random::fill_normal(s, 45, 3, 1.0);
  auto run = [&](auto zero) {
    using A = decltype(zero);
    using T = compute_t<A>;
    const auto xa = test::converted<Matrix<A>>("x", x), ba = test::converted<Matrix<A>>("base", base);
    const auto dya = test::converted<Matrix<A>>("dy", dy);
    const auto st = test::converted<Vector<T>>("s", s);
    Matrix<A> y("y", n, c), sum("sum", n, c), h("h", n, c), dx("dx", n, c);
    Vector<T> rstd("rstd", n), rstd2("rstd2", n);
    model::ops::rmsnorm_forward<T>(ExecSpace(), xa, y, rstd, T(1.1920928955078125e-07));
    model::ops::rmsnorm_backward<T>(ExecSpace(), xa, rstd, dya, dx);
    model::ops::residual_rmsnorm_forward<T>(ExecSpace(), ba, st, xa, sum, h, rstd2, T(1.1920928955078125e-07));
    return std::make_tuple(y, dx, sum, h, rstd);
  };
  const auto r64 = run(0.0);
  const auto r16 = run(bf16(0.0f));
  // Outputs of order 1 rounded at 2^-8; the norm itself is taken in float.
  CHECK(test::max_difference(std::get<0>(r16), std::get<0>(r64)) < 1e-2);
  CHECK(test::max_difference(std::get<1>(r16), std::get<1>(r64)) < 1e-2);
  CHECK(test::max_difference(std::get<2>(r16), std::get<2>(r64)) < 2e-2);
  CHECK(test::max_difference(std::get<3>(r16), std::get<3>(r64)) < 1e-2);
  CHECK(test::max_difference(std::get<4>(r16), std::get<4>(r64)) < 1e-2);
}

namespace {
// Every norm of this file with rows read 16 bytes at a time (Packs, a GPU's kernels) or a thread
// per element, on the same inputs: (N, C) of A, parameters of A.
template <class A, bool Packs>
auto norms(const Matrix<double>& base, const Matrix<double>& other, const Matrix<double>& dy, bool with_skip) {
  using T = compute_t<A>;
  const std::size_t n = base.extent(0), c = base.extent(1);
  const ExecSpace exec;
  const auto x = test::converted<Matrix<A>>("x", base), y = test::converted<Matrix<A>>("y", other);
  const auto g = test::converted<Matrix<A>>("dy", dy);
  Matrix<double> mix_values("mix", 2, c);
  random::fill_normal(mix_values, 9, 0, 1.0);
  Vector<double> weights("w", c);
  random::fill_normal(weights, 9, 1, 1.0);
  const auto mix = test::converted<Matrix<A>>("mix", mix_values);
  const auto w = test::converted<Vector<A>>("w", weights);
  Matrix<A> h("h", n, c), x_in("x_in", n, c), x_mix("x_mix", n, c), x_sum("x_sum", n, c), dx("dx", n, c);
  Vector<T> rstd("rstd", n), rstd_mix("rstd_mix", n), rstd_sum("rstd_sum", n);
  const T eps = T(1.1920928955078125e-07);
  using CM = ConstMatrix<A>;
  if (Packs) {  // else the packed kernels would not run
    using Rows = model::ops::PackedRows<16 / sizeof(A)>;
    REQUIRE(Rows::fits(c, x, y, g, mix, h, x_in, x_mix, x_sum, dx));
    REQUIRE(Rows::aligned(w.data()));
  }
  model::ops::rmsnorm_forward<T, Packs>(exec, CM(x), h, rstd, eps);
  model::ops::rmsnorm_backward<T, Packs>(exec, CM(x), ConstVector<T>(rstd), CM(g), dx);
  model::ops::rmsnorm_backward<T, Packs>(exec, CM(y), ConstVector<T>(rstd), CM(g), dx, true);  // adds
  Matrix<A> h_mix("h_mix", n, c), h_sum("h_sum", n, c);
  if (with_skip) {
    model::ops::mix_rmsnorm_forward<T, Packs>(exec, CM(x), CM(y), ConstVector<A>(w), CM(y), CM(mix), x_in, x_mix, h_mix,
                                              rstd_mix, eps);
  } else {
    model::ops::mix_rmsnorm_forward<T, Packs>(exec, CM(x), CM(), ConstVector<A>(), CM(y), CM(mix), Matrix<A>(), x_mix,
                                              h_mix, rstd_mix, eps);
  }
  model::ops::residual_rmsnorm_forward<T, Packs>(exec, CM(x), ConstVector<A>(w), CM(y), x_sum, h_sum, rstd_sum, eps);
  return std::vector<std::vector<double>>{host_values(h),     host_values(rstd),     host_values(dx),
                                          host_values(x_in),  host_values(x_mix),    host_values(h_mix),
                                          host_values(rstd_mix), host_values(x_sum), host_values(h_sum),
                                          host_values(rstd_sum)};
}

template <class A>
void check_packed_norms(bool with_skip) {
  const std::size_t n = 5, c = 96;
  Matrix<double> x("x", n, c), y("y", n, c), dy("dy", n, c);
  random::fill_normal(x, 8, 0, 2.0);
  random::fill_normal(y, 8, 1, 1.0);
  random::fill_normal(dy, 8, 2, 1.0);
  const auto rows = norms<A, false>(x, y, dy, with_skip), packed = norms<A, true>(x, y, dy, with_skip);
  // The same arithmetic per element; the rows' sums in another order (a few ulps of r), so a value
  // stored in bf16 may round to its neighbour.
  const double allowed = std::is_same<A, bf16>::value ? 1.0 / 128 : std::is_same<A, float>::value ? 1e-5 : 1e-12;
  const char* names[] = {"h", "rstd", "dx", "x_in", "x_mix", "h_mix", "rstd_mix", "x_sum", "h_sum", "rstd_sum"};
  for (std::size_t k = 0; k < rows.size(); ++k) {
    INFO(names[k]);
    CHECK(test::max_difference(packed[k], rows[k]) <= allowed);
  }
}
}  // namespace

TEST_CASE("norms read 16 bytes at a time give what a thread per element gives", "[model][rmsnorm][packed]") {
  for (const bool with_skip : {true, false}) {
    INFO((with_skip ? "mix with a skip" : "mix without a skip"));
    check_packed_norms<double>(with_skip);
    check_packed_norms<float>(with_skip);
    check_packed_norms<bf16>(with_skip);
  }
}
