#pragma once
// TensorBoard's event files, which TensorBoard and `wandb sync --sync-tensorboard` read: a run
// directory holds events.out.tfevents.<seconds>.<host> files, each a sequence of TFRecords (a
// little-endian uint64 length, its masked CRC-32C, the bytes, their masked CRC-32C) around Event
// protobuf messages. kgpt writes the first Event with the file version, then one Event per step
// and group of scalars (train/..., val/..., task/<name>/...), each scalar a Summary value with a
// tag and a float. A resumed run first cuts the earlier files back to the steps its checkpoint
// holds (the history's rule: train steps up to it, evaluations before it), then starts a new file
// whose second Event is a SessionLog START at the first step it trains, as TensorBoard expects of
// a restarted job, so a board that watched the earlier run drops the steps after the checkpoint.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace kgpt::io {

// CRC-32C (Castagnoli), and the mask TFRecord puts on it.
std::uint32_t crc32c(const void* data, std::size_t size);
std::uint32_t masked_crc32c(const void* data, std::size_t size);

struct Scalar {
  std::string tag;  // "train/loss"
  double value = 0;  // stored as a float, as TensorBoard's simple_value is
};

// What kgpt reads back of an Event: its step and, for a summary, the tags and values.
struct EventRecord {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;  // the first Event's ("brain.Event:2"), else ""
  bool session_start = false;  // a SessionLog whose status is START
  std::vector<Scalar> scalars;
};

class EventFile {
 public:
  // A new event file in `dir`, named after the current time (or one second after the newest event
  // file there, so files sort in the order they were written). `restart_step` > 0: the run resumes
  // and its first step written is this one (the SessionLog START's step).
  EventFile(const std::string& dir, std::int64_t restart_step);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // One Event at `step` holding `scalars` (non-finite values included, as TensorBoard shows them);
  // buffered until flush().
  void add(std::int64_t step, const std::vector<Scalar>& scalars);
  // Writes what add() buffered to the file and flushes it, so a board sees it. Throws Error naming
  // the file when the write fails.
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string pending_;
};

// The event files of `dir` (events.out.tfevents.*), sorted by name: the order they were written.
std::vector<std::string> event_files(const std::string& dir);

// The Events of the file at `path`. A file cut short inside its last record (its writer killed)
// reads up to that record. Throws InputError naming the file and the record's byte offset when a
// checksum does not match or an Event cannot be parsed.
std::vector<EventRecord> read_event_file(const std::string& path);

// Rewrites each event file of `dir` (through a temporary file and a rename) without the Events a
// run resumed at `last_step` writes again or never wrote: those of steps after it, and evaluations
// (val/, task/) at it. Returns how many Events were dropped.
std::size_t cut_event_files(const std::string& dir, std::int64_t last_step);

// Deletes the event files of `dir` (a new run in a run directory replaces the last one's).
void remove_event_files(const std::string& dir);

}  // namespace kgpt::io
