#include "model/layouts.hpp"

#include <cmath>

#include "core/error.hpp"

namespace kgpt::model {

namespace {

TensorSpec tensor(std::string name, std::vector<std::size_t> shape, ParamGroup group, Init init, double a = 0.0) {
  return TensorSpec{std::move(name), std::move(shape), group, init, a};
}

// nn.Linear(in, out): weight (out, in), U(-1/sqrt(in), 1/sqrt(in)).
TensorSpec linear(std::string name, std::size_t out, std::size_t in) {
  return tensor(std::move(name), {out, in}, ParamGroup::matrix, Init::uniform, 1.0 / std::sqrt(static_cast<double>(in)));
}

}  // namespace

ParameterLayout golf_layout(const config::ModelConfig& m) {
  const std::size_t c = m.d_model, v = m.vocab_size, h = m.n_head;
  const std::size_t kv_dim = static_cast<std::size_t>(m.n_kv_head) * (c / h);
  const std::size_t hidden = c * m.mlp_mult;
  ParameterLayout layout;
  layout.add(tensor("tok_emb.weight", {v, c}, ParamGroup::embedding, Init::normal, m.tied_embed_init_std));
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    layout.add(linear(b + "attn.c_q.weight", c, c));
    layout.add(linear(b + "attn.c_k.weight", kv_dim, c));
    layout.add(linear(b + "attn.c_v.weight", kv_dim, c));
    layout.add(tensor(b + "attn.proj.weight", {c, c}, ParamGroup::matrix, Init::zeros));
    layout.add(tensor(b + "attn.q_gain", {h}, ParamGroup::scalar, Init::constant, m.qk_gain_init));
    layout.add(linear(b + "mlp.fc.weight", hidden, c));
    layout.add(tensor(b + "mlp.proj.weight", {c, hidden}, ParamGroup::matrix, Init::zeros));
    layout.add(tensor(b + "attn_scale", {c}, ParamGroup::scalar, Init::constant, 1.0));
    layout.add(tensor(b + "mlp_scale", {c}, ParamGroup::scalar, Init::constant, 1.0));
    layout.add(tensor(b + "resid_mix", {2, c}, ParamGroup::scalar, Init::first_row, 1.0));
  }
  const int skips = golf_skip_count(m.n_layer);
  if (skips > 0) {
    layout.add(tensor("skip_weights", {static_cast<std::size_t>(skips), c}, ParamGroup::scalar, Init::constant, 1.0));
  }
  return layout;
}

ParameterLayout gpt2_layout(const config::ModelConfig& m, int block_size) {
  const std::size_t c = m.d_model, v = m.vocab_size;
  const double projection_std = 0.02 / std::sqrt(2.0 * m.n_layer);
  ParameterLayout layout;
  layout.add(tensor("transformer.wte.weight", {v, c}, ParamGroup::embedding, Init::normal, 0.02));
  layout.add(tensor("transformer.wpe.weight", {static_cast<std::size_t>(block_size), c}, ParamGroup::embedding,
                    Init::normal, 0.02));
  auto norm = [&layout, c](const std::string& name) {
    layout.add(tensor(name + ".weight", {c}, ParamGroup::scalar, Init::constant, 1.0));
    layout.add(tensor(name + ".bias", {c}, ParamGroup::scalar, Init::zeros));
  };
  auto dense = [&layout](const std::string& name, std::size_t out, std::size_t in, double std_dev) {
    layout.add(tensor(name + ".weight", {out, in}, ParamGroup::matrix, Init::normal, std_dev));
    layout.add(tensor(name + ".bias", {out}, ParamGroup::scalar, Init::zeros));
  };
  for (int i = 0; i < m.n_layer; ++i) {
    const std::string b = "transformer.h." + std::to_string(i) + ".";
    norm(b + "ln_1");
    dense(b + "attn.c_attn", 3 * c, c, 0.02);
    dense(b + "attn.c_proj", c, c, projection_std);
    norm(b + "ln_2");
    dense(b + "mlp.c_fc", 4 * c, c, 0.02);
    dense(b + "mlp.c_proj", c, 4 * c, projection_std);
  }
  norm("transformer.ln_f");
  return layout;
}

ParameterLayout model_layout(const config::ModelConfig& model, int block_size) {
  if (model.family == "golf") return golf_layout(model);
  if (model.family == "gpt2") return gpt2_layout(model, block_size);
  throw Error(ExitCode::failure, "unknown model family '" + model.family + "'");
}

}  // namespace kgpt::model
