#pragma once
// Multiple-choice tasks (HellaSwag's format, data/task_file.hpp), scored as the usual harnesses
// score them: each ending's log-likelihood given the context, summed over the ending's tokens. acc
// counts the examples whose right ending has the largest sum; acc_norm those whose right ending has
// the largest sum divided by the ending's length in characters (lm-evaluation-harness's acc_norm;
// llm.c's HellaSwag divides by tokens instead). Ties go to the first ending.
//
// The context is a document's start: the document start token (byte 256, or SentencePiece's <s>)
// and the ctx's tokens. Each ending is " " + its text, tokenized on its own and appended, so every
// ending continues the same context tokens. One example is one forward of its endings as rows, each
// as long as the longest (rows end in padding that a causal model's scored positions never see), so
// an example's scores do not depend on the others or on the number of ranks; every rank takes a
// contiguous share of the examples and the counts are added over ranks.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/views.hpp"
#include "data/shard.hpp"
#include "data/task_file.hpp"
#include "inference/text_codec.hpp"
#include "parallel/watchdog.hpp"
#include "parallel/world.hpp"

namespace kgpt::inference {

struct TaskExampleTokens {
  std::vector<int> context;               // the document start, then the context's tokens
  std::vector<std::vector<int>> endings;  // each " " + ending's tokens
  std::vector<double> characters;         // each " " + ending's length in characters (UTF-8 code points)
  int label = 0;
};

struct Task {
  std::string name, path;
  std::vector<TaskExampleTokens> examples;
};

// The characters of UTF-8 text: its bytes that do not continue a character.
inline std::size_t utf8_characters(const std::string& text) {
  std::size_t count = 0;
  for (unsigned char byte : text) count += (byte & 0xC0) != 0x80;
  return count;
}

// Reads and tokenizes a task file; an example whose context and ending take more than seq_len + 1
// tokens (more positions than a window holds) is an InputError naming the file and its line.
inline Task prepare_task(const std::string& path, const TextCodec& codec, int seq_len) {
  Task task;
  task.path = path;
  task.name = data::task_name(path);
  std::vector<std::string> problems;
  for (const data::TaskExample& e : data::read_task_file(path)) {
    TaskExampleTokens tokens;
    tokens.context = codec.prompt(e.context);
    tokens.label = e.label;
    std::size_t longest = 0;
    for (const std::string& ending : e.endings) {
      const std::string text = " " + ending;
      tokens.endings.push_back(codec.tokens(text));
      tokens.characters.push_back(static_cast<double>(utf8_characters(text)));
      longest = std::max(longest, tokens.endings.back().size());
    }
    const std::size_t positions = tokens.context.size() + longest - 1;
    if (positions > static_cast<std::size_t>(seq_len)) {
      if (problems.size() < 20) {
        problems.push_back(path + ":" + std::to_string(e.line) + ": the context (" +
                           std::to_string(tokens.context.size()) + " tokens with the document start) and its longest "
                           "ending (" + std::to_string(longest) + ") need " + std::to_string(positions) +
                           " positions, more than train.seq_len = " + std::to_string(seq_len));
      }
      continue;
    }
    task.examples.push_back(std::move(tokens));
  }
  if (!problems.empty()) throw InputError(problems);
  return task;
}

// The tasks of the deck's data.task_files (none when it is ""): every file its glob matches, read
// and tokenized with the deck's tokenizer. InputError naming the key when nothing matches, or
// naming the file and line of a bad example.
inline std::vector<Task> deck_tasks(const config::ResolvedDeck& deck) {
  const std::string& pattern = deck.config.data.task_files;
  if (pattern.empty()) return {};
  const std::vector<std::string> files = data::find_shards(pattern);
  if (files.empty()) {
    throw InputError(deck.where("data.task_files") + ": no file matches '" + pattern +
                     "' (relative paths are relative to the working directory)");
  }
  const TextCodec codec(deck, deck.path);
  std::vector<Task> tasks;
  for (const std::string& file : files) tasks.push_back(prepare_task(file, codec, deck.config.train.seq_len));
  return tasks;
}

struct TaskResult {
  std::string name;
  std::size_t examples = 0;
  double acc = 0, acc_norm = 0;
  double seconds = 0;  // this rank's wall time, the sum over ranks included
};

// Scores `task` with `model` (built for micro-batches of up to max_batch rows of seq_len); every
// rank takes its share of the examples. Collective.
template <class Model>
TaskResult score_task(const ExecSpace& exec, Model& model, const Task& task, int max_batch, int seq_len, int rank,
                      int world_size) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t count = task.examples.size();
  const std::size_t mine_begin = count * rank / world_size, mine_end = count * (rank + 1) / world_size;
  TokenMatrix inputs("kgpt::task::inputs", max_batch, seq_len), targets("kgpt::task::targets", max_batch, seq_len);
  auto host_inputs = Kokkos::create_mirror_view(inputs);
  auto host_targets = Kokkos::create_mirror_view(targets);
  double sums[2] = {0, 0};  // right by acc, by acc_norm
  bool first_forward = true;
  for (std::size_t i = mine_begin; i < mine_end; ++i) {
    const TaskExampleTokens& e = task.examples[i];
    const std::size_t context = e.context.size(), endings = e.endings.size();
    std::size_t width = 0;  // the positions of the longest ending's row
    for (const auto& ending : e.endings) width = std::max(width, context + ending.size() - 1);
    const int seq = static_cast<int>(width);
    std::vector<double> loglik(endings, 0.0);
    for (std::size_t first = 0; first < endings; first += static_cast<std::size_t>(max_batch)) {
      const int rows = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(max_batch), endings - first));
      // Host and device views of rows x seq over the buffers' first elements: both contiguous.
      const typename TokenMatrix::HostMirror hin(host_inputs.data(), rows, seq), hout(host_targets.data(), rows, seq);
      for (int r = 0; r < rows; ++r) {
        const std::vector<int>& ending = e.endings[first + static_cast<std::size_t>(r)];
        // The row's token at position p: the context's, the ending's, then padding.
        const auto token = [&](std::size_t p) {
          return p < context ? e.context[p] : p - context < ending.size() ? ending[p - context] : 0;
        };
        for (int t = 0; t < seq; ++t) {
          hin(r, t) = token(static_cast<std::size_t>(t));
          hout(r, t) = token(static_cast<std::size_t>(t) + 1);
        }
      }
      const TokenMatrix in(inputs.data(), rows, seq), out(targets.data(), rows, seq);
      Kokkos::deep_copy(exec, in, hin);
      Kokkos::deep_copy(exec, out, hout);
      if (!first_forward) model.reuse_weight_shadow();  // the weights do not change during an evaluation
      first_forward = false;
      model.forward(exec, in, out);
      const auto losses = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), model.token_losses());
      for (int r = 0; r < rows; ++r) {
        const std::size_t k = first + static_cast<std::size_t>(r);
        // Position p predicts token p + 1: the ending's tokens are predicted from context - 1 on.
        for (std::size_t p = context - 1; p < context - 1 + e.endings[k].size(); ++p) {
          loglik[k] -= static_cast<double>(losses(static_cast<std::size_t>(r) * static_cast<std::size_t>(seq) + p));
        }
      }
    }
    std::size_t best = 0, best_norm = 0;
    for (std::size_t k = 1; k < endings; ++k) {
      if (loglik[k] > loglik[best]) best = k;
      if (loglik[k] / e.characters[k] > loglik[best_norm] / e.characters[best_norm]) best_norm = k;
    }
    sums[0] += best == static_cast<std::size_t>(e.label);
    sums[1] += best_norm == static_cast<std::size_t>(e.label);
    parallel::progress();
  }
  parallel::progress_detail("summing the task's scores over ranks");
  parallel::sum_in_place(sums, 2);
  TaskResult result;
  result.name = task.name;
  result.examples = count;
  result.acc = sums[0] / static_cast<double>(count);
  result.acc_norm = sums[1] / static_cast<double>(count);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace kgpt::inference
