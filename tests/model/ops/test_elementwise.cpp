#include <catch2/catch.hpp>

#include <cstdint>
#include <tuple>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/ops/activations.hpp"
#include "model/ops/bigram.hpp"
#include "model/ops/elementwise.hpp"
#include "model/ops/rmsnorm.hpp"
#include "model/ops/smear.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;

TEST_CASE("scaled residual add: out of place forward, backward against finite differences", "[model][elementwise][gradcheck]") {
  Matrix<double> base("base", 5, 4), out("out", 5, 4), y("y", 5, 4), dy("dy", 5, 4);
  Vector<double> s("s", 4), ds("ds", 4);
  random::fill_normal(base, 80, 0, 1.0);
  random::fill_normal(y, 80, 1, 1.0);
  random::fill_normal(s, 80, 2, 1.0);
  const auto w = test::random_like("w", out, 81);
  auto loss = [&] {
    model::ops::scaled_add_forward<double>(ExecSpace(), base, s, y, out);
    return test::dot(w, out);
  };
  loss();
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), base);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), s);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  CHECK(ho(3, 2) == Approx(hb(3, 2) + hs(2) * hy(3, 2)).epsilon(1e-15));  // a GPU fuses the multiply-add
  model::ops::scaled_add_backward<double>(ExecSpace(), y, s, w, dy, ds);
  test::check_gradient("scaled_add dy", y, dy, loss);
  test::check_gradient("scaled_add ds", s, ds, loss);
  // In place (out is base) gives the same values.
  model::ops::scaled_add_forward<double>(ExecSpace(), base, s, y, out);
  model::ops::scaled_add_forward<double>(ExecSpace(), base, s, y, base);
  CHECK(test::max_difference(base, out) == 0.0);
}

TEST_CASE("residual mix and skip backward match finite differences of mix_rmsnorm's outputs",
          "[model][elementwise][gradcheck]") {
  const int n = 6, c = 5;
  Matrix<double> x_prev("x_prev", n, c), skip("skip", n, c), x0("x0", n, c), mix("mix", 2, c);
  Matrix<double> x_in("x_in", n, c), x_mix("x_mix", n, c), h("h", n, c);
  Matrix<double> dx("dx", n, c), dx0("dx0", n, c), dmix("dmix", 2, c), d_skip("d_skip", n, c), d_prev("d_prev", n, c);
  Vector<double> w_skip("w_skip", c), dw_skip("dw_skip", c), rstd("rstd", n);
  random::fill_normal(x_prev, 70, 0, 1.0);
  random::fill_normal(skip, 70, 1, 1.0);
  random::fill_normal(x0, 70, 2, 1.0);
  random::fill_normal(mix, 70, 3, 1.0);
  random::fill_normal(w_skip, 70, 4, 1.0);
  const auto w = test::random_like("w", x_mix, 71);
  // loss = sum(w * x_mix) with x_mix = mix0 * (x_prev + w_skip * skip) + mix1 * x0.
  auto loss = [&] {
    model::ops::mix_rmsnorm_forward<double>(ExecSpace(), ConstMatrix<double>(x_prev), ConstMatrix<double>(skip), w_skip,
                                            ConstMatrix<double>(x0), mix, x_in, x_mix, h, rstd, 1e-6);
    return test::dot(w, x_mix);
  };
  loss();
  Kokkos::deep_copy(dx, w);
  model::ops::mix_backward<double>(ExecSpace(), ConstMatrix<double>(x_in), ConstMatrix<double>(x0), mix, dx, dx0, dmix);
  test::check_gradient("mix dx0", x0, dx0, loss);
  test::check_gradient("mix dmix", mix, dmix, loss);
  // dx is now the gradient of x_in; it flows on to x_prev unchanged and into the skip.
  model::ops::skip_backward<double>(ExecSpace(), skip, w_skip, dx, d_skip, dw_skip);
  test::check_gradient("mix and skip dx_prev", x_prev, dx, loss);
  test::check_gradient("skip dsrc", skip, d_skip, loss);
  test::check_gradient("skip dw", w_skip, dw_skip, loss);
}

