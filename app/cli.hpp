#pragma once
// Command-line parsing shared by the subcommands: --name value, --name=value, flags, repeated
// options, and options that take several values (--input a.txt b.txt).

#include <map>
#include <string>
#include <vector>

namespace kgpt::app {

struct OptionSpec {
  std::string name;     // without the leading "--"
  std::string metavar;  // "" for a flag that takes no value
  std::string help;
  bool several = false;  // takes every following argument up to the next option
};

struct CommandSpec {
  std::string name;       // "check"
  std::string synopsis;   // "DECK [--set section.key=value]..."
  std::string summary;    // one line for `kgpt --help`
  std::string description;
  std::vector<OptionSpec> options;
  int min_positional = 0;
  int max_positional = 0;
};

class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  const std::vector<std::string>& all(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback = "") const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  friend ParsedArgs parse_args(const CommandSpec&, const std::vector<std::string>&);
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
};

// Throws InputError for unknown options (with the closest one suggested), missing values and a
// wrong number of positional arguments. "--help" is always accepted.
ParsedArgs parse_args(const CommandSpec& spec, const std::vector<std::string>& args);

std::string command_help(const CommandSpec& spec);

// "usage: kgpt NAME SYNOPSIS" on one line, for error messages.
std::string usage_line(const CommandSpec& spec);

// "missing argument DECK; usage: ...": names the positional argument at `index` from the synopsis.
std::string missing_argument(const CommandSpec& spec, int index);

// Typed option values; errors name the option.
long long int_option(const ParsedArgs& args, const std::string& name, long long fallback, long long min, long long max);
double double_option(const ParsedArgs& args, const std::string& name, double fallback);

}  // namespace kgpt::app
