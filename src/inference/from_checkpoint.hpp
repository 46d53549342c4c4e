#pragma once
// What can be done with a checkpoint besides resuming: evaluate it on the val split (on every rank
// of the job), generate text from it, and export it as a compressed artifact (io/artifact.hpp).
// Each rebuilds the model from the resolved deck stored in the checkpoint and loads it with
// load_checkpoint's checks. Evaluation and sampling take artifacts as well as checkpoints.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "inference/tasks.hpp"

namespace kgpt::inference {

// The resolved deck stored in the checkpoint or artifact at `path`, with `overrides` applied
// ("section.key=value").
config::ResolvedDeck checkpoint_deck(const std::string& path, const std::vector<std::string>& overrides,
                                     int world_size);

struct CheckpointEvaluation {
  bool artifact = false;  // `path` was an artifact
  std::int64_t step = 0;
  double loss = 0.0, bpb = 0.0;
  std::size_t tokens = 0;
  std::size_t windows = 0;  // windows of seq_len tokens evaluated (train.eval_stride)
  double seconds = 0.0;     // the evaluation's wall time
};

// Collective: every rank evaluates its share of the val split. `weights`: the checkpoint's live
// weights, or an average it keeps (train.ema_decay, train.swa_every); artifacts hold live ones only.
CheckpointEvaluation evaluate_checkpoint(const config::ResolvedDeck& deck, const std::string& path,
                                         config::Weights weights = config::Weights::live);

// The multiple-choice tasks of `task_files` (kgpt eval --task; inference/tasks.hpp) scored with the
// checkpoint's or artifact's weights. Collective: every rank scores its share of each task's
// examples. The files are read and tokenized before the model is built: a bad one is an InputError
// naming the file and its line.
struct TaskEvaluation {
  bool artifact = false;
  std::int64_t step = 0;
  std::vector<TaskResult> tasks;
};
TaskEvaluation evaluate_tasks(const config::ResolvedDeck& deck, const std::string& path,
                              const std::vector<std::string>& task_files, config::Weights weights = config::Weights::live);

struct SampleOptions {
  std::string prompt;
  int max_new_tokens = 200;
  double temperature = 1.0;  // 0: always the most likely token
  int top_k = 0;             // 0: all tokens
  std::uint64_t seed = 1;
  config::Weights weights = config::Weights::live;  // as evaluate_checkpoint's
};

// Continues the prompt one token at a time, handing each new piece of text to `emit`; stops after
// max_new_tokens or at a document boundary (byte token 256, or any control piece of a SentencePiece
// model). SentencePiece decks need data.vocab_file to be the .model. Returns the new text.
std::string sample_checkpoint(const config::ResolvedDeck& deck, const std::string& path, const SampleOptions& options,
                              const std::function<void(const std::string&)>& emit);

// The parameter buffer (host, the deck's layout) of the checkpoint or artifact at `path`.
std::vector<float> checkpoint_parameters(const config::ResolvedDeck& deck, const std::string& path, std::int64_t& step,
                                         config::Weights weights = config::Weights::live);

struct ExportedTensor {
  std::string name, storage, group;
  std::vector<std::size_t> shape;
  double max_abs = 0, max_error = 0, rms_error = 0;  // of the values, and of values minus their round trip
};

// The tensors of one weight group (io::WeightGroup) together.
struct ExportedGroup {
  std::string name;
  int bits = 8;  // the deck's bits for the group's large 2-D tensors
  std::size_t tensors = 0, elements = 0;
  std::size_t stored_bytes = 0;  // before compression
  double squares = 0;            // the sum of squared round-trip errors
  double rms_error() const;
};

struct ExportSummary {
  std::int64_t step = 0;
  std::size_t bytes = 0;          // the artifact file
  std::size_t float32_bytes = 0;  // the same tensors in fp32
  std::size_t payload_bytes = 0;  // the stored tensors before compression
  std::string compression;        // zlib, zstd or brotli
  std::string code_layout;        // packed or bytes (export.code_layout), "" without 4-7 bit codes
  std::vector<ExportedTensor> tensors;
  std::vector<ExportedGroup> groups;  // the groups that hold tensors, in io::WeightGroup's order
  std::string record;  // the run directory's artifact.yaml that was written, or ""
};

// Writes the artifact of the checkpoint's weights (live, or an average it keeps) to `out`, stored as
// the checkpoint's deck's export section says after `overrides` ("export.mlp_bits=5"). When the checkpoint lies in a run
// directory (<run>/checkpoints/ckpt_*.h5), <run>/artifact.yaml records the artifact's path, step
// and bytes for postprocess/summarize.py.
ExportSummary export_checkpoint(const std::string& checkpoint, const std::string& out,
                                const std::vector<std::string>& overrides,
                                config::Weights weights = config::Weights::live);

// What `kgpt export` will write for a deck, from its model's shapes alone (kgpt check): the payload's
// exact bytes and the file's largest possible size (the payload through the compressor's bound; the
// metadata's paths estimated), by group.
struct ArtifactPlan {
  std::size_t payload_bytes = 0, largest_bytes = 0;
  std::vector<ExportedGroup> groups;
};
ArtifactPlan plan_artifact(const config::ResolvedDeck& deck);

// After `kgpt eval` of an artifact: adds the round-trip val_loss and val_bpb to the artifact.yaml of
// the run it came from, when that file still names this artifact. Returns the file written, or "".
std::string record_artifact_evaluation(const std::string& artifact_path, const CheckpointEvaluation& result);

}  // namespace kgpt::inference
