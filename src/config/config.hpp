#pragma once
// Typed configuration. Every field's initialiser is its documented default; the deck reader
// (deck.cpp) and the reference (docs/deck-reference.md) take the defaults from here.

#include <string>

namespace kgpt::config {

struct RunConfig {
  std::string name = "";         // "" means the deck file's name without extension
  std::string out_dir = "runs";  // run directories are created below this folder
  long long seed = 1337;
  int checkpoint_every = 0;
  int checkpoint_keep_last = 3;
  int checkpoint_keep_every = 0;
};

struct ModelConfig {
  std::string family = "golf";  // golf | gpt2
  int vocab_size = 1024;
  int n_layer = 9;
  int d_model = 512;
  int n_head = 8;
  int n_kv_head = 4;  // golf: grouped-query attention; gpt2: must equal n_head
  int mlp_mult = 2;
  double rope_base = 10000.0;
  double logit_softcap = 30.0;  // 0 turns the softcap off
  double qk_gain_init = 1.5;
  double tied_embed_init_std = 0.005;
  std::string attention = "auto";  // auto | gemm | fused
};

struct DataConfig {
  // parameter-golf's layout for its SentencePiece-1024 FineWeb shards.
  std::string train_files = "data/datasets/fineweb10B_sp1024/fineweb_train_*.bin";
  std::string val_files = "data/datasets/fineweb10B_sp1024/fineweb_val_*.bin";
  std::string tokenizer = "sentencepiece";  // byte | sentencepiece
  std::string vocab_file = "data/tokenizers/fineweb_1024_bpe.vocab";  // for val_bpb
};

struct TrainConfig {
  int seq_len = 1024;
  long long global_batch_tokens = 524288;  // tokens per optimizer step, all ranks together
  int accum_total = 8;                     // micro-steps per optimizer step, all ranks together
  int iterations = 20000;
  int warmup_steps = 0;
  std::string schedule = "constant";  // constant | cosine
  double min_lr_fraction = 0.0;       // cosine floor, as a fraction of each group's lr
  int warmdown_iters = 1200;
  double max_wallclock_seconds = 0.0;  // 0: no wall-clock cap
  double grad_clip_norm = 0.0;         // 0: no clipping
  int eval_every = 1000;               // 0: evaluate only at the end
  long long val_tokens = 0;            // 0: the whole val split
  int log_every = 200;
  std::string gemm_precision = "fp32";  // fp32 | bf16 (CUDA builds; host builds run fp32)
};

struct OptimConfig {
  double matrix_lr = 0.04;
  double scalar_lr = 0.04;
  double embed_lr = 0.05;
  double head_lr = 0.008;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double weight_decay = 0.0;
  double muon_momentum = 0.95;
  double muon_momentum_warmup_start = 0.85;
  int muon_momentum_warmup_steps = 500;
  int muon_backend_steps = 5;
};

struct ParallelConfig {
  double bucket_mb = 25.0;
  bool overlap = true;
  int check_every = 0;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimConfig optim;
  ParallelConfig parallel;
};

}  // namespace kgpt::config
