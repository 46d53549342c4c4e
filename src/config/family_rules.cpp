#include "config/family_rules.hpp"

#include "core/error.hpp"

namespace kgpt::config {

bool FamilyRules::reads_key(std::string_view dotted) const {
  for (const auto& key : reads) {
    if (key == dotted) return true;
  }
  for (const auto& key : keys) {
    if (key.dotted == dotted) return true;
  }
  return false;
}

const FamilyRules* find_family_rules(const std::string& name) {
  for (const FamilyRules* f : family_rules()) {
    if (f->name == name) return f;
  }
  return nullptr;
}

std::string family_names() {
  std::string names;
  for (const FamilyRules* f : family_rules()) names += (names.empty() ? "" : ", ") + f->name;
  return names;
}

const FamilyRules& family_rules(const std::string& name) {
  const FamilyRules* f = find_family_rules(name);
  if (f == nullptr) {
    throw Error(ExitCode::bad_input, "model.family: '" + name + "' is not a model family; the families are " + family_names());
  }
  return *f;
}

}  // namespace kgpt::config
