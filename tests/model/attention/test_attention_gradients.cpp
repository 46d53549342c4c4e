// One gradient check for every attention implementation: each implementation the capability table
// says runs in double at this head dimension (gemm, fused; cuDNN is bf16-only and is compared with
// gemm in test_attention_cudnn.cpp) goes through the same Attention interface the models use, with
// grouped-query attention, against central differences of sum(W * O).
#include <catch2/catch.hpp>

#include <string>

#include "model/attention/attention.hpp"
#include "model/attention/attention_fixture.hpp"
#include "model/gradcheck.hpp"

using namespace kgpt;
using test::AttentionInputs;
using test::AttentionShape;
using test::TokenHeads;

TEST_CASE("every attention implementation's backward matches finite differences, with GQA", "[model][attention][gradcheck]") {
  const AttentionShape s{2, 4, 2, 6, 8};
  int checked = 0;
  for (const config::Attention kind : {config::Attention::gemm, config::Attention::fused, config::Attention::cudnn}) {
    if (!config::attention_runs(kind, s.d, config::Precision::fp32)) continue;
    INFO("attention " << config::name_of(kind));
    AttentionInputs<double> in(s, 91);
    TokenHeads<double> o("o", s.b, s.t, s.h, s.d), w("w", s.b, s.t, s.h, s.d);
    TokenHeads<double> dq("dq", s.b, s.t, s.h, s.d), dk("dk", s.b, s.t, s.kv, s.d), dv("dv", s.b, s.t, s.kv, s.d);
    random::fill_normal(w.m, 92, 0, 1.0);
    const auto attention = model::make_attention<double>(kind, model::AttentionShape{1, s.b, s.h, s.kv, s.t, s.d}, "test::");
    REQUIRE(std::string(attention->name()) == config::name_of(kind));
    auto loss = [&] {
      attention->forward(ExecSpace(), 0, in.q.in(), in.k.in(), in.v.in(), o.view());
      return test::dot(w.m, o.m);
    };
    loss();
    attention->backward(ExecSpace(), 0, in.q.in(), in.k.in(), in.v.in(), o.in(), w.in(), dq.view(), dk.view(), dv.view());
    // The columns outside the heads have no gradient, and the analytic one there stays 0.
    test::check_gradient("dq", in.q.m, dq.m, loss);
    test::check_gradient("dk", in.k.m, dk.m, loss);
    test::check_gradient("dv", in.v.m, dv.m, loss);
    ++checked;
  }
  CHECK(checked == 2);  // gemm and fused, on every build
}
