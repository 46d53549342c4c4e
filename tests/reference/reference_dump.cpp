// Writes a tiny model's weights, a batch, and kgpt's logits, loss, gradients and the losses of 10
// optimizer steps to an HDF5 file, for tests/reference/compare.py to check against the independent
// PyTorch model. usage: reference_dump FAMILY[-untied|-muon|-normuon|-smear|-parallel|-bigram|-recur|-ve|-xsa] OUT.h5,
// FAMILY a
// registered family with its defaults (golf: tied, Muon; gpt2: tied, AdamW), -untied with
// model.tie_embeddings false (an output head trained with optim.head_lr), -muon with
// optim.matrix_optimizer muon, -smear with model.smear_gate (golf), -parallel with blocks 1 and 2 of
// 3 in parallel (model.parallel_residual_start: 1, golf), -bigram with BigramHash (11 buckets of 8,
// projected) and SmearGate (golf), -recur with blocks 1 and 2 of 3 run twice (model.recur_start: 1,
// recur_count: 2; every family) and, in golf, block 2 in parallel (parallel_residual_start: 2); -ve
// with golf's value embeddings on layers 1 and 3 of 4 run (block 1 twice), projected from 4 wide; -xsa
// with golf's partial RoPE (4 of 8 dimensions), LN scale, XSA on the last 3 of 4 layers run (block 1
// twice), the last adding a value embedding to the v that XSA reads, and the output gate on 3 features.
// reference_dump --families lists the registered families, one a line; --hf-families those that
// Hugging Face transformers holds (kgpt export --format hf, model.init_from).
#include <cstdio>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "core/kokkos_compat.hpp"
#include "core/random.hpp"
#include "io/hdf5_file.hpp"
#include "config/deck.hpp"
#include "config/family_rules.hpp"
#include "model/family.hpp"
#include "model/language_model.hpp"
#include "model/parameters.hpp"
#include "optim/optimizer.hpp"

using namespace kgpt;

