#include "cli.hpp"

#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"

namespace kgpt::app {

const std::vector<std::string>& ParsedArgs::all(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = values_.find(name);
  return it == values_.end() ? none : it->second;
}

std::string ParsedArgs::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args) {
  ParsedArgs parsed;
  auto find = [&spec](const std::string& name) -> const OptionSpec* {
    for (const auto& option : spec.options) {
      if (option.name == name) return &option;
    }
    return nullptr;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      parsed.values_["help"];
      continue;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      parsed.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string inline_value;
    const bool has_inline = name.find('=') != std::string::npos;
    if (has_inline) {
      inline_value = name.substr(name.find('=') + 1);
      name.resize(name.find('='));
    }
    const OptionSpec* option = find(name);
    if (!option) {
      std::vector<std::string> names;
      for (const auto& o : spec.options) names.push_back(o.name);
      const std::string best = text::closest_match(name, names);
      throw InputError("unknown option --" + name + (best.empty() ? "" : " (did you mean --" + best + "?)") +
                       "; see kgpt " + spec.name + " --help");
    }
    auto& values = parsed.values_[name];
    if (option->metavar.empty()) {
      if (has_inline) throw InputError("option --" + name + " takes no value");
      continue;
    }
    if (has_inline) {
      values.push_back(inline_value);
      continue;
    }
    const std::size_t before = values.size();
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      values.push_back(args[++i]);
      if (!option->several) break;
    }
    if (values.size() == before) throw InputError("option --" + name + " needs a value (" + option->metavar + ")");
  }
  if (parsed.has("help")) return parsed;
  const int count = static_cast<int>(parsed.positional_.size());
  if (count < spec.min_positional) throw InputError(missing_argument(spec, count));
  if (count > spec.max_positional) {
    throw InputError("unexpected argument '" + parsed.positional_[static_cast<std::size_t>(spec.max_positional)] +
                     "'; " + usage_line(spec));
  }
  return parsed;
}

std::string usage_line(const CommandSpec& spec) {
  // A synopsis of several forms goes on one line here, the forms joined by "or".
  std::string forms = spec.synopsis;
  const std::string next_form = "\n       kgpt " + spec.name + " ";
  for (std::size_t at = forms.find(next_form); at != std::string::npos; at = forms.find(next_form, at)) {
    forms.replace(at, next_form.size(), " | kgpt " + spec.name + " ");
  }
  for (std::size_t at = forms.find("\n       "); at != std::string::npos; at = forms.find("\n       ", at)) {
    forms.replace(at, 8, " ");
  }
  return "usage: kgpt " + spec.name + " " + forms;
}

std::string missing_argument(const CommandSpec& spec, int index) {
  // The positional arguments are the synopsis's leading words, before its first option.
  std::istringstream words(spec.synopsis);
  std::string word;
  for (int i = 0; words >> word && word[0] != '-' && word[0] != '['; ++i) {
    if (i == index) return "missing argument " + word + "; " + usage_line(spec);
  }
  return "missing argument; " + usage_line(spec);
}

std::string command_help(const CommandSpec& spec) {
  std::ostringstream out;
  out << "usage: kgpt " << spec.name << " " << spec.synopsis << "\n\n" << spec.description << "\n\noptions:\n";
  for (const auto& option : spec.options) {
    std::string left = "  --" + option.name + (option.metavar.empty() ? "" : " " + option.metavar);
    if (left.size() < 28) left.append(28 - left.size(), ' ');
    else left += "\n" + std::string(28, ' ');
    out << left << option.help << "\n";
  }
  out << "  --help                    show this help\n";
  return out.str();
}

long long int_option(const ParsedArgs& args, const std::string& name, long long fallback, long long min, long long max) {
  if (!args.has(name)) return fallback;
  long long value = 0;
  const std::string raw = args.get(name);
  if (!text::parse_int64(raw, value)) throw InputError("option --" + name + ": expected an integer, got '" + raw + "'");
  if (value < min || value > max) {
    throw InputError("option --" + name + ": " + raw + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return value;
}

double double_option(const ParsedArgs& args, const std::string& name, double fallback) {
  if (!args.has(name)) return fallback;
  double value = 0;
  const std::string raw = args.get(name);
  if (!text::parse_double(raw, value)) throw InputError("option --" + name + ": expected a number, got '" + raw + "'");
  return value;
}

}  // namespace kgpt::app
