#include <catch2/catch.hpp>

#include <cmath>

#include "model/gradcheck.hpp"
#include "model/precision_check.hpp"
#include "model/model_base.hpp"
#include "model/ops/cross_entropy.hpp"

#include <cstring>
#include <limits>
#include <tuple>

using namespace kgpt;

namespace {
// (b, t) targets cycling through the vocabulary: row i gets (i * step + offset) % v.
TokenMatrix cycling_targets(int b, int t, int v, int step, int offset) {
  TokenMatrix targets("targets", b, t);
  auto host = Kokkos::create_mirror_view(targets);
  for (int i = 0; i < b * t; ++i) host.data()[i] = (i * step + offset) % v;
  Kokkos::deep_copy(targets, host);
  return targets;
}

struct Head {
  int batch = 2, seq = 3, c = 6, v = 11;
  TokenMatrix targets = cycling_targets(batch, seq, v, 7, 3);
  Matrix<double> x{"x", 6, 6}, w{"w", 11, 6}, logits{"logits", 6, 11}, dx{"dx", 6, 6}, dw{"dw", 11, 6};
  Vector<double> lse{"lse", 6}, losses{"losses", 6};
  Head() {
    random::fill_normal(x, 60, 0, 1.0);
    random::fill_normal(w, 60, 1, 1.0);
  }
  double forward(double cap) {
    return model::ops::cross_entropy_forward<double>(ExecSpace(), x, w, targets, cap, logits, lse, losses);
  }
};
}  // namespace

TEST_CASE("cross-entropy with softcap matches its definition", "[model][cross_entropy]") {
  Head head;
  for (double cap : {0.0, 2.0}) {
    const double mean = head.forward(cap);
    auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), head.x);
    auto hw = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), head.w);
    auto ht = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), head.targets);
    double expected = 0;
    for (int n = 0; n < 6; ++n) {
      std::vector<double> z(head.v);
      double m = -1e300, sum = 0;
      for (int j = 0; j < head.v; ++j) {
        for (int c = 0; c < head.c; ++c) z[j] += hx(n, c) * hw(j, c);
        if (cap > 0) z[j] = cap * std::tanh(z[j] / cap);
        m = std::max(m, z[j]);
      }
      for (int j = 0; j < head.v; ++j) sum += std::exp(z[j] - m);
      expected += (m + std::log(sum) - z[ht.data()[n]]) / 6;
    }
    CHECK(mean == Approx(expected).epsilon(1e-12));
  }
  // Uniform logits give ln(V).
  Kokkos::deep_copy(head.w, 0.0);
  CHECK(head.forward(30.0) == Approx(std::log(11.0)).epsilon(1e-14));
}

TEST_CASE("cross-entropy backward matches finite differences through the tied head", "[model][cross_entropy][gradcheck]") {
  for (double cap : {0.0, 1.5}) {
    INFO("softcap " << cap);
    Head head;
    const double grad_scale = 0.25;
    auto loss = [&] { return grad_scale * head.forward(cap); };
    loss();
    Kokkos::deep_copy(head.dw, 0.0);
    model::ops::cross_entropy_backward<double>(ExecSpace(), head.x, head.w, head.targets, cap, head.logits, head.lse,
                                               grad_scale, head.dx, head.dw);
    test::check_gradient("cross_entropy dx", head.x, head.dx, loss);
    test::check_gradient("cross_entropy dW", head.w, head.dw, loss);
  }
}

TEST_CASE("cross-entropy in float agrees with double", "[model][cross_entropy][float]") {
  const int b = 4, t = 16, n = b * t, c = 32, v = 97;
  Matrix<double> x("x", n, c), w("w", v, c);
  random::fill_normal(x, 61, 0, 1.0);
  random::fill_normal(w, 61, 1, 0.5);
  const TokenMatrix targets = cycling_targets(b, t, v, 13, 5);
  for (double cap : {0.0, 30.0}) {
    INFO("softcap " << cap);
    auto run = [&](auto zero) {
      using T = decltype(zero);
      const auto xt = test::converted<Matrix<T>>("x", x), wt = test::converted<Matrix<T>>("w", w);
      Matrix<T> logits("logits", n, v), dx("dx", n, c), dw("dw", v, c);
      Vector<T> lse("lse", n), losses("losses", n);
      const double loss =
          model::ops::cross_entropy_forward<T>(ExecSpace(), xt, wt, targets, T(cap), logits, lse, losses);
      model::ops::cross_entropy_backward<T>(ExecSpace(), xt, wt, targets, T(cap), logits, lse, T(0.5), dx, dw);
      return std::make_tuple(loss, lse, dx, dw);
    };
    const auto r64 = run(0.0);
    const auto r32 = run(0.0f);
    CHECK(std::get<0>(r32) == Approx(std::get<0>(r64)).epsilon(1e-6));
    CHECK(test::max_difference(std::get<1>(r32), std::get<1>(r64)) < 1e-6);
    // dx and dW are GEMMs over 97 logits and 64 rows of gradients of size about 1/n.
    CHECK(test::max_difference(std::get<2>(r32), std::get<2>(r64)) < 1e-6);
    CHECK(test::max_difference(std::get<3>(r32), std::get<3>(r64)) < 1e-6);
  }
}

