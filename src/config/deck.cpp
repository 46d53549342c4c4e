#include "config/deck.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "config/schema.hpp"
#include "config/attention_capabilities.hpp"
#include "config/family_rules.hpp"
#include "config/optimizer_rules.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace kgpt::config {

std::string Origin::describe() const {
  switch (kind) {
    case Kind::deck:
      if (line == 0) return file;  // a value set by a command, not written in a file
      return file + ":" + std::to_string(line) + ":" + std::to_string(column);
    case Kind::override_flag: return "--set " + file;
    case Kind::default_value: break;
  }
  return "default";
}

const Origin& ResolvedDeck::origin(const std::string& key) const {
  static const Origin fallback;
  auto it = origins.find(key);
  return it == origins.end() ? fallback : it->second;
}

std::string ResolvedDeck::where(const std::string& key) const {
  const Origin& o = origin(key);
  if (o.kind == Origin::Kind::deck) return o.describe() + ": " + key;
  return key + " (" + o.describe() + ")";
}

namespace {

// The key `section.name` sets: itself, or the key an old name now stands for (key_aliases()).
const KeySpec* find_key(const std::string& section, const std::string& name) {
  const std::string dotted = section + "." + name;
  for (const auto& alias : key_aliases()) {
    if (alias.old_name == dotted) return config::find_key(alias.new_name);
  }
  return config::find_key(dotted);
}

// " (did you mean 'train.seq_len'?)" for a key that does not exist, or "".
std::string suggest_key(const std::string& section, const std::string& name) {
  for (const auto& spec : deck_schema()) {
    if (spec.name == name) return " (did you mean '" + spec.dotted() + "'? it belongs to section '" + spec.section + "')";
  }
  std::vector<std::string> same_section, everywhere;
  for (const auto& spec : deck_schema()) {
    if (spec.section == section) same_section.push_back(spec.name);
    everywhere.push_back(spec.dotted());
  }
  std::string best = text::closest_match(name, same_section);
  if (!best.empty()) return " (did you mean '" + section + "." + best + "'?)";
  best = text::closest_match(section + "." + name, everywhere);
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string suggest_section(const std::string& section) {
  const std::string best = text::closest_match(section, deck_sections());
  if (!best.empty()) return " (did you mean '" + best + "'?)";
  std::string names;
  for (const auto& s : deck_sections()) names += (names.empty() ? "" : ", ") + s;
  return " (sections are " + names + ")";
}

std::string expected_phrase(const KeySpec& spec) {
  switch (spec.kind) {
    case ValueKind::integer: return "an integer";
    case ValueKind::real: return "a number";
    case ValueKind::boolean: return "true or false";
    case ValueKind::string: return "a string";
    case ValueKind::choice: return spec.type_name();
  }
  return spec.type_name();
}

// Parses deck text into a typed value. Returns "" on success, else what is wrong with it.
std::string parse_value(const KeySpec& spec, const std::string& raw, Value& out) {
  const std::string shown = "'" + raw + "'";
  switch (spec.kind) {
    case ValueKind::integer: {
      long long v = 0;
      if (!text::parse_int64(raw, v)) return "expected " + expected_phrase(spec) + ", got " + shown;
      if (!spec.bounds.contains(static_cast<double>(v))) {
        return "value " + raw + " is out of range: must be " + spec.bounds.describe();
      }
      out = v;
      return "";
    }
    case ValueKind::real: {
      double v = 0;
      if (!text::parse_double(raw, v)) return "expected " + expected_phrase(spec) + ", got " + shown;
      if (!spec.bounds.contains(v)) return "value " + raw + " is out of range: must be " + spec.bounds.describe();
      out = v;
      return "";
    }
    case ValueKind::boolean: {
      bool v = false;
      if (!text::parse_bool(raw, v)) return "expected " + expected_phrase(spec) + ", got " + shown;
      out = v;
      return "";
    }
    case ValueKind::string: out = raw; return "";
    case ValueKind::choice: {
      if (std::find(spec.choices.begin(), spec.choices.end(), raw) != spec.choices.end()) {
        out = raw;
        return "";
      }
      const std::string best = text::closest_match(raw, spec.choices);
      return "expected " + expected_phrase(spec) + ", got " + shown + (best.empty() ? "" : " (did you mean '" + best + "'?)");
    }
  }
  return "unknown value kind";
}

std::string node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Null: return "no value";
    default: return "a scalar";
  }
}

