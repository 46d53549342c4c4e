#include "config/sweep.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"

namespace kgpt::config {

namespace {

// Slurm's default MaxArraySize is 1001; far larger sweeps are almost always a typo in a grid.
constexpr std::size_t max_points = 10000;

const std::vector<std::string>& sweep_fields() {
  static const std::vector<std::string> fields = {"base", "name", "set", "grid", "list"};
  return fields;
}

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the " + what + " (does it exist and is it readable?)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string file_stem(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name;
}

bool is_plain_name(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

class SweepReader {
 public:
  SweepReader(Sweep& sweep, std::vector<std::string>& problems) : sweep_(sweep), problems_(problems) {}

  // Fills sweep_.base_deck, name, common, keys, and the points' overrides (decks come later).
  void read(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      problems_.push_back(at(e.mark) + ": YAML syntax error: " + e.msg);
      return;
    }
    if (!root.IsMap()) {
      problems_.push_back(sweep_.path + ":1:1: a sweep file is a mapping with base, and grid or list (see kgpt sweep --help)");
      return;
    }
    YAML::Node grid, list;
    YAML::Mark grid_mark, list_mark;
    bool has_grid = false, has_list = false;
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string field = it->first.Scalar();
      const YAML::Mark mark = it->first.Mark();
      if (std::find(sweep_fields().begin(), sweep_fields().end(), field) == sweep_fields().end()) {
        const std::string best = text::closest_match(field, sweep_fields());
        problems_.push_back(at(mark) + ": unknown field '" + field + "'" +
                            (best.empty() ? "" : " (did you mean '" + best + "'?)") +
                            "; a sweep file has base, name, set, grid and list");
        continue;
      }
      const YAML::Node value = it->second;
      if (field == "base" || field == "name") {
        if (!value.IsScalar() || value.Scalar().empty()) {
          problems_.push_back(at(mark) + ": " + field + ": expected " +
                              (field == "base" ? "the path of the base deck" : "a name") );
          continue;
        }
        (field == "base" ? sweep_.base_deck : sweep_.name) = value.Scalar();
        if (field == "name" && !is_plain_name(value.Scalar())) {
          problems_.push_back(at(value.Mark()) + ": name: '" + value.Scalar() +
                              "' may hold only letters, digits, '.', '_' and '-'");
        }
      } else if (field == "set") {
        read_mapping(value, mark, "set", sweep_.common);
      } else if (field == "grid") {
        grid = value;
        grid_mark = mark;
        has_grid = true;
      } else {
        list = value;
        list_mark = mark;
        has_list = true;
      }
    }
    if (sweep_.base_deck.empty()) problems_.push_back(sweep_.path + ": missing field 'base' (the path of the base deck)");
    if (!has_grid && !has_list) {
      problems_.push_back(sweep_.path + ": nothing to sweep: give 'grid' (values per key) or 'list' (points)");
    }
    std::vector<std::pair<std::string, std::vector<SweepOverride>>> axes;
    if (has_grid) read_grid(grid, grid_mark, axes);
    std::vector<std::vector<SweepOverride>> entries;
    if (has_list) read_list(list, list_mark, entries);
    if (!problems_.empty()) return;
    check_no_clashes(axes, entries);
    if (!problems_.empty()) return;
    expand(axes, entries);
  }

 private:
  std::string at(const YAML::Mark& mark) const {
    return sweep_.path + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
  }

  Origin origin(const YAML::Mark& mark) const {
    Origin o;
    o.kind = Origin::Kind::deck;
    o.file = sweep_.path;
    o.line = mark.line + 1;
    o.column = mark.column + 1;
    return o;
  }

