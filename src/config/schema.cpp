#include "config/schema.hpp"

#include <limits>
#include <type_traits>

#include "core/backend.hpp"
#include "config/attention_capabilities.hpp"
#include "config/family_rules.hpp"
#include "config/module_keys.hpp"
#include "config/optimizer_rules.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace kgpt::config {

bool Bounds::contains(double x) const {
  if (has_low && (low_open ? !(x > low) : !(x >= low))) return false;
  if (has_high && (high_open ? !(x < high) : !(x <= high))) return false;
  return true;
}

std::string Bounds::describe() const {
  auto number = [](double v) {
    long long whole = static_cast<long long>(v);
    return static_cast<double>(whole) == v ? std::to_string(whole) : text::format_double(v);
  };
  if (has_low && has_high) {
    return std::string("in ") + (low_open ? "(" : "[") + number(low) + ", " + number(high) + (high_open ? ")" : "]");
  }
  if (has_low) return (low_open ? "> " : ">= ") + number(low);
  if (has_high) return (high_open ? "< " : "<= ") + number(high);
  return "any value";
}

std::string KeySpec::type_name() const {
  switch (kind) {
    case ValueKind::integer: return "integer";
    case ValueKind::real: return "number";
    case ValueKind::boolean: return "boolean";
    case ValueKind::string: return "string";
    case ValueKind::choice: {
      std::string names;
      for (const auto& c : choices) names += (names.empty() ? "" : "|") + c;
      return "one of " + names;
    }
  }
  return "";
}

std::string value_text(const Value& value) {
  if (auto* i = std::get_if<long long>(&value)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&value)) return text::format_double(*d);
  if (auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  return std::get<std::string>(value);
}

namespace {

Bounds at_least(double low) { return Bounds{low, 0.0, true, false, false, false}; }
Bounds above(double low) { return Bounds{low, 0.0, true, false, true, false}; }
Bounds between(double low, double high) { return Bounds{low, high, true, true, false, false}; }
Bounds half_open(double low, double high) { return Bounds{low, high, true, true, false, true}; }

constexpr double kMaxInt = static_cast<double>(std::numeric_limits<int>::max());

// Builds the entry for one field. Integer fields of type int are range-checked against int by their
// bounds, which never exceed kMaxInt. Enum fields are choices: their values are the enum's deck
// spellings (ChoiceNames), in the enum's order.
template <class Section, class Field>
KeySpec key(const char* section, const char* name, Section Config::*part, Field Section::*field, ValueKind kind,
            Bounds bounds, std::string doc) {
  KeySpec spec;
  spec.section = section;
  spec.name = name;
  spec.kind = kind;
  spec.bounds = bounds;
  if constexpr (std::is_enum_v<Field>) {
    for (const char* choice : ChoiceNames<Field>::names) spec.choices.push_back(choice);
  }
  spec.doc = std::move(doc);
  spec.fixed_for_run = std::is_same_v<Section, ModelConfig>;
  spec.get = [part, field](const Config& c) -> Value {
    const Field& v = c.*part.*field;
    if constexpr (std::is_same_v<Field, bool>) return v;
    else if constexpr (std::is_enum_v<Field>) return std::string(name_of(v));
    else if constexpr (std::is_integral_v<Field>) return static_cast<long long>(v);
    else if constexpr (std::is_floating_point_v<Field>) return static_cast<double>(v);
    else return std::string(v);
  };
  spec.set = [part, field](Config& c, const Value& v) {
    Field& target = c.*part.*field;
    if constexpr (std::is_same_v<Field, bool>) target = std::get<bool>(v);
    else if constexpr (std::is_enum_v<Field>) parse_choice(std::get<std::string>(v), target);
    else if constexpr (std::is_integral_v<Field>) target = static_cast<Field>(std::get<long long>(v));
    else if constexpr (std::is_floating_point_v<Field>) target = static_cast<Field>(std::get<double>(v));
    else target = std::get<std::string>(v);
  };
  return spec;
}

// A default that depends on other keys (resolved after the deck and the overrides are read).
KeySpec with_default(KeySpec spec, std::function<Value(const Config&)> value, std::string doc) {
  spec.contextual_default = std::move(value);
  spec.default_doc = std::move(doc);
  return spec;
}

// A key that has an effect only where `why_not` returns "".
KeySpec acting(KeySpec spec, std::function<std::string(const Config&)> why_not, std::string doc) {
  spec.no_effect = std::move(why_not);
  spec.applies_doc = std::move(doc);
  return spec;
}

// A key that only some families read: "" where the deck's family reads it.
std::function<std::string(const Config&)> read_by_family(std::string dotted) {
  return [dotted](const Config& c) -> std::string {
    const FamilyRules* f = find_family_rules(c.model.family);
    return f == nullptr || f->reads_key(dotted) ? "" : "model.family is " + c.model.family;
  };
}

// "the golf family", "the golf and llama families": those that read `dotted`.
std::string readers(const std::string& dotted) {
  std::vector<std::string> names;
  for (const FamilyRules* f : family_rules()) {
    if (f->reads_key(dotted)) names.push_back(f->name);
  }
  std::string text = "the ";
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  }
  return text + (names.size() == 1 ? " family" : " families");
}

