// The GEMM attention of attention/softmax.hpp on token-major heads: against a naive reference, for
// causality, and in float and bf16 against double (its gradient check is every implementation's,
// test_attention_gradients.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "model/attention/attention.hpp"
#include "model/attention/attention_fixture.hpp"
#include "model/gradcheck.hpp"
#include "model/attention/softmax.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using test::AttentionInputs;
using test::AttentionShape;
using test::TokenHeads;

namespace {

// The GEMM attention forward and backward in activation type A (scores in compute_t<A>).
template <class A>
struct GemmRun {
  using T = compute_t<A>;
  Vector<T> scores;
  Vector<A> probs, ds;
  GemmRun(const AttentionShape& s)
      : scores("scores", std::size_t(s.b) * s.h * s.t * s.t),
        probs("probs", std::size_t(s.b) * s.h * s.t * s.t),
        ds("ds", std::size_t(s.b) * s.h * s.t * s.t) {}
  void forward(const AttentionInputs<A>& in, const TokenHeads<A>& o) {
    model::ops::attention_forward<A>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), scores.data(), probs.data(), o.view());
  }
  void backward(const AttentionInputs<A>& in, const TokenHeads<A>& d_o, const TokenHeads<A>& dq, const TokenHeads<A>& dk,
                const TokenHeads<A>& dv) {
    model::ops::attention_backward<A>(ExecSpace(), in.q.in(), in.k.in(), in.v.in(), probs.data(), d_o.in(), scores.data(),
                                      ds.data(), dq.view(), dk.view(), dv.view());
  }
};

// The same inputs in type A.
template <class A>
AttentionInputs<A> converted_inputs(const AttentionShape& s, const AttentionInputs<double>& in) {
  AttentionInputs<A> out(s, 0);
  out.q.m = test::converted<Matrix<A>>("q", in.q.m);
  out.k.m = test::converted<Matrix<A>>("k", in.k.m);
  out.v.m = test::converted<Matrix<A>>("v", in.v.m);
  return out;
}

}  // namespace

TEST_CASE("attention forward matches a naive causal GQA implementation, through strides", "[model][attention]") {
  for (const AttentionShape s : {AttentionShape{2, 4, 2, 7, 8}, AttentionShape{1, 3, 3, 5, 4}, AttentionShape{2, 4, 1, 9, 6}}) {
    INFO("B " << s.b << " H " << s.h << " KV " << s.kv << " T " << s.t << " D " << s.d);
    const AttentionInputs<double> in(s, 8);
    TokenHeads<double> o("o", s.b, s.t, s.h, s.d);
    Kokkos::deep_copy(o.m, std::numeric_limits<double>::quiet_NaN());
    GemmRun<double> run(s);
    run.forward(in, o);
    CHECK(test::max_relative_difference(test::heads_values(o), test::reference_attention(in)) < 1e-12);
    CHECK(test::other_columns_hold(o, std::numeric_limits<double>::quiet_NaN()));
    auto hp = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), run.probs);
    for (int r = 0; r < s.t; ++r) {
      double row = 0;
      for (int col = 0; col < s.t; ++col) {
        if (col > r) CHECK(hp(r * s.t + col) == 0.0);
        row += hp(r * s.t + col);
      }
      CHECK(row == Approx(1.0));
    }
  }
}

TEST_CASE("attention is causal", "[model][attention]") {
  const AttentionShape s{1, 2, 1, 6, 4};
  const int changed = 3;
  AttentionInputs<double> in(s, 3);
  TokenHeads<double> o1("o1", s.b, s.t, s.h, s.d), o2("o2", s.b, s.t, s.h, s.d);
  GemmRun<double> run(s);
  run.forward(in, o1);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.k.m);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.v.m);
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in.q.m);
  for (int l = 0; l < s.d; ++l) {
    hk(changed, in.k.column(0, l)) += 1.0;
    hv(changed, in.v.column(0, l)) -= 2.0;
    for (int j = 0; j < s.h; ++j) hq(changed, in.q.column(j, l)) *= 3.0;
  }
  Kokkos::deep_copy(in.q.m, hq);
  Kokkos::deep_copy(in.k.m, hk);
  Kokkos::deep_copy(in.v.m, hv);
  run.forward(in, o2);
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o1.m);
  auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o2.m);
  for (int r = 0; r < s.t; ++r) {
    bool same = true;
    for (std::size_t c = 0; c < o1.m.extent(1); ++c) same = same && h1(r, c) == h2(r, c);
    CHECK(same == (r < changed));
  }
}