Origin deck_origin(const std::string& file, const YAML::Mark& mark) {
  Origin o;
  o.kind = Origin::Kind::deck;
  o.file = file;
  o.line = mark.line + 1;
  o.column = mark.column + 1;
  return o;
}

class DeckReader {
 public:
  DeckReader(ResolvedDeck& deck, std::vector<std::string>& problems) : deck_(deck), problems_(problems) {}

  void read(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      problems_.push_back(deck_origin(deck_.path, e.mark).describe() + ": YAML syntax error: " + e.msg);
      return;
    }
    if (root.IsNull()) {
      problems_.push_back(deck_.path + ":1:1: the deck is empty; it needs at least one of the sections " + sections_list());
      return;
    }
    if (!root.IsMap()) {
      problems_.push_back(at(root.Mark()) + ": the deck must be a mapping of sections (" + sections_list() +
                          "), got " + node_kind(root));
      return;
    }
    std::set<std::string> seen_sections;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string section = it->first.Scalar();
      const YAML::Mark key_mark = it->first.Mark();
      if (std::find(deck_sections().begin(), deck_sections().end(), section) == deck_sections().end()) {
        problems_.push_back(at(key_mark) + ": unknown section '" + section + "'" + suggest_section(section));
        continue;
      }
      if (!seen_sections.insert(section).second) {
        problems_.push_back(at(key_mark) + ": section '" + section + "' appears twice");
        continue;
      }
      read_section(section, it->second, key_mark);
    }
  }

 private:
  void read_section(const std::string& section, const YAML::Node& body, const YAML::Mark& section_mark) {
    if (body.IsNull()) return;  // "model:" with nothing below keeps every default
    if (!body.IsMap()) {
      problems_.push_back(at(section_mark) + ": section '" + section + "' must be a mapping of keys, got " +
                          node_kind(body));
      return;
    }
    std::set<std::string> seen;
    for (auto it = body.begin(); it != body.end(); ++it) {
      const std::string name = it->first.Scalar();
      const std::string dotted = section + "." + name;
      const YAML::Mark key_mark = it->first.Mark();
      const KeySpec* spec = find_key(section, name);
      if (!spec) {
        problems_.push_back(at(key_mark) + ": unknown key '" + dotted + "'" + suggest_key(section, name));
        continue;
      }
      if (!seen.insert(spec->name).second) {
        problems_.push_back(at(key_mark) + ": " + dotted + ": key appears twice in section '" + section + "'" +
                            (spec->dotted() == dotted ? "" : " (as " + spec->dotted() + ", its new name)"));
        continue;
      }
      const YAML::Node node = it->second;
      // A missing value has no place of its own; point at the key instead.
      const YAML::Mark value_mark = node.IsNull() || node.Mark().line < 0 ? key_mark : node.Mark();
      if (!node.IsScalar()) {
        problems_.push_back(at(value_mark) + ": " + dotted + ": expected " + expected_phrase(*spec) + ", got " +
                            node_kind(node));
        continue;
      }
      Value value;
      const std::string reason = parse_value(*spec, node.Scalar(), value);
      if (!reason.empty()) {
        problems_.push_back(at(value_mark) + ": " + dotted + ": " + reason);
        continue;
      }
      spec->set(deck_.config, value);
      deck_.origins[spec->dotted()] = deck_origin(deck_.path, value_mark);
    }
  }

  std::string at(const YAML::Mark& mark) const { return deck_origin(deck_.path, mark).describe(); }

  static std::string sections_list() {
    std::string names;
    for (const auto& s : deck_sections()) names += (names.empty() ? "" : ", ") + s;
    return names;
  }

  ResolvedDeck& deck_;
  std::vector<std::string>& problems_;
};