// A default that each family sets (FamilyDefaults): the value for the deck's family, and, for the
// reference, each family's.
template <class Field>
KeySpec by_family(KeySpec spec, Field FamilyDefaults::*field) {
  std::string doc;
  for (const FamilyRules* f : family_rules()) {
    Value v;
    if constexpr (std::is_enum_v<Field>) v = std::string(name_of(f->defaults.*field));
    else if constexpr (std::is_same_v<Field, std::string>) v = f->defaults.*field;
    else if constexpr (std::is_same_v<Field, bool>) v = f->defaults.*field;
    else if constexpr (std::is_integral_v<Field>) v = static_cast<long long>(f->defaults.*field);
    else v = static_cast<double>(f->defaults.*field);
    doc += (doc.empty() ? "" : ", ") + value_text(v) + " for " + f->name;
  }
  return with_default(
      std::move(spec),
      [field](const Config& c) -> Value {
        const FamilyRules* f = find_family_rules(c.model.family);
        const FamilyDefaults defaults = f != nullptr ? f->defaults : FamilyDefaults{};
        if constexpr (std::is_enum_v<Field>) return std::string(name_of(defaults.*field));
        else if constexpr (std::is_same_v<Field, std::string>) return defaults.*field;
        else if constexpr (std::is_same_v<Field, bool>) return defaults.*field;
        else if constexpr (std::is_integral_v<Field>) return static_cast<long long>(defaults.*field);
        else return static_cast<double>(defaults.*field);
      },
      doc);
}

// model.n_kv_head: the family's default, or n_head where the family uses multi-head attention.
KeySpec kv_heads_key(KeySpec spec) {
  std::string doc;
  for (const FamilyRules* f : family_rules()) {
    const int kv_heads = f->defaults.n_kv_head;
    doc += (doc.empty() ? "" : ", ") + (kv_heads == 0 ? std::string("n_head") : std::to_string(kv_heads)) + " for " + f->name;
  }
  return with_default(
      std::move(spec),
      [](const Config& c) -> Value {
        const FamilyRules* f = find_family_rules(c.model.family);
        const int kv_heads = f != nullptr ? f->defaults.n_kv_head : FamilyDefaults{}.n_kv_head;
        return static_cast<long long>(kv_heads == 0 ? c.model.n_head : kv_heads);
      },
      doc);
}

// model.family: one of the registered families.
KeySpec family_key() {
  using MC = ModelConfig;
  std::string doc = "Model family:";
  for (const FamilyRules* f : family_rules()) doc += " " + f->name + " (" + f->summary + ");";
  doc.back() = '.';
  KeySpec spec = key("model", "family", &Config::model, &MC::family, ValueKind::choice, Bounds{}, doc);
  for (const FamilyRules* f : family_rules()) spec.choices.push_back(f->name);
  return spec;
}

// Whether model.attention resolves to cudnn (model::resolve_attention makes the same choice).
std::string cudnn_only(const Config& c) {
  const Attention a = c.model.attention;
  if (a == Attention::gemm || a == Attention::fused) return std::string("model.attention is ") + name_of(a);
  if (!backend::cudnn_built) return "this build of kgpt has no cuDNN attention";
  if (c.model.precision != Precision::bf16) return "train.precision is fp32 (cudnn attention takes bf16)";
  return "";
}

// A group's weight decay: optim.weight_decay unless the deck sets it.
KeySpec same_as_weight_decay(KeySpec spec) {
  return with_default(
      std::move(spec), [](const Config& c) -> Value { return c.optim.weight_decay; }, "optim.weight_decay");
}

// optim.matrix_optimizer: one of the registered optimizer rules, the family's by default.
KeySpec matrix_optimizer_key() {
  using OC = OptimConfig;
  std::string doc = "Optimizer of the 2-D block matrices:";
  for (const OptimizerRules* r : optimizer_rules()) doc += " " + r->name + " (" + r->summary + ");";
  doc.back() = '.';
  doc += " Embeddings, the head, vectors and scalars always use adamw.";
  KeySpec spec = key("optim", "matrix_optimizer", &Config::optim, &OC::matrix_optimizer, ValueKind::choice, Bounds{}, doc);
  for (const OptimizerRules* r : optimizer_rules()) spec.choices.push_back(r->name);
  return by_family(std::move(spec), &FamilyDefaults::matrix_optimizer);
}

// A key that only some optimizer rules read: it acts where the matrices' rule reads it.
KeySpec read_by_rule(KeySpec spec) {
  const std::string dotted = spec.dotted();
  std::string readers;
  for (const OptimizerRules* r : optimizer_rules()) {
    if (r->reads_key(dotted)) readers += (readers.empty() ? "" : " or ") + r->name;
  }
  return acting(
      std::move(spec),
      [dotted](const Config& c) -> std::string {
        const OptimizerRules* r = find_optimizer_rules(c.optim.matrix_optimizer);
        return r == nullptr || r->reads_key(dotted) ? "" : "optim.matrix_optimizer is " + c.optim.matrix_optimizer;
      },
      "optim.matrix_optimizer: " + readers);
}

