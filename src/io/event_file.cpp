#include "io/event_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "core/error.hpp"

namespace kgpt::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "events.out.tfevents.";
constexpr const char* kFileVersion = "brain.Event:2";

const std::array<std::uint32_t, 256>& crc_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected 0x1EDC6F41
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protobuf's wire format, the parts an Event uses.
enum Wire : std::uint32_t { varint = 0, fixed64 = 1, bytes = 2, fixed32 = 5 };

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, std::uint32_t field, Wire wire) { put_varint(out, (field << 3) | wire); }

void put_bytes(std::string& out, std::uint32_t field, const std::string& value) {
  put_key(out, field, Wire::bytes);
  put_varint(out, value.size());
  out += value;
}

template <class T>
void put_little_endian(std::string& out, T value) {
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // x86-64 and aarch64 are little-endian, as the format is
  out.append(raw, sizeof(T));
}

// An Event's fields 1 (wall_time) and 2 (step).
std::string event_head(std::int64_t step) {
  std::string event;
  put_key(event, 1, Wire::fixed64);
  put_little_endian(event, std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  put_key(event, 2, Wire::varint);
  put_varint(event, static_cast<std::uint64_t>(step));
  return event;
}

class WireReader {
 public:
  WireReader(const char* data, std::size_t size, std::string where) : at_(data), end_(data + size), where_(std::move(where)) {}
  bool done() const { return at_ == end_; }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      need(1);
      const auto byte = static_cast<unsigned char>(*at_++);
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("a varint longer than ten bytes");
  }
  template <class T>
  T little_endian() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  WireReader message() {
    const std::uint64_t size = varint();
    need(size);
    WireReader inner(at_, static_cast<std::size_t>(size), where_);
    at_ += size;
    return inner;
  }
  std::string text() {
    const WireReader inner = message();
    return std::string(inner.at_, inner.end_);
  }
  // Reads the message's fields to its end: `read(field, wire)` reads a field it knows and returns
  // true; any other field is skipped.
  template <class Read>
  void each_field(const Read& read) {
    while (!done()) {
      const std::uint64_t key = varint();
      const auto field = static_cast<std::uint32_t>(key >> 3), wire = static_cast<std::uint32_t>(key & 7);
      if (!read(field, wire)) skip(wire);
    }
  }
  void skip(std::uint32_t wire) {
    switch (wire) {
      case Wire::varint: varint(); return;
      case Wire::fixed64: little_endian<std::uint64_t>(); return;
      case Wire::bytes: message(); return;
      case Wire::fixed32: little_endian<std::uint32_t>(); return;
      default: fail("a field of wire type " + std::to_string(wire) + ", which an Event does not use");
    }
  }
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where_ + ": " + what); }

 private:
  void need(std::uint64_t bytes) const {
    if (bytes > static_cast<std::uint64_t>(end_ - at_)) fail("a field runs past the end of its message");
  }
  const char* at_;
  const char* end_;
  std::string where_;
};

Scalar parse_value(WireReader value) {
  Scalar scalar;
  value.each_field([&](std::uint32_t field, std::uint32_t wire) {
    if (field == 1 && wire == Wire::bytes) {
      scalar.tag = value.text();
    } else if (field == 2 && wire == Wire::fixed32) {
      scalar.value = value.little_endian<float>();
    } else {
      return false;
    }
    return true;
  });
  return scalar;
}

EventRecord parse_event(WireReader event) {
  EventRecord record;
  event.each_field([&](std::uint32_t field, std::uint32_t wire) {
    if (field == 1 && wire == Wire::fixed64) {
      record.wall_time = event.little_endian<double>();
    } else if (field == 2 && wire == Wire::varint) {
      record.step = static_cast<std::int64_t>(event.varint());
    } else if (field == 3 && wire == Wire::bytes) {
      record.file_version = event.text();
    } else if (field == 5 && wire == Wire::bytes) {
      WireReader summary = event.message();
      summary.each_field([&](std::uint32_t inner, std::uint32_t inner_wire) {
        if (inner != 1 || inner_wire != Wire::bytes) return false;
        record.scalars.push_back(parse_value(summary.message()));
        return true;
      });
    } else if (field == 7 && wire == Wire::bytes) {
      WireReader log = event.message();
      log.each_field([&](std::uint32_t inner, std::uint32_t inner_wire) {
        if (inner != 1 || inner_wire != Wire::varint) return false;
        record.session_start = log.varint() == 1;  // SessionLog.START
        return true;
      });
    } else {
      return false;
    }
    return true;
  });
  return record;
}

struct RawEvent {
  std::string bytes;  // the Event message as written
  EventRecord event;
};

std::vector<RawEvent> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot be opened");
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<RawEvent> events;
  std::size_t at = 0;
  while (data.size() - at >= 12) {
    std::uint64_t length = 0;
    std::uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, data.data() + at, 8);
    std::memcpy(&length_crc, data.data() + at + 8, 4);
    const std::string where = path + ": record at byte " + std::to_string(at);
    if (length_crc != masked_crc32c(data.data() + at, 8)) {
      throw InputError(where + ": its length's checksum does not match");
    }
    if (length > data.size() - at - 12 || data.size() - at - 12 - length < 4) break;  // cut short: the writer was stopped
    std::memcpy(&data_crc, data.data() + at + 12 + length, 4);
    if (data_crc != masked_crc32c(data.data() + at + 12, length)) {
      throw InputError(where + ": its data's checksum does not match");
    }
    RawEvent raw;
    raw.bytes.assign(data, at + 12, length);
    raw.event = parse_event(WireReader(raw.bytes.data(), raw.bytes.size(), where));
    events.push_back(std::move(raw));
    at += 16 + length;
  }
  return events;
}

