#include <catch2/catch.hpp>

#include <cmath>

#include "config/config.hpp"
#include "core/error.hpp"
#include "model/family.hpp"
#include "model/parameters.hpp"

using namespace kgpt;
using model::ParamGroup;

TEST_CASE("the golf baseline has parameter-golf's 17,059,912 parameters", "[model][parameters]") {
  const config::ModelConfig golf;  // the deck defaults are the baseline
  const auto layout = model::family("golf").layout(golf, 1024);
  CHECK(layout.parameter_count() == 17059912);
  CHECK(layout.find("tok_emb.weight").spec.shape == std::vector<std::size_t>{1024, 512});
  CHECK(layout.find("blocks.8.attn.c_k.weight").spec.shape == std::vector<std::size_t>{256, 512});
  CHECK(layout.find("blocks.0.mlp.fc.weight").spec.shape == std::vector<std::size_t>{1024, 512});
  CHECK(layout.find("skip_weights").spec.shape == std::vector<std::size_t>{4, 512});
  CHECK(layout.find("blocks.3.attn.proj.weight").spec.group() == ParamGroup::matrix);
  CHECK(layout.find("blocks.3.resid_mix").spec.group() == ParamGroup::scalar);
  CHECK(layout.find("tok_emb.weight").spec.group() == ParamGroup::embedding);
  for (const auto& entry : layout.entries()) {
    INFO(entry.spec.name);
    CHECK(entry.offset % model::ParameterLayout::kAlignment == 0);
  }
  CHECK_THROWS_WITH(layout.find("lm_head.weight"), "parameter layout: no tensor named 'lm_head.weight'");
}

TEST_CASE("every tensor's role gives its optimizer group, and golf's controls include its options' gates", "[model][parameters]") {
  using model::Role;
  config::ModelConfig golf;
  golf.smear_gate = true;
  golf.bigram_buckets = 64;
  golf.bigram_dim = 32;
  const auto layout = model::family("golf").layout(golf, 1024);
  CHECK(layout.find("smear_gate").spec.role == Role::control);
  CHECK(layout.find("bigram.scale").spec.role == Role::control);
  CHECK(layout.find("bigram.embed.weight").spec.role == Role::embedding);
  CHECK(layout.find("bigram.proj.weight").spec.role == Role::projection);
  CHECK(layout.find("blocks.2.attn.q_gain").spec.role == Role::control);
  CHECK(layout.find("blocks.2.mlp.proj.weight").spec.role == Role::mlp);
  CHECK(layout.find("blocks.2.attn.c_v.weight").spec.role == Role::attention);
  CHECK(model::group_of(Role::projection) == ParamGroup::matrix);
  CHECK(model::group_of(Role::control) == ParamGroup::scalar);
  CHECK(model::group_of(Role::norm) == ParamGroup::scalar);
  CHECK(model::group_of(Role::bias) == ParamGroup::scalar);
  CHECK(model::group_of(Role::head) == ParamGroup::head);
  // Only the blocks' attention and MLP matrices run FP8; under model.fp8 mlp only the MLP's.
  CHECK(model::runs_fp8(Role::attention, false));
  CHECK_FALSE(model::runs_fp8(Role::attention, true));
  CHECK(model::runs_fp8(Role::mlp, true));
  CHECK_FALSE(model::runs_fp8(Role::projection, false));
  CHECK_FALSE(model::runs_fp8(Role::head, false));
  // Every family: the matrix optimizer's tensors are 2-D, the blocks' matrices lie in blocks, norms and
  // biases are vectors.
  for (const model::Family* family : model::families()) {
    config::ModelConfig m;
    m.family = family->name;
    m.n_kv_head = family->defaults.n_kv_head == 0 ? m.n_head : m.n_kv_head;
    m.tie_embeddings = false;
    const model::ParameterLayout family_layout = family->layout(m, 64);
    for (const auto& entry : family_layout.entries()) {
      INFO(family->name << ": " << entry.spec.name << ", role " << model::role_name(entry.spec.role));
      if (entry.spec.group() == ParamGroup::matrix) CHECK(entry.spec.shape.size() == 2);
      if (model::is_block_matrix(entry.spec.role)) CHECK(entry.spec.block >= 0);
      if (entry.spec.role == Role::norm || entry.spec.role == Role::bias) CHECK(entry.spec.shape.size() == 1);
    }
  }
}

TEST_CASE("the tensor holding a buffer element is found by offset", "[model][parameters]") {
  const auto layout = model::family("golf").layout(config::ModelConfig{}, 1024);
  const auto& q = layout.find("blocks.1.attn.c_q.weight");
  CHECK(&layout.holding(q.offset) == &q);
  CHECK(&layout.holding(q.offset + q.size - 1) == &q);
  CHECK_THROWS_WITH(layout.holding(layout.buffer_size() + 5), Catch::Contains("lies in no tensor"));
}

TEST_CASE("gpt2 at 124M size has GPT-2's 124,439,808 parameters", "[model][parameters]") {
  config::ModelConfig gpt2;
  gpt2.family = "gpt2";
  gpt2.mlp_mult = 4;
  gpt2.vocab_size = 50257;
  gpt2.n_layer = 12;
  gpt2.d_model = 768;
  gpt2.n_head = 12;
  gpt2.n_kv_head = 12;
  const auto layout = model::family(gpt2.family).layout(gpt2, 1024);
  CHECK(layout.parameter_count() == 124439808);
  CHECK(layout.find("transformer.h.11.mlp.c_fc.weight").spec.shape == std::vector<std::size_t>{3072, 768});
}