TEST_CASE("bias and add_into: forward values, bias backward against finite differences", "[model][elementwise][gradcheck]") {
  Matrix<double> y("y", 7, 3), x("x", 7, 3), dy("dy", 7, 3);
  Vector<double> bias("bias", 3), dbias("dbias", 3);
  random::fill_normal(x, 60, 0, 1.0);
  random::fill_normal(bias, 60, 1, 1.0);
  const auto w = test::random_like("w", y, 61);
  auto loss = [&] {
    Kokkos::deep_copy(y, x);
    model::ops::bias_forward<double>(ExecSpace(), bias, y);
    return test::dot(w, y);
  };
  loss();
  model::ops::bias_backward<double>(ExecSpace(), w, dbias);
  test::check_gradient("bias", bias, dbias, loss);
  Kokkos::deep_copy(dy, 1.0);
  model::ops::add_into<double>(ExecSpace(), x, dy);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hd = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dy);
  for (std::size_t i = 0; i < x.span(); ++i) CHECK(hd.data()[i] == 1.0 + hx.data()[i]);
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

TEST_CASE("the residual ops in float and bf16 agree with double", "[model][elementwise][float][bf16]") {
  const int n = 256, c = 48;
  Matrix<double> x("x", n, c), x0("x0", n, c), mix("mix", 2, c), dy("dy", n, c);
  Vector<double> s("s", c);
  random::fill_normal(x, 90, 0, 1.0);
  random::fill_normal(x0, 90, 1, 1.0);
  random::fill_normal(mix, 90, 2, 1.0);
  random::fill_normal(dy, 90, 3, 1.0);
  random::fill_normal(s, 90, 4, 1.0);
  auto run = [&](auto zero) {
    using A = decltype(zero);
    using T = compute_t<A>;
    const auto xa = test::converted<Matrix<A>>("x", x), x0a = test::converted<Matrix<A>>("x0", x0);
    const auto dya = test::converted<Matrix<A>>("dy", dy);
    const auto mixt = test::converted<Matrix<T>>("mix", mix);
    const auto st = test::converted<Vector<T>>("s", s);
    Matrix<A> out("out", n, c), dx("dx", n, c), dx0("dx0", n, c), dys("dys", n, c), d_src("d_src", n, c);
    Matrix<T> dmix("dmix", 2, c);
    Vector<T> ds("ds", c), dbias("dbias", c), dw("dw", c);
    model::ops::scaled_add_forward<T>(ExecSpace(), xa, st, x0a, out);
    model::ops::scaled_add_backward<T>(ExecSpace(), x0a, st, dya, dys, ds);
    Kokkos::deep_copy(dx, dya);
    model::ops::mix_backward<T>(ExecSpace(), ConstMatrix<A>(xa), ConstMatrix<A>(x0a), mixt, dx, dx0, dmix);
    model::ops::skip_backward<T>(ExecSpace(), xa, st, dx, d_src, dw);
    model::ops::add_into<T>(ExecSpace(), xa, dx0);
    model::ops::bias_forward<T>(ExecSpace(), st, out);
    model::ops::bias_backward<T>(ExecSpace(), dya, dbias);
    return std::make_tuple(out, dx, dx0, dys, d_src, dmix, ds, dbias, dw);
  };
  const auto r64 = run(0.0);
  const auto r32 = run(0.0f);
  const auto r16 = run(bf16(0.0f));
  // Elementwise results: float rounds at 6e-8, bf16 at 2^-9 = 2e-3 (twice for a product).
  CHECK(test::max_difference(std::get<0>(r32), std::get<0>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<1>(r32), std::get<1>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<2>(r32), std::get<2>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<3>(r32), std::get<3>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<4>(r32), std::get<4>(r64)) < 1e-6);
  CHECK(test::max_difference(std::get<0>(r16), std::get<0>(r64)) < 3e-2);
  CHECK(test::max_difference(std::get<1>(r16), std::get<1>(r64)) < 3e-2);
  CHECK(test::max_difference(std::get<2>(r16), std::get<2>(r64)) < 3e-2);
  CHECK(test::max_difference(std::get<3>(r16), std::get<3>(r64)) < 3e-2);
  CHECK(test::max_difference(std::get<4>(r16), std::get<4>(r64)) < 3e-2);
  // Column sums over 256 rows, accumulated in float in both cases; with bf16 inputs each term is off
  // by up to 2^-7 of its size, and those errors add like a random walk over the rows.
  CHECK(test::max_difference(std::get<5>(r32), std::get<5>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<6>(r32), std::get<6>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<7>(r32), std::get<7>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<8>(r32), std::get<8>(r64)) < 1e-5);
  CHECK(test::max_difference(std::get<5>(r16), std::get<5>(r64)) < 6e-2);
  CHECK(test::max_difference(std::get<6>(r16), std::get<6>(r64)) < 6e-2);
  CHECK(test::max_difference(std::get<7>(r16), std::get<7>(r64)) < 6e-2);
  CHECK(test::max_difference(std::get<8>(r16), std::get<8>(r64)) < 6e-2);
}

