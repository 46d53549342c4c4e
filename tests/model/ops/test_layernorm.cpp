#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/ops/layernorm.hpp"

using namespace kgpt;
using test::converted;
using test::max_difference;
using test::all_finite;

namespace {

// Everything one forward and one backward of LayerNorm produce, in precision T.
template <class T>
struct LayerNormRun {
  Matrix<T> y, dx;
  Vector<T> mean, rstd, dw, db;
};

// Runs forward then backward in precision T on (double) inputs x (N, C), w, b (C) and upstream
// gradient dy (N, C). dx starts as NaN (it must be overwritten), dw and db as zero.
template <class T>
LayerNormRun<T> run_layernorm(const Matrix<double>& x, const Vector<double>& w, const Vector<double>& b,
                              const Matrix<double>& dy, double eps) {
  const int n = static_cast<int>(x.extent(0)), c = static_cast<int>(x.extent(1));
  const auto xt = converted<Matrix<T>>("x", x);
  const auto wt = converted<Vector<T>>("w", w);
  const auto bt = converted<Vector<T>>("b", b);
  const auto dyt = converted<Matrix<T>>("dy", dy);
  LayerNormRun<T> run{Matrix<T>("y", n, c), Matrix<T>("dx", n, c), Vector<T>("mean", n),
                      Vector<T>("rstd", n), Vector<T>("dw", c),   Vector<T>("db", c)};
  Kokkos::deep_copy(run.dx, std::numeric_limits<T>::quiet_NaN());
  model::ops::layernorm_forward<T>(ExecSpace(), xt, wt, bt, run.y, run.mean, run.rstd, T(eps));
  model::ops::layernorm_backward<T>(ExecSpace(), xt, wt, run.mean, run.rstd, dyt, run.dx, run.dw, run.db);
  return run;
}

}  // namespace

TEST_CASE("layernorm forward matches its definition", "[model][layernorm]") {
  const int n = 5, c = 12;
  const double eps = 1e-5;
  Matrix<double> x("x", n, c), y("y", n, c);
  Vector<double> w("w", c), b("b", c), mean("mean", n), rstd("rstd", n);
  random::fill_normal(x, 110, 0, 2.0);
  random::fill_normal(w, 110, 1, 1.0);
  random::fill_normal(b, 110, 2, 1.0);
  // One row far from zero with a small spread: a one-pass variance would cancel here.
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  for (int j = 0; j < c; ++j) hx(n - 1, j) = 1000.0 + 0.01 * hx(n - 1, j);
  Kokkos::deep_copy(x, hx);
  model::ops::layernorm_forward<double>(ExecSpace(), x, w, b, y, mean, rstd, eps);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), w);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  auto hmean = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), mean);
  auto hrstd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), rstd);
  for (int i = 0; i < n; ++i) {
    // PyTorch's nn.LayerNorm: biased variance, eps inside the square root.
    double mu = 0, var = 0;
    for (int j = 0; j < c; ++j) mu += hx(i, j) / c;
    for (int j = 0; j < c; ++j) var += (hx(i, j) - mu) * (hx(i, j) - mu) / c;
    const double r = 1 / std::sqrt(var + eps);
    CHECK(hmean(i) == Approx(mu).epsilon(1e-14));
    CHECK(hrstd(i) == Approx(r).epsilon(1e-10));
    for (int j = 0; j < c; ++j) {
      CHECK(hy(i, j) == Approx((hx(i, j) - mu) * r * hw(j) + hb(j)).epsilon(1e-10).margin(1e-12));
    }
  }
}