// "" when `section.name=raw` is a known key with a valid value, else the reason; `spec` and `value`
// are set on success.
std::string resolve_override(const std::string& section, const std::string& name, const std::string& raw,
                             const KeySpec*& spec, Value& value) {
  spec = find_key(section, name);
  if (!spec) {
    const bool known_section =
        std::find(deck_sections().begin(), deck_sections().end(), section) != deck_sections().end();
    return "unknown key '" + section + "." + name + "'" +
           (known_section ? suggest_key(section, name) : suggest_section(section));
  }
  const std::string reason = parse_value(*spec, raw, value);
  return reason.empty() ? "" : spec->dotted() + ": " + reason;
}

void apply_override(ResolvedDeck& deck, std::size_t index, std::vector<std::string>& problems) {
  const std::string& flag = deck.options.overrides[index];
  const bool from_file = index < deck.options.override_origins.size();
  const std::string shown = from_file ? deck.options.override_origins[index].describe() : "--set " + flag;
  const auto equals = flag.find('=');
  const auto dot = flag.find('.');
  if (equals == std::string::npos || dot == std::string::npos || dot > equals) {
    problems.push_back(shown + ": expected section.key=value, for example --set train.iterations=100");
    return;
  }
  const KeySpec* spec = nullptr;
  Value value;
  const std::string reason =
      resolve_override(flag.substr(0, dot), flag.substr(dot + 1, equals - dot - 1), flag.substr(equals + 1), spec, value);
  if (!reason.empty()) {
    problems.push_back(shown + ": " + reason);
    return;
  }
  spec->set(deck.config, value);
  Origin o;
  if (from_file) {
    o = deck.options.override_origins[index];
  } else {
    o.kind = Origin::Kind::override_flag;
    o.file = flag;
  }
  deck.origins[spec->dotted()] = o;
}

// Keys left at their default whose default depends on other keys take the default for this deck.
void resolve_defaults(ResolvedDeck& deck) {
  for (const auto& spec : deck_schema()) {
    if (spec.contextual_default && deck.origin(spec.dotted()).kind == Origin::Kind::default_value) {
      spec.set(deck.config, spec.contextual_default(deck.config));
    }
  }
}

// The value a key has when a deck leaves it out, in this deck's configuration.
Value default_value(const KeySpec& spec, const Config& config) {
  return spec.contextual_default ? spec.contextual_default(config) : spec.get(Config{});
}

// "" when the key acts in this configuration or keeps its default, else why a value set for it
// changes nothing. (Resolved decks write every key; their values there are the defaults.)
std::string without_effect(const KeySpec& spec, const ResolvedDeck& deck) {
  if (!spec.no_effect || deck.origin(spec.dotted()).kind == Origin::Kind::default_value) return "";
  const std::string reason = spec.no_effect(deck.config);
  if (reason.empty() || value_text(spec.get(deck.config)) == value_text(default_value(spec, deck.config))) return "";
  return reason;
}

// A key set where it acts on nothing is most likely a mistake, but also what a sweep over a mode
// (tie_embeddings, schedule, matrix_optimizer) does to the points of the other mode: a note, not
// an error.
void note_keys_without_effect(ResolvedDeck& deck) {
  for (const auto& spec : deck_schema()) {
    const std::string reason = without_effect(spec, deck);
    if (reason.empty()) continue;
    deck.notes.push_back(deck.where(spec.dotted()) + ": " + spec.dotted() + " = " + value_text(spec.get(deck.config)) +
                         " has no effect: it acts with " + spec.applies_doc + " only, and " + reason);
  }
}