namespace {

// x + 4 y + j: 4 y is exact, so a fused multiply-add (as a GPU compiles it) rounds as the host does.
struct PlusFourTimesAndColumn {
  KOKKOS_INLINE_FUNCTION float operator()(const std::size_t j, const float x, const float y) const {
    return x + 4.0f * y + static_cast<float>(j);
  }
};

// A host copy of an (n, c) View of any layout (a column slice too): through a contiguous copy in
// the View's own space, since Kokkos copies between spaces only contiguous arrays.
template <class V>
auto host_matrix(const V& v) {
  Kokkos::View<typename V::non_const_value_type**, Kokkos::LayoutRight, MemSpace> packed("packed", v.extent(0),
                                                                                         v.extent(1));
  Kokkos::deep_copy(packed, v);
  return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), packed);
}

// out = a + 4 b + j (j the column) by map_elements, against a host loop, for storage type A.
template <class A, bool Packs, class Out, class In>
void check_map(const Out& out, const In& a, const In& b) {
  // Copies of the inputs as they are before the op (out may be one of them).
  const auto ha = host_matrix(a);
  const auto hb = host_matrix(b);
  model::ops::map_elements<float, Packs>(ExecSpace(), "test::map", PlusFourTimesAndColumn{}, out, a, b);
  const auto ho = host_matrix(out);
  int wrong = 0;
  for (std::size_t i = 0; i < out.extent(0); ++i) {
    for (std::size_t j = 0; j < out.extent(1); ++j) {
      const A expected = store<A>(float(ha(i, j)) + 4.0f * float(hb(i, j)) + static_cast<float>(j));
      wrong += float(ho(i, j)) != float(expected);
    }
  }
  CHECK(wrong == 0);
}

// out = a + 4 b + j (j the column) by map_elements with 16-byte packs where the arrays allow them
// (as on a GPU) and without (as on the host), against a host loop, for storage type A.
template <class A, class Out, class In>
void check_map(const Out& out, const In& a, const In& b) {
  check_map<A, true>(out, a, b);
  check_map<A, false>(out, a, b);
}

}  // namespace

TEST_CASE("map_elements: 16-byte packs where the arrays allow them, one element per thread where not",
          "[model][elementwise][bf16]") {
  // 24 columns: packs of 8 bf16 or 4 floats. 21 columns, or a column slice starting at column 1,
  // leave the packs unaligned and take the per-element path; both give the same values.
  for (const std::size_t cols : {std::size_t(24), std::size_t(21)}) {
    Matrix<bf16> a("a", 9, cols), b("b", 9, cols), out("out", 9, cols);
    random::fill_normal(a, 90, 0, 1.0);
    random::fill_normal(b, 90, 1, 1.0);
    check_map<bf16>(out, a, b);
    Matrix<float> af("af", 9, cols), bf("bf", 9, cols), outf("outf", 9, cols);
    random::fill_normal(af, 91, 0, 1.0);
    random::fill_normal(bf, 91, 1, 1.0);
    check_map<float>(outf, af, bf);
    check_map<float>(af, af, bf);  // in place
  }
  Matrix<bf16> wide("wide", 6, 33), other("other", 6, 33), out("out", 6, 33);
  random::fill_normal(wide, 92, 0, 1.0);
  random::fill_normal(other, 92, 1, 1.0);
  const auto slice = [](const Matrix<bf16>& m) { return Kokkos::subview(m, Kokkos::ALL(), std::make_pair(1, 25)); };
  check_map<bf16>(slice(out), slice(wide), slice(other));
  // Mixed storage: float inputs, bf16 output, packs of 8.
  Matrix<float> fa("fa", 5, 16), fb("fb", 5, 16);
  Matrix<bf16> low("low", 5, 16);
  random::fill_normal(fa, 93, 0, 1.0);
  random::fill_normal(fb, 93, 1, 1.0);
  check_map<bf16>(low, fa, fb);
}

