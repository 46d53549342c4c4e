// kgpt eval, kgpt sample and kgpt export: a checkpoint's (or artifact's) val loss, text generated
// from it, and its compressed artifact.

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "parallel/world.hpp"
#include "inference/from_checkpoint.hpp"
#include "inference/hf.hpp"
#include "io/artifact.hpp"
#include "io/run_directory.hpp"

namespace kgpt::app {

namespace {

const OptionSpec kWeightsOption{"weights", "live|ema|swa",
                                   "a checkpoint's live weights (default) or an average it keeps (train.ema_decay, "
                                   "train.swa_every; swa is refused, exit 2, before the SWA's first snapshot)"};

config::Weights weights_option(const ParsedArgs& args) {
  if (!args.has("weights")) return config::Weights::live;
  config::Weights weights = config::Weights::live;
  if (!config::parse_choice(args.get("weights"), weights)) {
    throw InputError("--weights: '" + args.get("weights") + "' is not one of live, ema, swa");
  }
  return weights;
}

}  // namespace

const CommandSpec& eval_spec() {
  static const CommandSpec spec{
      "eval",
      "CKPT|ARTIFACT [--set section.key=value]... [--weights live|ema|swa] [--task FILE.jsonl]...",
      "val loss and val_bpb of a checkpoint or an exported artifact",
      "Rebuilds the model from the resolved deck stored in the checkpoint (or artifact), loads it\n"
      "(checking its checksum, names and shapes) and evaluates it on the deck's val split\n"
      "(data.val_files, train.val_tokens, train.eval_stride for sliding windows; --set changes them).\n"
      "Under mpiexec or srun every rank takes a share of the windows; the result does not depend on the\n"
      "number of ranks. --weights ema or swa evaluates an average of the weights the checkpoint keeps.\n"
      "Prints one line (eval_s: the evaluation's wall time):\n"
      "  checkpoint:PATH step:S val_loss:L val_bpb:B val_tokens:N eval_windows:W eval_s:E weights:live\n"
      "(artifact:PATH ... for an artifact: the round-trip figures, which are also added to the\n"
      "artifact.yaml of the run it was exported from).\n"
      "--task scores a multiple-choice task instead: a JSON Lines file in HellaSwag's format, one\n"
      "{\"ctx\": ..., \"endings\": [...], \"label\": N} a line. Each ending (after a space) is scored by its\n"
      "log-likelihood given the context (after the document start); acc counts the examples whose\n"
      "right ending scores highest, acc_norm those whose right ending scores highest per character.\n"
      "The same figures on any number of ranks. One line per task:\n"
      "  task:NAME file:PATH examples:N acc:A acc_norm:B eval_s:E checkpoint:PATH step:S weights:live\n"
      "A bad task file (not JSON, a missing field, a label out of range, an empty ending, a context and\n"
      "ending longer than train.seq_len) ends with exit code 2 naming the file and line.",
      {{"set", "section.key=value", "override a key of the checkpoint's deck (repeatable)"},
       kWeightsOption,
       {"task", "FILE.jsonl", "score this multiple-choice task file instead of the val split (repeatable)"}},
      1,
      1};
  return spec;
}

int run_eval(const ParsedArgs& args) {
  const std::string path = args.positional().at(0);
  config::ResolvedDeck deck;
  // Evaluation splits the val sequences over any number of ranks: the deck's batch plan is read for
  // one rank, whatever the world size.
  parallel::agreed([&] { deck = inference::checkpoint_deck(path, args.all("set"), 1); });
  config::Weights weights = config::Weights::live;
  parallel::agreed([&] { weights = weights_option(args); });
  if (args.has("task")) {
    inference::TaskEvaluation tasks;
    const std::vector<std::string> files = args.all("task");
    parallel::agreed([&] { tasks = inference::evaluate_tasks(deck, path, files, weights); });
    if (parallel::world().rank == 0) {
      for (std::size_t i = 0; i < tasks.tasks.size(); ++i) {
        const inference::TaskResult& t = tasks.tasks[i];
        char line[256];
        std::snprintf(line, sizeof(line), " examples:%zu acc:%.6f acc_norm:%.6f eval_s:%.2f", t.examples, t.acc,
                      t.acc_norm, t.seconds);
        std::cout << "task:" << t.name << " file:" << files[i] << line << (tasks.artifact ? " artifact:" : " checkpoint:")
                  << path << " step:" << tasks.step << " weights:" << config::name_of(weights) << std::endl;
      }
    }
    return 0;
  }
  inference::CheckpointEvaluation result;
  parallel::agreed([&] { result = inference::evaluate_checkpoint(deck, path, weights); });
  if (parallel::world().rank == 0) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  " step:%lld val_loss:%.6f val_bpb:%.6f val_tokens:%zu eval_windows:%zu eval_s:%.2f weights:%s",
                  static_cast<long long>(result.step), result.loss, result.bpb, result.tokens, result.windows,
                  result.seconds, config::name_of(weights));
    std::cout << (result.artifact ? "artifact:" : "checkpoint:") << path << line << std::endl;
    if (result.artifact) {
      const std::string record = inference::record_artifact_evaluation(path, result);
      if (!record.empty()) std::cout << "recorded in " << record << std::endl;
    }
  }
  return 0;
}