  // One key: value pair; false (with a problem) if the key or the value is not valid.
  bool read_value(const std::string& key, const YAML::Mark& key_mark, const YAML::Node& value, SweepOverride& out) {
    if (key == "run.name" || key == "run.out_dir") {
      problems_.push_back(at(key_mark) + ": " + key + " is set by the sweep: point i runs in <--out>/runs/<i>");
      return false;
    }
    if (!value.IsScalar()) {
      problems_.push_back(at(value.IsNull() ? key_mark : value.Mark()) + ": " + key + ": expected one value, got " +
                          (value.IsSequence() ? "a list" : value.IsMap() ? "a mapping" : "no value"));
      return false;
    }
    const std::string reason = check_override(key, value.Scalar());
    if (!reason.empty()) {
      const bool key_problem = reason.rfind("unknown key", 0) == 0 || reason.rfind("expected section.key", 0) == 0;
      problems_.push_back(at(key_problem ? key_mark : value.Mark()) + ": " + reason);
      return false;
    }
    out = SweepOverride{key, value.Scalar(), origin(value.Mark())};
    return true;
  }

  void read_mapping(const YAML::Node& node, const YAML::Mark& mark, const std::string& field,
                    std::vector<SweepOverride>& out) {
    if (!node.IsMap() || node.size() == 0) {
      problems_.push_back(at(mark) + ": " + field + ": expected a mapping of section.key: value");
      return;
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (!seen.insert(key).second) {
        problems_.push_back(at(it->first.Mark()) + ": " + key + " appears twice in " + field);
        continue;
      }
      SweepOverride o;
      if (read_value(key, it->first.Mark(), it->second, o)) out.push_back(o);
    }
  }

  void read_grid(const YAML::Node& grid, const YAML::Mark& mark,
                 std::vector<std::pair<std::string, std::vector<SweepOverride>>>& axes) {
    if (!grid.IsMap() || grid.size() == 0) {
      problems_.push_back(at(mark) + ": grid: expected a mapping of section.key: [values...]");
      return;
    }
    for (auto it = grid.begin(); it != grid.end(); ++it) {
      const std::string key = it->first.Scalar();
      const YAML::Node values = it->second;
      if (!values.IsSequence() || values.size() == 0) {
        problems_.push_back(at(it->first.Mark()) + ": grid: " + key + ": expected a non-empty list of values, for example [0.02, 0.04]");
        continue;
      }
      if (std::any_of(axes.begin(), axes.end(), [&](const auto& a) { return a.first == key; })) {
        problems_.push_back(at(it->first.Mark()) + ": " + key + " appears twice in grid");
        continue;
      }
      std::vector<SweepOverride> axis;
      if (key == "run.name" || key == "run.out_dir") {
        SweepOverride ignored;
        read_value(key, it->first.Mark(), values[0], ignored);  // one message for the whole axis
        continue;
      }
      for (const auto& value : values) {
        SweepOverride o;
        if (read_value(key, it->first.Mark(), value, o)) axis.push_back(o);
      }
      axes.emplace_back(key, axis);
    }
  }

  void read_list(const YAML::Node& list, const YAML::Mark& mark, std::vector<std::vector<SweepOverride>>& entries) {
    if (!list.IsSequence() || list.size() == 0) {
      problems_.push_back(at(mark) + ": list: expected a list of points, each a mapping of section.key: value");
      return;
    }
    for (const auto& entry : list) {
      std::vector<SweepOverride> point;
      read_mapping(entry, entry.Mark(), "a list entry", point);
      entries.push_back(point);
    }
  }

  void check_no_clashes(const std::vector<std::pair<std::string, std::vector<SweepOverride>>>& axes,
                        const std::vector<std::vector<SweepOverride>>& entries) {
    std::set<std::string> grid_keys;
    for (const auto& axis : axes) grid_keys.insert(axis.first);
    auto check = [&](const SweepOverride& o, const std::string& other) {
      problems_.push_back(o.origin.describe() + ": " + o.key + " is also given in " + other +
                          "; give each key in one place");
    };
    for (const auto& o : sweep_.common) {
      if (grid_keys.count(o.key)) check(o, "grid");
    }
    for (const auto& entry : entries) {
      for (const auto& o : entry) {
        if (grid_keys.count(o.key)) check(o, "grid");
        for (const auto& c : sweep_.common) {
          if (c.key == o.key) check(o, "set");
        }
      }
    }
  }