// Rules that tie several keys together. Each message names every key involved and its origin.
void check_cross_field(ResolvedDeck& deck, std::vector<std::string>& problems) {
  const Config& c = deck.config;
  if (!c.run.name.empty()) {
    const std::string why = run_name_problem(c.run.name);
    if (!why.empty()) problems.push_back(deck.where("run.name") + ": '" + c.run.name + "' " + why);
  }
  const ModelConfig& m = c.model;
  auto value_of = [&deck](const std::string& key, long long v) {
    return key + " = " + std::to_string(v) + " (" + deck.origin(key).describe() + ")";
  };
  if (m.d_model % m.n_head != 0) {
    problems.push_back(deck.where("model.d_model") + ": d_model = " + std::to_string(m.d_model) +
                       " is not divisible by " + value_of("model.n_head", m.n_head));
  }
  // The family's own rules (config/family_rules.hpp); model.family was checked against the registry.
  family_rules(m.family).check(deck, problems);
  const int head_dim = m.d_model % m.n_head == 0 ? m.d_model / m.n_head : 0;
  if (m.attention != Attention::automatic) {
    // What the chosen implementation runs (config/attention_capabilities.hpp).
    const AttentionCapability& can = attention_capability(m.attention);
    const std::string kind = name_of(m.attention);
    if (!can.built) {
      problems.push_back(deck.where("model.attention") + ": " + kind + " attention needs a CUDA build of kgpt with cuDNN "
                         "and cudnn-frontend; this build has none (use gemm or auto)");
    }
    if (can.bf16_only && m.precision != Precision::bf16) {
      problems.push_back(deck.where("model.attention") + ": " + kind + " attention takes bf16 inputs; train.precision is " +
                         std::string(name_of(m.precision)) + " (" + deck.origin("train.precision").describe() +
                         "): set train.precision: bf16, or use gemm or auto");
    }
    if (head_dim > 0 && !can.head_dim(head_dim)) {
      problems.push_back(deck.where("model.attention") + ": " + kind + " attention needs a head dimension of " +
                         can.head_dims + "; d_model / n_head = " + std::to_string(head_dim) + " (" +
                         value_of("model.d_model", m.d_model) + ", " + value_of("model.n_head", m.n_head) +
                         "); use gemm or auto");
    }
  }
  if (m.fp8 != Fp8::none && m.precision != Precision::bf16) {
    problems.push_back(deck.where("model.fp8") + ": model.fp8 = " + name_of(m.fp8) + " takes train.precision: bf16 (the FP8 " +
                       "products give bf16 activations); train.precision is " + name_of(m.precision) + " (" +
                       deck.origin("train.precision").describe() + ")");
  }
  // One rebuilt block has no other to share its working set with: the memory of none, for more compute.
  // Depth recurrence (model.recur_start) runs more layers than blocks; the rebuilt ones are layers.
  const int layers = m.n_layer + (m.recur_start >= 0 && family_reads(m, "model.recur_start") ? m.recur_count : 0);
  if (m.recompute == Recompute::block && m.recompute_every > 1 && m.recompute_every >= layers) {
    problems.push_back(deck.where("train.recompute_every") + ": recompute_every = " + std::to_string(m.recompute_every) +
                       " with " + value_of("model.n_layer", m.n_layer) +
                       (layers != m.n_layer ? " (" + std::to_string(layers) + " layers run, with model.recur_count)" : "") +
                       " rebuilds block 0 alone, which keeps as much memory as train.recompute: none for more "
                       "compute: use a value below the layers run");
  }
  if (deck.config.train.eval_stride > deck.config.train.seq_len) {
    problems.push_back(deck.where("train.eval_stride") + ": eval_stride = " +
                       std::to_string(deck.config.train.eval_stride) + " is larger than " +
                       value_of("train.seq_len", deck.config.train.seq_len) +
                       ": windows that far apart would leave tokens unscored");
  }
  const TrainConfig& t = deck.config.train;
  if (t.val_tokens > 0 && t.val_tokens < t.seq_len) {
    // Evaluation scores whole windows of seq_len tokens: fewer leaves nothing to score.
    problems.push_back(deck.where("train.val_tokens") + ": val_tokens = " + std::to_string(t.val_tokens) +
                       " is fewer than " + value_of("train.seq_len", t.seq_len) +
                       ", one evaluation window; set at least that, or 0 for the whole val split");
  }
  if ((t.eval_weights == Weights::ema && t.ema_decay == 0) || (t.eval_weights == Weights::swa && t.swa_every == 0)) {
    const bool ema = t.eval_weights == Weights::ema;
    problems.push_back(deck.where("train.eval_weights") + ": eval_weights = " + name_of(t.eval_weights) +
                       " scores an average the run does not keep: " +
                       (ema ? value_of("train.ema_decay", t.ema_decay) : value_of("train.swa_every", t.swa_every)) +
                       (ema ? " (set it, e.g. 0.997)" : " (set it, e.g. 50)"));
  }
  if (m.n_head % m.n_kv_head != 0) {
    problems.push_back(deck.where("model.n_head") + ": n_head = " + std::to_string(m.n_head) +
                       " is not divisible by " + value_of("model.n_kv_head", m.n_kv_head));
  }
  if (c.data.tokenizer == Tokenizer::byte && m.vocab_size < 257) {
    problems.push_back(deck.where("model.vocab_size") + ": vocab_size = " + std::to_string(m.vocab_size) +
                       " is too small for data.tokenizer = byte (" + deck.origin("data.tokenizer").describe() +
                       "), which needs 257 ids: 256 bytes and the document boundary");
  }
  if (c.data.tokenizer == Tokenizer::sentencepiece && c.data.vocab_file.empty()) {
    problems.push_back(deck.where("data.vocab_file") + ": data.tokenizer = sentencepiece (" +
                       deck.origin("data.tokenizer").describe() +
                       ") needs data.vocab_file, the SentencePiece .model (or its .vocab), to count bytes for val_bpb");
  }
  if (c.data.tokenizer == Tokenizer::tiktoken && c.data.vocab_file.empty()) {
    problems.push_back(deck.where("data.vocab_file") + ": data.tokenizer = tiktoken (" +
                       deck.origin("data.tokenizer").describe() +
                       ") needs data.vocab_file, the rank file (.tiktoken) or GPT-2's encoder.json");
  }
  if (c.data.train_files.empty()) {
    problems.push_back(deck.where("data.train_files") + ": must name shard files (a path or a glob)");
  }
  if (c.data.val_files.empty()) {
    problems.push_back(deck.where("data.val_files") + ": must name shard files (a path or a glob)");
  }
  // The matrices' optimizer rule's own rules (config/optimizer_rules.hpp); the key was checked
  // against the registry.
  const OptimizerRules* rule = find_optimizer_rules(c.optim.matrix_optimizer);
  if (rule != nullptr && rule->check != nullptr) rule->check(deck, problems);
  const std::string batch_problem = plan_batch(c.train, deck.options.world_size, deck.plan);
  if (!batch_problem.empty()) {
    const bool accum = c.train.accum_total % deck.options.world_size != 0;
    const std::string key = accum ? "train.accum_total" : "train.global_batch_tokens";
    std::string message = deck.where(key) + ": " + batch_problem;
    if (!accum) message += " (train.seq_len from " + deck.origin("train.seq_len").describe() + ")";
    problems.push_back(message);
  }
}

}  // namespace