std::string framed(const std::string& event) {
  std::string out;
  const std::uint64_t length = event.size();
  put_little_endian(out, length);
  put_little_endian(out, masked_crc32c(out.data(), 8));
  out += event;
  put_little_endian(out, masked_crc32c(event.data(), event.size()));
  return out;
}

// The seconds in an event file's name (events.out.tfevents.<seconds>.<host>), or -1.
long long seconds_in_name(const std::string& name) {
  const std::size_t start = std::strlen(kPrefix);
  std::size_t end = start;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  return end > start && end - start < 19 ? std::stoll(name.substr(start, end - start)) : -1;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size) {
  const auto& table = crc_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

EventFile::EventFile(const std::string& dir, std::int64_t restart_step) {
  long long seconds = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (const std::string& existing : event_files(dir)) {
    seconds = std::max(seconds, seconds_in_name(fs::path(existing).filename().string()) + 1);
  }
  char host[256] = "host";
  ::gethostname(host, sizeof(host) - 1);
  host[sizeof(host) - 1] = '\0';
  char name[64];
  std::snprintf(name, sizeof(name), "%s%010lld.", kPrefix, seconds);
  path_ = dir + "/" + name + host;
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) throw Error(ExitCode::failure, path_ + ": cannot be created: " + std::strerror(errno));
  std::string version = event_head(0);
  put_bytes(version, 3, kFileVersion);
  record(version);
  if (restart_step > 0) {
    std::string start = event_head(restart_step), log;
    put_key(log, 1, Wire::varint);
    put_varint(log, 1);  // SessionLog.START
    put_bytes(start, 7, log);
    record(start);
  }
  flush();
}

EventFile::~EventFile() {
  try {
    flush();
  } catch (const Error&) {
    // A destructor cannot report it; the history has every row.
  }
  std::fclose(file_);
}

void EventFile::record(const std::string& event) { pending_ += framed(event); }

void EventFile::add(std::int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& scalar : scalars) {
    std::string value;
    put_bytes(value, 1, scalar.tag);
    put_key(value, 2, Wire::fixed32);
    put_little_endian(value, static_cast<float>(scalar.value));
    put_bytes(summary, 1, value);
  }
  std::string event = event_head(step);
  put_bytes(event, 5, summary);
  record(event);
}

void EventFile::flush() {
  if (pending_.empty()) return;
  const bool written = std::fwrite(pending_.data(), 1, pending_.size(), file_) == pending_.size();
  pending_.clear();
  if (!written || std::fflush(file_) != 0) throw Error(ExitCode::failure, path_ + ": cannot be written: " + std::strerror(errno));
}

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool temporary = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;  // cut_event_files'
    if (name.rfind(kPrefix, 0) == 0 && !temporary && entry.is_regular_file(error)) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<EventRecord> read_event_file(const std::string& path) {
  std::vector<EventRecord> events;
  for (RawEvent& raw : read_raw(path)) events.push_back(std::move(raw.event));
  return events;
}

std::size_t cut_event_files(const std::string& dir, std::int64_t last_step) {
  // Every file is read before any is rewritten, so a damaged one changes none.
  std::vector<std::pair<std::string, std::vector<RawEvent>>> files;
  for (const std::string& path : event_files(dir)) files.emplace_back(path, read_raw(path));
  std::size_t dropped = 0;
  for (const auto& [path, events] : files) {
    std::string kept;
    std::size_t dropped_here = 0;
    for (const RawEvent& raw : events) {
      const EventRecord& e = raw.event;
      const bool evaluation = !e.scalars.empty() && e.scalars.front().tag.rfind("train/", 0) != 0;
      if (e.step > last_step || (e.step == last_step && evaluation)) {
        ++dropped_here;
      } else {
        kept += framed(raw.bytes);
      }
    }
    // Untouched unless something is dropped, or a killed writer left half a record at its end.
    std::error_code size_error;
    if (dropped_here == 0 && fs::file_size(path, size_error) == kept.size()) continue;
    dropped += dropped_here;
    const std::string temporary = path + ".tmp";
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(kept.data(), static_cast<std::streamsize>(kept.size()));
      if (!out.flush()) throw Error(ExitCode::failure, temporary + ": cannot be written");
    }
    std::error_code error;
    fs::rename(temporary, path, error);
    if (error) throw Error(ExitCode::failure, temporary + ": cannot rename to " + path + ": " + error.message());
  }
  return dropped;
}

void remove_event_files(const std::string& dir) {
  for (const std::string& path : event_files(dir)) {
    std::error_code error;
    fs::remove(path, error);
    if (error) throw Error(ExitCode::failure, path + ": cannot be removed: " + error.message());
  }
}

}  // namespace kgpt::io
