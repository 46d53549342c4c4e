// kgpt prepare: text files in, token shards out (byte tokenizer or a SentencePiece model).

#include <iostream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/prepare.hpp"

namespace kgpt::app {

const CommandSpec& prepare_spec() {
  static const CommandSpec spec{
      "prepare",
      "--input FILE... --out DIR [--tokenizer byte|sentencepiece [--model FILE.model]] [--val-fraction F]\n"
      "       [--doc-delimiter TEXT] [--prefix NAME]",
      "make train and val token shards from text files",
      "Tokenizes text and writes shards DIR/<prefix>_train_000000.bin, ... and\n"
      "DIR/<prefix>_val_000000.bin, ..., plus DIR/<prefix>_prepare.yaml recording what was made.\n\n"
      "byte (default): token b is byte b; token 256 starts every document, so decks need\n"
      "model.vocab_size >= 257 and data.tokenizer: byte.\n"
      "sentencepiece: --model names a SentencePiece model (`kgpt tokenizer train` makes one). Each\n"
      "document starts with the model's <s>; each line is encoded as spm_encode encodes it, and a line\n"
      "break is the byte piece <0x0A>. Decks then take data.tokenizer: sentencepiece,\n"
      "data.vocab_file: FILE.model and model.vocab_size >= the model's pieces.\n\n"
      "Documents: each input file is one document, or, with --doc-delimiter TEXT, a line that is\n"
      "exactly TEXT separates documents (fortune files use %). Documents go to the val split\n"
      "evenly spread, a share of --val-fraction of them, the first one always to val.\n"
      "Existing shards with the same prefix are kept and the command stops, unless --force.",
      {
          {"input", "FILE...", "text files to read, in this order (one or more)", true},
          {"out", "DIR", "folder for the shards (created if missing)"},
          {"tokenizer", "NAME", "byte or sentencepiece (default byte)"},
          {"model", "FILE", "the SentencePiece .model, with --tokenizer sentencepiece"},
          {"val-fraction", "F", "share of documents for the val split, in [0, 1) (default 0.1)"},
          {"doc-delimiter", "TEXT", "a line equal to TEXT separates documents (default: one per file)"},
          {"prefix", "NAME", "shard file name prefix (default text)"},
          {"shard-tokens", "N", "tokens per shard file (default 100000000)"},
          {"force", "", "replace existing shards with the same prefix"},
          {"quiet", "", "no progress lines"},
      },
      0,
      0};
  return spec;
}

int run_prepare(const ParsedArgs& args) {
  data::PrepareOptions options;
  options.inputs = args.all("input");
  options.out_dir = args.get("out");
  const std::string tokenizer = args.get("tokenizer", "byte");
  if (tokenizer == "sentencepiece") {
    options.tokenizer = data::PrepareTokenizer::sentencepiece;
  } else if (tokenizer != "byte") {
    throw InputError("--tokenizer: '" + tokenizer + "' is not one of byte, sentencepiece");
  }
  options.model_file = args.get("model");
  options.val_fraction = double_option(args, "val-fraction", options.val_fraction);
  options.doc_delimiter = args.get("doc-delimiter");
  options.prefix = args.get("prefix", options.prefix);
  options.shard_tokens =
      static_cast<std::uint64_t>(int_option(args, "shard-tokens", static_cast<long long>(options.shard_tokens), 1, INT32_MAX));
  options.force = args.has("force");
  options.progress = args.has("quiet") ? nullptr : &std::cerr;

  const data::PrepareSummary summary = data::prepare_shards(options);
  std::cout << "prepared " << text::with_thousands(summary.documents) << " documents ("
            << text::with_thousands(summary.val_documents) << " val) from " << text::with_thousands(summary.bytes_read)
            << " bytes: " << text::with_thousands(summary.train_tokens) << " train tokens in "
            << summary.train_shards.size() << " shards, " << text::with_thousands(summary.val_tokens)
            << " val tokens in " << summary.val_shards.size() << " shards; see " << summary.meta_file << "\n";
  return 0;
}

}  // namespace kgpt::app
