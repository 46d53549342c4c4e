// golf's fused q/k path (per head: RMSNorm, rotary embedding, query gain) against a plain host
// reference, finite differences, and in float and bf16 against double.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/ops/qk_norm_rope.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using test::host_values;

namespace {

// B 2, T 5, H 4 query heads, KV 2 key heads of D 8, in a raw (N, W) matrix with q at column 0, k
// after it, and v columns the op must leave alone.
// rope: the rotated dimensions of a head (partial RoPE, model.rope_dims), 0 for all.
struct Case {
  int b = 2, t = 5, h = 4, kv = 2, d = 8, rope = 0;
  int n() const { return b * t; }
  int width() const { return (h + 2 * kv) * d; }
  model::ops::QkShape shape() const { return {h, kv, d, t, 0, h * d, rope / 2}; }
};

constexpr double kEps = 1.1920928955078125e-07;

template <class T>
struct Tables {
  Matrix<T> cos, sin;
  explicit Tables(int t_max, int d, int rope = 0) : cos("cos", t_max, d / 2), sin("sin", t_max, d / 2) {
    model::ops::rope_tables(cos, sin, 100.0, static_cast<std::size_t>(rope / 2));
  }
};

// The forward on the host in double, straight from the definitions.
void reference(const Case& c, const std::vector<double>& raw, const std::vector<double>& gain, std::vector<double>& q,
               std::vector<double>& k) {
  q.assign(std::size_t(c.n()) * c.h * c.d, 0);
  k.assign(std::size_t(c.n()) * c.kv * c.d, 0);
  const int rotated = c.rope > 0 ? c.rope : c.d, half = rotated / 2;
  for (int n = 0; n < c.n(); ++n) {
    const int t = n % c.t;
    for (int head = 0; head < c.h + c.kv; ++head) {
      const bool is_q = head < c.h;
      const int col = head * c.d;  // q heads, then k heads, from column 0
      double sum = 0;
      for (int x = 0; x < c.d; ++x) sum += raw[n * c.width() + col + x] * raw[n * c.width() + col + x];
      const double r = 1 / std::sqrt(sum / c.d + kEps);
      const double g = is_q ? gain[head] : 1.0;
      double* out = is_q ? &q[(n * c.h + head) * c.d] : &k[(n * c.kv + head - c.h) * c.d];
      for (int i = 0; i < half; ++i) {
        const double angle = t * std::pow(100.0, -2.0 * i / rotated);
        const double x1 = raw[n * c.width() + col + i] * r, x2 = raw[n * c.width() + col + i + half] * r;
        out[i] = g * (x1 * std::cos(angle) + x2 * std::sin(angle));
        out[i + half] = g * (x2 * std::cos(angle) - x1 * std::sin(angle));
      }
      for (int i = rotated; i < c.d; ++i) out[i] = g * raw[n * c.width() + col + i] * r;  // passed through
    }
  }
}

// The ops with 16-byte packs per lane (a GPU's kernels) or a lane per feature pair; the host runs both.
template <class T, class... Args>
void forward(bool packed, const Args&... args) {
  if (packed) {
    model::ops::qk_norm_rope_forward<T, true>(args...);
  } else {
    model::ops::qk_norm_rope_forward<T, false>(args...);
  }
}
template <class T, class... Args>
void backward(bool packed, const Args&... args) {
  if (packed) {
    model::ops::qk_norm_rope_backward<T, true>(args...);
  } else {
    model::ops::qk_norm_rope_backward<T, false>(args...);
  }
}

}  // namespace

TEST_CASE("rope tables hold cos and sin of t base^(-2i/D)", "[model][rope]") {
  Tables<double> tables(7, 8);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tables.cos);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tables.sin);
  for (int t = 0; t < 7; ++t)
    for (int i = 0; i < 4; ++i) {
      CHECK(hc(t, i) == Approx(std::cos(t * std::pow(100.0, -2.0 * i / 8))).epsilon(1e-15));
      CHECK(hs(t, i) == Approx(std::sin(t * std::pow(100.0, -2.0 * i / 8))).margin(1e-15));
    }
}

