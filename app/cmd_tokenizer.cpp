// kgpt tokenizer train: a SentencePiece model from text files, for `kgpt prepare --tokenizer sentencepiece`.
// kgpt tokenizer encode|decode: text to token ids (one a line) and back, with any of kgpt's tokenizers.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/byte_tokenizer.hpp"
#include "data/sentencepiece.hpp"
#include "data/tiktoken.hpp"

namespace kgpt::app {

const CommandSpec& tokenizer_spec() {
  static const CommandSpec spec{
      "tokenizer",
      "train --input FILE... --vocab-size N --out PREFIX [--model-type bpe|unigram] [--doc-delimiter TEXT]\n"
      "       [--threads N] [--quiet]\n"
      "       encode|decode --tokenizer byte|sentencepiece|tiktoken [--vocab FILE] [--encoding NAME] [--input FILE]\n"
      "       [--allow-special] [--timing]",
      "train a SentencePiece tokenizer; encode text to token ids and decode them",
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
      "Progress lines and SentencePiece's own log go to stderr (--quiet: none).\n\n"
      "encode reads text (--input FILE, else stdin) and prints its token ids, one a line; decode reads\n"
      "ids (any whitespace between them) and writes the bytes they stand for. --tokenizer names the\n"
      "tokenizer as decks do (data.tokenizer), --vocab its file (data.vocab_file): a SentencePiece\n"
      ".model, or for tiktoken a rank file (cl100k_base.tiktoken, one 'BASE64 RANK' a line) or GPT-2's\n"
      "encoder.json with vocab.bpe beside it. --encoding names the tiktoken encoding (gpt2, r50k_base,\n"
      "p50k_base, p50k_edit, cl100k_base, o200k_base; default: from the file's name, else its size).\n"
      "tiktoken encodes text as tiktoken's encode_ordinary does (special-token text is ordinary\n"
      "text); --allow-special reads it as the special token, as encode(text, allowed_special='all').\n"
      "sentencepiece encodes text as `kgpt prepare` does, line by line; byte gives each byte its\n"
      "token. Text with a NUL byte is refused (exit 2, naming FILE:LINE:COLUMN). --timing prints how\n"
      "long loading and encoding took (not reading or printing) and the MB/s, for benchmarks.",
      {
          {"input", "FILE...", "text files to train on (one or more)", true},
          {"vocab-size", "N", "pieces in the model, 261 to 65536 (default 1024)"},
          {"out", "PREFIX", "writes PREFIX.model and PREFIX.vocab (folders are created)"},
          {"model-type", "TYPE", "bpe or unigram (default bpe)"},
          {"doc-delimiter", "TEXT", "a line equal to TEXT separates documents and is skipped"},
          {"threads", "N", "threads SentencePiece trains with (default 1)"},
          {"quiet", "", "no progress lines"},
          {"tokenizer", "KIND", "encode/decode: byte, sentencepiece or tiktoken"},
          {"vocab", "FILE", "encode/decode: the tokenizer's file (.model, .tiktoken, encoder.json)"},
          {"encoding", "NAME", "encode/decode with tiktoken: the encoding (default auto)"},
          {"allow-special", "", "encode with tiktoken: special-token text becomes the special token"},
          {"timing", "", "encode: print the bytes, tokens and seconds of the encoding itself to stderr"},
      },
      1,
      1};
  return spec;
}

namespace {

std::string read_input(const ParsedArgs& args, std::string& name) {
  const std::vector<std::string> inputs = args.has("input") ? args.all("input") : std::vector<std::string>{};
  if (inputs.size() > 1) throw InputError("--input: encode and decode read one file (or stdin)");
  if (inputs.empty()) {
    name = "stdin";
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  name = inputs[0];
  std::ifstream in(name, std::ios::binary);
  if (!in) throw InputError(name + ": cannot be read");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<int> read_ids(const std::string& text, const std::string& name) {
  std::vector<int> ids;
  std::size_t line = 1;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    const bool ends_well = end == text.size() || text[end] == ' ' || text[end] == '\t' || text[end] == '\n' || text[end] == '\r';
    if (end == i || end - i > 9 || !ends_well) {
      throw InputError(name + ":" + std::to_string(line) + ": '" + text.substr(i, std::min<std::size_t>(20, text.size() - i)) +
                       "' is not a token id (decode reads ids 0 and up, separated by whitespace)");
    }
    ids.push_back(std::stoi(text.substr(i, end - i)));
    i = end;
  }
  return ids;
}

int run_codec(const std::string& action, const ParsedArgs& args) {
  const std::string kind = args.get("tokenizer");
  const std::string vocab = args.get("vocab");
  if (kind.empty()) throw InputError("--tokenizer: " + action + " needs one of byte, sentencepiece, tiktoken");
  if (kind != "byte" && kind != "sentencepiece" && kind != "tiktoken") {
    throw InputError("--tokenizer: '" + kind + "' is not one of byte, sentencepiece, tiktoken");
  }
  if (kind != "byte" && vocab.empty()) throw InputError("--vocab: --tokenizer " + kind + " needs its file");
  if (kind == "byte" && !vocab.empty()) throw InputError("--vocab: the byte tokenizer has no file");
  if (args.has("encoding") && kind != "tiktoken") throw InputError("--encoding is for --tokenizer tiktoken");
  if (args.has("allow-special") && (kind != "tiktoken" || action != "encode")) {
    throw InputError("--allow-special is for encode with --tokenizer tiktoken");
  }
  const auto load_start = std::chrono::steady_clock::now();
  std::unique_ptr<data::TiktokenTokenizer> tiktoken;
  std::unique_ptr<data::SentencePieceModel> sentencepiece;
  if (kind == "tiktoken") {
    tiktoken = std::make_unique<data::TiktokenTokenizer>(data::TiktokenTokenizer::load(vocab, args.get("encoding", "auto")));
  } else if (kind == "sentencepiece") {
    sentencepiece = std::make_unique<data::SentencePieceModel>(data::SentencePieceModel::load(vocab));
  }
  std::string name;
  const std::string input = read_input(args, name);
  if (action == "encode") {
    data::refuse_nul_bytes(input, name);
    const auto encode_start = std::chrono::steady_clock::now();
    std::vector<int> ids;
    if (tiktoken) {
      ids = tiktoken->encode(input, args.has("allow-special"));
    } else if (sentencepiece) {
      ids = sentencepiece->encode_text(input);
    } else {
      ids.assign(input.begin(), input.end());
      for (int& id : ids) id &= 0xFF;
    }
    if (args.has("timing")) {
      const auto done = std::chrono::steady_clock::now();
      const double load = std::chrono::duration<double>(encode_start - load_start).count();
      const double encode = std::chrono::duration<double>(done - encode_start).count();
      // The load's time includes reading the input, which is small beside the vocabulary.
      std::cerr << "kgpt tokenizer encode: " << text::with_thousands(input.size()) << " bytes into "
                << text::with_thousands(ids.size()) << " tokens in " << text::fixed(encode, 3) << " s ("
                << text::fixed(static_cast<double>(input.size()) / 1e6 / encode, 2) << " MB/s); loading took "
                << text::fixed(load, 3) << " s\n";
    }
    std::string out;
    out.reserve(ids.size() * 6);
    for (int id : ids) (out += std::to_string(id)) += '\n';
    std::cout << out;
    return 0;
  }
  const std::vector<int> ids = read_ids(input, name);
  std::string text;
  if (tiktoken) {
    text = tiktoken->decode(ids);
  } else if (sentencepiece) {
    for (int id : ids) {
      if (id >= sentencepiece->vocab_size()) {
        throw InputError(name + ": token " + std::to_string(id) + " is no piece of " + vocab + " (" +
                         std::to_string(sentencepiece->vocab_size()) + " pieces)");
      }
    }
    text = sentencepiece->decode(ids);
  } else {
    for (int id : ids) {
      if (id >= data::kByteVocabSize) {
        throw InputError(name + ": token " + std::to_string(id) + " is no token of the byte tokenizer (0 to 256)");
      }
      if (id < 256) text += static_cast<char>(id);
    }
  }
  std::cout << text << std::flush;
  return 0;
}

}  // namespace

int run_tokenizer(const ParsedArgs& args) {
  const std::string action = args.positional().at(0);
  if (action == "encode" || action == "decode") return run_codec(action, args);
  if (action != "train") throw InputError("unknown action '" + action + "' (train, encode or decode)");
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