  void expand(const std::vector<std::pair<std::string, std::vector<SweepOverride>>>& axes,
              const std::vector<std::vector<SweepOverride>>& entries) {
    std::size_t combinations = 1;
    for (const auto& axis : axes) {
      combinations *= axis.second.size();
      if (combinations > max_points) break;
    }
    const std::size_t count = combinations * std::max<std::size_t>(entries.size(), 1);
    if (combinations > max_points || count > max_points) {
      problems_.push_back(sweep_.path + ": the sweep has more than " + std::to_string(max_points) +
                          " points; split it into several sweeps");
      return;
    }
    for (const auto& axis : axes) sweep_.keys.push_back(axis.first);
    for (const auto& entry : entries) {
      for (const auto& o : entry) {
        if (std::find(sweep_.keys.begin(), sweep_.keys.end(), o.key) == sweep_.keys.end()) sweep_.keys.push_back(o.key);
      }
    }
    const std::vector<std::vector<SweepOverride>> list_entries = entries.empty() ? std::vector<std::vector<SweepOverride>>(1) : entries;
    for (const auto& entry : list_entries) {
      for (std::size_t c = 0; c < combinations; ++c) {
        std::vector<SweepOverride> values = entry;
        // Mixed radix, the last grid key varying fastest.
        std::size_t rest = c;
        std::vector<SweepOverride> grid_values(axes.size());
        for (std::size_t a = axes.size(); a-- > 0;) {
          grid_values[a] = axes[a].second[rest % axes[a].second.size()];
          rest /= axes[a].second.size();
        }
        values.insert(values.end(), grid_values.begin(), grid_values.end());
        std::sort(values.begin(), values.end(), [this](const SweepOverride& x, const SweepOverride& y) {
          return position(x.key) < position(y.key);
        });
        SweepPoint point;
        point.index = static_cast<int>(sweep_.points.size());
        point.overrides = values;
        sweep_.points.push_back(point);
      }
    }
  }

  std::size_t position(const std::string& key) const {
    return static_cast<std::size_t>(std::find(sweep_.keys.begin(), sweep_.keys.end(), key) - sweep_.keys.begin());
  }

