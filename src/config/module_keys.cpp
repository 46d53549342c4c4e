#include "config/module_keys.hpp"

#include "config/family_rules.hpp"
#include "config/optimizer_rules.hpp"
#include "core/error.hpp"

namespace kgpt::config {

std::vector<const ModuleKey*> module_keys() {
  std::vector<const ModuleKey*> keys;
  auto add = [&keys](const std::vector<ModuleKey>& declared) {
    for (const ModuleKey& key : declared) {
      const ModuleKey* seen = nullptr;
      for (const ModuleKey* k : keys) {
        if (k->dotted == key.dotted) seen = k;
      }
      if (seen == nullptr) {
        keys.push_back(&key);
      } else if (seen->kind != key.kind || seen->default_value != key.default_value) {
        // Modules may share a key (each reads it), but not give it two types or defaults.
        throw Error(ExitCode::failure, key.dotted + ": declared twice with different types or defaults");
      }
    }
  };
  for (const FamilyRules* f : family_rules()) add(f->keys);
  for (const OptimizerRules* r : optimizer_rules()) add(r->keys);
  return keys;
}

const Value& module_value(const ModuleValues& values, std::string_view dotted) {
  if (auto it = values.find(dotted); it != values.end()) return it->second;
  for (const ModuleKey* key : module_keys()) {
    if (key->dotted == dotted) return key->default_value;
  }
  throw Error(ExitCode::failure, std::string(dotted) + ": no registered family or optimizer rule declares this key");
}

namespace {
template <class V>
V typed(const ModuleValues& values, std::string_view dotted) {
  const Value& v = module_value(values, dotted);
  if (const V* typed = std::get_if<V>(&v)) return *typed;
  throw Error(ExitCode::failure, std::string(dotted) + ": read as another type than the one its module declares");
}
}  // namespace

long long module_integer(const ModuleValues& values, std::string_view dotted) { return typed<long long>(values, dotted); }
double module_real(const ModuleValues& values, std::string_view dotted) { return typed<double>(values, dotted); }
bool module_boolean(const ModuleValues& values, std::string_view dotted) { return typed<bool>(values, dotted); }
std::string module_string(const ModuleValues& values, std::string_view dotted) {
  return typed<std::string>(values, dotted);
}

}  // namespace kgpt::config
