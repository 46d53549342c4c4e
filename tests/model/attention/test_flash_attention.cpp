// The fused (flash-style) attention against the GEMM attention of attention.hpp, finite
// differences, and causality, on token-major heads; and in bf16 against double.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "model/attention/attention_fixture.hpp"
#include "model/gradcheck.hpp"
#include "model/attention/softmax.hpp"
#include "model/attention/flash_kernels.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using test::AttentionInputs;
using test::AttentionShape;
using test::TokenHeads;

namespace {

template <class A>
struct FusedRun {
  using T = compute_t<A>;
  Tensor3<T> lse, delta;
  explicit FusedRun(const AttentionShape& s) : lse("lse", s.b, s.h, s.t), delta("delta", s.b, s.h, s.t) {}
  void forward(const AttentionInputs<A>& in, const TokenHeads<A>& o) {
    model::ops::flash_attention_forward<A>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), lse, o.view());
  }
  void backward(const AttentionInputs<A>& in, const TokenHeads<A>& o, const TokenHeads<A>& d_o, const TokenHeads<A>& dq,
                const TokenHeads<A>& dk, const TokenHeads<A>& dv) {
    model::ops::flash_attention_backward<A>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), o.in(), lse, d_o.in(), delta,
                                            dq.view(), dk.view(), dv.view());
  }
};

}  // namespace

TEST_CASE("fused attention equals the GEMM attention, forward and backward, with GQA", "[model][attention][flash]") {
  for (const AttentionShape s : {AttentionShape{2, 4, 2, 7, 8}, AttentionShape{1, 3, 3, 33, 16}, AttentionShape{2, 4, 1, 12, 32},
                                 AttentionShape{1, 2, 2, 5, 64}, AttentionShape{1, 1, 1, 3, 128}}) {
    INFO("B " << s.b << " H " << s.h << " KV " << s.kv << " T " << s.t << " D " << s.d);
    const AttentionInputs<double> in(s, 40 + s.d);
    const std::size_t slice = std::size_t(s.b) * s.h * s.t * s.t;
    Vector<double> scores("scores", slice), probs("probs", slice), ds("ds", slice);
    TokenHeads<double> o("o", s.b, s.t, s.h, s.d), o_fused("o_fused", s.b, s.t, s.h, s.d);
    model::ops::attention_forward<double>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), scores.data(), probs.data(), o.view());
    Kokkos::deep_copy(o_fused.m, std::numeric_limits<double>::quiet_NaN());  // every head element must be written
    FusedRun<double> fused(s);
    fused.forward(in, o_fused);
    CHECK(test::max_relative_difference(test::heads_values(o_fused), test::heads_values(o)) < 1e-13);
    CHECK(test::other_columns_hold(o_fused, std::numeric_limits<double>::quiet_NaN()));

    TokenHeads<double> d_o("d_o", s.b, s.t, s.h, s.d);
    random::fill_normal(d_o.m, 77, 0, 1.0);
    TokenHeads<double> dq("dq", s.b, s.t, s.h, s.d), dk("dk", s.b, s.t, s.kv, s.d), dv("dv", s.b, s.t, s.kv, s.d);
    TokenHeads<double> dq_f("dq_f", s.b, s.t, s.h, s.d), dk_f("dk_f", s.b, s.t, s.kv, s.d), dv_f("dv_f", s.b, s.t, s.kv, s.d);
    model::ops::attention_backward<double>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), probs.data(), d_o.in(), scores.data(),
                                           ds.data(), dq.view(), dk.view(), dv.view());
    for (const auto* g : {&dq_f, &dk_f, &dv_f}) Kokkos::deep_copy(g->m, std::numeric_limits<double>::quiet_NaN());
    fused.backward(in, o_fused, d_o, dq_f, dk_f, dv_f);
    CHECK(test::max_relative_difference(test::heads_values(dq_f), test::heads_values(dq)) < 1e-12);
    CHECK(test::max_relative_difference(test::heads_values(dk_f), test::heads_values(dk)) < 1e-12);
    CHECK(test::max_relative_difference(test::heads_values(dv_f), test::heads_values(dv)) < 1e-12);
  }
}