std::string run_name_problem(const std::string& name) {
  if (name.empty()) return "is empty: a run directory needs a name";
  if (name.find('/') != std::string::npos) {
    return "holds a '/': a run name is one folder name inside run.out_dir (set run.out_dir for another folder)";
  }
  if (name == "." || name == "..") return "is not a folder name of its own: it would put the run outside run.out_dir";
  return "";
}

ResolvedDeck parse_deck(const std::string& text, const std::string& display_name, const DeckOptions& options) {
  ResolvedDeck deck;
  deck.path = display_name;
  deck.text = text;
  deck.options = options;
  std::vector<std::string> problems;
  DeckReader(deck, problems).read(text);
  for (std::size_t i = 0; i < options.overrides.size(); ++i) apply_override(deck, i, problems);
  if (problems.empty()) {
    resolve_defaults(deck);
    note_keys_without_effect(deck);
    check_cross_field(deck, problems);
  }
  if (!problems.empty()) throw InputError(problems);
  return deck;
}

ResolvedDeck load_deck(const std::string& path, const DeckOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the deck file (does it exist and is it readable?)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw InputError(path + ": error while reading the deck file");
  return parse_deck(buffer.str(), path, options);
}

ResolvedDeck load_deck_text(const std::string& text, const std::string& name, const DeckOptions& options) {
  return parse_deck(text, name, options);
}

