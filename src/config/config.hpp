#pragma once
// Typed configuration. Every field's initialiser is its documented default; the deck reader
// (deck.cpp) and the reference (docs/deck-reference.md) take the defaults from here. A few
// defaults depend on other keys (the schema's contextual defaults, schema.cpp): the values below
// are those of the golf family with a tied embedding, and resolve_contextual_defaults() sets the
// others for a deck. The family is a name the model registry knows (model/family.hpp).
//
// Keys with a fixed set of values are enums from the moment the deck is read; ChoiceNames<E>
// holds the deck spelling of each value, in the enum's order.

#include <map>
#include <string>
#include <variant>

namespace kgpt::config {

// A deck value as the schema reads and writes it.
using Value = std::variant<long long, double, bool, std::string>;
// The values of the keys a module declares itself (a family's, config/family_rules.hpp; an
// optimizer rule's, config/optimizer_rules.hpp), by dotted key; a key set nowhere has its declared
// default (config/module_keys.hpp).
using ModuleValues = std::map<std::string, Value, std::less<>>;

enum class Attention { automatic, gemm, fused, cudnn };
enum class Tokenizer { byte, sentencepiece, tiktoken };
// data/tiktoken.hpp's encodings; automatic: from the vocabulary file's name, else its size.
enum class TiktokenEncoding { automatic, gpt2, r50k_base, p50k_base, p50k_edit, cl100k_base, o200k_base };
enum class Schedule { constant, cosine };
enum class Precision { fp32, bf16 };
enum class Recompute { none, block };
enum class Fp8 { none, mlp, all };
enum class Compression { zlib, zstd, brotli };
enum class CodeLayout { automatic, packed, bytes };
enum class Weights { live, ema, swa };

template <class E>
struct ChoiceNames;
template <>
struct ChoiceNames<Attention> {
  static constexpr const char* names[] = {"auto", "gemm", "fused", "cudnn"};
};
template <>
struct ChoiceNames<Tokenizer> {
  static constexpr const char* names[] = {"byte", "sentencepiece", "tiktoken"};
};
template <>
struct ChoiceNames<TiktokenEncoding> {
  static constexpr const char* names[] = {"auto", "gpt2", "r50k_base", "p50k_base", "p50k_edit", "cl100k_base", "o200k_base"};
};
template <>
struct ChoiceNames<Schedule> {
  static constexpr const char* names[] = {"constant", "cosine"};
};
template <>
struct ChoiceNames<Precision> {
  static constexpr const char* names[] = {"fp32", "bf16"};
};
template <>
struct ChoiceNames<Recompute> {
  static constexpr const char* names[] = {"none", "block"};
};
template <>
struct ChoiceNames<Fp8> {
  static constexpr const char* names[] = {"none", "mlp", "all"};
};
template <>
struct ChoiceNames<Weights> {
  static constexpr const char* names[] = {"live", "ema", "swa"};
};
template <>
struct ChoiceNames<CodeLayout> {
  static constexpr const char* names[] = {"auto", "packed", "bytes"};
};
template <>
struct ChoiceNames<Compression> {
  static constexpr const char* names[] = {"zlib", "zstd", "brotli"};
};

// "golf", "auto", ... : the deck spelling of a value.
template <class E>
const char* name_of(E value) {
  return ChoiceNames<E>::names[static_cast<int>(value)];
}

// Sets `value` from its deck spelling; false when `text` names none.
template <class E>
bool parse_choice(const std::string& text, E& value) {
  int index = 0;
  for (const char* name : ChoiceNames<E>::names) {
    if (text == name) {
      value = static_cast<E>(index);
      return true;
    }
    ++index;
  }
  return false;
}

struct RunConfig {
  std::string name = "";         // "" means the deck file's name without extension
  std::string out_dir = "runs";  // run directories are created below this folder
  long long seed = 1337;
  int checkpoint_every = 0;
  int checkpoint_keep_last = 3;
  int checkpoint_keep_every = 0;
  bool tensorboard = true;  // rank 0 writes TensorBoard event files into the run directory
};

struct ModelConfig {
  std::string family = "golf";  // a registered family (model/family.hpp)
  int vocab_size = 1024;
  int n_layer = 9;
  int d_model = 512;
  int n_head = 8;
  int n_kv_head = 4;  // golf: grouped-query attention; gpt2: must equal n_head
  int mlp_mult = 2;   // contextual: 2 for golf, 4 for gpt2
  double rope_base = 10000.0;
  double logit_softcap = 30.0;  // 0 turns the softcap off
  double qk_gain_init = 1.5;
  bool tie_embeddings = true;          // false: a separate output head (lm_head.weight)
  double tied_embed_init_std = 0.005;  // contextual: 0.005 for golf, 0.02 for gpt2
  Attention attention = Attention::automatic;
  bool attention_deterministic = true;  // cudnn: the deterministic backward algorithm
  bool gelu_epilogue = true;  // GELU and its gradient in the MLP's products, where the backend has them
  Fp8 fp8 = Fp8::none;        // which blocks' linear layers run FP8 products (model/ops/fp8.hpp)
  bool smear_gate = false;    // golf: each position mixes in a learned share of the previous one
  int parallel_residual_start = -1;  // golf: blocks from this one on run attention and MLP side by side; -1: none
  // golf's depth recurrence: blocks recur_start .. recur_start + recur_count - 1 run a second time,
  // with the same weights, right after their first pass; -1: none (model/block_sequence.hpp).
  int recur_start = -1;
  int recur_count = 1;
  // golf's BigramHash: a table of bigram_buckets rows of bigram_dim, indexed by a hash of each
  // (previous token, token) pair, projected to d_model and added to the token embedding; 0: none.
  int bigram_buckets = 0;
  int bigram_dim = 128;
  // The deck key is train.precision; it lives here because the model is built for it, so that
  // eval, sample and resume run a checkpoint in the precision it was trained in.
  Precision precision = Precision::fp32;
  // The deck key is train.recompute; the model keeps what its backward needs by it.
  Recompute recompute = Recompute::none;
  // train.recompute_every: under recompute block, blocks 0, N, 2N, ... are rebuilt; the others keep
  // their activations (model/recompute.hpp).
  int recompute_every = 1;
  // A safetensors file (or a folder holding model.safetensors) whose weights start the run.
  std::string init_from = "";
  // The keys families declare themselves ("model.value_embed_layers"), as the deck sets them.
  ModuleValues family_keys;
};

struct DataConfig {
  // parameter-golf's layout for its SentencePiece-1024 FineWeb shards.
  std::string train_files = "data/datasets/fineweb10B_sp1024/fineweb_train_*.bin";
  std::string val_files = "data/datasets/fineweb10B_sp1024/fineweb_val_*.bin";
  Tokenizer tokenizer = Tokenizer::sentencepiece;
  std::string vocab_file = "data/tokenizers/fineweb_1024_bpe.vocab";  // for val_bpb
  TiktokenEncoding tiktoken_encoding = TiktokenEncoding::automatic;
  // Multiple-choice task files (a glob) scored at the end and every train.task_eval_every steps; "": none.
  std::string task_files = "";
};

struct TrainConfig {
  int seq_len = 1024;
  long long global_batch_tokens = 524288;  // tokens per optimizer step, all ranks together
  int accum_total = 8;                     // micro-steps per optimizer step, all ranks together
  int iterations = 20000;
  int warmup_steps = 0;
  Schedule schedule = Schedule::constant;
  double min_lr_fraction = 0.0;  // cosine floor, as a fraction of each group's lr
  int warmdown_iters = 1200;
  double max_wallclock_seconds = 0.0;  // 0: no wall-clock cap
  double grad_clip_norm = 0.0;         // 0: no clipping
  int eval_every = 1000;               // 0: evaluate only at the end
  long long val_tokens = 0;            // 0: the whole val split
  int eval_stride = 0;                 // 0: back-to-back windows; else sliding windows advancing by this
  bool eval_isolate_documents = false;  // windows never reach back across a document's start
  int task_eval_every = 0;              // score data.task_files every N steps too; 0: at the end only
  int log_every = 200;
  // Averages of the weights (features/weight_averages/), kept beside them and in checkpoints.
  double ema_decay = 0.0;       // 0: no EMA; else ema = d ema + (1 - d) w after every step
  int swa_every = 0;            // 0: no SWA; else every N steps once the lr multiplier is below swa_start_lr
  double swa_start_lr = 0.5;
  Weights eval_weights = Weights::live;  // which weights training's evaluations score
  double qat_start_lr = 0.0;  // late QAT (features/late_qat/) below this lr multiplier; 0: none
};

struct OptimConfig {
  // The keys optimizer rules declare themselves, as the deck sets them.
  ModuleValues rule_keys;
  // A registered optimizer rule (config/optimizer_rules.hpp); contextual: muon for golf, adamw for gpt2.
  std::string matrix_optimizer = "muon";
  double matrix_lr = 0.04;
  double scalar_lr = 0.04;
  double embed_lr = 0.05;  // contextual: 0.05 with a tied embedding, 0.6 with an untied one
  double head_lr = 0.008;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  // Decoupled weight decay by group; each but the scalars' defaults to weight_decay (contextual).
  double matrix_weight_decay = 0.0;
  double embed_weight_decay = 0.0;
  double head_weight_decay = 0.0;
  double scalar_weight_decay = 0.0;
  double muon_momentum = 0.95;
  double muon_momentum_warmup_start = 0.85;
  int muon_momentum_warmup_steps = 500;
  int muon_backend_steps = 5;
};

struct ParallelConfig {
  double bucket_mb = 25.0;
  bool overlap = true;
  int check_every = 0;
  double stall_timeout_s = 600.0;  // 0: no stall watchdog
  double device_memory_gib = 0.0;  // the memory plan's budget per rank; 0: this machine's device
  int zero_stage = 0;              // 1: the optimizer state and update sharded over the ranks
  bool share_muon = true;          // stage 0: each rank orthogonalises a share of Muon's matrices
};

// How `kgpt export` stores the weights (io/artifact.hpp): bits per weight of the 2-D tensors by
// group (8: parameter-golf's int8 rows; 4-7: codes packed to that many bits), and the compressor.
struct ExportConfig {
  int embed_bits = 8;
  int attention_bits = 8;
  int mlp_bits = 8;
  Compression compression = Compression::zlib;
  CodeLayout code_layout = CodeLayout::automatic;  // 4-7 bit codes: packed, a byte each, or the smaller file
  long long keep_float_max = 65536;  // tensors of at most this many elements stay in fp16/fp32
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
  ExportConfig export_;  // the deck's `export` section (export is a C++ keyword)
};

// Sets the keys whose defaults depend on other keys (family, tie_embeddings) to those defaults,
// as the deck reader does for keys a deck leaves out; for code that builds a Config by hand.
void resolve_contextual_defaults(Config& config);

}  // namespace kgpt::config
