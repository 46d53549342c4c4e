// cuDNN's fused attention (CUDA builds with cuDNN): forward and every gradient against the GEMM
// attention in fp32 on the same bf16 inputs, with GQA and without, through the strides of
// token-major heads; columns outside the heads untouched; the backward deterministic; the
// workspace cuDNN asks for against the memory plan's estimate of it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/backend.hpp"
#include "core/bf16.hpp"
#include "model/attention/attention_fixture.hpp"
#include "model/attention/attention.hpp"
#include "model/attention/cudnn.hpp"
#include "model/precision_check.hpp"

using namespace kgpt;
using test::TokenHeads;

namespace {

constexpr int kPad = 8;  // keeps every row of a head 16-byte aligned, as the QKV matrix's rows are

template <class A>
struct Tensors {
  TokenHeads<A> q, k, v, o, d_o, dq, dk, dv;
  Tensors(const test::AttentionShape& s)
      : q("q", s.b, s.t, s.h, s.d, kPad), k("k", s.b, s.t, s.kv, s.d, kPad), v("v", s.b, s.t, s.kv, s.d, kPad),
        o("o", s.b, s.t, s.h, s.d, kPad), d_o("d_o", s.b, s.t, s.h, s.d, kPad), dq("dq", s.b, s.t, s.h, s.d, kPad),
        dk("dk", s.b, s.t, s.kv, s.d, kPad), dv("dv", s.b, s.t, s.kv, s.d, kPad) {}

  // q, k, v and dO drawn from N(0, 1) with this seed.
  void fill_inputs(std::uint64_t seed) {
    random::fill_normal(q.m, seed, 0, 1.0);
    random::fill_normal(k.m, seed, 1, 1.0);
    random::fill_normal(v.m, seed, 2, 1.0);
    random::fill_normal(d_o.m, seed, 3, 1.0);
  }

  void run(model::Attention<A>& attention) {
    for (auto* x : {&o, &dq, &dk, &dv}) Kokkos::deep_copy(x->m, A(std::numeric_limits<float>::quiet_NaN()));
    const ExecSpace exec;
    attention.forward(exec, 0, q.in(), k.in(), v.in(), o.view());
    attention.backward(exec, 0, q.in(), k.in(), v.in(), o.in(), d_o.in(), dq.view(), dk.view(), dv.view());
    exec.fence();
  }
};

}  // namespace

TEST_CASE("cudnn attention matches the fp32 gemm attention, forward and gradients, with either backward",
          "[model][attention][cudnn]") {
  REQUIRE(backend::cudnn_built);
  for (const bool deterministic : {true, false}) {
    for (const test::AttentionShape s : {test::AttentionShape{2, 4, 2, 64, 64}, test::AttentionShape{2, 4, 4, 96, 64},
                                         test::AttentionShape{1, 8, 1, 80, 128}, test::AttentionShape{3, 2, 2, 33, 32},
                                         test::AttentionShape{2, 8, 4, 128, 64}}) {  // the last: golf's grouping
      INFO("B " << s.b << " H " << s.h << " KV " << s.kv << " T " << s.t << " D " << s.d << " deterministic "
                << deterministic);
      model::AttentionShape shape{1, s.b, s.h, s.kv, s.t, s.d};
      shape.deterministic = deterministic;
      Tensors<bf16> low(s);
      low.fill_inputs(31);
      auto cudnn = model::make_attention<bf16>(config::Attention::cudnn, shape, "test::");
      REQUIRE(std::string(cudnn->name()) == "cudnn");
      low.run(*cudnn);

      // The reference: the same (bf16-rounded) inputs, exactly, in fp32 through the GEMM path.
      Tensors<float> ref(s);
      ref.q.m = test::converted<Matrix<float>>("q", low.q.m);
      ref.k.m = test::converted<Matrix<float>>("k", low.k.m);
      ref.v.m = test::converted<Matrix<float>>("v", low.v.m);
      ref.d_o.m = test::converted<Matrix<float>>("d_o", low.d_o.m);
      auto gemm = model::make_attention<float>(config::Attention::gemm, shape, "test::");
      ref.run(*gemm);

      // cuDNN rounds P to bf16 for P V and dS for dQ and dK, and writes bf16 results (2^-8 relative
      // each), summing T terms in fp32: 2e-2 of each value's scale is a few of those roundings and far
      // below a wrong mask, scale or GQA grouping (which move results by O(1)).
      const double tolerance = 2e-2;
      CHECK(test::max_relative_difference(test::heads_values(low.o), test::heads_values(ref.o)) < tolerance);
      CHECK(test::max_relative_difference(test::heads_values(low.dq), test::heads_values(ref.dq)) < tolerance);
      CHECK(test::max_relative_difference(test::heads_values(low.dk), test::heads_values(ref.dk)) < tolerance);
      CHECK(test::max_relative_difference(test::heads_values(low.dv), test::heads_values(ref.dv)) < tolerance);
      for (const auto* x : {&low.o, &low.dq, &low.dk, &low.dv}) {
        CHECK(test::other_columns_hold(*x, std::numeric_limits<double>::quiet_NaN()));
      }
      if (!deterministic) continue;
      // The deterministic backward: a second run gives the same bits.
      const std::vector<double> dk_first = test::heads_values(low.dk), dq_first = test::heads_values(low.dq);
      low.run(*cudnn);
      CHECK(test::heads_values(low.dk) == dk_first);
      CHECK(test::heads_values(low.dq) == dq_first);
    }
  }
}

TEST_CASE("cudnn attention's workspace is what the memory plan estimates, with either backward",
          "[model][attention][cudnn]") {
  // Large enough that the parts the estimate counts (dP: 128 MiB; dQ: 16 MiB) dwarf the engine's own
  // scratch, which the estimate leaves out.
  const test::AttentionShape s{8, 8, 4, 1024, 64};
  for (const bool deterministic : {true, false}) {
    model::AttentionShape shape{1, s.b, s.h, s.kv, s.t, s.d};
    shape.deterministic = deterministic;
    Tensors<bf16> low(s);
    low.fill_inputs(37);
    auto cudnn = model::make_attention<bf16>(config::Attention::cudnn, shape, "test::");
    low.run(*cudnn);
    const double workspace = static_cast<double>(dynamic_cast<const model::CudnnAttention&>(*cudnn).workspace_bytes());
    const double estimate = static_cast<double>(model::cudnn_workspace_estimate(shape));
    INFO("deterministic " << deterministic << ": cuDNN's workspace " << workspace / 1048576 << " MiB, estimated "
                          << estimate / 1048576 << " MiB");
    // The plan may not fall short by more than a quarter (then it would admit decks that do not fit),
    // nor ask for more than twice what cuDNN takes.
    CHECK(workspace <= 1.25 * estimate);
    CHECK(workspace >= 0.5 * estimate);
  }
}

TEST_CASE("cudnn attention refuses head dimensions it cannot run", "[model][attention][cudnn]") {
  CHECK_THROWS_WITH(model::make_attention<bf16>(config::Attention::cudnn, model::AttentionShape{1, 1, 2, 2, 8, 12}, ""),
                    Catch::Contains("head dimension 12"));
}
