// kgpt tokenizer train: a SentencePiece model from text files, for `kgpt prepare --tokenizer sentencepiece`.

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/sentencepiece.hpp"

namespace kgpt::app {

const CommandSpec& tokenizer_spec() {
  static const CommandSpec spec{
      "tokenizer",
      "train --input FILE... --vocab-size N --out PREFIX [--model-type bpe|unigram] [--doc-delimiter TEXT]\n"
      "       [--threads N] [--quiet]",
      "train a SentencePiece tokenizer on text files",
      "Trains a SentencePiece model (Debian's libsentencepiece) on the lines of the input files and\n"
      "writes PREFIX.model and PREFIX.vocab. Byte fallback is on, so every byte of any text can be\n"
      "encoded; the first pieces are <pad> 0, <s> 1 (document start), </s> 2 and <unk> 3, then the 256\n"
      "byte pieces <0x00>..<0xFF>, then the learned pieces. Text is kept as it is: no Unicode\n"
      "normalisation, no dummy space before a line, runs of spaces kept, so decoding gives back the\n"
      "bytes encoded and val_bpb counts the text's own bytes. Digits are split into single pieces.\n\n"
      "With --doc-delimiter TEXT, lines equal to TEXT separate documents and are not trained on\n"
      "(fortune files use %); empty lines are skipped. Existing PREFIX files are never replaced.\n"
      "Before SentencePiece runs, the text is read until it can give the pieces asked for: inputs with\n"
      "no line to train on, or too little text for --vocab-size, end with exit code 2 naming the files\n"
      "and the most pieces they allow; nothing is written then.\n"
      "Progress lines and SentencePiece's own log go to stderr (--quiet: none).",
      {
          {"input", "FILE...", "text files to train on (one or more)", true},
          {"vocab-size", "N", "pieces in the model, 261 to 65536 (default 1024)"},
          {"out", "PREFIX", "writes PREFIX.model and PREFIX.vocab (folders are created)"},
          {"model-type", "TYPE", "bpe or unigram (default bpe)"},
          {"doc-delimiter", "TEXT", "a line equal to TEXT separates documents and is skipped"},
          {"threads", "N", "threads SentencePiece trains with (default 1)"},
          {"quiet", "", "no progress lines"},
      },
      1,
      1};
  return spec;
}

int run_tokenizer(const ParsedArgs& args) {
  const std::string action = args.positional().at(0);
  if (action != "train") throw InputError("unknown action '" + action + "' (the one action is train)");
  data::TokenizerTrainOptions options;
  options.inputs = args.all("input");
  options.out_prefix = args.get("out");
  options.vocab_size = static_cast<int>(int_option(args, "vocab-size", options.vocab_size, 1, 1 << 30));
  const std::string type = args.get("model-type", "bpe");
  if (type == "unigram") {
    options.type = data::SentencePieceType::unigram;
  } else if (type != "bpe") {
    throw InputError("--model-type: '" + type + "' is not one of bpe, unigram");
  }
  options.doc_delimiter = args.get("doc-delimiter");
  options.threads = static_cast<int>(int_option(args, "threads", 1, 1, 1024));
  options.progress = args.has("quiet") ? nullptr : &std::cerr;
  const data::TokenizerTrainSummary s = data::train_sentencepiece(options);
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.1f", s.seconds);
  std::cout << "trained a " << type << " tokenizer of " << s.pieces << " pieces on "
            << text::with_thousands(s.lines) << " lines (" << text::with_thousands(s.bytes) << " bytes) in "
            << seconds << " s: " << s.model_file << ", " << s.vocab_file << "\n";
  return 0;
}

}  // namespace kgpt::app