std::string check_override(const std::string& key, const std::string& raw) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return "expected section.key, for example train.iterations, got '" + key + "'";
  const KeySpec* spec = nullptr;
  Value value;
  return resolve_override(key.substr(0, dot), key.substr(dot + 1), raw, spec, value);
}

std::vector<std::string> differing_keys(const Config& a, const Config& b) {
  std::vector<std::string> keys;
  for (const auto& spec : deck_schema()) {
    if (value_text(spec.get(a)) != value_text(spec.get(b))) keys.push_back(spec.dotted());
  }
  return keys;
}

std::vector<std::string> all_keys() {
  std::vector<std::string> keys;
  for (const auto& spec : deck_schema()) keys.push_back(spec.dotted());
  return keys;
}

namespace {

std::string yaml_scalar(const KeySpec& spec, const Value& value) {
  if (spec.kind != ValueKind::string) return value_text(value);
  YAML::Emitter out;
  out << std::get<std::string>(value);
  return out.c_str();
}

}  // namespace

std::string render_resolved(const ResolvedDeck& deck) {
  std::ostringstream out;
  out << "# kgpt resolved deck: every key with the value in force and where it came from.\n";
  out << "# deck: " << deck.path << "\n";
  out << "# overrides:";
  if (deck.options.overrides.empty()) out << " none";
  for (const auto& flag : deck.options.overrides) out << " --set " << flag;
  out << "\n";
  const BatchPlan& p = deck.plan;
  out << "# world_size " << p.world_size << ": grad_accum_steps " << p.grad_accum_steps << ", " << p.local_sequences
      << " sequences of " << p.seq_len << " tokens (" << p.local_tokens << " tokens) per rank per micro-step\n";
  std::string current;
  for (const auto& spec : deck_schema()) {
    if (spec.section != current) {
      current = spec.section;
      out << current << ":\n";
    }
    std::string line = "  " + spec.name + ": " + yaml_scalar(spec, spec.get(deck.config));
    if (line.size() < 48) line.append(48 - line.size(), ' ');
    const std::string idle = without_effect(spec, deck);
    out << line << "  # " << deck.origin(spec.dotted()).describe() << (idle.empty() ? "" : "; no effect: " + idle)
        << "\n";
  }
  return out.str();
}

std::string render_values(const ResolvedDeck& deck) {
  std::ostringstream out;
  std::string current;
  for (const auto& spec : deck_schema()) {
    if (spec.section != current) {
      current = spec.section;
      out << current << ":\n";
    }
    out << "  " << spec.name << ": " << yaml_scalar(spec, spec.get(deck.config)) << "\n";
  }
  return out.str();
}

namespace {

// "- Rules of each family: golf: ...; gpt2: ...", from the registry.
std::string rules_of_families() {
  std::string text;
  for (const FamilyRules* f : family_rules()) {
    if (f->rules.empty()) continue;
    text += (text.empty() ? "- Rules of each family: " : "; ") + f->name + ": " + f->rules;
  }
  return text.empty() ? "" : text + ".\n";
}

std::string rules_of_optimizers() {
  std::string text;
  for (const OptimizerRules* r : optimizer_rules()) {
    if (r->rules.empty()) continue;
    text += (text.empty() ? "- Rules of each optimizer (`optim.matrix_optimizer`): " : "; ") + r->name + ": " + r->rules;
  }
  return text.empty() ? "" : text + ".\n";
}

}  // namespace

namespace {

// The keys --resume holds to the checkpoint's values, for the reference: four to a line.
std::string fixed_for_run_keys() {
  std::string keys;
  int count = 0;
  for (const auto& spec : deck_schema()) {
    if (!spec.fixed_for_run) continue;
    if (count > 0) keys += count % 4 == 0 ? ",\n  " : ", ";
    keys += "`" + spec.dotted() + "`";
    ++count;
  }
  return keys;
}

}  // namespace