TEST_CASE("cross-entropy on bf16 activations keeps the logits and the loss in float", "[model][cross_entropy][bf16]") {
  const int b = 4, t = 16, n = b * t, c = 32, v = 97;
  Matrix<double> x("x", n, c), w("w", v, c);
  random::fill_normal(x, 62, 0, 1.0);
  random::fill_normal(w, 62, 1, 0.5);
  const TokenMatrix targets = cycling_targets(b, t, v, 13, 5);
  Matrix<double> logits("logits", n, v), dx("dx", n, c), dw("dw", v, c);
  Vector<double> lse("lse", n), losses("losses", n);
  const double loss = model::ops::cross_entropy_forward<double>(ExecSpace(), x, w, targets, 30.0, logits, lse, losses);
  model::ops::cross_entropy_backward<double>(ExecSpace(), x, w, targets, 30.0, logits, lse, 0.5, dx, dw);
  const auto x16 = test::converted<Matrix<bf16>>("x", x), w16 = test::converted<Matrix<bf16>>("w", w);
  Matrix<float> logits32("logits", n, v), dw32("dw", v, c);
  Matrix<bf16> d_logits("d_logits", n, v), dx16("dx", n, c);
  Vector<float> lse32("lse", n), losses32("losses", n);
  const double loss16 =
      model::ops::cross_entropy_forward<float>(ExecSpace(), x16, w16, targets, 30.0f, logits32, lse32, losses32);
  model::ops::cross_entropy_backward<float>(ExecSpace(), x16, w16, targets, 30.0f, logits32, lse32, 0.5f, d_logits, dx16,
                                            dw32);
  // The logits come from bf16 inputs (2^-8 relative each) summed in float over 32 products; the
  // loss and softmax are float from there. Gradients are rounded to bf16 on the way to the products.
  CHECK(loss16 == Approx(loss).epsilon(1e-2));
  CHECK(test::max_difference(lse32, lse) < 1e-2);
  CHECK(test::max_difference(dx16, dx) < 1e-2);
  CHECK(test::max_difference(dw32, dw) < 1e-2);
}

TEST_CASE("logits stored in T hold z' after the forward, bf16 logits keep z", "[model][cross_entropy][softcap]") {
  const int b = 2, t = 8, n = b * t, c = 16, v = 37;
  const float cap = 1.5f;  // small, so that most logits are visibly capped
  Matrix<double> x("x", n, c), w("w", v, c);
  random::fill_normal(x, 63, 0, 1.0);
  random::fill_normal(w, 63, 1, 1.0);
  const auto x16 = test::converted<Matrix<bf16>>("x", x), w16 = test::converted<Matrix<bf16>>("w", w);
  TokenMatrix targets("targets", b, t);
  Kokkos::deep_copy(targets, 3);
  Matrix<float> logits32("logits", n, v);
  Matrix<bf16> logits16("logits", n, v);
  Vector<float> lse32("lse", n), losses32("losses", n), lse16("lse", n), losses16("losses", n);
  const double loss32 = model::ops::cross_entropy_forward<float>(ExecSpace(), x16, w16, targets, cap, logits32, lse32, losses32);
  const double loss16 = model::ops::cross_entropy_forward<float>(ExecSpace(), x16, w16, targets, cap, logits16, lse16, losses16);
  const auto stored32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits32);
  const auto stored16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), logits16);
  const auto capped32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model::ops::capped_logits<float>(ExecSpace(), logits32, cap));
  const auto capped16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model::ops::capped_logits<float>(ExecSpace(), logits16, cap));
  // The same z from the same bf16 product, rounded to bf16 or not.
  std::size_t capped_visibly = 0;
  for (int row = 0; row < n; ++row) {
    for (int j = 0; j < v; ++j) {
      const float z16 = static_cast<float>(stored16(row, j));
      const float expected = cap * std::tanh(z16 / cap);
      CHECK(std::abs(stored32(row, j)) <= cap);                                  // z' in place
      CHECK(stored32(row, j) == Approx(expected).margin(cap * 1e-2));            // of z, not of bf16(z)
      CHECK(capped32(row, j) == stored32(row, j));                               // read as it is
      CHECK(capped16(row, j) == Approx(expected).epsilon(1e-6));                 // capped from z (a GPU's tanh: 2 ulp)
      capped_visibly += std::abs(z16) > cap ? 1 : 0;
    }
  }
  CHECK(capped_visibly > 50);
  CHECK(loss32 == Approx(loss16).epsilon(1e-2));
}