TEST_CASE("rope tables of partial RoPE rotate R/2 pairs at t base^(-2i/R), the rest by angle 0", "[model][rope]") {
  Tables<double> tables(7, 16, 4);
  auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tables.cos);
  auto hs = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), tables.sin);
  for (int t = 0; t < 7; ++t) {
    for (int i = 0; i < 2; ++i) {
      CHECK(hc(t, i) == Approx(std::cos(t * std::pow(100.0, -2.0 * i / 4))).epsilon(1e-15));
      CHECK(hs(t, i) == Approx(std::sin(t * std::pow(100.0, -2.0 * i / 4))).margin(1e-15));
    }
    for (int i = 2; i < 8; ++i) {
      CHECK(hc(t, i) == 1.0);
      CHECK(hs(t, i) == 0.0);
    }
  }
}

TEST_CASE("q/k norm, rope and gain match their definitions and leave v alone", "[model][rope][head_gain]") {
  const bool packed = GENERATE(false, true);
  Case c;
  c.rope = GENERATE(0, 4, 2);
  INFO((packed ? "16-byte packs per lane" : "a lane per feature pair") << ", rotating " << c.rope << " (0: all)");
  Matrix<double> raw("raw", c.n(), c.width()), q("q", c.n(), c.h * c.d), k("k", c.n(), c.kv * c.d);
  Vector<double> gain("gain", c.h), q_rstd("q_rstd", c.n() * c.h), k_rstd("k_rstd", c.n() * c.kv);
  random::fill_normal(raw, 1, 0, 2.0);
  random::fill_normal(gain, 1, 1, 1.0);
  const Tables<double> tables(c.t, c.d, c.rope);
  const auto before = host_values(raw);
  forward<double>(packed, ExecSpace(), raw, c.shape(), tables.cos, tables.sin, gain, q, k, q_rstd, k_rstd,
                                           kEps);
  std::vector<double> q_expected, k_expected;
  reference(c, host_values(raw), host_values(gain), q_expected, k_expected);
  const auto q_got = host_values(q), k_got = host_values(k);
  for (std::size_t i = 0; i < q_got.size(); ++i) REQUIRE(q_got[i] == Approx(q_expected[i]).epsilon(1e-12).margin(1e-14));
  for (std::size_t i = 0; i < k_got.size(); ++i) REQUIRE(k_got[i] == Approx(k_expected[i]).epsilon(1e-12).margin(1e-14));
  CHECK(host_values(raw) == before);
}

TEST_CASE("q/k norm, rope and gain backward matches finite differences", "[model][rope][head_gain][gradcheck]") {
  const bool packed = GENERATE(false, true);
  Case c;
  c.rope = GENERATE(0, 4);
  INFO((packed ? "16-byte packs per lane" : "a lane per feature pair") << ", rotating " << c.rope << " (0: all)");
  Matrix<double> raw("raw", c.n(), c.width()), q("q", c.n(), c.h * c.d), k("k", c.n(), c.kv * c.d);
  Matrix<double> wq("wq", c.n(), c.h * c.d), wk("wk", c.n(), c.kv * c.d), d_raw("d_raw", c.n(), c.width());
  Matrix<double> gain_rows("gain_rows", c.n(), c.h);
  Vector<double> gain("gain", c.h), dgain("dgain", c.h), q_rstd("q_rstd", c.n() * c.h), k_rstd("k_rstd", c.n() * c.kv);
  random::fill_normal(raw, 2, 0, 1.5);
  random::fill_normal(gain, 2, 1, 1.0);
  random::fill_normal(wq, 2, 2, 1.0);
  random::fill_normal(wk, 2, 3, 1.0);
  const Tables<double> tables(c.t, c.d, c.rope);
  auto loss = [&] {
    forward<double>(packed, ExecSpace(), raw, c.shape(), tables.cos, tables.sin, gain, q, k, q_rstd,
                                             k_rstd, kEps);
    return test::dot(wq, q) + test::dot(wk, k);
  };
  loss();
  backward<double>(packed, ExecSpace(), raw, c.shape(), tables.cos, tables.sin, gain, q_rstd, k_rstd,
                                            wq, wk, d_raw, dgain, gain_rows);
  // v columns get no gradient from this op; d_raw's there stay as they were (zero).
  test::check_gradient("qk d_raw", raw, d_raw, loss);
  test::check_gradient("qk dgain", gain, dgain, loss);
  // The gain gradient accumulates.
  const auto first = host_values(dgain);
  backward<double>(packed, ExecSpace(), raw, c.shape(), tables.cos, tables.sin, gain, q_rstd, k_rstd,
                                            wq, wk, d_raw, dgain, gain_rows);
  const auto second = host_values(dgain);
  for (int j = 0; j < c.h; ++j) CHECK(second[j] == Approx(2 * first[j]));
}

