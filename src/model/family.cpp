#include "model/family.hpp"

#include "model/block_sequence.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

// The registry's rules list holds the Family objects themselves (families/registry.cpp), so the
// deck's lookup is the model's, with its message.
const Family* find_family(const std::string& name) { return static_cast<const Family*>(config::find_family_rules(name)); }

const Family& family(const std::string& name) { return static_cast<const Family&>(config::family_rules(name)); }

std::size_t run_parameter_count(const config::ModelConfig& model, const ParameterLayout& layout) {
  std::size_t parameters = 0;
  for (const TensorEntry& e : layout.entries()) {
    parameters += e.size * static_cast<std::size_t>(e.spec.block >= 0 ? runs_of(model, e.spec.block) : 1);
  }
  return parameters;
}

double standard_flops_per_token(const config::ModelConfig& model, const ParameterLayout& layout, int seq,
                                const std::vector<std::string>& outside_products) {
  std::size_t parameters = run_parameter_count(model, layout);
  for (const auto& name : outside_products) {
    if (layout.contains(name)) parameters -= layout.find(name).size;
  }
  const double head_dim = static_cast<double>(model.d_model) / model.n_head;
  return 6.0 * static_cast<double>(parameters) + 12.0 * run_layers(model) * model.n_head * head_dim * seq;
}

}  // namespace kgpt::model
