#pragma once
// The model families kgpt trains. Each family registers itself once (model/families/registry.cpp,
// one line; its folder defines the entry in families/<name>/family.cpp) with everything the rest of
// kgpt asks of a family: its name and summary, the defaults and rules it gives the deck, its
// parameters' layout, its models, and its FLOPs per token. The deck schema, the deck checks, the
// layout of a checkpoint, the bench and the test helpers ask this registry; none of them names a
// family. model.family must name a registered family.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/family_rules.hpp"

namespace kgpt::model {

class ParameterLayout;
template <class T>
class LanguageModel;

// The deck's side of a family (config/family_rules.hpp): its name, defaults and rules.
using FamilyDefaults = config::FamilyDefaults;

// How Hugging Face transformers holds a model of a family (kgpt export --format hf, model.init_from).
struct HfForm {
  std::string architecture;              // the transformers class: "GPT2LMHeadModel"
  std::string config_json;               // config.json, without torch_dtype (the exporter adds it)
  std::vector<std::string> transposed;   // 2-D tensors stored there as (in, out): GPT-2's Conv1D weights
  std::string optional_prefix;           // a prefix of kgpt's names that some files leave out
  std::vector<std::string> buffer_suffixes;  // non-parameter tensors some files carry, skipped on load
  // Learned position tables, (positions, C): a file's longer table loads its first rows, as a model
  // trained on longer sequences is fine-tuned on shorter ones.
  std::vector<std::string> position_tables;
};

// A family: the deck's side (name, summary, defaults, the keys it reads, its rules), and its model.
struct Family : config::FamilyRules {
  // The parameters of a model of this configuration learning up to max_seq positions (where the
  // family learns positions).
  ParameterLayout (*layout)(const config::ModelConfig& model, int max_seq) = nullptr;
  // Its models, for micro-batches of up to max_batch sequences of up to max_seq tokens; float
  // parameters with float or bf16 activations (train.precision), or double (finite-difference
  // tests). Weights are not initialised: callers initialise or load them.
  std::unique_ptr<LanguageModel<float>> (*make_float)(const config::ModelConfig& model, int max_batch,
                                                      int max_seq) = nullptr;
  std::unique_ptr<LanguageModel<double>> (*make_double)(const config::ModelConfig& model, int max_batch,
                                                        int max_seq) = nullptr;
  // Bytes of activations and workspaces a model of this configuration holds for micro-batches of
  // max_batch x max_seq tokens, from its declaration (what its constructor allocates).
  std::size_t (*activation_bytes)(const config::ModelConfig& model, int max_batch, int max_seq) = nullptr;
  // Training FLOPs per token at sequence length seq: 6 N (N the parameters that take part in the
  // products: learned positions do not) + 12 L H D T for attention.
  double (*flops_per_token)(const config::ModelConfig& model, int seq) = nullptr;
  // nullptr where transformers has no class for the family. Otherwise the form of the deck's model.
  HfForm (*hf_form)(const config::ResolvedDeck& deck) = nullptr;
};

// Every registered family, in registration order.
const std::vector<const Family*>& families();
// The family named `name`; throws Error naming the registered ones when there is none.
const Family& family(const std::string& name);
const Family* find_family(const std::string& name);
using config::family_names;  // "golf, gpt2, llama"

// The parameters a token's forward multiplies by: the layout's, a block's counted once per layer
// that runs it (model/block_sequence.hpp).
std::size_t run_parameter_count(const config::ModelConfig& model, const ParameterLayout& layout);
// 6 N + 12 L H D T with N the run parameters without those named in `outside_products` and L the
// layers run.
double standard_flops_per_token(const config::ModelConfig& model, const ParameterLayout& layout, int seq,
                                const std::vector<std::string>& outside_products = {});

}  // namespace kgpt::model