const CommandSpec& sample_spec() {
  static const CommandSpec spec{
      "sample",
      "CKPT|ARTIFACT [--set section.key=value]... [--prompt TEXT] [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S] [--weights live|ema|swa]",
      "generate text from a checkpoint or an exported artifact",
      "Rebuilds the model from the checkpoint (or artifact) and continues TEXT one token at a time,\n"
      "printing the prompt and then each new piece of text as it comes. Sampling draws from the\n"
      "softmax of the logits divided by T over the K most likely tokens (T = 0: always the most likely\n"
      "one); the same seed gives the same text. Stops after N new tokens or at the end of a document.\n"
      "Byte-tokenizer models read and write bytes; SentencePiece models encode the prompt and decode\n"
      "the output with the deck's data.vocab_file, which must then be the .model (--set changes it);\n"
      "tiktoken models with its rank file (or encoder.json), <|endoftext|> starting the prompt's\n"
      "document and any special token ending the text.",
      {
          {"set", "section.key=value", "override a key of the checkpoint's deck (repeatable)"},
          {"prompt", "TEXT", "text to continue (default: none, a new document)"},
          {"max-new-tokens", "N", "tokens to generate at most (default 200)"},
          {"temperature", "T", "softmax temperature, >= 0 (default 1)"},
          {"top-k", "K", "sample among the K most likely tokens; 0 means all (default 0)"},
          {"seed", "S", "seed of the sampler (default 1)"},
          kWeightsOption,
      },
      1,
      1};
  return spec;
}

int run_sample(const ParsedArgs& args) {
  const std::string path = args.positional().at(0);
  inference::SampleOptions options;
  options.prompt = args.get("prompt");
  options.max_new_tokens = static_cast<int>(int_option(args, "max-new-tokens", options.max_new_tokens, 0, 1 << 24));
  options.temperature = double_option(args, "temperature", options.temperature);
  if (!(options.temperature >= 0)) throw InputError("--temperature: must be >= 0");
  options.top_k = static_cast<int>(int_option(args, "top-k", options.top_k, 0, 1 << 20));
  options.seed = static_cast<std::uint64_t>(int_option(args, "seed", 1, 0, 1LL << 62));
  options.weights = weights_option(args);
  const config::ResolvedDeck deck = inference::checkpoint_deck(path, args.all("set"), 1);
  std::cout << options.prompt << std::flush;
  inference::sample_checkpoint(deck, path, options, [](const std::string& piece) { std::cout << piece << std::flush; });
  std::cout << std::endl;
  return 0;
}

const CommandSpec& export_spec() {
  static const CommandSpec spec{
      "export",
      "CKPT --out FILE|DIR [--set export.key=value]... [--keep-float-max N] [--weights live|ema|swa] [--format artifact|hf] [--dtype fp32|bf16]",
      "compress a checkpoint into a model artifact (int8/int6/int5 + zlib/zstd/brotli), or write it for Hugging Face transformers",
      "Writes the checkpoint's weights as parameter-golf scores a model, as the deck's export section\n"
      "says (--set changes it): 2-D tensors of more than export.keep_float_max (65,536) elements in\n"
      "their group's bits, export.embed_bits, attention_bits and mlp_bits (8: int8 per row, clip at the\n"
      "99.99984th percentile of |w|, fp16 row scales, parameter-golf's baseline; 4-7: per-row codes\n"
      "of that many bits, each row's clip chosen for the least squared error, packed or a byte each as\n"
      "export.code_layout says: auto keeps the smaller file), larger tensors\n"
      "of other ranks as int8 with one scale, smaller tensors in fp16 (the control tensors attn_scale,\n"
      "mlp_scale, resid_mix, q_gain, skip_weights in fp32), all compressed with export.compression\n"
      "(zlib at level 9, zstd at level 22 or brotli at quality 11); the checkpoint's deck travels inside. Prints every\n"
      "tensor's storage and round-trip error, each group's bytes and error, and the artifact's bytes\n"
      "against parameter-golf's 16,000,000-byte limit (kgpt check predicts them from a deck).\n"
      "`kgpt eval FILE` gives the round-trip val_loss and val_bpb, and `kgpt sample FILE` and\n"
      "`kgpt inspect FILE` work as on checkpoints. A checkpoint in a run directory also gets\n"
      "<run>/artifact.yaml, read by postprocess/summarize.py.\n"
      "--format hf writes the folder DIR that transformers loads (AutoModelForCausalLM.from_pretrained):\n"
      "config.json, model.safetensors (fp32, or bf16 with --dtype bf16) and, for a SentencePiece deck,\n"
      "tokenizer.model. gpt2 checkpoints become GPT2LMHeadModel, llama ones LlamaForCausalLM; other\n"
      "families, and models trained with model.logit_softcap, are refused (exit 2). DIR must not exist:\n"
      "it is written under a temporary name and renamed into place.",
      {
          {"out", "FILE|DIR", "the artifact to write (replaced atomically if it exists), or the folder (hf)"},
          {"set", "export.key=value", "override a key of the checkpoint's deck's export section (repeatable)"},
          {"keep-float-max", "N", "tensors of at most N elements stay in fp16/fp32 (export.keep_float_max)"},
          kWeightsOption,
          {"format", "artifact|hf", "artifact (default): kgpt's quantized artifact; hf: a transformers folder"},
          {"dtype", "fp32|bf16", "hf: the weights' dtype in model.safetensors (default fp32)"},
      },
      1,
      1};
  return spec;
}