std::vector<KeySpec> build_schema() {
  using VK = ValueKind;
  using RC = RunConfig;
  using MC = ModelConfig;
  using DC = DataConfig;
  using TC = TrainConfig;
  using OC = OptimConfig;
  using PC = ParallelConfig;
  using EC = ExportConfig;
  const Bounds none{};
  const Bounds positive_int = between(1, kMaxInt);
  const Bounds count = between(0, kMaxInt);
  return {
      // run
      key("run", "name", &Config::run, &RC::name, VK::string, none,
          "Name of the run directory inside out_dir: one folder name (no '/', not '.' or '..'); empty means "
          "the deck file's name without extension."),
      key("run", "out_dir", &Config::run, &RC::out_dir, VK::string, none,
          "Folder that holds run directories (relative paths are relative to the working directory)."),
      key("run", "seed", &Config::run, &RC::seed, VK::integer, between(0, 9.0e18),
          "Seed of the weight initialisation and of sampling; the same on every rank."),
      key("run", "checkpoint_every", &Config::run, &RC::checkpoint_every, VK::integer, count,
          "Write a checkpoint every N steps (and always at the end and when preempted); 0 means only then."),
      key("run", "checkpoint_keep_last", &Config::run, &RC::checkpoint_keep_last, VK::integer, positive_int,
          "Newest checkpoints kept in <run dir>/checkpoints; older ones are deleted."),
      key("run", "checkpoint_keep_every", &Config::run, &RC::checkpoint_keep_every, VK::integer, count,
          "Also keep every checkpoint whose step is a multiple of N; 0 means none beyond keep_last."),
      key("run", "tensorboard", &Config::run, &RC::tensorboard, VK::boolean, none,
          "Rank 0 writes TensorBoard event files (events.out.tfevents.*) into the run directory: the step's, "
          "evaluation's and tasks' scalars, flushed with every log line (`tensorboard --logdir <out_dir>`, or "
          "`wandb sync --sync-tensorboard <run dir>`)."),
      // model
      family_key(),
      key("model", "vocab_size", &Config::model, &MC::vocab_size, VK::integer, between(2, 65536),
          "Vocabulary size; every token id in the shards must be below it (shards hold uint16 ids)."),
      key("model", "n_layer", &Config::model, &MC::n_layer, VK::integer, between(1, 1024), "Transformer blocks."),
      key("model", "d_model", &Config::model, &MC::d_model, VK::integer, between(1, 65536),
          "Residual stream width; divisible by n_head."),
      key("model", "n_head", &Config::model, &MC::n_head, VK::integer, between(1, 1024),
          "Query heads; divisible by n_kv_head. Head dimension is d_model / n_head."),
      kv_heads_key(key("model", "n_kv_head", &Config::model, &MC::n_kv_head, VK::integer, between(1, 1024),
                       "Key/value heads: grouped-query attention where below n_head (a family may need n_kv_head = "
                       "n_head: see the rules of each family above).")),
      by_family(key("model", "mlp_mult", &Config::model, &MC::mlp_mult, VK::integer, between(1, 64),
                    "MLP hidden width as a multiple of d_model."),
                &FamilyDefaults::mlp_mult),
      acting(key("model", "rope_base", &Config::model, &MC::rope_base, VK::real, above(0), "RoPE frequency base."),
             read_by_family("model.rope_base"), readers("model.rope_base")),
      by_family(key("model", "logit_softcap", &Config::model, &MC::logit_softcap, VK::real, at_least(0),
                    "Logits become c*tanh(z/c); 0 turns the cap off."),
                &FamilyDefaults::logit_softcap),
      acting(key("model", "qk_gain_init", &Config::model, &MC::qk_gain_init, VK::real, above(0),
                 "Initial per-head query gain."),
             read_by_family("model.qk_gain_init"), readers("model.qk_gain_init")),
      by_family(key("model", "tie_embeddings", &Config::model, &MC::tie_embeddings, VK::boolean, none,
                    "true: the logits use the token embedding (tied); false: a separate output head lm_head.weight "
                    "(vocab_size x d_model, trained with optim.head_lr), as parameter-golf's untied option."),
                &FamilyDefaults::tie_embeddings),
      acting(by_family(key("model", "tied_embed_init_std", &Config::model, &MC::tied_embed_init_std, VK::real,
                           above(0), "Standard deviation of the tied embedding's normal initialisation."),
                       &FamilyDefaults::tied_embed_init_std),
             [](const Config& c) -> std::string {
               return c.model.tie_embeddings ? "" : "model.tie_embeddings is false";
             },
             "a tied embedding"),
      key("model", "attention", &Config::model, &MC::attention, VK::choice, none,
          std::string("Attention kernels, all computing the same function: cudnn (cuDNN's fused flash attention on "
                      "the tensor cores; CUDA builds with cuDNN, train.precision: bf16, head dimension ") +
              attention_capability(Attention::cudnn).head_dims +
              "); gemm (strided batched GEMMs, keeps the (B, H, T, T) probabilities for the backward); fused "
              "(Kokkos kernels on CUDA cores, head dimension " +
              attention_capability(Attention::fused).head_dims +
              ", keeps only a log-sum-exp per row); auto takes cudnn where this build and deck allow it, else "
              "gemm."),
      acting(key("model", "attention_deterministic", &Config::model, &MC::attention_deterministic, VK::boolean, none,
                 "cudnn attention: true runs cuDNN's deterministic backward, so runs repeat bit for bit (on "
                 "Hopper it needs a large workspace, which kgpt bench's view_peak_mb counts); false lets cuDNN "
                 "pick its faster, non-deterministic backward. gemm and fused are deterministic always."),
             cudnn_only, "cudnn attention"),
      acting(key("model", "gelu_epilogue", &Config::model, &MC::gelu_epilogue, VK::boolean, none,
                 "true: GELU and its gradient ride in the MLP's products where the GEMMs have such products "
                 "(cuBLASLt's GELU epilogues, bf16 on a GPU; kgpt check --device times both ways); false: the "
                 "products and GELU's own kernels apart, as the host always runs them. The same function either "
                 "way."),
             read_by_family("model.gelu_epilogue"), readers("model.gelu_epilogue")),
      acting(key("model", "smear_gate", &Config::model, &MC::smear_gate, VK::boolean, none,
                 "SmearGate, as parameter-golf's records from 2026-03-20 use it: after the embedding's RMSNorm "
                 "each position becomes (1 - g) x_t + g x_{t-1} (x_{-1} = 0 at a sequence's start), g = "
                 "sigmoid(smear_gate) per channel, smear_gate a vector of d_model trained with optim.scalar_lr "
                 "from zero (g = 0.5). Part of the model: eval and sample use the checkpoint deck's; --resume "
                 "refuses another value."),
             read_by_family("model.smear_gate"), readers("model.smear_gate")),
      acting(key("model", "parallel_residual_start", &Config::model, &MC::parallel_residual_start, VK::integer,
                 between(-1, 1023),
                 "Parallel residuals, as parameter-golf's records from 2026-03-31 use them (GPT-J's form): blocks "
                 "from this index on (counted from 0) feed the attention and the MLP the same normed input, x_out = "
                 "x + attn_scale * Attn(RMSNorm(x)) + mlp_scale * MLP(RMSNorm(x)), where the others run the MLP "
                 "after the attention's residual add. -1: no block; below model.n_layer. The same parameters and "
                 "FLOPs either way. Part of the model: eval and sample use the checkpoint deck's; --resume refuses "
                 "another value."),
             read_by_family("model.parallel_residual_start"), readers("model.parallel_residual_start")),
      acting(key("model", "recur_start", &Config::model, &MC::recur_start, VK::integer, between(-1, 1023),
                 "Depth recurrence, as parameter-golf's record of 2026-03-31 runs it: the model.recur_count blocks "
                 "from this index on (counted from 0) run a second time, with the same weights, right after their "
                 "first pass, so the forward runs n_layer + recur_count layers (0 .. s+k-1, s .. s+k-1, s+k .. "
                 "n_layer-1). Golf's U-Net skips pair the layers as run; its model.parallel_residual_start counts "
                 "blocks. -1: none. Part of the model: eval and sample use the checkpoint deck's; --resume refuses "
                 "another value."),
             read_by_family("model.recur_start"), readers("model.recur_start")),
      acting(key("model", "recur_count", &Config::model, &MC::recur_count, VK::integer, between(1, 1024),
                 "How many consecutive blocks, from model.recur_start, run twice (the record: 2, blocks 4 and 5 of "
                 "11). recur_start + recur_count is at most n_layer."),
             read_by_family("model.recur_count"), readers("model.recur_count")),
      acting(key("model", "bigram_buckets", &Config::model, &MC::bigram_buckets, VK::integer, between(0, 1 << 24),
                 "BigramHash, as parameter-golf's records from 2026-03-20 use it: a table of this many rows of "
                 "model.bigram_dim, trained with optim.embed_lr from zero, read at a hash of each (previous "
                 "token, token) pair (the records' (36313 t XOR 27191 t_prev) mod (buckets - 1); a sequence's "
                 "first position reads the last row), projected to d_model (bigram.proj, a Muon matrix, where "
                 "bigram_dim is not d_model), scaled by a learned scalar from 0.05 and added to the token "
                 "embedding before its RMSNorm. 0: none; else at least 2. Part of the model: eval and sample use "
                 "the checkpoint deck's; --resume refuses another value."),
             read_by_family("model.bigram_buckets"), readers("model.bigram_buckets")),
      acting(key("model", "bigram_dim", &Config::model, &MC::bigram_dim, VK::integer, between(1, 65536),
                 "The width of BigramHash's table rows (the records: 112 or 128)."),
             read_by_family("model.bigram_dim"), readers("model.bigram_dim")),
      key("model", "fp8", &Config::model, &MC::fp8, VK::choice, none,
          "Which linear layers of the blocks run FP8 products, as Hopper's FP8 GEMMs with per-tensor scales do "
          "(torchtitan's float8 tensorwise recipe): none; mlp (each block's MLP); all (every linear layer of the "
          "blocks; the embedding and the output head stay bf16). Inputs and weights are rounded to e4m3 and the "
          "output's gradient to e5m2, each at a power-of-two scale from its largest magnitude in the same step; "
          "the products then accumulate in fp32. Takes train.precision: bf16. CUDA builds run FP8 tensor-core "
          "products (cuBLASLt) where every side of the layer is a multiple of 16; the host, and other layers, "
          "round the operands and run bf16 products on them, which compute the same numbers up to the order of "
          "the sums; kgpt check's memory plan shows the operands' scratch. Part of the model: eval and sample use the "
          "checkpoint deck's; --resume refuses another value."),
      key("model", "init_from", &Config::model, &MC::init_from, VK::string, none,
          "A safetensors file, or a folder holding model.safetensors (kgpt export --format hf, or a Hugging Face "
          "model's folder), whose weights start the run instead of the random initialisation; every tensor's name "
          "and shape is checked against the model before anything is written (a learned position table longer than "
          "train.seq_len loads its first rows, as GPT-2's 1,024 positions for a deck of 256), and the optimizer "
          "starts fresh. The "
          "history and the checkpoints record the file and its checksum; --resume resumes from the run's own "
          "checkpoints. Empty: random initialisation."),
      // data
      key("data", "train_files", &Config::data, &DC::train_files, VK::string, none,
          "Glob of training shards, read in sorted order and wrapped around."),
      key("data", "val_files", &Config::data, &DC::val_files, VK::string, none, "Glob of validation shards."),
      key("data", "tokenizer", &Config::data, &DC::tokenizer, VK::choice, none,
          "How tokens map to text: byte (kgpt prepare's default; 256 is the document boundary), "
          "sentencepiece (kgpt prepare --tokenizer sentencepiece, or parameter-golf's shards; needs vocab_file) "
          "or tiktoken (byte-level BPE as GPT-2's and tiktoken's encodings: nanoGPT's and llm.c's FineWeb "
          "shards, kgpt prepare --tokenizer tiktoken; needs vocab_file)."),
      acting(key("data", "vocab_file", &Config::data, &DC::vocab_file, VK::string, none,
                 "The tokenizer's file. sentencepiece: the model (.model: val_bpb's byte counts, and kgpt sample "
                 "encodes and decodes text with it) or its vocabulary (.vocab, one piece and score per line: "
                 "val_bpb only). tiktoken: a rank file (one \"base64 rank\" a line, as tiktoken's "
                 "cl100k_base.tiktoken) or GPT-2's encoder.json with vocab.bpe beside it. Required for both."),
             [](const Config& c) -> std::string {
               return c.data.tokenizer != Tokenizer::byte ? "" : "data.tokenizer is byte";
             },
             "data.tokenizer: sentencepiece or tiktoken"),
      acting(key("data", "tiktoken_encoding", &Config::data, &DC::tiktoken_encoding, VK::choice, none,
                 "The encoding of data.vocab_file's ranks, which gives the split pattern and the special tokens "
                 "(<|endoftext|>, the document separator): gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base or "
                 "o200k_base; auto infers it from the file's name, else from its number of ranks."),
             [](const Config& c) -> std::string {
               return c.data.tokenizer == Tokenizer::tiktoken ? "" : "data.tokenizer is not tiktoken";
             },
             "data.tokenizer: tiktoken"),
      key("data", "task_files", &Config::data, &DC::task_files, VK::string, none,
          "Multiple-choice task files (a glob; kgpt eval --task's format: JSON Lines as HellaSwag's, one "
          "{\"ctx\", \"endings\", \"label\"} a line) that training scores at the end, and every "
          "train.task_eval_every steps: acc and acc_norm per file, in the log and in history.h5's /task. Read "
          "and checked with the deck (kgpt check too), before anything is written. \"\": none."),
      // train
      key("train", "seq_len", &Config::train, &TC::seq_len, VK::integer, between(1, 1048576),
          "Tokens per training sequence."),
      key("train", "global_batch_tokens", &Config::train, &TC::global_batch_tokens, VK::integer, between(1, 1.0e13),
          "Tokens per optimizer step over all ranks and micro-steps; divisible by "
          "world_size x grad_accum_steps x seq_len."),
      key("train", "accum_total", &Config::train, &TC::accum_total, VK::integer, between(1, 65536),
          "Micro-steps per optimizer step over all ranks; grad_accum_steps = accum_total / world_size."),
      key("train", "iterations", &Config::train, &TC::iterations, VK::integer, count, "Optimizer steps."),
      key("train", "warmup_steps", &Config::train, &TC::warmup_steps, VK::integer, count,
          "Steps of linear learning-rate warmup."),
      key("train", "schedule", &Config::train, &TC::schedule, VK::choice, none,
          "Learning rate after warmup: constant (then warmdown) or cosine (to min_lr_fraction)."),
      acting(key("train", "min_lr_fraction", &Config::train, &TC::min_lr_fraction, VK::real, between(0, 1),
                 "Floor of the cosine schedule as a fraction of each group's learning rate."),
             [](const Config& c) -> std::string {
               return c.train.schedule == Schedule::cosine ? "" : "train.schedule is constant";
             },
             "train.schedule: cosine"),
      key("train", "warmdown_iters", &Config::train, &TC::warmdown_iters, VK::integer, count,
          "Linear decay to zero over the last warmdown_iters steps (or the same share of the wall-clock cap)."),
      key("train", "max_wallclock_seconds", &Config::train, &TC::max_wallclock_seconds, VK::real, at_least(0),
          "Stop after this many seconds of training, agreed by all ranks; 0 means no cap."),
      key("train", "grad_clip_norm", &Config::train, &TC::grad_clip_norm, VK::real, at_least(0),
          "Clip gradients to this global norm; 0 means no clipping."),
      key("train", "eval_every", &Config::train, &TC::eval_every, VK::integer, count,
          "Evaluate on the val split every N steps and at the end; 0 means only at the end."),
      key("train", "val_tokens", &Config::train, &TC::val_tokens, VK::integer, between(0, 1.0e13),
          "Tokens of the val split to evaluate; 0 means all of it."),
      key("train", "eval_stride", &Config::train, &TC::eval_stride, VK::integer, count,
          "Sliding-window evaluation: windows of seq_len tokens start every eval_stride tokens, and each "
          "scores only the tokens no earlier window scored (the first scores all; the last ends at the "
          "split's end), so every val token is scored once, with at least seq_len - eval_stride tokens of "
          "context (parameter-golf's records use 64). 0: back-to-back windows, each token with the context "
          "since its window's start. At most train.seq_len; an evaluation then runs about seq_len / "
          "eval_stride times the forwards (kgpt check prints them)."),
      key("train", "eval_isolate_documents", &Config::train, &TC::eval_isolate_documents, VK::boolean, none,
          "Evaluation with each document on its own, as papers score documents: no window reaches back "
          "across a document's start (the token kgpt prepare places before every document: the byte "
          "tokenizer's 256, SentencePiece's <s>), so every val token's context is its own document's "
          "tokens before it. A document of up to seq_len tokens is one window; a longer one gets "
          "train.eval_stride's windows over it (0: back to back). Every val token is still scored once, so "
          "val_bpb's bytes are unchanged; short documents make more windows than back to back (kgpt eval "
          "prints eval_windows)."),
      acting(key("train", "task_eval_every", &Config::train, &TC::task_eval_every, VK::integer, between(0, 2147483647),
                 "Score data.task_files every N steps, as well as at the end, with the weights "
                 "train.eval_weights names (acc: the right ending has the largest log-likelihood; acc_norm: the "
                 "largest per character). 0: at the end only."),
             [](const Config& c) -> std::string { return c.data.task_files.empty() ? "data.task_files is empty" : ""; },
             "data.task_files"),
      key("train", "log_every", &Config::train, &TC::log_every, VK::integer, positive_int,
          "Print a train line every N steps (and the first and last steps)."),
      key("train", "precision", &Config::model, &MC::precision, VK::choice, none,
          "fp32, or bf16: activations stored in bf16 and the GEMMs fed bf16 with fp32 accumulation (on the "
          "tensor cores on GPUs); master weights, gradients, optimizer state, norms' statistics, softmax and "
          "the loss stay fp32. CPU builds run bf16 too (for tests, not speed). Part of the model: eval and sample "
          "use the precision of the checkpoint's deck; --resume refuses another. Read also under its old name "
          "train.gemm_precision."),
      key("train", "recompute", &Config::model, &MC::recompute, VK::choice, none,
          "What the forward keeps for the backward: none keeps every activation of every block; block "
          "keeps only each transformer block's input and runs the block's forward again, with the same "
          "kernels, just before its backward (the same losses and gradients, bit for bit, for about a "
          "third more compute; kgpt check's memory plan shows what it saves). train.recompute_every rebuilds "
          "only some blocks."),
      acting(key("train", "recompute_every", &Config::model, &MC::recompute_every, VK::integer, positive_int,
                 "Which blocks train.recompute: block rebuilds: every Nth (blocks 0, N, 2N, ...), as Megatron's "
                 "partial recompute; the others keep their activations. 1 rebuilds every block; larger N keeps "
                 "more memory for less recompute (a rebuilt block costs one more forward). Below "
                 "model.n_layer (one rebuilt block saves nothing). kgpt check's memory plan shows what each choice keeps."),
             [](const Config& c) -> std::string {
               return c.model.recompute == Recompute::block ? "" : "train.recompute is none";
             },
             "train.recompute: block"),
      key("train", "ema_decay", &Config::train, &TC::ema_decay, VK::real, half_open(0, 1),
          "Exponential moving average of the weights: after every optimizer step ema = d ema + (1 - d) w, "
          "starting from the initial weights (parameter-golf's records: 0.997). Kept in every checkpoint; "
          "train.eval_weights: ema evaluates it, and kgpt eval, sample and export take it with --weights ema. "
          "0: none."),
      key("train", "swa_every", &Config::train, &TC::swa_every, VK::integer, count,
          "Stochastic weight averaging: after every step s with s a multiple of N whose learning-rate "
          "multiplier is below train.swa_start_lr (the warmdown's later part), the weights join a uniform "
          "average of all such snapshots (parameter-golf's records: every 50 steps, below 0.4 to 0.5). Kept in every "
          "checkpoint with its count; train.eval_weights: swa evaluates it, and kgpt eval, sample and export "
          "take it with --weights swa. 0: none."),
      acting(key("train", "swa_start_lr", &Config::train, &TC::swa_start_lr, VK::real, half_open(0, 2),
                 "train.swa_every: snapshots are taken only at steps whose learning-rate multiplier (warmup, "
                 "schedule and warmdown together) is below this."),
             [](const Config& c) -> std::string { return c.train.swa_every > 0 ? "" : "train.swa_every is 0"; },
             "train.swa_every > 0"),
      key("train", "qat_start_lr", &Config::train, &TC::qat_start_lr, VK::real, half_open(0, 2),
          "Late quantization-aware training: from the first step after warmup whose learning-rate multiplier "
          "is below this, the forward and backward read the attention's and MLP's matrices rounded per row to "
          "their export bits (export.attention_bits, export.mlp_bits; scale max|w| / (2^(b-1) - 1)), and the "
          "optimizer updates the unrounded weights with those gradients (straight-through). parameter-golf's "
          "records: 0.15. 0: none; 1.5: every step after warmup. kgpt check's memory plan counts the copy of the "
          "weights it keeps."),
      key("train", "eval_weights", &Config::train, &TC::eval_weights, VK::choice, none,
          "The weights training's evaluations score: live (the optimizer's), ema (train.ema_decay) or swa "
          "(train.swa_every; the live weights until its first snapshot). The log's val lines name them."),
      // optim
      matrix_optimizer_key(),
      key("optim", "matrix_lr", &Config::optim, &OC::matrix_lr, VK::real, at_least(0),
          "Learning rate of the 2-D block matrices (optim.matrix_optimizer)."),
      key("optim", "scalar_lr", &Config::optim, &OC::scalar_lr, VK::real, at_least(0),
          "Learning rate of vectors and scalars (gains, scales, mixes, skip weights, norms)."),
      with_default(key("optim", "embed_lr", &Config::optim, &OC::embed_lr, VK::real, at_least(0),
                       "Learning rate of the token embedding (and of learned positions)."),
                   [](const Config& c) -> Value { return c.model.tie_embeddings ? 0.05 : 0.6; },
                   "0.05 tied, 0.6 untied (parameter-golf's tied_embed_lr and embed_lr)"),
      acting(key("optim", "head_lr", &Config::optim, &OC::head_lr, VK::real, at_least(0),
                 "Learning rate of the untied output head (Adam)."),
             [](const Config& c) -> std::string {
               return c.model.tie_embeddings ? "model.tie_embeddings is true: there is no head" : "";
             },
             "an untied embedding"),
      key("optim", "beta1", &Config::optim, &OC::beta1, VK::real, half_open(0, 1), "Adam first-moment decay."),
      key("optim", "beta2", &Config::optim, &OC::beta2, VK::real, half_open(0, 1), "Adam second-moment decay."),
      key("optim", "adam_eps", &Config::optim, &OC::adam_eps, VK::real, above(0), "Adam epsilon."),
      key("optim", "weight_decay", &Config::optim, &OC::weight_decay, VK::real, at_least(0),
          "Decoupled weight decay (p -= lr wd p, lr the group's scheduled rate) on the matrices, the "
          "embeddings and the head, whatever their optimizer: the default of matrix_weight_decay, "
          "embed_weight_decay and head_weight_decay below, which a deck may set apart. Vectors and scalars "
          "take scalar_weight_decay."),
      same_as_weight_decay(key("optim", "matrix_weight_decay", &Config::optim, &OC::matrix_weight_decay, VK::real,
                               at_least(0),
                               "Decoupled weight decay of the 2-D block matrices, with Muon or AdamW "
                               "(parameter-golf's MUON_WD, 0.04 in its records).")),
      same_as_weight_decay(key("optim", "embed_weight_decay", &Config::optim, &OC::embed_weight_decay, VK::real,
                               at_least(0),
                               "Decoupled weight decay of the token embedding (and of learned positions) "
                               "(parameter-golf's EMBED_WD).")),
      acting(same_as_weight_decay(key("optim", "head_weight_decay", &Config::optim, &OC::head_weight_decay,
                                      VK::real, at_least(0), "Decoupled weight decay of the untied output head.")),
             [](const Config& c) -> std::string {
               return c.model.tie_embeddings ? "model.tie_embeddings is true: there is no head" : "";
             },
             "an untied embedding"),
      key("optim", "scalar_weight_decay", &Config::optim, &OC::scalar_weight_decay, VK::real, at_least(0),
          "Decoupled weight decay of vectors and scalars (gains, scales, mixes, skip weights, norms); "
          "parameter-golf's records decay them with their AdamW (WEIGHT_DECAY, later ADAM_WD)."),
      read_by_rule(key("optim", "muon_momentum", &Config::optim, &OC::muon_momentum, VK::real, half_open(0, 1),
                       "Muon momentum after warmup (Nesterov).")),
      read_by_rule(key("optim", "muon_momentum_warmup_start", &Config::optim, &OC::muon_momentum_warmup_start, VK::real,
                       half_open(0, 1), "Muon momentum at step 0, raised linearly to muon_momentum.")),
      read_by_rule(key("optim", "muon_momentum_warmup_steps", &Config::optim, &OC::muon_momentum_warmup_steps,
                       VK::integer, count, "Steps over which Muon momentum warms up.")),
      read_by_rule(key("optim", "muon_backend_steps", &Config::optim, &OC::muon_backend_steps, VK::integer,
                       between(1, 20), "Newton-Schulz iterations per Muon update.")),
      // parallel
      acting(key("parallel", "bucket_mb", &Config::parallel, &PC::bucket_mb, VK::real, above(0),
                 "Size in MB (10^6 bytes) from which a bucket of final gradients starts averaging during the "
                 "last micro-step's backward."),
             [](const Config& c) -> std::string {
               return c.parallel.overlap ? "" : "parallel.overlap is false";
             },
             "parallel.overlap: true"),
      key("parallel", "overlap", &Config::parallel, &PC::overlap, VK::boolean, none,
          "Average gradients in buckets while the last micro-step's backward runs; false: one all-reduce "
          "over the whole gradient buffer after it."),
      key("parallel", "check_every", &Config::parallel, &PC::check_every, VK::integer, count,
          "Compare a checksum of the parameters across ranks every N steps (always at the start); 0 means "
          "only at the start."),
      key("parallel", "stall_timeout_s", &Config::parallel, &PC::stall_timeout_s, VK::real, at_least(0),
          "End the job (exit code 4, not requeued by the Slurm scripts) when its ranks make no progress for "
          "this many seconds, or one stops answering, naming the rank, step and phase; 0 turns the watchdog "
          "off. It must exceed the longest stretch without progress: a micro-step's forward or backward, one "
          "evaluation batch, one checkpoint tensor, the first step's set-up (GEMM plans, cuDNN graphs)."),
      key("parallel", "zero_stage", &Config::parallel, &PC::zero_stage, VK::integer, between(0, 1),
          "0: every rank holds the whole optimizer state and runs the whole update. 1: the parameter tensors "
          "are split into one contiguous span per rank (whole tensors, balanced by size); each rank keeps the "
          "optimizer state of its span only and updates it, then the updated spans are gathered on every rank. "
          "The same losses and parameters as 0; checkpoints have the same format, so a run resumes across stages "
          "and world sizes."),
      key("parallel", "share_muon", &Config::parallel, &PC::share_muon, VK::boolean, none,
          "With Muon on more than one rank at zero_stage 0: each rank orthogonalises a share of the matrices "
          "(whole matrices, balanced by their Newton-Schulz arithmetic) and the orthogonalised updates are "
          "exchanged, exactly as computed, so every rank applies all of them; false: every rank "
          "orthogonalises every matrix. The same losses and parameters either way. At zero_stage 1 each rank "
          "orthogonalises the matrices of its own span."),
      key("parallel", "device_memory_gib", &Config::parallel, &PC::device_memory_gib, VK::real, at_least(0),
          "Memory per rank (GiB, 2^30 bytes) that the memory plan must fit in: kgpt check, train and bench "
          "refuse a deck whose plan exceeds it. 0: the memory of this machine's device (the GPU on a CUDA "
          "build, the host's physical memory on a CPU build)."),
      // export
      key("export", "embed_bits", &Config::export_, &EC::embed_bits, VK::integer, between(4, 8),
          "kgpt export: bits per weight of the token embedding, learned positions and untied head (2-D "
          "tensors of more than export.keep_float_max elements). 8: int8 per row as parameter-golf's "
          "baseline stores it (clip at the 99.99984th percentile of the row's magnitudes); 4-7: per-row codes in "
          "[-(2^(b-1)-1), 2^(b-1)-1] packed to b bits, each row's clip the one of its magnitudes' 99.9th, "
          "99.95th, 99.99th and 99.999th percentiles and their maximum that rounds the row with the least "
          "squared error, with an fp16 scale."),
      key("export", "attention_bits", &Config::export_, &EC::attention_bits, VK::integer, between(4, 8),
          "kgpt export: bits per weight of the attention's matrices (as export.embed_bits; parameter-golf's "
          "records store them in 6)."),
      key("export", "mlp_bits", &Config::export_, &EC::mlp_bits, VK::integer, between(4, 8),
          "kgpt export: bits per weight of the MLP's matrices (as export.embed_bits; parameter-golf's "
          "records store them in 6, then 5)."),
      key("export", "compression", &Config::export_, &EC::compression, VK::choice, none,
          "kgpt export: the compressor of the artifact's payload: zlib (level 9, parameter-golf's baseline), "
          "zstd (level 22, its records of March) or brotli (quality 11 with a 16 MiB window, its SP1024 record "
          "of 2026-03-31)."),
      key("export", "code_layout", &Config::export_, &EC::code_layout, VK::choice, none,
          "kgpt export: how 4-7 bit codes are stored: packed (b bits each: the payload's size follows from the "
          "shapes, and little is left for the compressor), bytes (one int8 each, as parameter-golf's records "
          "store them: the compressor codes them by their frequencies, smaller after zstd at 5-7 bits), or auto "
          "(the file compressed both ways, the smaller kept)."),
      key("export", "keep_float_max", &Config::export_, &EC::keep_float_max, VK::integer, between(0, 1.0e13),
          "kgpt export: tensors of at most this many elements stay in floating point (fp32 for the control "
          "tensors: golf's attn_scale, mlp_scale, resid_mix, q_gain, skip_weights, smear_gate and bigram.scale; "
          "fp16 for the others); "
          "kgpt export --keep-float-max sets it too."),
  };
}

