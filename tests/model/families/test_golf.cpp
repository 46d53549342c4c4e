#include <catch2/catch.hpp>

#include <cmath>

#include "model/families/golf/golf.hpp"
#include "model/gradcheck.hpp"

using namespace kgpt;

namespace {

config::ModelConfig tiny_golf() {
  config::ModelConfig m;
  m.vocab_size = 19;
  m.n_layer = 3;  // one encoder, two decoders: one U-Net skip
  m.d_model = 16;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.mlp_mult = 2;
  m.rope_base = 100.0;
  m.logit_softcap = 5.0;
  return m;
}


// Every parameter random, so that no gradient is trivially zero (the real init zeroes projections).
template <class T>
void randomize(model::GolfModel<T>& model) {
  random::fill_normal(model.parameters().values(), 99, 0, 0.5);
}

}  // namespace

TEST_CASE("golf: the loss at initialisation is close to ln(vocab)", "[model][golf]") {
  config::ModelConfig m = tiny_golf();
  m.vocab_size = 257;
  m.d_model = 32;
  model::GolfModel<float> model(m, 4, 16);
  model::initialize(model.parameters(), 1337);
  const auto inputs = test::random_tokens(4, 16, 257, 1), targets = test::random_tokens(4, 16, 257, 2);
  const double loss = model.forward(ExecSpace(), inputs, targets);
  CHECK(std::abs(loss - std::log(257.0)) < 0.1);
}

TEST_CASE("golf: the whole model's gradient matches finite differences", "[model][golf][gradcheck]") {
  model::GolfModel<double> model(tiny_golf(), 2, 7);
  randomize(model);
  const auto inputs = test::random_tokens(2, 5, 19, 3), targets = test::random_tokens(2, 5, 19, 4);
  test::check_model_gradient(model, inputs, targets);
}

TEST_CASE("golf with BigramHash and depth recurrence: the whole model's gradient matches finite differences",
          "[model][golf][gradcheck]") {
  // Projected bigram rows (4 wide) or rows as wide as the model (no projection); block 1 of 3 run
  // twice, and blocks 1 and 2 twice, so that a block serves an encoder and a decoder layer.
  const int dim = GENERATE(4, 16);
  const int count = GENERATE(1, 2);
  INFO("bigram_dim " << dim << " recur_count " << count);
  config::ModelConfig m = tiny_golf();
  m.bigram_buckets = 7;
  m.bigram_dim = dim;
  m.recur_start = 1;
  m.recur_count = count;
  model::GolfModel<double> model(m, 2, 7);
  CHECK(model.parameters().layout().contains("bigram.proj.weight") == (dim != 16));
  randomize(model);
  const auto inputs = test::random_tokens(2, 5, 19, 3), targets = test::random_tokens(2, 5, 19, 4);
  test::check_model_gradient(model, inputs, targets);
}

TEST_CASE("golf with value embeddings: the whole model's gradient matches finite differences", "[model][golf][gradcheck]") {
  // A table narrower than the key/value width (projected) or as wide (not), on layers 1 and 3 of 4
  // run (block 1 of 3 twice), so that one layer of a repeated block adds them and the other does not.
  const int dim = GENERATE(4, 8);
  INFO("value_embed_dim " << dim);
  config::ModelConfig m = tiny_golf();
  m.recur_start = 1;
  m.recur_count = 1;
  m.family_keys["model.value_embed_layers"] = std::string("1, 3");
  m.family_keys["model.value_embed_dim"] = static_cast<long long>(dim);
  model::GolfModel<double> model(m, 2, 7);
  const auto& layout = model.parameters().layout();
  REQUIRE(model::head_shape(m).kv_width() == 8);
  CHECK(layout.contains("ve_shared.proj.weight") == (dim != 8));
  CHECK(layout.contains("ve_layer_scales.1"));
  CHECK_FALSE(layout.contains("ve_layer_scales.2"));
  randomize(model);
  const auto inputs = test::random_tokens(2, 5, 19, 3), targets = test::random_tokens(2, 5, 19, 4);
  test::check_model_gradient(model, inputs, targets);
}