namespace {

// The residual backwards with their column sums in 16-byte packs (Packs, as on a GPU) or a column
// at a time (as on the host), for activations of type A: every output.
template <class A, bool Packs>
auto residual_backwards(std::size_t n, std::size_t c) {
  using T = compute_t<A>;
  Matrix<A> x("x", n, c), x0("x0", n, c), dy("dy", n, c), dx("dx", n, c), dx0("dx0", n, c), dys("dys", n, c),
      d_src("d_src", n, c);
  Matrix<T> mix("mix", 2, c), dmix("dmix", 2, c);
  Vector<T> s("s", c), ds("ds", c), dbias("dbias", c), dw("dw", c);
  random::fill_normal(x, 91, 0, 1.0);
  random::fill_normal(x0, 91, 1, 1.0);
  random::fill_normal(dy, 91, 2, 1.0);
  random::fill_normal(dx0, 91, 3, 1.0);
  random::fill_normal(mix, 91, 4, 1.0);
  random::fill_normal(s, 91, 5, 1.0);
  // The gradients' sums start from values of their own: the backwards add to them.
  random::fill_normal(ds, 91, 6, 1.0);
  random::fill_normal(dmix, 91, 7, 1.0);
  random::fill_normal(dbias, 91, 8, 1.0);
  random::fill_normal(dw, 91, 9, 1.0);
  model::ops::scaled_add_backward<T, Packs>(ExecSpace(), x0, s, dy, dys, ds);
  Kokkos::deep_copy(dx, dy);
  model::ops::mix_backward<T, Packs>(ExecSpace(), ConstMatrix<A>(x), ConstMatrix<A>(x0), mix, dx, dx0, dmix);
  model::ops::skip_backward<T, Packs>(ExecSpace(), x, s, dx, d_src, dw);
  model::ops::bias_backward<T, Packs>(ExecSpace(), dy, dbias);
  return std::make_tuple(host_matrix(dys), host_matrix(dx), host_matrix(dx0), host_matrix(d_src), host_matrix(dmix),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), ds),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dbias),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw));
}

template <class H>
int count_differences(const H& a, const H& b) {
  int differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += a.data()[i] != b.data()[i];
  return differ;
}

template <class A>
void check_residual_backwards_in_packs(std::size_t n, std::size_t c) {
  INFO(n << " x " << c << (sizeof(A) == 2 ? " bf16" : sizeof(A) == 4 ? " float" : " double"));
  const auto packed = residual_backwards<A, true>(n, c), alone = residual_backwards<A, false>(n, c);
  // Each column's rows are added in the same order either way, so the sums agree bit for bit.
  CHECK(count_differences(std::get<0>(packed), std::get<0>(alone)) == 0);
  CHECK(count_differences(std::get<1>(packed), std::get<1>(alone)) == 0);
  CHECK(count_differences(std::get<2>(packed), std::get<2>(alone)) == 0);
  CHECK(count_differences(std::get<3>(packed), std::get<3>(alone)) == 0);
  CHECK(count_differences(std::get<4>(packed), std::get<4>(alone)) == 0);
  CHECK(count_differences(std::get<5>(packed), std::get<5>(alone)) == 0);
  CHECK(count_differences(std::get<6>(packed), std::get<6>(alone)) == 0);
  CHECK(count_differences(std::get<7>(packed), std::get<7>(alone)) == 0);
}

}  // namespace