TEST_CASE("attention in float and bf16 agrees with double", "[model][attention][float][bf16]") {
  const AttentionShape s{2, 4, 2, 16, 8};
  const AttentionInputs<double> in(s, 21);
  TokenHeads<double> o("o", s.b, s.t, s.h, s.d), d_o("d_o", s.b, s.t, s.h, s.d);
  random::fill_normal(d_o.m, 22, 0, 1.0);
  TokenHeads<double> dq("dq", s.b, s.t, s.h, s.d), dk("dk", s.b, s.t, s.kv, s.d), dv("dv", s.b, s.t, s.kv, s.d);
  GemmRun<double> reference(s);
  reference.forward(in, o);
  reference.backward(in, d_o, dq, dk, dv);
  auto compare = [&](auto zero, double tolerance) {
    using A = decltype(zero);
    const AttentionInputs<A> low = converted_inputs<A>(s, in);
    TokenHeads<A> o_low("o", s.b, s.t, s.h, s.d), d_o_low("d_o", s.b, s.t, s.h, s.d);
    d_o_low.m = test::converted<Matrix<A>>("d_o", d_o.m);
    TokenHeads<A> dq_low("dq", s.b, s.t, s.h, s.d), dk_low("dk", s.b, s.t, s.kv, s.d), dv_low("dv", s.b, s.t, s.kv, s.d);
    GemmRun<A> run(s);
    run.forward(low, o_low);
    run.backward(low, d_o_low, dq_low, dk_low, dv_low);
    CHECK(test::max_relative_difference(test::heads_values(o_low), test::heads_values(o)) < tolerance);
    CHECK(test::max_relative_difference(test::heads_values(dq_low), test::heads_values(dq)) < tolerance);
    CHECK(test::max_relative_difference(test::heads_values(dk_low), test::heads_values(dk)) < tolerance);
    CHECK(test::max_relative_difference(test::heads_values(dv_low), test::heads_values(dv)) < tolerance);
  };
  compare(0.0f, 1e-5);
  // bf16 rounds the inputs, P, dS and the outputs at 2^-8 relative each: a few of those in the
  // products of 16 terms; 3e-2 of each value's scale (of order 1) is well above that and far below
  // a wrong result.
  compare(bf16(0.0f), 3e-2);
}

TEST_CASE("the memory plan's estimate of cuDNN's workspace, for either backward", "[model][attention][memory]") {
  // Golf's micro-batch: 64 sequences of 1,024 tokens, 8 query heads of 64 sharing 4 K/V heads.
  model::AttentionShape golf{9, 64, 8, 4, 1024, 64};
  // The grouped K/V heads' fp32 dK and dV: 2 x 64 x 4 x 1,024 x 64 values (128 MiB), either way.
  const std::size_t grouped = 134217728u;
  // Deterministic: dP of 64 x 8 (1,024 x 1,024) bf16 values (1 GiB) and 64 x 8 x 1,024 fp32 sums.
  CHECK(model::cudnn_workspace_estimate(golf) == 1073741824u + 2097152u + grouped);
  golf.deterministic = false;
  // Otherwise: dQ of 64 x 8 x 1,024 x 64 fp32 values (128 MiB) and the same sums.
  CHECK(model::cudnn_workspace_estimate(golf) == 134217728u + 2097152u + grouped);
  // As many K/V heads as query heads: no dK and dV accumulators.
  model::AttentionShape full = golf;
  full.kv_heads = 8;
  CHECK(model::cudnn_workspace_estimate(full) == 134217728u + 2097152u);

  // Sequences of 1,000 tokens: dP is padded to 1,024 on both sides, the sums and dK, dV are not.
  model::AttentionShape shorter{9, 64, 8, 4, 1000, 64};
  CHECK(model::cudnn_workspace_estimate(shorter) == 1073741824u + 64u * 8 * 1000 * 4 + 2u * 64 * 4 * 1000 * 64 * 4);

  // The plan counts it as the cudnn attention's library workspace, with the statistics as activations.
  const model::AttentionMemory memory = model::attention_memory(config::Attention::cudnn, shorter, config::Precision::bf16);
  CHECK(memory.library_workspace == model::cudnn_workspace_estimate(shorter));
  CHECK(memory.activations == 9u * 64 * 8 * 1000 * 4);
}