// The keys of the model's configuration that --resume may change (KeySpec::fixed_for_run): they
// choose how the same function is computed, or how a new run starts.
constexpr const char* kFreeAtResume[] = {"model.attention",    "model.attention_deterministic", "model.gelu_epilogue",
                                         "train.recompute",    "train.recompute_every",         "model.init_from",
                                         "model.qk_gain_init", "model.tied_embed_init_std"};

// The entry of a key a family or an optimizer rule declares: its value lives in the section's
// ModuleValues, and it acts where the deck's family (model.*) or the matrices' rule (optim.*) reads it.
KeySpec module_key(const ModuleKey& declared) {
  const std::size_t dot = declared.dotted.find('.');
  const std::string section = declared.dotted.substr(0, dot);
  if (section != "model" && section != "optim") {
    throw Error(ExitCode::failure, declared.dotted + ": a module's own key lies in the model or the optim section");
  }
  const bool model = section == "model";
  KeySpec spec;
  spec.section = section;
  spec.name = declared.dotted.substr(dot + 1);
  spec.kind = declared.kind;
  spec.bounds = declared.bounds;
  spec.doc = declared.doc;
  spec.fixed_for_run = model;
  const std::string dotted = declared.dotted;
  spec.get = [dotted, model](const Config& c) -> Value {
    return module_value(model ? c.model.family_keys : c.optim.rule_keys, dotted);
  };
  spec.set = [dotted, model](Config& c, const Value& v) { (model ? c.model.family_keys : c.optim.rule_keys)[dotted] = v; };
  if (model) return acting(std::move(spec), read_by_family(dotted), readers(dotted));
  return read_by_rule(std::move(spec));
}