TEST_CASE("the residual backwards' column sums in 16-byte packs equal them a column at a time",
          "[model][elementwise][bf16]") {
  // 1,100 rows: two stages of partial sums and a short last block. 48 columns are whole packs of 8
  // bf16, 4 floats or 2 doubles; 44 columns are not (bf16 falls back to a column per thread).
  for (const std::size_t cols : {std::size_t(48), std::size_t(44)}) {
    check_residual_backwards_in_packs<bf16>(1100, cols);
    check_residual_backwards_in_packs<float>(1100, cols);
    check_residual_backwards_in_packs<double>(1100, cols);
  }
}

TEST_CASE("SmearGate: forward from its definition, backward against finite differences", "[model][elementwise][gradcheck]") {
  // 3 sequences of 4 positions, 5 channels: the first row of each sequence has no previous one.
  const int seq = 4;
  Matrix<double> x("x", 12, 5), y("y", 12, 5), dx("dx", 12, 5);
  Vector<double> gate("gate", 5), dgate("dgate", 5);
  random::fill_normal(x, 83, 0, 1.0);
  random::fill_normal(gate, 83, 1, 1.0);
  const auto w = test::random_like("w", y, 84);
  auto loss = [&] {
    model::ops::smear_forward<double>(ExecSpace(), ConstMatrix<double>(x), gate, y, seq);
    return test::dot(w, y);
  };
  loss();
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gate);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  for (const int i : {0, 4, 5, 11}) {
    for (int j = 0; j < 5; ++j) {
      const double g = 1.0 / (1.0 + std::exp(-hg(j)));
      const double previous = i % seq == 0 ? 0.0 : hx(i - 1, j);
      CHECK(hy(i, j) == Approx((1 - g) * hx(i, j) + g * previous).epsilon(1e-14));
    }
  }
  model::ops::smear_backward<double>(ExecSpace(), ConstMatrix<double>(x), gate, ConstMatrix<double>(w), dx, dgate, seq);
  test::check_gradient("smear dx", x, dx, loss);
  test::check_gradient("smear dgate", gate, dgate, loss);
}

namespace {

// SmearGate's backward with its column sums in 16-byte packs (Packs) or a column at a time.
template <class A, bool Packs>
auto smear_backward_of(std::size_t n, std::size_t c, int seq) {
  using T = compute_t<A>;
  Matrix<A> x("x", n, c), dy("dy", n, c), dx("dx", n, c);
  Vector<T> gate("gate", c), dgate("dgate", c);
  random::fill_normal(x, 92, 0, 1.0);
  random::fill_normal(dy, 92, 1, 1.0);
  random::fill_normal(gate, 92, 2, 1.0);
  random::fill_normal(dgate, 92, 3, 1.0);
  model::ops::smear_backward<T, Packs>(ExecSpace(), ConstMatrix<A>(x), gate, ConstMatrix<A>(dy), dx, dgate, seq);
  return std::make_pair(host_matrix(dx), Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dgate));
}

template <class A>
void check_smear_in_packs(std::size_t n, std::size_t c, int seq) {
  INFO(n << " x " << c << (sizeof(A) == 2 ? " bf16" : sizeof(A) == 4 ? " float" : " double"));
  const auto packed = smear_backward_of<A, true>(n, c, seq), alone = smear_backward_of<A, false>(n, c, seq);
  CHECK(count_differences(packed.first, alone.first) == 0);
  CHECK(count_differences(packed.second, alone.second) == 0);
}

}  // namespace

TEST_CASE("SmearGate's backward in 16-byte packs equals it a column at a time", "[model][elementwise][bf16]") {
  for (const std::size_t cols : {std::size_t(48), std::size_t(44)}) {
    check_smear_in_packs<bf16>(1100, cols, 100);
    check_smear_in_packs<float>(1100, cols, 100);
    check_smear_in_packs<double>(1100, cols, 100);
  }
}

