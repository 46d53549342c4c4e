#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "model/gradcheck.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/heads.hpp"

using namespace kgpt;

namespace {

// Naive causal GQA attention on the host, in double.
std::vector<double> reference_attention(const Tensor4<double>& q, const Tensor4<double>& k, const Tensor4<double>& v) {
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  const int b = q.extent(0), h = q.extent(1), t = q.extent(2), d = q.extent(3), group = h / k.extent(1);
  std::vector<double> out(q.span());
  for (int i = 0; i < b; ++i)
    for (int j = 0; j < h; ++j)
      for (int r = 0; r < t; ++r) {
        std::vector<double> w(r + 1);
        double m = -1e300, sum = 0;
        for (int c = 0; c <= r; ++c) {
          double s = 0;
          for (int l = 0; l < d; ++l) s += hq(i, j, r, l) * hk(i, j / group, c, l);
          w[c] = s / std::sqrt(double(d));
          m = std::max(m, w[c]);
        }
        for (int c = 0; c <= r; ++c) sum += (w[c] = std::exp(w[c] - m));
        for (int l = 0; l < d; ++l) {
          double o = 0;
          for (int c = 0; c <= r; ++c) o += w[c] / sum * hv(i, j / group, c, l);
          out[((i * h + j) * t + r) * d + l] = o;
        }
      }
  return out;
}

struct Case {
  int b, h, kv, t, d;
};

}  // namespace

TEST_CASE("attention forward matches a naive causal GQA implementation", "[model][attention]") {
  for (const Case c : {Case{2, 4, 2, 7, 8}, Case{1, 3, 3, 5, 4}, Case{2, 4, 1, 9, 6}}) {
    INFO("B " << c.b << " H " << c.h << " KV " << c.kv << " T " << c.t << " D " << c.d);
    Tensor4<double> q("q", c.b, c.h, c.t, c.d), k("k", c.b, c.kv, c.t, c.d), v("v", c.b, c.kv, c.t, c.d);
    Tensor4<double> p("p", c.b, c.h, c.t, c.t), o("o", c.b, c.h, c.t, c.d);
    random::fill_normal(q, 8, 0, 1.0);
    random::fill_normal(k, 8, 1, 1.0);
    random::fill_normal(v, 8, 2, 1.0);
    model::ops::attention_forward<double>(ExecSpace(), q, k, v, p, o);
    const auto expected = reference_attention(q, k, v);
    auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
    for (std::size_t n = 0; n < o.span(); ++n) REQUIRE(ho.data()[n] == Approx(expected[n]).epsilon(1e-12).margin(1e-14));
    auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p);
    for (int r = 0; r < c.t; ++r) {
      double row = 0;
      for (int col = 0; col < c.t; ++col) {
        if (col > r) CHECK(hp(0, 0, r, col) == 0.0);
        row += hp(0, 0, r, col);
      }
      CHECK(row == Approx(1.0));
    }
  }
}

TEST_CASE("attention is causal", "[model][attention]") {
  const int b = 1, h = 2, kv = 1, t = 6, d = 4, changed = 3;
  Tensor4<double> q("q", b, h, t, d), k("k", b, kv, t, d), v("v", b, kv, t, d), p("p", b, h, t, t);
  Tensor4<double> o1("o1", b, h, t, d), o2("o2", b, h, t, d);
  random::fill_normal(q, 3, 0, 1.0);
  random::fill_normal(k, 3, 1, 1.0);
  random::fill_normal(v, 3, 2, 1.0);
  model::ops::attention_forward<double>(ExecSpace(), q, k, v, p, o1);
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  for (int l = 0; l < d; ++l) {
    hk(0, 0, changed, l) += 1.0;
    hv(0, 0, changed, l) -= 2.0;
    for (int j = 0; j < h; ++j) hq(0, j, changed, l) *= 3.0;
  }
  Kokkos::deep_copy(q, hq);
  Kokkos::deep_copy(k, hk);
  Kokkos::deep_copy(v, hv);
  model::ops::attention_forward<double>(ExecSpace(), q, k, v, p, o2);
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o1);
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o2);
  for (int j = 0; j < h; ++j)
    for (int r = 0; r < t; ++r) {
      bool same = true;
      for (int l = 0; l < d; ++l) same = same && h1(0, j, r, l) == h2(0, j, r, l);
      CHECK(same == (r < changed));
    }
}