namespace {
// Loss, lse, dx and dW of the head on logits whose rows are `ld` elements apart (ld >= V), the
// whole logits storage filled with NaN first; and that storage afterwards.
template <class A, class Z, bool Packs = false>
auto head_on_rows(const Matrix<double>& x, const Matrix<double>& w, const TokenMatrix& targets, float cap,
                  std::size_t ld) {
  const std::size_t n = x.extent(0), c = x.extent(1), v = w.extent(0);
  const auto xa = test::converted<Matrix<A>>("x", x), wa = test::converted<Matrix<A>>("w", w);
  Matrix<Z> storage("logits", n, ld);
  Kokkos::deep_copy(storage, Z(std::numeric_limits<float>::quiet_NaN()));
  const Matrix<Z> logits = Kokkos::subview(storage, Kokkos::ALL(), std::make_pair(std::size_t(0), v));
  Matrix<A> dx("dx", n, c);
  Matrix<float> dw("dw", v, c);
  Vector<float> lse("lse", n), losses("losses", n);
  if (Packs) REQUIRE(model::ops::detail::packs_aligned<16 / sizeof(Z)>(logits));  // else the plain passes run
  const double loss =
      model::ops::cross_entropy_forward<float, Packs>(ExecSpace(), xa, wa, targets, cap, logits, lse, losses);
  model::ops::cross_entropy_backward<float, Packs>(ExecSpace(), xa, wa, targets, cap, logits, lse, 0.5f, logits, dx, dw);
  return std::make_tuple(loss, Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dx),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), storage));
}

template <class View>
bool same_bits(const View& a, const View& b) {
  return a.span() == b.span() &&
         std::memcmp(a.data(), b.data(), a.span() * sizeof(typename View::value_type)) == 0;
}

// The largest relative difference of two host arrays of the same shape (as floats).
template <class View>
double relative_difference(const View& a, const View& b) {
  double largest = 0, scale = 0;
  for (std::size_t i = 0; i < a.span(); ++i) {
    const double x = static_cast<float>(a.data()[i]), y = static_cast<float>(b.data()[i]);
    largest = std::max(largest, std::abs(x - y));
    scale = std::max(scale, std::abs(y));
  }
  return largest / scale;
}

template <class A, class Z>
void check_padded_rows(const Matrix<double>& x, const Matrix<double>& w, const TokenMatrix& targets, float cap) {
  const std::size_t v = w.extent(0), ld = 64;
  const auto plain = head_on_rows<A, Z>(x, w, targets, cap, v);
  const auto padded = head_on_rows<A, Z>(x, w, targets, cap, ld);
  CHECK(std::isfinite(std::get<0>(plain)));
  if (!backend::on_gpu) {
    // The host's BLAS sees only another leading dimension: the same values, bit for bit.
    CHECK(std::get<0>(padded) == std::get<0>(plain));
    CHECK(same_bits(std::get<1>(padded), std::get<1>(plain)));
    CHECK(same_bits(std::get<2>(padded), std::get<2>(plain)));
    CHECK(same_bits(std::get<3>(padded), std::get<3>(plain)));
  } else {
    // cuBLASLt may take another kernel for another alignment, adding in another order.
    const double tolerance = std::is_same<A, bf16>::value ? 1e-2 : 1e-5;
    CHECK(std::get<0>(padded) == Approx(std::get<0>(plain)).epsilon(tolerance));
    CHECK(relative_difference(std::get<1>(padded), std::get<1>(plain)) < tolerance);
    CHECK(relative_difference(std::get<2>(padded), std::get<2>(plain)) < tolerance);
    CHECK(relative_difference(std::get<3>(padded), std::get<3>(plain)) < tolerance);
  }
  // Nothing read the padding (a NaN there would reach the loss) or wrote it.
  const auto& storage = std::get<4>(padded);
  std::size_t untouched = 0;
  for (std::size_t row = 0; row < storage.extent(0); ++row) {
    for (std::size_t j = v; j < ld; ++j) untouched += std::isnan(static_cast<float>(storage(row, j))) ? 1 : 0;
  }
  CHECK(untouched == storage.extent(0) * (ld - v));
}
}  // namespace