TEST_CASE("BigramHash: the rows from the records' hash, the sum from its definition, the scale's backward against "
          "finite differences", "[model][elementwise][gradcheck]") {
  // 2 sequences of 4 tokens, 3 channels: the first position of each sequence reads the last row.
  const int buckets = 13, seq = 4;
  TokenMatrix tokens("tokens", 2, seq), rows("rows", 2, seq);
  const std::vector<int> ids = {5, 1023, 0, 77, 40000, 3, 3, 59000};
  auto ht = Kokkos::create_mirror_view(tokens);
  for (int i = 0; i < 8; ++i) ht(i / seq, i % seq) = ids[static_cast<std::size_t>(i)];
  Kokkos::deep_copy(tokens, ht);
  model::ops::bigram_rows(ExecSpace(), ConstTokenMatrix(tokens), buckets, rows);
  auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), rows);
  for (int b = 0; b < 2; ++b) {
    CHECK(hr(b, 0) == buckets - 1);
    for (int t = 1; t < seq; ++t) {
      // The records take the products in 32-bit integers; these ids keep them below 2^31.
      const std::int32_t h = (36313 * ht(b, t)) ^ (27191 * ht(b, t - 1));
      CHECK(hr(b, t) == h % (buckets - 1));
    }
  }

  Matrix<double> table("table", 60000, 3), p("p", 8, 3), x("x", 8, 3), dp("dp", 8, 3);
  Vector<double> scale("scale", 1), dscale("dscale", 1), columns("columns", 3);
  random::fill_normal(table, 85, 0, 1.0);
  random::fill_normal(p, 85, 1, 1.0);
  random::fill_normal(scale, 85, 2, 1.0);
  const auto w = test::random_like("w", x, 86);
  auto loss = [&] {
    model::ops::bigram_add_forward<double>(ExecSpace(), ConstTokenMatrix(tokens), table, scale, ConstMatrix<double>(p), x);
    return test::dot(w, x);
  };
  loss();
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto htable = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), table);
  auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), scale);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) CHECK(hx(i, j) == Approx(htable(ids[std::size_t(i)], j) + hs(0) * hp(i, j)).epsilon(1e-14));
  }
  model::ops::bigram_scale_backward<double>(ExecSpace(), ConstMatrix<double>(p), scale, ConstMatrix<double>(w), dp, dscale,
                                            columns);
  test::check_gradient("bigram dp", p, dp, loss);
  test::check_gradient("bigram dscale", scale, dscale, loss);
}

namespace {

// BigramHash's scale backward with its column sums in 16-byte packs (Packs) or a column at a time.
template <class A, bool Packs>
auto bigram_backward_of(std::size_t n, std::size_t c) {
  using T = compute_t<A>;
  Matrix<A> p("p", n, c), dx("dx", n, c), dp("dp", n, c);
  Vector<T> scale("scale", 1), dscale("dscale", 1), columns("columns", c);
  random::fill_normal(p, 93, 0, 1.0);
  random::fill_normal(dx, 93, 1, 1.0);
  random::fill_normal(scale, 93, 2, 1.0);
  random::fill_normal(dscale, 93, 3, 1.0);
  model::ops::bigram_scale_backward<T, Packs>(ExecSpace(), ConstMatrix<A>(p), scale, ConstMatrix<A>(dx), dp, dscale,
                                              columns);
  return std::make_pair(host_matrix(dp), Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dscale));
}

template <class A>
void check_bigram_in_packs(std::size_t n, std::size_t c) {
  INFO(n << " x " << c << (sizeof(A) == 2 ? " bf16" : sizeof(A) == 4 ? " float" : " double"));
  const auto packed = bigram_backward_of<A, true>(n, c), alone = bigram_backward_of<A, false>(n, c);
  CHECK(count_differences(packed.first, alone.first) == 0);
  CHECK(count_differences(packed.second, alone.second) == 0);
}

}  // namespace

TEST_CASE("BigramHash's scale backward in 16-byte packs equals it a column at a time", "[model][elementwise][bf16]") {
  for (const std::size_t cols : {std::size_t(48), std::size_t(44)}) {
    check_bigram_in_packs<bf16>(1100, cols);
    check_bigram_in_packs<float>(1100, cols);
    check_bigram_in_packs<double>(1100, cols);
  }
}