TEST_CASE("fused attention is causal and stable for large scores", "[model][attention][flash]") {
  const AttentionShape s{1, 2, 1, 9, 16};
  AttentionInputs<float> in(s, 5);
  TokenHeads<float> o1("o1", s.b, s.t, s.h, s.d), o2("o2", s.b, s.t, s.h, s.d);
  FusedRun<float> run(s);
  run.forward(in, o1);
  // Change key/value row 4: query rows 0..3 must not move.
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.k.m);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.v.m);
  for (int x = 0; x < s.d; ++x) {
    hk(4, in.k.column(0, x)) += 1.0f;
    hv(4, in.v.column(0, x)) -= 2.0f;
  }
  Kokkos::deep_copy(in.k.m, hk);
  Kokkos::deep_copy(in.v.m, hv);
  run.forward(in, o2);
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o1.m);
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o2.m);
  for (int r = 0; r < s.t; ++r) {
    bool same = true;
    for (std::size_t c = 0; c < o1.m.extent(1); ++c) same = same && h1(r, c) == h2(r, c);
    CHECK(same == (r < 4));
  }
  // Scores of several hundred: exp would overflow without the running maximum.
  Kokkos::deep_copy(in.q.m, 30.0f);
  run.forward(in, o2);
  for (double v : test::heads_values(o2)) REQUIRE(std::isfinite(v));
}

TEST_CASE("fused attention in bf16 agrees with double", "[model][attention][flash][bf16]") {
  const AttentionShape s{2, 4, 2, 16, 16};
  const AttentionInputs<double> in(s, 33);
  TokenHeads<double> o("o", s.b, s.t, s.h, s.d), d_o("d_o", s.b, s.t, s.h, s.d);
  TokenHeads<double> dq("dq", s.b, s.t, s.h, s.d), dk("dk", s.b, s.t, s.kv, s.d), dv("dv", s.b, s.t, s.kv, s.d);
  random::fill_normal(d_o.m, 34, 0, 1.0);
  FusedRun<double> reference(s);
  reference.forward(in, o);
  reference.backward(in, o, d_o, dq, dk, dv);
  AttentionInputs<bf16> low(s, 0);
  low.q.m = test::converted<Matrix<bf16>>("q", in.q.m);
  low.k.m = test::converted<Matrix<bf16>>("k", in.k.m);
  low.v.m = test::converted<Matrix<bf16>>("v", in.v.m);
  TokenHeads<bf16> o16("o", s.b, s.t, s.h, s.d), d_o16("d_o", s.b, s.t, s.h, s.d);
  d_o16.m = test::converted<Matrix<bf16>>("d_o", d_o.m);
  TokenHeads<bf16> dq16("dq", s.b, s.t, s.h, s.d), dk16("dk", s.b, s.t, s.kv, s.d), dv16("dv", s.b, s.t, s.kv, s.d);
  FusedRun<bf16> run(s);
  run.forward(low, o16);
  run.backward(low, o16, d_o16, dq16, dk16, dv16);
  // Inputs and outputs rounded at 2^-8; sums over 16 keys in float.
  CHECK(test::max_relative_difference(test::heads_values(o16), test::heads_values(o)) < 3e-2);
  CHECK(test::max_relative_difference(test::heads_values(dq16), test::heads_values(dq)) < 3e-2);
  CHECK(test::max_relative_difference(test::heads_values(dk16), test::heads_values(dk)) < 3e-2);
  CHECK(test::max_relative_difference(test::heads_values(dv16), test::heads_values(dv)) < 3e-2);
}

TEST_CASE("fused attention names an unsupported head dimension, and its kernels cover what the capability table says",
          "[model][attention][flash]") {
  const auto& fused = config::attention_capability(config::Attention::fused);
  CHECK(fused.head_dim(64));
  CHECK_FALSE(fused.head_dim(48));
  // The kernels run exactly the head dimensions the table lists.
  for (int d = 1; d <= 130; ++d) {
    const AttentionShape shape{1, 1, 1, 2, d};
    const AttentionInputs<float> in(shape, 4);
    TokenHeads<float> out("o", shape.b, shape.t, shape.h, shape.d);
    FusedRun<float> runner(shape);
    bool ran = true;
    try {
      runner.forward(in, out);
    } catch (const Error&) {
      ran = false;
    }
    INFO("head dimension " << d);
    CHECK(ran == fused.head_dim(d));
  }
  const AttentionShape s{1, 1, 1, 2, 6};
  const AttentionInputs<double> in(s, 3);
  TokenHeads<double> o("o", s.b, s.t, s.h, s.d);
  FusedRun<double> run(s);
  CHECK_THROWS_WITH(run.forward(in, o), Catch::Contains("head dimension 6 is not 8, 16, 32, 64 or 128"));
}
