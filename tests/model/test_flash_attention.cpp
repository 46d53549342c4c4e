// The fused (flash-style) attention against the GEMM attention of attention.hpp, a naive reference,
// finite differences, and causality.
#include <catch2/catch.hpp>

#include "model/gradcheck.hpp"
#include "model/ops/attention.hpp"
#include "model/ops/flash_attention.hpp"

using namespace kgpt;

namespace {

struct Shape {
  int b, h, kv, t, d;
};

template <class T>
struct Inputs {
  Tensor4<T> q, k, v;
  Inputs(const Shape& s, std::uint64_t seed)
      : q("q", s.b, s.h, s.t, s.d), k("k", s.b, s.kv, s.t, s.d), v("v", s.b, s.kv, s.t, s.d) {
    random::fill_normal(q, seed, 0, 1.0);
    random::fill_normal(k, seed, 1, 1.0);
    random::fill_normal(v, seed, 2, 1.0);
  }
};

// Largest |a - b| / max(1, |b|) over two Views of the same shape.
template <class A, class B>
double max_relative_difference(const A& a, const B& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double worst = 0;
  for (std::size_t n = 0; n < a.span(); ++n) {
    const double x = ha.data()[n], y = hb.data()[n];
    worst = std::max(worst, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  return worst;
}

}  // namespace

TEST_CASE("fused attention equals the GEMM attention, forward and backward, with GQA", "[model][attention][flash]") {
  for (const Shape s : {Shape{2, 4, 2, 7, 8}, Shape{1, 3, 3, 33, 16}, Shape{2, 4, 1, 12, 32}, Shape{1, 2, 2, 5, 64},
                        Shape{1, 1, 1, 3, 128}}) {
    INFO("B " << s.b << " H " << s.h << " KV " << s.kv << " T " << s.t << " D " << s.d);
    const Inputs<double> in(s, 40 + s.d);
    Tensor4<double> p("p", s.b, s.h, s.t, s.t), o("o", s.b, s.h, s.t, s.d), o_fused("o_fused", s.b, s.h, s.t, s.d);
    Tensor3<double> lse("lse", s.b, s.h, s.t), delta("delta", s.b, s.h, s.t);
    model::ops::attention_forward<double>(ExecSpace(), in.q, in.k, in.v, p, o);
    Kokkos::deep_copy(o_fused, std::nan(""));  // every element must be written
    model::ops::flash_attention_forward<double>(ExecSpace(), in.q, in.k, in.v, lse, o_fused);
    CHECK(max_relative_difference(o_fused, o) < 1e-13);

    const auto d_o = test::random_like("d_o", o, 77);
    Tensor4<double> dq("dq", s.b, s.h, s.t, s.d), dk("dk", s.b, s.kv, s.t, s.d), dv("dv", s.b, s.kv, s.t, s.d);
    Tensor4<double> dq_f("dq_f", s.b, s.h, s.t, s.d), dk_f("dk_f", s.b, s.kv, s.t, s.d), dv_f("dv_f", s.b, s.kv, s.t, s.d);
    Tensor4<double> scratch("scratch", s.b, s.h, s.t, s.t);
    model::ops::attention_backward<double>(ExecSpace(), in.q, in.k, in.v, p, d_o, dq, dk, dv, scratch);
    for (const auto& g : {dq_f, dk_f, dv_f}) Kokkos::deep_copy(g, std::nan(""));
    model::ops::flash_attention_backward<double>(ExecSpace(), in.q, in.k, in.v, o_fused, lse, d_o, delta, dq_f, dk_f,
                                                 dv_f);
    CHECK(max_relative_difference(dq_f, dq) < 1e-12);
    CHECK(max_relative_difference(dk_f, dk) < 1e-12);
    CHECK(max_relative_difference(dv_f, dv) < 1e-12);
  }
}

TEST_CASE("fused attention backward matches finite differences", "[model][attention][flash][gradcheck]") {
  const Shape s{2, 4, 2, 6, 8};
  const Inputs<double> in(s, 91);
  Tensor4<double> o("o", s.b, s.h, s.t, s.d), dq("dq", s.b, s.h, s.t, s.d);
  Tensor4<double> dk("dk", s.b, s.kv, s.t, s.d), dv("dv", s.b, s.kv, s.t, s.d);
  Tensor3<double> lse("lse", s.b, s.h, s.t), delta("delta", s.b, s.h, s.t);
  const auto w = test::random_like("w", o, 92);
  auto loss = [&] {
    model::ops::flash_attention_forward<double>(ExecSpace(), in.q, in.k, in.v, lse, o);
    return test::dot(w, o);
  };
  loss();
  model::ops::flash_attention_backward<double>(ExecSpace(), in.q, in.k, in.v, o, lse, w, delta, dq, dk, dv);
  test::check_gradient("fused attention dq", in.q, dq, loss);
  test::check_gradient("fused attention dk", in.k, dk, loss);
  test::check_gradient("fused attention dv", in.v, dv, loss);
}

TEST_CASE("fused attention is causal and stable for large scores", "[model][attention][flash]") {
  const Shape s{1, 2, 1, 9, 16};
  Inputs<float> in(s, 5);
  Tensor4<float> o1("o1", s.b, s.h, s.t, s.d), o2("o2", s.b, s.h, s.t, s.d);
  Tensor3<float> lse("lse", s.b, s.h, s.t);
  model::ops::flash_attention_forward<float>(ExecSpace(), in.q, in.k, in.v, lse, o1);
  // Change key/value row 4 and every later query: rows 0..3 must not move.
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.v);
  for (int x = 0; x < s.d; ++x) {
    hk(0, 0, 4, x) += 1.0f;
    hv(0, 0, 4, x) -= 2.0f;
  }
  Kokkos::deep_copy(in.k, hk);
  Kokkos::deep_copy(in.v, hv);
  model::ops::flash_attention_forward<float>(ExecSpace(), in.q, in.k, in.v, lse, o2);
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o1);
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o2);
  for (int hq = 0; hq < s.h; ++hq) {
    for (int r = 0; r < s.t; ++r) {
      bool same = true;
      for (int x = 0; x < s.d; ++x) same = same && h1(0, hq, r, x) == h2(0, hq, r, x);
      CHECK(same == (r < 4));
    }
  }
  // Scores of several hundred: exp would overflow without the running maximum.
  Kokkos::deep_copy(in.q, 30.0f);
  model::ops::flash_attention_forward<float>(ExecSpace(), in.q, in.k, in.v, lse, o2);
  auto h3 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o2);
  for (std::size_t n = 0; n < o2.span(); ++n) REQUIRE(std::isfinite(h3.data()[n]));
}

TEST_CASE("fused attention names an unsupported head dimension", "[model][attention][flash]") {
  CHECK(model::ops::flash_attention_supports(64));
  CHECK_FALSE(model::ops::flash_attention_supports(48));
  const Shape s{1, 1, 1, 2, 6};
  const Inputs<double> in(s, 3);
  Tensor4<double> o("o", s.b, s.h, s.t, s.d);
  Tensor3<double> lse("lse", s.b, s.h, s.t);
  CHECK_THROWS_WITH(model::ops::flash_attention_forward<double>(ExecSpace(), in.q, in.k, in.v, lse, o),
                    Catch::Contains("head dimension 6 is not one of 8, 16, 32, 64, 128"));
}
