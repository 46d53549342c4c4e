// The model families kgpt trains. Adding one is a folder families/<name>/ whose family.cpp defines
// `const Family& <name>_family()`, and its name on the line below.
#define KGPT_FAMILIES(X) X(golf) X(gpt2) X(llama)

#include <vector>

#include "model/family.hpp"

namespace kgpt::model {

#define KGPT_DECLARE_FAMILY(name) const Family& name##_family();
KGPT_FAMILIES(KGPT_DECLARE_FAMILY)
#undef KGPT_DECLARE_FAMILY

const std::vector<const Family*>& families() {
#define KGPT_FAMILY_ENTRY(name) &name##_family(),
  static const std::vector<const Family*> all = {KGPT_FAMILIES(KGPT_FAMILY_ENTRY)};
#undef KGPT_FAMILY_ENTRY
  return all;
}

}  // namespace kgpt::model

namespace kgpt::config {

// The deck's side of the same list (config/family_rules.hpp).
const std::vector<const FamilyRules*>& family_rules() {
  static const std::vector<const FamilyRules*> all = [] {
    std::vector<const FamilyRules*> rules;
    for (const model::Family* f : model::families()) rules.push_back(f);
    return rules;
  }();
  return all;
}

}  // namespace kgpt::config