TEST_CASE("logits whose rows are padded past the vocabulary give the same loss and gradients",
          "[model][cross_entropy][padded]") {
  const int b = 2, t = 8, n = b * t, c = 16, v = 37;
  Matrix<double> x("x", n, c), w("w", v, c);
  random::fill_normal(x, 64, 0, 1.0);
  random::fill_normal(w, 64, 1, 1.0);
  const TokenMatrix targets = cycling_targets(b, t, v, 5, 1);
  for (float cap : {0.0f, 1.5f}) {
    INFO("softcap " << cap);
    check_padded_rows<float, float>(x, w, targets, cap);  // fp32 model: z' written in place
    check_padded_rows<bf16, bf16>(x, w, targets, cap);    // bf16 model: bf16 logits keep z
  }
}

namespace {
// The GPU's packed, one-pass forward and packed backward against the host's passes, on rows 64
// apart: for V below one pack, with and without a tail, and a full row of packs.
template <class A, class Z>
void check_packed_rows(int v, float cap) {
  const int b = 2, t = 8, n = b * t, c = 16;
  Matrix<double> x("x", n, c), w("w", v, c);
  random::fill_normal(x, 65, 0, 1.0);
  random::fill_normal(w, 65, 1, 1.5);  // logits of a few units: the running maximum moves often
  const TokenMatrix targets = cycling_targets(b, t, v, 5, 1);
  const auto plain = head_on_rows<A, Z, false>(x, w, targets, cap, 64);
  const auto packed = head_on_rows<A, Z, true>(x, w, targets, cap, 64);
  // The same terms summed in another order (rescaled sums): float rounding apart.
  CHECK(std::get<0>(packed) == Approx(std::get<0>(plain)).epsilon(1e-6));
  CHECK(relative_difference(std::get<1>(packed), std::get<1>(plain)) < 1e-6);
  // The gradients: the same per logit but for exp(z - lse) with lse a few ulps apart; bf16
  // gradients may round to the neighbouring value.
  const double tolerance = std::is_same<A, bf16>::value ? 1e-2 : 1e-5;
  CHECK(relative_difference(std::get<2>(packed), std::get<2>(plain)) < tolerance);
  CHECK(relative_difference(std::get<3>(packed), std::get<3>(plain)) < tolerance);
  // The logits' storage holds dz now: the same per logit, and nothing in either padding.
  const auto& stored_plain = std::get<4>(plain);
  const auto& stored_packed = std::get<4>(packed);
  double largest = 0, scale = 0;
  std::size_t untouched = 0;
  for (int row = 0; row < n; ++row) {
    for (int j = 0; j < 64; ++j) {
      const double a = static_cast<float>(stored_packed(row, j)), p = static_cast<float>(stored_plain(row, j));
      if (j < v) {
        largest = std::max(largest, std::abs(a - p));
        scale = std::max(scale, std::abs(p));
      } else {
        untouched += std::isnan(a) && std::isnan(p) ? 1 : 0;
      }
    }
  }
  CHECK(largest <= tolerance * scale);
  CHECK(untouched == static_cast<std::size_t>(n * (64 - v)));
}
}  // namespace

TEST_CASE("the packed one-pass cross-entropy agrees with the host's passes", "[model][cross_entropy][packed]") {
  for (int v : {3, 37, 64}) {
    for (float cap : {0.0f, 1.5f}) {
      INFO("V " << v << ", softcap " << cap);
      check_packed_rows<float, float>(v, cap);
      check_packed_rows<bf16, bf16>(v, cap);
    }
  }
}