int run_export(const ParsedArgs& args) {
  const std::string path = args.positional().at(0);
  if (!args.has("out")) throw InputError("missing --out FILE (the artifact to write) or --out DIR with --format hf");
  const std::string format = args.has("format") ? args.get("format") : "artifact";
  if (format != "artifact" && format != "hf") throw InputError("--format: '" + format + "' is not one of artifact, hf");
  if (args.has("dtype") && format != "hf") throw InputError("--dtype: only with --format hf");
  // The artifact replaces whatever is at --out: never the checkpoint itself or a file a run needs.
  const std::string clash = io::output_clash(args.get("out"), path);
  if (!clash.empty()) {
    throw InputError("--out " + args.get("out") + " " + clash + "; exporting " + path +
                     " there would overwrite what a run keeps: choose another path, for example beside the run "
                     "directory");
  }
  if (format == "hf") {
    const std::string dtype = args.has("dtype") ? args.get("dtype") : "fp32";
    if (dtype != "fp32" && dtype != "bf16") throw InputError("--dtype: '" + dtype + "' is not one of fp32, bf16");
    const inference::HfExportSummary s = inference::export_hf(
        path, args.get("out"), dtype == "bf16" ? io::SafetensorsDtype::bf16 : io::SafetensorsDtype::f32,
        weights_option(args));
    std::string files;
    for (const std::string& f : s.files) files += (files.empty() ? "" : ",") + f;
    std::cout << "hf:" << args.get("out") << " step:" << s.step << " tensors:" << s.tensors << " dtype:" << dtype
              << " safetensors_bytes:" << s.bytes << " files:" << files << "\n";
    return 0;
  }
  std::vector<std::string> overrides;
  for (const std::string& set : args.all("set")) {
    if (set.rfind("export.", 0) != 0) {
      throw InputError("--set " + set + ": export takes the keys of the export section only (export.key=value)");
    }
    overrides.push_back(set);
  }
  if (args.has("keep-float-max")) {
    overrides.push_back("export.keep_float_max=" + std::to_string(int_option(args, "keep-float-max", 65536, 0, 1LL << 40)));
  }
  const inference::ExportSummary s = inference::export_checkpoint(path, args.get("out"), overrides, weights_option(args));
  char line[512];
  for (const auto& t : s.tensors) {
    const std::string shape = text::shape(t.shape);
    std::snprintf(line, sizeof(line), "  %-32s %-14s %-15s max|w|:%.4g max_error:%.3g rms_error:%.3g\n", t.name.c_str(),
                  shape.c_str(), t.storage.c_str(), t.max_abs, t.max_error, t.rms_error);
    std::cout << line;
  }
  for (const auto& g : s.groups) {
    std::snprintf(line, sizeof(line), "group:%s bits:%d tensors:%zu elements:%zu payload:%zu rms_error:%.3g\n",
                  g.name.c_str(), g.bits, g.tensors, g.elements, g.stored_bytes, g.rms_error());
    std::cout << line;
  }
  std::snprintf(line, sizeof(line),
                "artifact:%s step:%lld bytes:%zu float32_bytes:%zu ratio:%.3f payload_bytes:%zu compression:%s%s "
                "tensors:%zu limit:%zu %s\n",
                args.get("out").c_str(), static_cast<long long>(s.step), s.bytes, s.float32_bytes,
                static_cast<double>(s.bytes) / static_cast<double>(s.float32_bytes), s.payload_bytes,
                s.compression.c_str(), s.code_layout.empty() ? "" : (" codes:" + s.code_layout).c_str(),
                s.tensors.size(), io::kArtifactLimitBytes,
                s.bytes <= io::kArtifactLimitBytes ? "fits" : "over the limit");
  std::cout << line;
  if (!s.record.empty()) std::cout << "recorded in " << s.record << "\n";
  return 0;
}

}  // namespace kgpt::app