TEST_CASE("q/k norm, rope and gain in float and bf16 agree with double", "[model][rope][float][bf16]") {
  const bool packed = GENERATE(false, true);
  Case c;
  c.rope = GENERATE(0, 16);
  INFO((packed ? "16-byte packs per lane" : "a lane per feature pair") << ", rotating " << c.rope << " (0: all)");
  c.b = 3;
  c.t = 32;
  c.d = 64;
  Matrix<double> raw("raw", c.n(), c.width()), dq("dq", c.n(), c.h * c.d), dk("dk", c.n(), c.kv * c.d);
  Vector<double> gain("gain", c.h);
  random::fill_normal(raw, 5, 0, 2.0);
  random::fill_normal(dq, 5, 1, 1.0);
  random::fill_normal(dk, 5, 2, 1.0);
  random::fill_normal(gain, 5, 3, 1.0);
  auto run = [&](auto zero) {
    using A = decltype(zero);
    using T = compute_t<A>;
    const Tables<T> tables(c.t, c.d, c.rope);
    const auto raw_a = test::converted<Matrix<A>>("raw", raw);
    const auto dq_a = test::converted<Matrix<A>>("dq", dq), dk_a = test::converted<Matrix<A>>("dk", dk);
    const auto gain_t = test::converted<Vector<T>>("gain", gain);
    Matrix<A> q("q", c.n(), c.h * c.d), k("k", c.n(), c.kv * c.d), d_raw("d_raw", c.n(), c.width());
    Vector<T> q_rstd("q_rstd", c.n() * c.h), k_rstd("k_rstd", c.n() * c.kv), dgain("dgain", c.h);
    Matrix<T> gain_rows("gain_rows", c.n(), c.h);
    forward<T>(packed, ExecSpace(), raw_a, c.shape(), tables.cos, tables.sin, gain_t, q, k, q_rstd, k_rstd,
                                        T(kEps));
    backward<T>(packed, ExecSpace(), raw_a, c.shape(), tables.cos, tables.sin, gain_t, q_rstd, k_rstd, dq_a,
                                         dk_a, d_raw, dgain, gain_rows);
    return std::make_tuple(host_values(q), host_values(k), host_values(d_raw), host_values(dgain));
  };
  const auto r64 = run(0.0);
  const auto r32 = run(0.0f);
  const auto r16 = run(bf16(0.0f));
  auto worst = [](const std::vector<double>& a, const std::vector<double>& b) {
    double w = 0;
    for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, std::fabs(a[i] - b[i]) / (1 + std::fabs(b[i])));
    return w;
  };
  CHECK(worst(std::get<0>(r32), std::get<0>(r64)) < 1e-6);
  CHECK(worst(std::get<1>(r32), std::get<1>(r64)) < 1e-6);
  CHECK(worst(std::get<2>(r32), std::get<2>(r64)) < 1e-6);
  CHECK(worst(std::get<3>(r32), std::get<3>(r64)) < 1e-5);  // a sum over 96 rows of 64 products
  // bf16: the inputs and outputs rounded at 2^-8 relative (values of order 1 to 3 here).
  CHECK(worst(std::get<0>(r16), std::get<0>(r64)) < 2e-2);
  CHECK(worst(std::get<1>(r16), std::get<1>(r64)) < 2e-2);
  CHECK(worst(std::get<2>(r16), std::get<2>(r64)) < 2e-2);
  CHECK(worst(std::get<3>(r16), std::get<3>(r64)) < 2e-2);
}
