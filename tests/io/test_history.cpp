// history.h5 (io/history.hpp): its /task rows, a resumed run's history keeping the rows before
// the step it resumes from, and the progress `kgpt inspect` reads from a history being written.
#include <catch2/catch.hpp>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <hdf5.h>

#include "io/describe.hpp"
#include "io/hdf5_file.hpp"
#include "io/history.hpp"

using namespace kgpt;

namespace {

io::RunMetadata metadata() {
  io::RunMetadata m;
  m.deck_text = "model: {family: golf}\n";
  m.task_names = {"hellaswag_val", "words"};
  return m;
}

// As a run from step `from` to step `to` writes them: a train row for each step it takes, and at
// even steps (`from` included: a run evaluates where it starts) a val row and a row of each of two
// tasks.
void write_rows(io::History& history, int from, int to) {
  for (int step = from; step <= to; ++step) {
    if (step > from) history.append(io::TrainRow{step, 100 * step, 5.0 - 0.1 * step});
    if (step % 2 == 0) {
      history.append(io::ValRow{step, 4.0 - 0.1 * step, 6.0});
      history.append(io::TaskRow{step, 0, 40, 0.25 + 0.01 * step, 0.3});
      history.append(io::TaskRow{step, 1, 12, 0.5, 0.5 + 0.01 * step});
    }
  }
}

}  // namespace

TEST_CASE("history: task rows are written with the tasks' names, and a resumed run keeps those before its step",
          "[io][history]") {
  const std::string path = "test_history_tasks.h5";
  std::remove(path.c_str());
  {
    io::History history = io::History::create(path, metadata());
    write_rows(history, 0, 10);
  }
  {
    const io::Hdf5File file(path, io::Hdf5File::Mode::read);
    CHECK(file.read_attribute_string("/task", "names") == "hellaswag_val\nwords");
    CHECK(file.read_doubles("/task/step") == std::vector<double>{0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10});
    CHECK(file.read_doubles("/task/task") == std::vector<double>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
    CHECK(file.read_doubles("/task/examples").at(1) == 12);
    CHECK(file.read_doubles("/task/acc").at(4) == Approx(0.29));
    CHECK(file.read_doubles("/task/acc_norm").at(5) == Approx(0.54));
  }
  // Resumed from step 6: train rows up to 6, val and task rows before 6 (the run scores step 6 again).
  {
    io::History history = io::History::resume(path, 6, metadata());
    write_rows(history, 6, 8);
  }
  const io::Hdf5File file(path, io::Hdf5File::Mode::read);
  CHECK(file.read_doubles("/train/step") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(file.read_doubles("/val/step") == std::vector<double>{0, 2, 4, 6, 8});
  CHECK(file.read_doubles("/task/step") == std::vector<double>{0, 0, 2, 2, 4, 4, 6, 6, 8, 8});
  CHECK(file.read_doubles("/task/acc_norm").at(7) == Approx(0.56));
  CHECK(file.read_attribute_string("/task", "names") == "hellaswag_val\nwords");
  std::remove(path.c_str());
}

TEST_CASE("history: one written before /task resumes with no task rows", "[io][history]") {
  const std::string path = "test_history_old.h5";
  std::remove(path.c_str());
  {
    io::History history = io::History::create(path, metadata());
    write_rows(history, 0, 4);
  }
  {
    // The file as an older kgpt wrote it: no /task group.
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    CHECK(H5Ldelete(file, "/task", H5P_DEFAULT) >= 0);
    H5Fclose(file);
  }
  {
    io::History history = io::History::resume(path, 4, metadata());
    history.append(io::TaskRow{4, 1, 12, 0.5, 0.5});
  }
  const io::Hdf5File file(path, io::Hdf5File::Mode::read);
  CHECK(file.read_doubles("/train/step") == std::vector<double>{1, 2, 3, 4});
  CHECK(file.read_doubles("/val/step") == std::vector<double>{0, 2});
  CHECK(file.read_doubles("/task/step") == std::vector<double>{4});
  std::remove(path.c_str());
}

TEST_CASE("history: inspect's progress is the last row every column holds, as a running writer inside a row leaves it",
          "[io][history]") {
  const std::string path = "test_history_progress.h5";
  std::remove(path.c_str());
  io::RunMetadata m = metadata();
  m.iterations = 10;
  {
    io::History history = io::History::create(path, m);
    for (int step = 1; step <= 3; ++step) {
      io::TrainRow row;
      row.step = step;
      row.tokens = 100 * step;
      row.loss = 5.0 - step;
      row.step_ms = 250;
      row.tokens_per_s = 400;
      row.time_left_s = 100.0 * (4 - step);  // 300, 200, 100
      history.append(row);
    }
  }
  {
    // Step 4 as far as a writer gets before time_left_s: its columns up to the wall time.
    io::Hdf5File file(path, io::Hdf5File::Mode::append);
    for (const char* column : {"/train/step", "/train/tokens", "/train/loss", "/train/lr_matrix", "/train/lr_scalar",
                               "/train/lr_embedding", "/train/lr_head", "/train/grad_norm", "/train/step_ms",
                               "/train/tokens_per_s", "/train/allreduce_calls", "/train/allreduce_bytes",
                               "/train/wall_time_s"}) {
      file.append(column, std::string(column) == "/train/step" ? 4.0 : 1.0);
    }
  }
  std::ostringstream out;
  io::describe_file(path, out);
  CHECK_THAT(out.str(), Catch::Contains("  progress: step 3/10 (30.0%), time left 1m40s\n") &&
                            Catch::Contains("  last step: train_loss 2, step_ms 250.0, tok/s 400,"));
  std::remove(path.c_str());
}
