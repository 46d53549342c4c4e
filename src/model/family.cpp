#include "model/family.hpp"

#include "core/error.hpp"
#include "model/parameters.hpp"

namespace kgpt::model {

const Family* find_family(const std::string& name) {
  for (const Family* f : families()) {
    if (f->name == name) return f;
  }
  return nullptr;
}

const Family& family(const std::string& name) {
  const Family* f = find_family(name);
  if (f == nullptr) {
    throw Error(ExitCode::bad_input, "model.family: '" + name + "' is not a model family; the families are " + family_names());
  }
  return *f;
}

double standard_flops_per_token(const config::ModelConfig& model, const ParameterLayout& layout, int seq,
                                const std::vector<std::string>& outside_products) {
  std::size_t parameters = layout.parameter_count();
  for (const auto& name : outside_products) {
    if (layout.contains(name)) parameters -= layout.find(name).size;
  }
  const double head_dim = static_cast<double>(model.d_model) / model.n_head;
  return 6.0 * static_cast<double>(parameters) + 12.0 * model.n_layer * model.n_head * head_dim * seq;
}

}  // namespace kgpt::model