TEST_CASE("the packed cross-entropy backward matches finite differences", "[model][cross_entropy][packed][gradcheck]") {
  for (double cap : {0.0, 1.5}) {
    INFO("softcap " << cap);
    Head head;  // V = 11: five packs of two doubles and a tail of one
    Matrix<double> storage("logits", 6, 16);
    const Matrix<double> logits = Kokkos::subview(storage, Kokkos::ALL(), std::make_pair(0, head.v));
    REQUIRE(model::ops::detail::packs_aligned<2>(logits));
    const double grad_scale = 0.25;
    auto loss = [&] {
      return grad_scale * model::ops::cross_entropy_forward<double, true>(ExecSpace(), head.x, head.w, head.targets, cap,
                                                                          logits, head.lse, head.losses);
    };
    const double value = loss();
    CHECK(value == Approx(grad_scale * head.forward(cap)).epsilon(1e-13));  // the two-pass forward's loss
    loss();
    Kokkos::deep_copy(head.dw, 0.0);
    model::ops::cross_entropy_backward<double, true>(ExecSpace(), head.x, head.w, head.targets, cap, logits, head.lse,
                                                     grad_scale, head.dx, head.dw);
    test::check_gradient("packed cross_entropy dx", head.x, head.dx, loss);
    test::check_gradient("packed cross_entropy dW", head.w, head.dw, loss);
  }
}

namespace {
// Loss, dx and dW of the model's output head (model_base.hpp) with its three products run as wide
// as the vocabulary or padded to the logits' rows.
template <class A>
auto output_head(const Matrix<double>& x, const Matrix<double>& w, const TokenMatrix& targets, float cap, bool padded) {
  const std::size_t n = x.extent(0), c = x.extent(1), v = w.extent(0);
  const ExecSpace exec;
  const auto xa = test::converted<Matrix<A>>("x", x), wa = test::converted<Matrix<A>>("w", w);
  model::OutputHead<float, A> head("kgpt::test::", n, v, c, padded);
  Matrix<A> dx("dx", n, c);
  Matrix<float> dw("dw", v, c);
  random::fill_normal(dw, 66, 2, 1.0);  // the head's gradient accumulates
  const Kokkos::View<double, MemSpace> loss("loss");
  head.forward(exec, xa, wa, targets, cap, loss);
  head.backward(exec, xa, wa, dw, targets, cap, 0.5f, dx);
  double host_loss = 0;
  Kokkos::deep_copy(host_loss, loss);
  return std::make_tuple(host_loss, Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dx),
                         Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dw));
}

template <class A>
void check_padded_products(const Matrix<double>& x, const Matrix<double>& w, const TokenMatrix& targets, float cap) {
  const auto narrow = output_head<A>(x, w, targets, cap, false);
  const auto padded = output_head<A>(x, w, targets, cap, true);
  // The same logits (each a product of a row of x and a row of W); dx adds exact zeros for the
  // padded columns, in another order where the product blocks its sum otherwise.
  const double tolerance = std::is_same<A, bf16>::value ? 1e-2 : 1e-5;
  CHECK(std::isfinite(std::get<0>(narrow)));
  CHECK(std::get<0>(padded) == Approx(std::get<0>(narrow)).epsilon(1e-6));
  CHECK(relative_difference(std::get<1>(padded), std::get<1>(narrow)) < tolerance);
  CHECK(relative_difference(std::get<2>(padded), std::get<2>(narrow)) < tolerance);
}
}  // namespace

TEST_CASE("the output head's products padded to its logits' rows give the loss and gradients of unpadded ones",
          "[model][cross_entropy][padded]") {
  const int b = 2, t = 8, n = b * t, c = 16;
  for (int v : {37, 64}) {
    Matrix<double> x("x", n, c), w("w", v, c);
    random::fill_normal(x, 66, 0, 1.0);
    random::fill_normal(w, 66, 1, 1.0);
    const TokenMatrix targets = cycling_targets(b, t, v, 5, 1);
    for (float cap : {0.0f, 1.5f}) {
      INFO("V " << v << ", softcap " << cap);
      check_padded_products<float>(x, w, targets, cap);
      check_padded_products<bf16>(x, w, targets, cap);
    }
  }
  // The padded weights and the padded weight gradient (64 rows of C each) are the only memory it
  // adds, and only where V is not a multiple of 64.
  using Head = model::OutputHead<float, bf16>;
  CHECK(Head::bytes(n, 37, c, true) - Head::bytes(n, 37, c, false) == 64 * c * (sizeof(bf16) + sizeof(float)));
  CHECK(Head::bytes(n, 64, c, true) == Head::bytes(n, 64, c, false));
}