std::vector<KeySpec> schema_with_resume_rules() {
  std::vector<KeySpec> schema = build_schema();
  // The modules' own keys, each after the last key of its section.
  for (const ModuleKey* declared : module_keys()) {
    for (const KeySpec& existing : schema) {
      if (existing.dotted() == declared->dotted) {
        throw Error(ExitCode::failure, declared->dotted + ": a module declares a key the schema already has");
      }
    }
    KeySpec spec = module_key(*declared);
    auto at = schema.end();
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it->section == spec.section) at = it + 1;
    }
    schema.insert(at, std::move(spec));
  }
  for (KeySpec& spec : schema) {
    for (const char* key : kFreeAtResume) {
      if (spec.dotted() == key) spec.fixed_for_run = false;
    }
  }
  return schema;
}

}  // namespace

const std::vector<KeySpec>& deck_schema() {
  static const std::vector<KeySpec> schema = schema_with_resume_rules();
  return schema;
}

void resolve_contextual_defaults(Config& config) {
  for (const auto& spec : deck_schema()) {
    if (spec.contextual_default) spec.set(config, spec.contextual_default(config));
  }
}

const KeySpec* find_key(const std::string& dotted) {
  for (const auto& spec : deck_schema()) {
    if (spec.dotted() == dotted) return &spec;
  }
  return nullptr;
}

const std::vector<KeyAlias>& key_aliases() {
  static const std::vector<KeyAlias> aliases = {{"train.gemm_precision", "train.precision"}};
  return aliases;
}

const std::vector<std::string>& deck_sections() {
  static const std::vector<std::string> sections = {"run", "model", "data", "train", "optim", "parallel", "export"};
  return sections;
}

}  // namespace kgpt::config