TEST_CASE("attention backward matches finite differences, with GQA", "[model][attention][gradcheck]") {
  const int b = 2, h = 4, kv = 2, t = 5, d = 4;
  Tensor4<double> q("q", b, h, t, d), k("k", b, kv, t, d), v("v", b, kv, t, d), p("p", b, h, t, t), o("o", b, h, t, d);
  Tensor4<double> dq("dq", b, h, t, d), dk("dk", b, kv, t, d), dv("dv", b, kv, t, d);
  Tensor4<double> scratch("scratch", b, h, t, t);
  random::fill_normal(q, 12, 0, 1.0);
  random::fill_normal(k, 12, 1, 1.0);
  random::fill_normal(v, 12, 2, 1.0);
  const auto w = test::random_like("w", o, 13);
  auto loss = [&] {
    model::ops::attention_forward<double>(ExecSpace(), q, k, v, p, o);
    return test::dot(w, o);
  };
  loss();
  model::ops::attention_backward<double>(ExecSpace(), q, k, v, p, w, dq, dk, dv, scratch);
  test::check_gradient("attention dq", q, dq, loss);
  test::check_gradient("attention dk", k, dk, loss);
  test::check_gradient("attention dv", v, dv, loss);
}

TEST_CASE("float attention agrees with double", "[model][attention]") {
  const int b = 1, h = 2, kv = 1, t = 16, d = 8;
  Tensor4<double> q("q", b, h, t, d), k("k", b, kv, t, d), v("v", b, kv, t, d), p("p", b, h, t, t), o("o", b, h, t, d);
  random::fill_normal(q, 21, 0, 1.0);
  random::fill_normal(k, 21, 1, 1.0);
  random::fill_normal(v, 21, 2, 1.0);
  Tensor4<float> qf("qf", b, h, t, d), kf("kf", b, kv, t, d), vf("vf", b, kv, t, d), pf("pf", b, h, t, t), of("of", b, h, t, d);
  random::fill_normal(qf, 21, 0, 1.0);
  random::fill_normal(kf, 21, 1, 1.0);
  random::fill_normal(vf, 21, 2, 1.0);
  model::ops::attention_forward<double>(ExecSpace(), q, k, v, p, o);
  model::ops::attention_forward<float>(ExecSpace(), qf, kf, vf, pf, of);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  auto hof = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), of);
  for (std::size_t n = 0; n < o.span(); ++n) CHECK(hof.data()[n] == Approx(ho.data()[n]).margin(1e-5));
}

TEST_CASE("split_heads and merge_heads are inverse permutations", "[model][heads]") {
  const int b = 2, t = 3, h = 2, kv = 1, d = 4;
  Matrix<double> m("m", b * t, (h + 2 * kv) * d), back("back", b * t, (h + 2 * kv) * d);
  random::fill_normal(m, 30, 0, 1.0);
  Tensor4<double> q("q", b, h, t, d), k("k", b, kv, t, d), v("v", b, kv, t, d);
  model::ops::split_heads<double>(ExecSpace(), m, 0, q);
  model::ops::split_heads<double>(ExecSpace(), m, h * d, k);
  model::ops::split_heads<double>(ExecSpace(), m, (h + kv) * d, v);
  auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  CHECK(hk(1, 0, 2, 3) == hm(1 * t + 2, h * d + 3));
  model::ops::merge_heads<double>(ExecSpace(), q, 0, back);
  model::ops::merge_heads<double>(ExecSpace(), k, h * d, back);
  model::ops::merge_heads<double>(ExecSpace(), v, (h + kv) * d, back);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), back);
  for (std::size_t n = 0; n < m.span(); ++n) CHECK(hb.data()[n] == hm.data()[n]);
}