  Sweep& sweep_;
  std::vector<std::string>& problems_;
};

std::string describe_values(const std::vector<SweepOverride>& values) {
  std::string text;
  for (const auto& o : values) text += (text.empty() ? "" : ", ") + o.key + "=" + o.value;
  return text.empty() ? "no overrides" : text;
}

std::string csv_field(const std::string& field) {
  if (field.find_first_of(",\"\n\r") == std::string::npos) return field;
  std::string quoted = "\"";
  for (char c : field) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// A value as JSON: numbers and booleans keep their type, everything else is a string.
std::string json_value(const std::string& raw) {
  bool b = false;
  if (text::parse_bool(raw, b)) return b ? "true" : "false";
  long long i = 0;
  if (text::parse_int64(raw, i)) return std::to_string(i);
  double d = 0;
  // JSON has no inf or nan, and no leading '+' or '.'.
  if (text::parse_double(raw, d) && raw.find_first_of("iInN") == std::string::npos && raw[0] != '+' && raw[0] != '.') {
    return raw;
  }
  return json_string(raw);
}

}  // namespace

std::string point_name(const Sweep& sweep, int index) {
  std::string digits = std::to_string(index);
  if (static_cast<int>(digits.size()) < sweep.index_width) {
    digits.insert(0, static_cast<std::size_t>(sweep.index_width) - digits.size(), '0');
  }
  return digits;
}

Sweep expand_sweep(const std::string& sweep_path, const std::string& out_dir, int world_size) {
  Sweep sweep;
  sweep.path = sweep_path;
  sweep.world_size = world_size;
  std::vector<std::string> problems;
  SweepReader(sweep, problems).read(read_text(sweep_path, "sweep file"));
  if (!problems.empty()) throw InputError(problems);
  if (sweep.name.empty()) sweep.name = file_stem(sweep_path);
  sweep.index_width = std::max<int>(3, static_cast<int>(std::to_string(sweep.points.size() - 1).size()));

  const std::string base_text = read_text(sweep.base_deck, "base deck named by " + sweep_path + " (base)");
  const std::string runs = (out_dir.empty() ? std::string(".") : out_dir) + "/runs";
  Origin from_out;
  from_out.kind = Origin::Kind::deck;
  from_out.file = "kgpt sweep --out " + out_dir;
  for (SweepPoint& point : sweep.points) {
    DeckOptions options;
    options.world_size = world_size;
    for (const auto* group : {&sweep.common, &point.overrides}) {
      for (const auto& o : *group) {
        options.overrides.push_back(o.key + "=" + o.value);
        options.override_origins.push_back(o.origin);
      }
    }
    options.overrides.push_back("run.out_dir=" + runs);
    options.override_origins.push_back(from_out);
    options.overrides.push_back("run.name=" + point_name(sweep, point.index));
    options.override_origins.push_back(from_out);
    try {
      point.deck = parse_deck(base_text, sweep.base_deck, options);
    } catch (const InputError& e) {
      for (const auto& problem : e.problems()) {
        problems.push_back("point " + std::to_string(point.index) + " (" + describe_values(point.overrides) +
                           "): " + problem);
      }
    }
  }
  if (!problems.empty()) throw InputError(problems);
  return sweep;
}

std::string render_point_deck(const Sweep& sweep, const SweepPoint& point) {
  std::ostringstream out;
  out << "# kgpt sweep " << sweep.name << " (" << sweep.path << "): point " << point.index << " of "
      << sweep.points.size() << "\n";
  out << "# values: " << describe_values(point.overrides) << "\n";
  out << render_resolved(point.deck);
  return out.str();
}

std::string render_manifest_csv(const Sweep& sweep) {
  std::ostringstream out;
  out << "index,deck,run_dir";
  for (const auto& key : sweep.keys) out << "," << csv_field(key);
  out << "\n";
  for (const auto& point : sweep.points) {
    const std::string name = point_name(sweep, point.index);
    out << point.index << ",decks/" << name << ".yaml,runs/" << name;
    for (const auto& key : sweep.keys) {
      std::string value;
      for (const auto& o : point.overrides) {
        if (o.key == key) value = o.value;
      }
      out << "," << csv_field(value);
    }
    out << "\n";
  }
  return out.str();
}

std::string render_manifest_json(const Sweep& sweep) {
  std::ostringstream out;
  out << "{\n  \"sweep\": " << json_string(sweep.name) << ",\n  \"sweep_file\": " << json_string(sweep.path)
      << ",\n  \"base_deck\": " << json_string(sweep.base_deck) << ",\n  \"world_size\": " << sweep.world_size
      << ",\n  \"common\": {";
  for (std::size_t i = 0; i < sweep.common.size(); ++i) {
    out << (i ? ", " : "") << json_string(sweep.common[i].key) << ": " << json_value(sweep.common[i].value);
  }
  out << "},\n  \"keys\": [";
  for (std::size_t i = 0; i < sweep.keys.size(); ++i) out << (i ? ", " : "") << json_string(sweep.keys[i]);
  out << "],\n  \"points\": [\n";
  for (std::size_t p = 0; p < sweep.points.size(); ++p) {
    const SweepPoint& point = sweep.points[p];
    const std::string name = point_name(sweep, point.index);
    out << "    {\"index\": " << point.index << ", \"deck\": " << json_string("decks/" + name + ".yaml")
        << ", \"run_dir\": " << json_string("runs/" + name) << ", \"overrides\": {";
    for (std::size_t i = 0; i < point.overrides.size(); ++i) {
      out << (i ? ", " : "") << json_string(point.overrides[i].key) << ": " << json_value(point.overrides[i].value);
    }
    out << "}}" << (p + 1 < sweep.points.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return out.str();
}

}  // namespace kgpt::config
