// TensorBoard event files (io/event_file.hpp): CRC-32C against its published check values, a file
// written and read back, a resumed run's cut, and damaged or cut-short files. Readers written
// elsewhere check the same files in tests/io/test_tensorboard.py.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/event_file.hpp"
#include "support/temp_dir.hpp"

using namespace kgpt;

namespace {

std::vector<std::int64_t> steps_of(const std::vector<io::EventRecord>& events, const std::string& prefix) {
  std::vector<std::int64_t> steps;
  for (const auto& e : events) {
    if (!e.scalars.empty() && e.scalars.front().tag.rfind(prefix, 0) == 0) steps.push_back(e.step);
  }
  return steps;
}

// As a run writes them: train scalars at each step in (from, to], an evaluation at every third
// step, `from` included (a run evaluates where it starts).
void write_run(io::EventFile& file, int from, int to) {
  for (int step = from; step <= to; ++step) {
    if (step > from) file.add(step, {{"train/loss", 5.0 - 0.25 * step}, {"train/lr_matrix", 0.02}});
    if (step % 3 == 0) file.add(step, {{"val/loss", 4.0 - 0.125 * step}, {"val/bpb", 1.5}});
  }
  file.flush();
}

}  // namespace

TEST_CASE("io: CRC-32C gives its published check values and TFRecord's mask", "[io]") {
  // RFC 3720, B.4: 32 bytes of zeros, of ones, ascending and descending; the catalogue's "123456789".
  CHECK(io::crc32c("123456789", 9) == 0xE3069283u);
  std::vector<unsigned char> bytes(32, 0);
  CHECK(io::crc32c(bytes.data(), bytes.size()) == 0x8A9136AAu);
  std::fill(bytes.begin(), bytes.end(), 0xFF);
  CHECK(io::crc32c(bytes.data(), bytes.size()) == 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(i);
  CHECK(io::crc32c(bytes.data(), bytes.size()) == 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) bytes[i] = static_cast<unsigned char>(31 - i);
  CHECK(io::crc32c(bytes.data(), bytes.size()) == 0x113FDB5Cu);
  const std::uint32_t crc = io::crc32c("123456789", 9);
  CHECK(io::masked_crc32c("123456789", 9) == ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
}

TEST_CASE("io: an event file reads back its version, steps, tags and float values", "[io]") {
  test::TempDir dir;
  std::string path;
  {
    io::EventFile file(dir.path(), 0);
    path = file.path();
    write_run(file, 0, 6);
    file.add(7, {{"train/loss", 0.1}, {"train/odd", -0.0}, {"train/big", 3.0e38}});
  }  // the destructor flushes step 7
  CHECK(path.find(dir.path() + "/events.out.tfevents.") == 0);
  const auto events = io::read_event_file(path);
  REQUIRE(events.size() == 1 + 6 + 3 + 1);
  CHECK(events[0].file_version == "brain.Event:2");
  CHECK(events[0].scalars.empty());
  CHECK(events[0].wall_time > 1.7e9);
  CHECK(steps_of(events, "train/") == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7});
  CHECK(steps_of(events, "val/") == std::vector<std::int64_t>{0, 3, 6});
  const io::EventRecord& last = events.back();
  REQUIRE(last.scalars.size() == 3);
  CHECK(last.scalars[0].tag == "train/loss");
  CHECK(last.scalars[0].value == static_cast<double>(0.1f));  // stored as a float
  CHECK(std::signbit(last.scalars[1].value));
  CHECK(last.scalars[2].value == static_cast<double>(3.0e38f));
  CHECK(io::event_files(dir.path()) == std::vector<std::string>{path});
}

TEST_CASE("io: a resumed run's cut keeps train steps up to its checkpoint and evaluations before it", "[io]") {
  test::TempDir dir;
  std::string first;
  {
    io::EventFile file(dir.path(), 0);
    first = file.path();
    write_run(file, 0, 8);
  }
  CHECK(io::cut_event_files(dir.path(), 6) == 2 + 1);  // train 7 and 8, val at 6
  auto events = io::read_event_file(first);
  CHECK(steps_of(events, "train/") == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(steps_of(events, "val/") == std::vector<std::int64_t>{0, 3});
  CHECK(io::cut_event_files(dir.path(), 6) == 0);
  std::string second;
  {
    io::EventFile file(dir.path(), 7);
    second = file.path();
    write_run(file, 6, 9);
  }
  // Named a second after the first file even within its second, so the files sort in the order written.
  CHECK(second > first);
  CHECK(io::event_files(dir.path()) == std::vector<std::string>{first, second});
  events = io::read_event_file(second);
  REQUIRE(events.size() >= 2);
  CHECK(events[1].session_start);
  CHECK(events[1].step == 7);
  CHECK(steps_of(events, "train/") == std::vector<std::int64_t>{7, 8, 9});
  CHECK(steps_of(events, "val/") == std::vector<std::int64_t>{6, 9});
  // A second resumption from step 4 cuts both files; the START at 7 goes with the steps after 4.
  CHECK(io::cut_event_files(dir.path(), 4) == 2 + 6);
  CHECK(steps_of(io::read_event_file(first), "train/") == std::vector<std::int64_t>{1, 2, 3, 4});
  CHECK(io::read_event_file(second).size() == 1);
  io::remove_event_files(dir.path());
  CHECK(io::event_files(dir.path()).empty());
}

TEST_CASE("io: a damaged event file is refused naming its record, and a cut-short one reads to its last whole record",
          "[io]") {
  test::TempDir dir;
  std::string path;
  {
    io::EventFile file(dir.path(), 0);
    path = file.path();
    write_run(file, 0, 3);
  }
  const std::string whole = test::read_file(path);
  const auto events = io::read_event_file(path);
  REQUIRE(events.size() == 1 + 3 + 2);

  // A writer killed inside its last record: that record is left out, and the cut drops the fragment.
  test::write_file(path, whole.substr(0, whole.size() - 5));
  CHECK(io::read_event_file(path).size() == events.size() - 1);
  CHECK(io::cut_event_files(dir.path(), 100) == 0);
  CHECK(test::read_file(path).size() < whole.size() - 5);
  CHECK(io::read_event_file(path).size() == events.size() - 1);

  std::uint64_t first_length = 0;
  std::memcpy(&first_length, whole.data(), 8);
  const std::size_t second_record = 16 + first_length;
  const std::string at = "record at byte " + std::to_string(second_record);
  std::string damaged = whole;
  damaged[second_record + 14] ^= 0x01;  // inside the data
  test::write_file(path, damaged);
  CHECK_THROWS_WITH(io::read_event_file(path), Catch::Contains(path) && Catch::Contains(at) &&
                                                   Catch::Contains("its data's checksum does not match"));
  // The cut reads every file before it writes any: the damaged file stays as it was.
  CHECK_THROWS_WITH(io::cut_event_files(dir.path(), 1), Catch::Contains(at));
  CHECK(test::read_file(path) == damaged);
  damaged = whole;
  damaged[second_record + 2] ^= 0x01;  // the length
  test::write_file(path, damaged);
  CHECK_THROWS_WITH(io::read_event_file(path), Catch::Contains(at) && Catch::Contains("its length's checksum"));
}