TEST_CASE("golf with partial RoPE, LN scale, XSA and the output gate: the whole model's gradient matches finite differences",
          "[model][golf][gradcheck]") {
  // 2 of each head's 4 dimensions rotate; LN scale on every layer; XSA on the last 2 of 4 layers run
  // (block 1 twice: only its second run subtracts), the last of them adding a value embedding to the
  // v that XSA reads; the output gate reading 3 features, after XSA; blocks from 2 on in parallel
  // or none.
  const int parallel_from = GENERATE(-1, 2);
  INFO("model.parallel_residual_start " << parallel_from);
  config::ModelConfig m = tiny_golf();
  m.recur_start = 1;
  m.recur_count = 1;
  m.parallel_residual_start = parallel_from;
  m.family_keys["model.rope_dims"] = 2LL;
  m.family_keys["model.ln_scale"] = true;
  m.family_keys["model.xsa_last_n"] = 2LL;
  m.family_keys["model.attn_gate_width"] = 3LL;
  m.family_keys["model.value_embed_layers"] = std::string("3");
  m.family_keys["model.value_embed_dim"] = 8LL;
  model::GolfModel<double> model(m, 2, 7);
  randomize(model);
  const auto inputs = test::random_tokens(2, 5, 19, 5), targets = test::random_tokens(2, 5, 19, 6);
  test::check_model_gradient(model, inputs, targets);
}

TEST_CASE("golf's XSA, partial RoPE, LN scale and output gate each change the loss, and at their defaults nothing", "[model][golf]") {
  const auto inputs = test::random_tokens(2, 5, 19, 7), targets = test::random_tokens(2, 5, 19, 8);
  auto loss = [&](const std::string& key, const config::Value& value) {
    config::ModelConfig m = tiny_golf();
    if (!key.empty()) m.family_keys[key] = value;
    model::GolfModel<double> model(m, 2, 7);
    randomize(model);
    return model.forward(ExecSpace(), inputs, targets);
  };
  const double plain = loss("", config::Value(0LL));
  CHECK(loss("model.rope_dims", config::Value(0LL)) == plain);
  CHECK(loss("model.rope_dims", config::Value(4LL)) == plain);  // all 4 of a head's dimensions: full RoPE
  CHECK(loss("model.ln_scale", config::Value(false)) == plain);
  CHECK(loss("model.xsa_last_n", config::Value(0LL)) == plain);
  CHECK(loss("model.attn_gate_width", config::Value(0LL)) == plain);
  CHECK(loss("model.rope_dims", config::Value(2LL)) != plain);
  CHECK(loss("model.ln_scale", config::Value(true)) != plain);
  CHECK(loss("model.xsa_last_n", config::Value(1LL)) != plain);
  CHECK(loss("model.attn_gate_width", config::Value(2LL)) != plain);
}

TEST_CASE("golf: gradients accumulate over micro-steps with the grad scale", "[model][golf]") {
  model::GolfModel<double> model(tiny_golf(), 2, 7);
  randomize(model);
  const auto inputs = test::random_tokens(2, 5, 19, 5), targets = test::random_tokens(2, 5, 19, 6);
  Kokkos::deep_copy(model.parameters().grads(), 0.0);
  model.forward(ExecSpace(), inputs, targets);
  model.backward(ExecSpace(), 1.0);
  auto once = Kokkos::create_mirror(model.parameters().grads());
  Kokkos::deep_copy(once, model.parameters().grads());
  Kokkos::deep_copy(model.parameters().grads(), 0.0);
  for (int micro = 0; micro < 4; ++micro) {
    model.forward(ExecSpace(), inputs, targets);
    model.backward(ExecSpace(), 0.25);
  }
  auto four = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.parameters().grads());
  for (std::size_t i = 0; i < once.extent(0); ++i) REQUIRE(four(i) == Approx(once(i)).epsilon(1e-12).margin(1e-15));
}

TEST_CASE("golf: logits at positions up to t do not depend on later tokens", "[model][golf]") {
  model::GolfModel<double> model(tiny_golf(), 2, 7);
  randomize(model);
  auto inputs = test::random_tokens(2, 7, 19, 8);
  const auto targets = test::random_tokens(2, 7, 19, 9);
  model.forward(ExecSpace(), inputs, targets);
  auto before = Kokkos::create_mirror(model.logits());
  Kokkos::deep_copy(before, model.logits());
  const int changed = 4;
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), inputs);
  host(1, changed) = (host(1, changed) + 5) % 19;
  Kokkos::deep_copy(inputs, host);
  model.forward(ExecSpace(), inputs, targets);
  auto after = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.logits());
  for (int t = 0; t < 7; ++t) {
    bool same = true;
    for (int v = 0; v < 19; ++v) same = same && before(7 + t, v) == after(7 + t, v);
    CHECK(same == (t < changed));
    // The other sequence is untouched.
    for (int v = 0; v < 19; ++v) CHECK(before(t, v) == after(t, v));
  }
}