namespace {

template <class View>
std::vector<double> host_values(const View& view) {
  auto host = Kokkos::create_mirror(view);
  Kokkos::deep_copy(host, view);
  return std::vector<double>(host.data(), host.data() + view.span());
}

TokenMatrix tokens(int b, int t, int vocab, std::uint64_t stream, std::vector<std::int64_t>& record) {
  TokenMatrix m("tokens", b, t);
  auto host = Kokkos::create_mirror_view(m);
  for (int i = 0; i < b * t; ++i) {
    host.data()[i] = static_cast<int>(random::bits(2024, stream, i) % vocab);
    record.push_back(host.data()[i]);
  }
  Kokkos::deep_copy(m, host);
  return m;
}

int dump(config::Config config, const char* path) {
  const config::ModelConfig& m = config.model;
  const int batch = 2, seq = 8;
  const auto built = model::make_model<double>(m, batch, seq);
  model::LanguageModel<double>& lm = *built;
  model::initialize(lm.parameters(), 1234);
  // Perturb every tensor so that no gradient is trivially zero (the golf init zeroes projections).
  Vector<double> noise("noise", lm.parameters().values().extent(0));
  random::fill_normal(noise, 77, 0, 0.1);
  const Vector<double> params = lm.parameters().values();
  Kokkos::parallel_for(
      "kgpt::reference::perturb", noise.extent(0), KOKKOS_LAMBDA(const int i) { params(i) += noise(i); });

  std::vector<std::int64_t> input_ids, target_ids, input_ids2, target_ids2;
  const auto inputs = tokens(batch, seq, m.vocab_size, 1, input_ids), targets = tokens(batch, seq, m.vocab_size, 2, target_ids);
  const auto inputs2 = tokens(batch, seq, m.vocab_size, 3, input_ids2);
  const auto targets2 = tokens(batch, seq, m.vocab_size, 4, target_ids2);

  io::Hdf5File out(path, io::Hdf5File::Mode::create);
  const auto& layout = lm.parameters().layout();
  const auto values = host_values(lm.parameters().values());
  for (const auto& e : layout.entries()) {
    out.write("params/" + e.spec.name, e.spec.shape, values.data() + e.offset);
    out.write_string("groups/" + e.spec.name, model::group_name(e.spec.group()));  // the optimizer group
  }

  Kokkos::deep_copy(lm.parameters().grads(), 0.0);
  const double loss = lm.forward(ExecSpace(), inputs, targets);
  const auto logits = host_values(lm.logits());
  lm.backward(ExecSpace(), 1.0);
  const auto grads = host_values(lm.parameters().grads());
  for (const auto& e : layout.entries()) out.write("grads/" + e.spec.name, e.spec.shape, grads.data() + e.offset);
  out.write("batch/inputs", {std::size_t(batch), std::size_t(seq)}, input_ids.data());
  out.write("batch/targets", {std::size_t(batch), std::size_t(seq)}, target_ids.data());
  out.write("batch/inputs2", {std::size_t(batch), std::size_t(seq)}, input_ids2.data());
  out.write("batch/targets2", {std::size_t(batch), std::size_t(seq)}, target_ids2.data());
  out.write("logits", {std::size_t(batch * seq), std::size_t(m.vocab_size)}, logits.data());
  out.write("loss", {}, &loss);

  // 10 optimizer steps at a constant learning rate, alternating the two batches.
  optim::Optimizer<double> optimizer(lm.parameters(), config);
  std::vector<double> losses;
  for (int step = 0; step < 10; ++step) {
    Kokkos::deep_copy(lm.parameters().grads(), 0.0);
    losses.push_back(step % 2 == 0 ? lm.forward(ExecSpace(), inputs, targets) : lm.forward(ExecSpace(), inputs2, targets2));
    lm.backward(ExecSpace(), 1.0);
    optimizer.step(ExecSpace(), step, 1.0);
  }
  out.write("train/losses", {losses.size()}, losses.data());
  out.write_string("family", m.family.c_str());
  out.write_string("matrix_optimizer", config.optim.matrix_optimizer);
  std::vector<std::pair<const char*, double>> settings;
  if (config::family_reads(m, "model.value_embed_layers")) {
    out.write_string("value_embed_layers", config::module_string(m.family_keys, "model.value_embed_layers"));
    settings = {{"rope_dims", static_cast<double>(config::module_integer(m.family_keys, "model.rope_dims"))},
                {"ln_scale", config::module_boolean(m.family_keys, "model.ln_scale") ? 1.0 : 0.0},
                {"xsa_last_n", static_cast<double>(config::module_integer(m.family_keys, "model.xsa_last_n"))}};
  }
  settings.insert(settings.end(), {
      {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_kv_head", m.n_kv_head}, {"rope_base", m.rope_base},
      {"logit_softcap", m.logit_softcap}, {"rms_eps", 1.1920928955078125e-07},
      {"parallel_residual_start", m.parallel_residual_start}, {"recur_start", m.recur_start},
      {"recur_count", m.recur_count},
      {"tie_embeddings", m.tie_embeddings ? 1.0 : 0.0}, {"head_lr", config.optim.head_lr},
      {"matrix_lr", config.optim.matrix_lr}, {"scalar_lr", config.optim.scalar_lr}, {"embed_lr", config.optim.embed_lr},
      {"beta1", config.optim.beta1}, {"beta2", config.optim.beta2}, {"adam_eps", config.optim.adam_eps},
      {"matrix_weight_decay", config.optim.matrix_weight_decay}, {"embed_weight_decay", config.optim.embed_weight_decay},
      {"head_weight_decay", config.optim.head_weight_decay}, {"scalar_weight_decay", config.optim.scalar_weight_decay},
      {"muon_momentum", config.optim.muon_momentum}, {"muon_momentum_warmup_start", config.optim.muon_momentum_warmup_start},
      {"muon_momentum_warmup_steps", config.optim.muon_momentum_warmup_steps},
      {"muon_backend_steps", config.optim.muon_backend_steps}});
  for (const auto& [key, value] : settings) out.set_attribute("loss", key, value);
  std::printf("wrote %s: %s loss %.6f, 10-step losses %.6f .. %.6f\n", path, m.family.c_str(), loss, losses.front(),
              losses.back());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  compat::Runtime kokkos;
  if (argc == 2 && std::string(argv[1]) == "--families") {  // the registry, one name a line
    for (const model::Family* f : model::families()) std::printf("%s\n", f->name.c_str());
    return 0;
  }
  if (argc == 2 && std::string(argv[1]) == "--hf-families") {
    for (const model::Family* f : model::families()) {
      if (f->hf_form != nullptr) std::printf("%s\n", f->name.c_str());
    }
    return 0;
  }
  const std::string variant = argc == 3 ? argv[1] : "";
  const std::string name = variant.substr(0, variant.find('-'));
  const std::string modifier = variant.find('-') == std::string::npos ? "" : variant.substr(variant.find('-') + 1);
  if (model::find_family(name) == nullptr ||
      (modifier != "" && modifier != "untied" && modifier != "muon" && modifier != "smear" && modifier != "parallel" &&
       modifier != "bigram" && modifier != "recur" && modifier != "normuon" && modifier != "ve" && modifier != "xsa")) {
    std::fprintf(stderr, "usage: %s FAMILY[-untied|-muon|-normuon|-smear|-parallel|-bigram|-recur|-ve|-xsa] OUT.h5 (families: %s)\n", argv[0],
                 model::family_names().c_str());
    return 2;
  }
  config::Config config;
  config::ModelConfig& m = config.model;
  m.family = name;
  config::resolve_contextual_defaults(config);  // the family's defaults: MLP width, matrix optimizer, ...
  m.vocab_size = 37;
  m.n_layer = 3;
  m.d_model = 32;
  m.n_head = 4;
  m.n_kv_head = 2;  // grouped-query attention, where the family has it
  m.mlp_mult = 2;
  m.rope_base = 100.0;
  m.logit_softcap = 5.0;
  {
    config::ResolvedDeck deck;
    deck.config = config;
    std::vector<std::string> problems;
    model::family(name).check(deck, problems);
    if (!problems.empty()) m.n_kv_head = m.n_head;
  }
  config.optim.matrix_lr = 0.02;
  config.optim.muon_momentum_warmup_steps = 5;
  if (config.optim.matrix_optimizer == "adamw") {
    config.optim.matrix_lr = config.optim.embed_lr = config.optim.scalar_lr = 3e-3;
  }
  // Decoupled weight decay, a rate of its own for each group, so that a group given another's
  // rate shows in the losses.
  config.optim.matrix_weight_decay = 0.1;
  config.optim.embed_weight_decay = 0.05;
  config.optim.head_weight_decay = 0.03;
  config.optim.scalar_weight_decay = 0.2;
  if (modifier == "untied") {
    m.tie_embeddings = false;
    config.optim.embed_lr = 0.05;
    config.optim.head_lr = 0.01;
  }
  if (modifier == "muon") {
    config.optim.matrix_optimizer = "muon";
    config.optim.matrix_lr = 0.02;
  }
  if (modifier == "normuon") {
    config.optim.matrix_optimizer = "normuon";
    config.optim.matrix_lr = 0.02;
    config.optim.beta2 = 0.9;  // the second moments' decay, not Adam's default, so that it shows
  }
  if (modifier == "smear") m.smear_gate = true;
  if (modifier == "parallel") m.parallel_residual_start = 1;
  if (modifier == "bigram") {
    m.bigram_buckets = 11;
    m.bigram_dim = 8;
    m.smear_gate = true;
  }
  if (modifier == "ve") {
    // Value embeddings on layers 1 and 3 of 4 run (block 1 twice), 4 wide: projected to the key/value
    // width of 16.
    m.recur_start = 1;
    m.recur_count = 1;
    m.family_keys["model.value_embed_layers"] = std::string("1,3");
    m.family_keys["model.value_embed_dim"] = 4LL;
  }
  if (modifier == "xsa") {
    m.recur_start = 1;
    m.recur_count = 1;
    m.family_keys["model.rope_dims"] = 4LL;
    m.family_keys["model.ln_scale"] = true;
    m.family_keys["model.xsa_last_n"] = 3LL;
    m.family_keys["model.attn_gate_width"] = 3LL;
    m.family_keys["model.value_embed_layers"] = std::string("3");
    m.family_keys["model.value_embed_dim"] = 4LL;
  }
  if (modifier == "recur") {
    m.recur_start = 1;
    m.recur_count = 2;
    if (config::family_reads(m, "model.parallel_residual_start")) m.parallel_residual_start = 2;
  }
  return dump(config, argv[2]);
}
