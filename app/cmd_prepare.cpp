// kgpt prepare: text files in, token shards out (byte tokenizer, a SentencePiece model, or tiktoken's BPE).

#include <iostream>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "data/prepare.hpp"
#include "parallel/world.hpp"

namespace kgpt::app {

const CommandSpec& prepare_spec() {
  static const CommandSpec spec{
      "prepare",
      "--input FILE... --out DIR [--tokenizer byte|sentencepiece|tiktoken] [--model FILE.model]\n"
      "       [--vocab FILE [--encoding NAME]] [--val-fraction F]\n"
      "       [--val-split auto|documents|tail] [--doc-delimiter TEXT | --paragraphs] [--prefix NAME]\n"
      "       [--shard-tokens N] [--force] [--quiet]",
      "make train and val token shards from text files",
      "Tokenizes text and writes shards DIR/<prefix>_train_000000.bin, ... and\n"
      "DIR/<prefix>_val_000000.bin, ..., plus DIR/<prefix>_prepare.yaml recording what was made.\n\n"
      "byte (default): token b is byte b; token 256 starts every document, so decks need\n"
      "model.vocab_size >= 257 and data.tokenizer: byte.\n"
      "sentencepiece: --model names a SentencePiece model (`kgpt tokenizer train` makes one). Each\n"
      "document starts with the model's <s>; each line is encoded as spm_encode encodes it, and a line\n"
      "break is the byte piece <0x0A>. Decks then take data.tokenizer: sentencepiece,\n"
      "data.vocab_file: FILE.model and model.vocab_size >= the model's pieces.\n"
      "tiktoken: --vocab names tiktoken's ranks (gpt2.tiktoken, r50k_base.tiktoken, ...: one\n"
      "'BASE64 RANK' a line) or GPT-2's encoder.json with vocab.bpe beside it; --encoding names the\n"
      "encoding (default: from the file's name, else its size). Each document starts with\n"
      "<|endoftext|> (50256 for GPT-2) and its whole text is encoded as tiktoken's encode_ordinary\n"
      "encodes it, as nanoGPT's and llm.c's FineWeb shards are made. Ids must fit uint16: gpt2, r50k\n"
      "and p50k do, cl100k and o200k do not. A NUL byte in the text is refused, naming FILE:LINE:COL.\n"
      "Decks then take data.tokenizer: tiktoken, data.vocab_file: FILE and model.vocab_size >= 50257.\n\n"
      "Documents: each input file is one document; with --doc-delimiter TEXT a line that is exactly\n"
      "TEXT separates documents (fortune files use %); with --paragraphs blank lines do.\n"
      "The val split (--val-split) takes --val-fraction of the text: `documents`, that share of the\n"
      "documents spread evenly, the first one always to val; `tail`, the last share of the bytes, a\n"
      "document cut there going on in val. `auto` (default) takes the tail for a single file without\n"
      "--doc-delimiter or --paragraphs (one document, which no share of documents splits) and the\n"
      "documents otherwise, so `kgpt prepare --input my.txt --out data/mine` makes both splits.\n"
      "Existing shards with the same prefix are kept and the command stops, unless --force.\n\n"
      "Under mpiexec or srun, with tiktoken, every rank reads the inputs and encodes its share of the\n"
      "text, and rank 0 writes the shards: the same files as one rank writes. Byte and SentencePiece\n"
      "encoding runs on rank 0.",
      {
          {"input", "FILE...", "text files to read, in this order (one or more)", true},
          {"out", "DIR", "folder for the shards (created if missing)"},
          {"tokenizer", "NAME", "byte, sentencepiece or tiktoken (default byte)"},
          {"model", "FILE", "the SentencePiece .model, with --tokenizer sentencepiece"},
          {"vocab", "FILE", "tiktoken's ranks (.tiktoken) or GPT-2's encoder.json, with --tokenizer tiktoken"},
          {"encoding", "NAME", "the tiktoken encoding: gpt2, r50k_base, p50k_base, p50k_edit (default auto)"},
          {"val-fraction", "F", "share of the text for the val split, in [0, 1) (default 0.1)"},
          {"val-split", "HOW", "auto, documents or tail: how the val share is taken (default auto)"},
          {"doc-delimiter", "TEXT", "a line equal to TEXT separates documents (default: one per file)"},
          {"paragraphs", "", "blank lines separate documents"},
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
  } else if (tokenizer == "tiktoken") {
    options.tokenizer = data::PrepareTokenizer::tiktoken;
  } else if (tokenizer != "byte") {
    throw InputError("--tokenizer: '" + tokenizer + "' is not one of byte, sentencepiece, tiktoken");
  }
  options.model_file = args.get("model");
  options.vocab_file = args.get("vocab");
  options.encoding = args.get("encoding", "auto");
  options.val_fraction = double_option(args, "val-fraction", options.val_fraction);
  options.doc_delimiter = args.get("doc-delimiter");
  options.paragraphs = args.has("paragraphs");
  const std::string split = args.get("val-split", "auto");
  if (split == "documents") {
    options.val_split = data::ValSplit::documents;
  } else if (split == "tail") {
    options.val_split = data::ValSplit::tail;
  } else if (split != "auto") {
    throw InputError("--val-split: '" + split + "' is not one of auto, documents, tail");
  }
  options.prefix = args.get("prefix", options.prefix);
  options.shard_tokens =
      static_cast<std::uint64_t>(int_option(args, "shard-tokens", static_cast<long long>(options.shard_tokens), 1, INT32_MAX));
  options.force = args.has("force");
  options.progress = args.has("quiet") ? nullptr : &std::cerr;
  const auto& world = parallel::world();
  options.rank = world.rank;
  options.world_size = world.size;
  options.agree = [](const std::function<void()>& step) { parallel::agreed(step); };
  options.send_to_root = parallel::send_ints_to_root;
  options.receive_at_root = parallel::receive_ints_from;

  const data::PrepareSummary summary = data::prepare_shards(options);
  parallel::wait_for_sends_to_root();
  if (world.rank != 0) return 0;
  const bool tail = summary.val_split == data::ValSplit::tail;
  std::cout << "prepared " << text::with_thousands(summary.documents) << " documents ("
            << text::with_thousands(summary.val_documents) << " val) from " << text::with_thousands(summary.bytes_read)
            << " bytes, the val split " << (tail ? "the last " : "") << text::with_thousands(summary.val_bytes)
            << (tail ? " bytes" : " bytes of whole documents") << ": " << text::with_thousands(summary.train_tokens)
            << " train tokens in "
            << summary.train_shards.size() << " shards, " << text::with_thousands(summary.val_tokens)
            << " val tokens in " << summary.val_shards.size() << " shards; see " << summary.meta_file << "\n";
  return 0;
}

}  // namespace kgpt::app
