// kgpt check: validate a deck (and its data) and print the fully resolved deck.

#include <iostream>

#include "commands.hpp"
#include "config/deck.hpp"
#include "core/error.hpp"
#include "core/kokkos_compat.hpp"
#include "core/text.hpp"
#include "core/versions.hpp"
#include "inference/evaluator.hpp"
#include "inference/from_checkpoint.hpp"
#include "inference/hf.hpp"
#include "data/dataset_check.hpp"
#include "inference/tasks.hpp"
#include "io/artifact.hpp"
#include "model/family.hpp"
#include "probes/attention.hpp"
#include "probes/fp8.hpp"
#include "probes/gelu.hpp"
#include "probes/head.hpp"
#include "train/memory_plan.hpp"
#include "train/step_estimate.hpp"

namespace kgpt::app {

const CommandSpec& check_spec() {
  static const CommandSpec spec{
      "check",
"DECK [--set section.key=value]... [--world-size N] [--no-data] [--device] [--plan-for host|cuda]\n"
      "       kgpt check --reference",
      "validate a deck and its data, print the resolved deck",
      "Reads DECK, applies the --set overrides, validates every key and the rules between keys for\n"
      "the given world size, checks that the train and val shards exist and have valid headers, and\n"
"prints the fully resolved deck (every key, its value, and where it came from) on stdout.\n"
      "It prints the memory plan of one rank on stderr: parameters, gradients, optimizer state, the bf16\n"
      "weight shadow, activations at the deck's micro-batch, the step's buffers and library workspaces,\n"
      "against the memory of the device (parallel.device_memory_gib, or this machine's). A deck that\n"
      "does not fit is refused, naming what would. --plan-for cuda plans for a CUDA build from any\n"
      "machine (cuDNN attention where the deck allows it; set parallel.device_memory_gib).\n"
      "Then what `kgpt export` would write for the deck's export section: the payload's bytes by\n"
      "weight group, exact, and the most the artifact file can take after compression, against\n"
      "parameter-golf's 16,000,000-byte limit. For a bf16 deck, the step it should take on H100s at the\n"
      "given world size: its FLOPs at the rate golf's baseline deck was measured at on one H100 as one\n"
      "rank of 8, plus its gradients' all-reduce over NVLink (an estimate; kgpt bench measures).\n"
      "Nothing is written. Exit code 0 when the deck is valid, 2 with one message per problem if not.\n"
      "\n"
      "--device also runs the deck's attention on this machine's device (the GPU of a CUDA build):\n"
      "the implementation model.attention resolves to, at one rank's micro-batch, forward and\n"
      "backward on random inputs (cuDNN's graphs are built as training builds them), timed, and on\n"
      "one sequence compared with another implementation of the same function. It prints the\n"
      "device, the cuDNN found at run time and the figures; exit code 1 with the library's message\n"
      "when the attention cannot run here or disagrees. Then it times the output head's three products\n"
      "at the same micro-batch with the logits' rows as training keeps them (the vocabulary rounded up\n"
      "to 64 apart) and, where that differs, as wide as the vocabulary; for a bf16 deck, a block's\n"
      "linear layers as bf16 and as FP8 products (model.fp8), side by side.",
      {
          {"set", "section.key=value", "override a deck key (repeatable; validated like the deck)"},
          {"world-size", "N", "number of MPI ranks the deck is meant for (default 1)"},
          {"no-data", "", "skip the check of the data files"},
          {"device", "", "also run the deck's attention and the head's products on this machine's device"},
          {"plan-for", "host|cuda", "the build the memory plan is for (default: this one)"},
          {"reference", "", "print the Markdown reference of every deck key and exit"},
      },
      0,
      1};
  return spec;
}

config::ResolvedDeck load_deck_from_args(const ParsedArgs& args, int world_size) {
  config::DeckOptions options;
  options.world_size = world_size;
  options.overrides = args.all("set");
  return config::load_deck(args.positional().at(0), options);
}

namespace {

// Runs the deck's attention (probes/attention.hpp), times the output head's products
// (probes/head.hpp) and, for a GELU MLP, the products GELU rides in (probes/gelu.hpp) on
// this machine's device, and says how it went.
void check_device(const config::ResolvedDeck& deck) {
  const config::ModelConfig& m = deck.config.model;
  const int batch = static_cast<int>(deck.plan.local_sequences), seq = deck.config.train.seq_len;
  const std::string device = compat::device_name();
  std::cerr << "kgpt check: device: " << compat::enabled_backends() << (device.empty() ? "" : " (" + device + ")")
            << "; cuDNN: " << versions().cudnn << "\n";
  try {
    const probes::AttentionProbe p = probes::probe_attention(m, batch, seq);
    std::cerr << "kgpt check: attention " << p.attention << " (" << config::name_of(m.precision) << ") at " << p.batch
              << "x" << p.seq << ", " << p.heads << " heads, " << p.kv_heads << " kv heads, head dim " << p.head_dim
              << ": forward " << text::fixed(p.forward_ms, 2) << " ms, backward " << text::fixed(p.backward_ms, 2)
              << " ms";
    if (p.workspace_bytes >= 0) {
      std::cerr << "; cuDNN workspace " << text::fixed(p.workspace_bytes / 1048576.0, 1) << " MiB (the plan estimates "
                << text::fixed(p.workspace_estimate_bytes / 1048576.0, 1) << ")";
    }
    if (p.compared_with.empty()) {
      std::cerr << "; no other implementation to compare with\n";
    } else {
      std::cerr << "; against " << p.compared_with << " on one sequence: " << text::significant(p.max_difference)
                << " (allowed " << text::significant(p.tolerance) << ")\n";
    }
  } catch (const Error& e) {
    throw Error(ExitCode::failure, deck.where("model.attention") + ": this machine cannot run the deck's attention: " +
                                       e.what());
  }
  try {
    const probes::HeadProbe h = probes::probe_head(m, batch, seq);
    const auto rate = [&](double ms) {
      const double tflops = h.flops / (ms * 1e-3) / 1e12;
      return text::fixed(tflops, tflops < 10 ? 3 : 1) + " TFLOP/s";
    };
    std::cerr << "kgpt check: head products (logits, dx, dW) at " << h.rows << " x " << h.vocab << " x " << h.width
              << " (" << config::name_of(m.precision) << "): rows " << h.row_stride << " apart, products "
              << h.product_cols << " wide, as trained: " << text::fixed(h.kept_ms, 2) << " ms (" << rate(h.kept_ms) << ")";
    const auto other = [&](const std::string& what, double ms) {
      std::cerr << "; " << what << ": " << text::fixed(ms, 2) << " ms (" << rate(ms) << ", "
                << text::fixed(ms / h.kept_ms, 2) << "x)";
    };
    if (h.other_cols_ms >= 0) {
      other("products " + std::to_string(h.product_cols == h.vocab ? h.row_stride : h.vocab) + " wide", h.other_cols_ms);
    }
    if (h.unpadded_ms >= 0) other("rows " + std::to_string(h.vocab) + " apart", h.unpadded_ms);
    std::cerr << "\n";
  } catch (const Error& e) {
    throw Error(ExitCode::failure, deck.where("model.vocab_size") + ": this machine cannot run the output head's products: " +
                                       e.what());
  }
  if (m.precision == config::Precision::bf16) {
    try {
      std::cerr << "kgpt check: fp8 products (forward, dx, dW; rounding passes included) at " << batch * seq
                << " rows, bf16 against FP8:";
      const char* separator = " ";
      for (const probes::Fp8ProbeLayer& l : probes::probe_fp8(m, batch, seq)) {
        std::cerr << separator << l.name << " " << l.in << "->" << l.out << " " << text::fixed(l.bf16_ms, 2) << " ms, "
                  << text::fixed(l.fp8_ms, 2) << " ms (" << text::fixed(l.bf16_ms / l.fp8_ms, 2) << "x, "
                  << (l.native ? "FP8 tensor cores" : "bf16 products of rounded operands") << ", y off by "
                  << text::fixed(100 * l.relative_error, 1) << "% RMS)";
        separator = "; ";
      }
      std::cerr << "\n";
    } catch (const Error& e) {
      std::cerr << "\n";
      throw Error(ExitCode::failure, deck.where("model.fp8") + ": this machine cannot run FP8 products: " + e.what());
    }
  }
  if (!model::family(m.family).reads_key("model.gelu_epilogue")) return;
  try {
    const probes::GeluProbe g = probes::probe_gelu(m, batch, seq);
    const auto fused = [](bool yes) { return yes ? "in the product" : "apart"; };
    std::cerr << "kgpt check: gelu products (up into GELU, down's dx through it) at " << g.rows << " x " << g.hidden
              << " x " << g.width << " (" << config::name_of(m.precision)
              << "): forward GELU " << fused(g.fused_forward) << ", backward " << fused(g.fused_backward) << "; ";
    if (g.fused_ms >= 0) {
      std::cerr << "in the products " << text::fixed(g.fused_ms, 2) << " ms, apart " << text::fixed(g.apart_ms, 2)
                << " ms (" << text::fixed(g.apart_ms / g.fused_ms, 2) << "x); largest difference "
                << text::significant(g.max_difference) << " (allowed " << text::significant(g.tolerance) << ")\n";
    } else {
      std::cerr << text::fixed(g.apart_ms, 2) << " ms\n";
    }
  } catch (const Error& e) {
    throw Error(ExitCode::failure, deck.where("model.gelu_epilogue") +
                                       ": this machine cannot run the MLP's products with GELU in them: " + e.what() +
                                       " (model.gelu_epilogue: false runs the products and GELU apart)");
  }
}

// What kgpt export would write: the payload by group and the file's largest size.
void describe_artifact(const config::ResolvedDeck& deck) {
  const inference::ArtifactPlan plan = inference::plan_artifact(deck);
  std::cerr << "kgpt check: artifact (kgpt export, " << config::name_of(deck.config.export_.compression) << "): payload "
            << text::with_thousands(plan.payload_bytes) << " bytes (";
  const char* separator = "";
  for (const auto& g : plan.groups) {
    std::cerr << separator << g.name << " " << text::with_thousands(g.stored_bytes) << " in " << g.tensors
              << " tensors, " << g.bits << "-bit rows";
    separator = "; ";
  }
  const std::size_t limit = io::kArtifactLimitBytes;
  std::cerr << "), at most " << text::with_thousands(plan.largest_bytes) << " bytes after compression: ";
  if (plan.largest_bytes <= limit) {
    std::cerr << "fits parameter-golf's " << text::with_thousands(limit) << "-byte limit whatever the weights\n";
  } else if (plan.payload_bytes <= limit) {
    std::cerr << "fits parameter-golf's " << text::with_thousands(limit) << "-byte limit unless compression grows the payload\n";
  } else {
    const std::size_t saving = plan.payload_bytes - limit;
    std::cerr << "fits parameter-golf's " << text::with_thousands(limit) << "-byte limit only if compression saves "
              << text::with_thousands(saving) << " bytes ("
              << text::fixed(100.0 * static_cast<double>(saving) / static_cast<double>(plan.payload_bytes), 1)
              << "% of the payload)\n";
  }
}

}  // namespace

int run_check(const ParsedArgs& args) {
  if (args.has("reference")) {
    std::cout << config::render_reference();
    return 0;
  }
  if (args.positional().empty()) throw InputError(missing_argument(check_spec(), 0));
  const int world_size = static_cast<int>(int_option(args, "world-size", 1, 1, 1 << 20));
  const config::ResolvedDeck deck = load_deck_from_args(args, world_size);
  model::MemoryTarget target = model::this_build();
  if (args.has("plan-for")) {
    const std::string backend = args.get("plan-for");
    if (backend == "cuda") target = model::gpu_build();
    else if (backend == "host") target = model::MemoryTarget{};
    else throw InputError("--plan-for: '" + backend + "' is not one of host, cuda");
  }
  const train::MemoryPlan memory = train::plan_memory(deck, target);
  std::string data_note = "data not checked (--no-data)";
  if (!args.has("no-data")) {
    const data::DatasetFiles files = data::check_dataset(deck);
    data_note = std::to_string(files.train.files.size()) + " train shards (" + text::with_thousands(files.train.tokens) +
                " tokens), " + std::to_string(files.val.files.size()) + " val shards (" +
                text::with_thousands(files.val.tokens) + " tokens)";
    // What an evaluation runs: every window is a forward of seq_len tokens.
    const int seq = deck.config.train.seq_len, stride = deck.config.train.eval_stride;
    const std::size_t windows = inference::eval_windows(files.val_evaluated, seq, stride).size();
    data_note += "; evaluation: " + text::with_thousands(files.val_evaluated) + " val tokens in " +
                 text::with_thousands(windows) + " windows of " + std::to_string(seq) +
                 (stride == 0 ? std::string(" back to back")
                              : " (train.eval_stride " + std::to_string(stride) + ": " +
                                    text::fixed(static_cast<double>(windows) * seq /
                                                    static_cast<double>(files.val_evaluated), 2) +
                                    "x the forward tokens of back to back)");
    if (deck.config.train.eval_isolate_documents) {
      data_note += "; train.eval_isolate_documents: one window or more per document instead (kgpt eval prints how "
                   "many)";
    }
    const std::vector<inference::Task> tasks = inference::deck_tasks(deck);
    for (const inference::Task& task : tasks) {
      data_note += "; task " + task.name + " (" + task.path + "): " + text::with_thousands(task.examples.size()) +
                   " examples";
    }
    if (!deck.config.model.init_from.empty()) {
      const inference::InitWeights init = inference::read_init_weights(deck);
      data_note += "; model.init_from " + init.file + " (" + std::to_string(init.tensors) +
                   " tensors, fnv1a64 " + init.checksum + ")";
    }
  }
  std::cout << config::render_resolved(deck);
  for (const auto& note : deck.notes) std::cerr << "kgpt check: note: " << note << "\n";
  std::cerr << "kgpt check: memory plan of one rank (" << memory.backend << " build, world size " << world_size
            << ", micro-batch " << deck.plan.local_sequences << "x" << deck.plan.seq_len << "):\n";
  for (const auto& line : train::describe(memory)) std::cerr << line << "\n";
  train::require_fit(deck, memory, target);
  describe_artifact(deck);
  // A bf16 deck is a GPU deck: how long its step should take on H100s, from the measured baseline.
  if (deck.config.model.precision == config::Precision::bf16) {
    std::cerr << "kgpt check: " << train::describe(train::estimate_h100_step(deck), world_size) << "\n";
  }
  std::cerr << "kgpt check: " << deck.path << " is valid for world size " << world_size << "; " << data_note << "\n";
  if (args.has("device")) check_device(deck);
  return 0;
}

}  // namespace kgpt::app
