#pragma once
// The table of deck keys: one entry per key with its type, bounds, meaning, and how it reads and
// writes its Config field. The deck reader, the resolved deck and the reference all walk it.

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.hpp"

namespace kgpt::config {

enum class ValueKind { integer, real, boolean, string, choice };

struct Bounds {
  double low = 0.0, high = 0.0;
  bool has_low = false, has_high = false;
  bool low_open = false, high_open = false;  // open: the bound itself is not allowed
  bool contains(double x) const;
  std::string describe() const;  // ">= 1", "in (0, 1)", ...
};

struct KeySpec {
  std::string section;
  std::string name;
  ValueKind kind = ValueKind::integer;
  Bounds bounds;                     // integer and real
  std::vector<std::string> choices;  // choice
  std::string doc;
  std::function<Value(const Config&)> get;
  std::function<void(Config&, const Value&)> set;
  // Keys whose default depends on other keys: the default for a configuration, and how the
  // reference describes it ("muon for golf, adamw for gpt2"). Empty for a fixed default.
  std::function<Value(const Config&)> contextual_default;
  std::string default_doc;
  // Keys that act only in some configurations: "" where the key has an effect, else why it has
  // none ("family gpt2 has no rotary embedding"). A deck that sets such a key to anything but its
  // default there is refused, so that no key is silently without effect.
  std::function<std::string(const Config&)> no_effect;
  std::string applies_doc;  // where it acts, for the reference ("golf only")
  // Part of the trained model: the function its weights compute (model.n_layer, model.recur_count,
  // train.precision, ...). `kgpt train --resume` refuses a deck that gives such a key another value
  // than the checkpoint's deck. The keys of the model that choose only how it is computed
  // (model.attention, train.recompute) or how a new run starts (model.init_from) are free.
  bool fixed_for_run = false;

  std::string dotted() const { return section + "." + name; }
  std::string type_name() const;  // "integer", "number", "boolean", "string", "one of golf|gpt2"
};

const std::vector<KeySpec>& deck_schema();
const KeySpec* find_key(const std::string& dotted);

// Keys read under an old name, with the key they now set ("train.gemm_precision" -> "train.precision").
struct KeyAlias {
  std::string old_name, new_name;
};
const std::vector<KeyAlias>& key_aliases();
const std::vector<std::string>& deck_sections();

// Value as deck text ("0.04", "true", "golf").
std::string value_text(const Value& value);

}  // namespace kgpt::config