TEST_CASE("layernorm backward matches finite differences for dx, dw and db", "[model][layernorm][gradcheck]") {
  const int n = 5, c = 12;
  Matrix<double> x("x", n, c), y("y", n, c), dx("dx", n, c);
  Vector<double> w("w", c), b("b", c), dw("dw", c), db("db", c), mean("mean", n), rstd("rstd", n);
  random::fill_normal(x, 112, 0, 2.0);
  random::fill_normal(w, 112, 1, 1.0);
  random::fill_normal(b, 112, 2, 1.0);
  const auto up = test::random_like("up", y, 113);
  auto loss = [&] {
    model::ops::layernorm_forward<double>(ExecSpace(), x, w, b, y, mean, rstd, 1e-5);
    return test::dot(up, y);
  };
  loss();
  model::ops::layernorm_backward<double>(ExecSpace(), x, w, mean, rstd, up, dx, dw, db);
  test::check_gradient("layernorm dx", x, dx, loss);
  test::check_gradient("layernorm dw", w, dw, loss);
  test::check_gradient("layernorm db", b, db, loss);
}

TEST_CASE("layernorm backward overwrites dx and accumulates dw and db", "[model][layernorm]") {
  const int n = 6, c = 10;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  Vector<double> w("w", c), b("b", c);
  random::fill_normal(x, 114, 0, 1.0);
  random::fill_normal(w, 114, 1, 1.0);
  random::fill_normal(b, 114, 2, 1.0);
  random::fill_normal(dy, 114, 3, 1.0);
  // dx starts as NaN: a first backward that added into it would leave NaN behind.
  auto once = run_layernorm<double>(x, w, b, dy, 1e-5);
  REQUIRE(all_finite(once.dx));
  auto dx_once = converted<Matrix<double>>("dx_once", once.dx);
  auto dw_once = converted<Vector<double>>("dw_once", once.dw);
  auto db_once = converted<Vector<double>>("db_once", once.db);
  model::ops::layernorm_backward<double>(ExecSpace(), x, w, once.mean, once.rstd, dy, once.dx, once.dw, once.db);
  CHECK(max_difference(once.dx, dx_once) == 0);
  CHECK(max_difference(once.dw, dw_once, 2.0) == 0);
  CHECK(max_difference(once.db, db_once, 2.0) == 0);
}

TEST_CASE("layernorm in float agrees with double", "[model][layernorm][float]") {
  const int n = 8, c = 96;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  Vector<double> w("w", c), b("b", c);
  random::fill_normal(x, 116, 0, 3.0);
  random::fill_normal(w, 116, 1, 1.0);
  random::fill_normal(b, 116, 2, 1.0);
  random::fill_normal(dy, 116, 3, 1.0);
  const auto ref = run_layernorm<double>(x, w, b, dy, 1e-5);
  const auto low = run_layernorm<float>(x, w, b, dy, 1e-5);
  // Float rounds the inputs and every operation at about 6e-8; this case shows differences of
  // 2e-8 (rstd) to 2.3e-7 (dw), so 1e-6 leaves room for other reduction orders (GPU teams).
  CHECK(max_difference(low.mean, ref.mean) < 1e-6);
  CHECK(max_difference(low.rstd, ref.rstd) < 1e-6);
  CHECK(max_difference(low.y, ref.y) < 1e-6);
  CHECK(max_difference(low.dx, ref.dx) < 1e-6);
  CHECK(max_difference(low.dw, ref.dw) < 1e-6);
  CHECK(max_difference(low.db, ref.db) < 1e-6);
}

TEST_CASE("layernorm on bf16 activations agrees with double", "[model][layernorm][bf16]") {
  const int n = 8, c = 96;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  Vector<double> w("w", c), b("b", c);
  random::fill_normal(x, 117, 0, 3.0);
  random::fill_normal(w, 117, 1, 1.0);
  random::fill_normal(b, 117, 2, 1.0);
  random::fill_normal(dy, 117, 3, 1.0);
  const auto ref = run_layernorm<double>(x, w, b, dy, 1e-5);
  const auto x16 = converted<Matrix<bf16>>("x", x), dy16 = converted<Matrix<bf16>>("dy", dy);
  const auto wt = converted<Vector<float>>("w", w), bt = converted<Vector<float>>("b", b);
  Matrix<bf16> y("y", n, c), dx("dx", n, c);
  Vector<float> mean("mean", n), rstd("rstd", n), dw("dw", c), db("db", c);
  model::ops::layernorm_forward<float>(ExecSpace(), x16, wt, bt, y, mean, rstd, 1e-5f);
  model::ops::layernorm_backward<float>(ExecSpace(), x16, wt, mean, rstd, dy16, dx, dw, db);
  // Statistics and parameter gradients are float sums of bf16-rounded inputs (2^-8 relative each);
  // y and dx are rounded once more when stored.
  CHECK(max_difference(mean, ref.mean) < 1e-2);
  CHECK(max_difference(rstd, ref.rstd) < 1e-2);
  CHECK(max_difference(y, ref.y) < 3e-2);
  CHECK(max_difference(dx, ref.dx) < 3e-2);
  CHECK(max_difference(dw, ref.dw) < 5e-2);
  CHECK(max_difference(db, ref.db) < 5e-2);
}