TEST_CASE("initialisation follows each tensor's rule and is the same for the same seed", "[model][parameters]") {
  config::ModelConfig m;
  m.vocab_size = 64;
  m.n_layer = 3;
  m.d_model = 32;
  m.n_head = 4;
  m.n_kv_head = 2;
  model::Parameters<double> params(model::family("golf").layout(m, 1024));
  model::initialize(params, 1337);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), params.values());
  auto values_of = [&](const std::string& name) {
    const auto& e = params.layout().find(name);
    return std::vector<double>(host.data() + e.offset, host.data() + e.offset + e.size);
  };
  for (double v : values_of("blocks.1.attn.proj.weight")) CHECK(v == 0.0);
  for (double v : values_of("blocks.1.mlp_scale")) CHECK(v == 1.0);
  for (double v : values_of("blocks.2.attn.q_gain")) CHECK(v == 1.5);
  const auto mix = values_of("blocks.0.resid_mix");
  for (int j = 0; j < 32; ++j) {
    CHECK(mix[j] == 1.0);
    CHECK(mix[32 + j] == 0.0);
  }
  const double bound = 1.0 / std::sqrt(32.0);
  double max_abs = 0;
  for (double v : values_of("blocks.0.attn.c_q.weight")) max_abs = std::max(max_abs, std::abs(v));
  CHECK(max_abs <= bound);
  CHECK(max_abs > 0.9 * bound);
  const auto emb = values_of("tok_emb.weight");
  double sum_sq = 0;
  for (double v : emb) sum_sq += v * v;
  CHECK(std::sqrt(sum_sq / emb.size()) == Approx(0.005).epsilon(0.1));

  // Same seed, same numbers; another seed, other numbers. The views alias the buffer.
  model::Parameters<double> again(model::family("golf").layout(m, 1024));
  model::initialize(again, 1337);
  auto host_again = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), again.values());
  CHECK(std::equal(host.data(), host.data() + host.extent(0), host_again.data()));
  model::initialize(again, 1338);
  Kokkos::deep_copy(host_again, again.values());
  CHECK_FALSE(std::equal(host.data(), host.data() + host.extent(0), host_again.data()));
  auto q = params.matrix("blocks.0.attn.c_q.weight");
  CHECK(q.data() == params.values().data() + params.layout().find("blocks.0.attn.c_q.weight").offset);
  CHECK(params.grad_matrix("blocks.0.attn.c_q.weight").extent(0) == 32);
  CHECK_THROWS_AS(params.vector("blocks.0.attn.c_q.weight"), Error);
}

TEST_CASE("an untied golf head is zero and the untied embedding N(0, 1), as parameter-golf starts them",
          "[model][parameters]") {
  config::ModelConfig m;
  m.vocab_size = 64;
  m.n_layer = 2;
  m.d_model = 32;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.tie_embeddings = false;
  model::Parameters<double> params(model::family("golf").layout(m, 1024));
  const auto& head = params.layout().find("lm_head.weight");
  CHECK(head.spec.shape == std::vector<std::size_t>{64, 32});
  CHECK(head.spec.group() == ParamGroup::head);
  CHECK(&params.layout().entries().back() == &head);  // after every tensor of the tied layout
  model::initialize(params, 7);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), params.values());
  for (std::size_t i = 0; i < head.size; ++i) REQUIRE(host(head.offset + i) == 0.0);
  const auto& emb = params.layout().find("tok_emb.weight");
  double sum_sq = 0;
  for (std::size_t i = 0; i < emb.size; ++i) sum_sq += host(emb.offset + i) * host(emb.offset + i);
  CHECK(std::sqrt(sum_sq / emb.size) == Approx(1.0).epsilon(0.1));
  m.tie_embeddings = true;
  CHECK_FALSE(model::family("golf").layout(m, 1024).contains("lm_head.weight"));
}

TEST_CASE("the bf16 weight shadow rounds every value, 8 at a time where the buffer allows it", "[model][parameters][bf16]") {
  // 1,000 values: whole packs of 8; 1,003: not (one value a thread). Values around 1 with bits below
  // bf16's precision, halfway cases and signed zeros among them.
  for (const std::size_t n : {std::size_t(1000), std::size_t(1003)}) {
    INFO(n << " values");
    Vector<float> values("values", n);
    auto host = Kokkos::create_mirror_view(values);
    for (std::size_t i = 0; i < n; ++i) {
      host(i) = static_cast<float>(std::ldexp(1.0 + static_cast<double>(i % 257) / 256.0 + 1.0 / 65536.0, int(i % 7) - 3)) *
                (i % 2 ? -1.0f : 1.0f);
    }
    host(3) = -0.0f;
    Kokkos::deep_copy(values, host);
    Vector<bf16> packed("packed", n), alone("alone", n);
    model::refresh_shadow<float, bf16, true>(ExecSpace(), values, packed);
    model::refresh_shadow<float, bf16, false>(ExecSpace(), values, alone);
    auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), packed);
    auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), alone);
    int wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      wrong += a(i).bits != b(i).bits;
      wrong += b(i).bits != bf16(host(i)).bits;  // round to nearest even, as bf16 defines it
    }
    CHECK(wrong == 0);
  }
}