TEST_CASE("golf: 8 micro-batches of M sequences at scale 1/8 equal one batch of 8M", "[model][golf]") {
  const int micro = 2, steps = 8, t = 6;
  model::GolfModel<double> model(tiny_golf(), micro * steps, t);
  randomize(model);
  const auto inputs = test::random_tokens(micro * steps, t, 19, 20), targets = test::random_tokens(micro * steps, t, 19, 21);
  Kokkos::deep_copy(model.parameters().grads(), 0.0);
  const double whole_loss = model.forward(ExecSpace(), inputs, targets);
  model.backward(ExecSpace(), 1.0);
  auto whole = Kokkos::create_mirror(model.parameters().grads());
  Kokkos::deep_copy(whole, model.parameters().grads());

  Kokkos::deep_copy(model.parameters().grads(), 0.0);
  double loss_sum = 0;
  for (int s = 0; s < steps; ++s) {
    const auto rows = std::make_pair(s * micro, (s + 1) * micro);
    TokenMatrix in("in", micro, t), out("out", micro, t);
    Kokkos::deep_copy(in, Kokkos::subview(inputs, rows, Kokkos::ALL()));
    Kokkos::deep_copy(out, Kokkos::subview(targets, rows, Kokkos::ALL()));
    loss_sum += model.forward(ExecSpace(), in, out);
    model.backward(ExecSpace(), 1.0 / steps);
  }
  CHECK(loss_sum / steps == Approx(whole_loss).epsilon(1e-12));
  auto accumulated = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.parameters().grads());
  double worst = 0;
  for (std::size_t i = 0; i < whole.extent(0); ++i) {
    worst = std::max(worst, std::abs(accumulated(i) - whole(i)) / std::max(1e-3, std::abs(whole(i))));
  }
  CHECK(worst < 1e-5);
}

TEST_CASE("golf: fused and GEMM attention give the same loss and gradients", "[model][golf][flash]") {
  config::ModelConfig m = tiny_golf();
  m.d_model = 32;  // head dimension 8, which the fused kernels take
  test::check_attention_kinds_agree<model::GolfModel<double>>(m, 19, [](auto& model) { randomize(model); });
  m.attention = config::Attention::fused;
  model::GolfModel<double> fused(m, 2, 7);
  randomize(fused);
  test::check_model_gradient(fused, test::random_tokens(2, 7, 19, 9), test::random_tokens(2, 7, 19, 10));
}

TEST_CASE("golf: the bf16 model's loss and gradients stay within bf16 rounding of the float model", "[model][golf][bf16]") {
  config::ModelConfig m = tiny_golf();
  m.d_model = 32;
  m.vocab_size = 61;
  model::GolfModel<float> fp32(m, 4, 16);
  m.precision = config::Precision::bf16;
  model::GolfModel<float, bf16> low(m, 4, 16);
  random::fill_normal(fp32.parameters().values(), 99, 0, 0.3);
  Kokkos::deep_copy(low.parameters().values(), fp32.parameters().values());
  const auto inputs = test::random_tokens(4, 16, 61, 11), targets = test::random_tokens(4, 16, 61, 12);
  test::check_bf16_near_float(fp32, low, inputs, targets);
}

TEST_CASE("golf: a bf16 forward rounds the weights again unless told they are unchanged", "[model][golf][bf16]") {
  config::ModelConfig m = tiny_golf();
  m.precision = config::Precision::bf16;
  model::GolfModel<float, bf16> model(m, 2, 8);
  random::fill_normal(model.parameters().values(), 7, 0, 0.3);
  const auto inputs = test::random_tokens(2, 8, 19, 13), targets = test::random_tokens(2, 8, 19, 14);
  const double first = model.forward(ExecSpace(), inputs, targets);
  model.reuse_weight_shadow();
  CHECK(model.forward(ExecSpace(), inputs, targets) == first);
  // A new matrix (the products read matrices through the copy): a forward told the values are
  // unchanged still reads the old copy; the next one reads the new values.
  random::fill_normal(model.parameters().matrix("blocks.0.mlp.fc.weight"), 8, 0, 0.3);
  model.reuse_weight_shadow();
  CHECK(model.forward(ExecSpace(), inputs, targets) == first);
  const double second = model.forward(ExecSpace(), inputs, targets);
  CHECK(second != first);
  model::GolfModel<float, bf16> fresh(m, 2, 8);
  Kokkos::deep_copy(fresh.parameters().values(), model.parameters().values());
  CHECK(fresh.forward(ExecSpace(), inputs, targets) == second);
}