namespace {
// Forward, backward, and a second backward added into dx, with rows read 16 bytes at a time
// (Packs, a GPU's kernels) or a thread per element.
template <class A, bool Packs>
std::vector<std::vector<double>> layernorm_both(const Matrix<double>& x, const Vector<double>& w,
                                                const Vector<double>& b, const Matrix<double>& dy) {
  using T = compute_t<A>;
  const std::size_t n = x.extent(0), c = x.extent(1);
  const auto xa = converted<Matrix<A>>("x", x), dya = converted<Matrix<A>>("dy", dy);
  const auto wa = converted<Vector<A>>("w", w), ba = converted<Vector<A>>("b", b);
  Matrix<A> y("y", n, c), dx("dx", n, c);
  Vector<T> mean("mean", n), rstd("rstd", n), dw("dw", c), db("db", c);
  if (Packs) {  // else the packed kernels would not run
    using Rows = model::ops::PackedRows<16 / sizeof(A)>;
    REQUIRE(Rows::fits(c, xa, dya, y, dx));
    REQUIRE((Rows::aligned(wa.data()) && Rows::aligned(ba.data())));
  }
  const ExecSpace exec;
  model::ops::layernorm_forward<T, Packs>(exec, xa, wa, ba, y, mean, rstd, T(1e-5));
  model::ops::layernorm_backward<T, Packs>(exec, xa, wa, ConstVector<T>(mean), ConstVector<T>(rstd), dya, dx, dw, db);
  model::ops::layernorm_backward<T, Packs>(exec, y, wa, ConstVector<T>(mean), ConstVector<T>(rstd), dya, dx, dw, db,
                                           {}, true);
  return {host_values(y), host_values(mean), host_values(rstd), host_values(dx), host_values(dw), host_values(db)};
}

template <class A>
void check_packed_layernorm() {
  const std::size_t n = 5, c = 96;
  Matrix<double> x("x", n, c), dy("dy", n, c);
  Vector<double> w("w", c), b("b", c);
  random::fill_normal(x, 111, 0, 2.0);
  random::fill_normal(dy, 111, 1, 1.0);
  random::fill_normal(w, 111, 2, 1.0);
  random::fill_normal(b, 111, 3, 1.0);
  const auto rows = layernorm_both<A, false>(x, w, b, dy), packed = layernorm_both<A, true>(x, w, b, dy);
  // The rows' sums in another order (a few ulps of mean and rstd): a value stored in bf16 may round
  // to its neighbour.
  const double allowed = std::is_same<A, bf16>::value ? 1.0 / 128 : std::is_same<A, float>::value ? 1e-5 : 1e-12;
  const char* names[] = {"y", "mean", "rstd", "dx", "dw", "db"};
  for (std::size_t k = 0; k < rows.size(); ++k) {
    INFO(names[k]);
    CHECK(max_difference(packed[k], rows[k]) <= allowed);
  }
}
}  // namespace

TEST_CASE("layernorm read 16 bytes at a time gives what a thread per element gives", "[model][layernorm][packed]") {
  check_packed_layernorm<double>();
  check_packed_layernorm<float>();
  check_packed_layernorm<bf16>();
}