std::string render_reference() {
  std::ostringstream out;
  out << "# Deck reference\n\n"
      << "Every key of a kgpt input deck, with its default. This file is generated by\n"
      << "`kgpt check --reference`; a test keeps it equal to that output.\n\n"
      << "A deck is a YAML mapping of sections; each section maps keys to values. Keys left out keep\n"
      << "their defaults. `--set section.key=value` on the command line overrides a key after the deck\n"
      << "is read and is validated the same way. Unknown keys, wrong types, out-of-range values and the\n"
      << "rules between keys below stop the program with exit code 2 and a message naming the key and\n"
      << "its line:column.\n\n"
      << "Rules between keys:\n"
      << "- `model.d_model` divisible by `model.n_head`; `model.n_head` divisible by `model.n_kv_head`.\n"
      << rules_of_families()
      << "- `model.attention: fused` needs a head dimension `d_model / n_head` of "
      << attention_capability(Attention::fused).head_dims << ";\n"
      << "  `cudnn` a CUDA build with cuDNN, `train.precision: bf16` and a head dimension of\n"
      << "  " << attention_capability(Attention::cudnn).head_dims << ".\n"
      << "- `train.accum_total` divisible by the world size; grad_accum_steps = accum_total / world_size.\n"
      << "- `train.global_batch_tokens` divisible by world_size x grad_accum_steps x `train.seq_len`.\n"
      << "- `data.tokenizer: byte` needs `model.vocab_size >= 257`; `sentencepiece` and `tiktoken` need `data.vocab_file`.\n"
      << rules_of_optimizers()
      << "- `train.val_tokens` is 0 or at least `train.seq_len` (one evaluation window).\n"
      << "- `run.name` is one folder name inside `run.out_dir`: no '/', not `.` or `..` (nor the deck file's\n"
      << "  name standing for it, nor with `kgpt train --run-suffix` appended).\n"
      << "- `kgpt train --resume` refuses a deck whose model differs from the checkpoint's deck in any of\n"
      << "  " << fixed_for_run_keys() << ".\n"
      << "  The keys of the model that choose only how it is computed (`model.attention`, `train.recompute`),\n"
      << "  and `model.init_from` and the initial values, may change.\n"
      << "- A key that acts only in some configurations (the \"acts with\" notes below), set to another value\n"
      << "  than its default elsewhere (`rope_base: 500` in a gpt2 deck, `head_lr` with a tied embedding),\n"
      << "  changes nothing: `kgpt check` and `kgpt train` print a note, and the resolved deck marks it.\n"
      << "- Defaults that depend on other keys: `model.mlp_mult`, `model.logit_softcap`, `model.tie_embeddings`,\n"
      << "  `model.tied_embed_init_std`, `optim.matrix_optimizer` (by family) and `optim.embed_lr` (by\n"
      << "  `model.tie_embeddings`).\n"
      << "- `train.gemm_precision` is read as `train.precision`, its new name.\n"
      << "- `kgpt check` and `kgpt train` also check that `data.train_files` and `data.val_files` match\n"
      << "  shard files with valid headers (`kgpt check --no-data` skips this).\n";
  const Config defaults;
  std::string current;
  for (const auto& spec : deck_schema()) {
    if (spec.section != current) {
      current = spec.section;
      out << "\n## " << current << "\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    }
    std::string allowed;
    if (spec.kind == ValueKind::integer || spec.kind == ValueKind::real) allowed = spec.bounds.describe();
    if (spec.kind == ValueKind::choice) {
      for (const auto& c : spec.choices) allowed += (allowed.empty() ? "" : ", ") + c;
    }
    if (spec.kind == ValueKind::boolean) allowed = "true, false";
    const std::string type = spec.kind == ValueKind::choice ? "choice" : spec.type_name();
    const std::string def = value_text(spec.get(defaults));
    const std::string shown = !spec.default_doc.empty() ? spec.default_doc : def.empty() ? "\"\"" : "`" + def + "`";
    const std::string acts = spec.applies_doc.empty() ? "" : " Acts with " + spec.applies_doc + " only.";
    out << "| `" << spec.name << "` | " << type << " | " << shown << " | " << allowed << " | " << spec.doc << acts
        << " |\n";
  }
  return out.str();
}

}  // namespace kgpt::config
