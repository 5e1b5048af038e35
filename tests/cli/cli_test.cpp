// The `engine` command end to end: exit codes, one-line errors, the reports and the files it
// writes, on a tiny model and data written by the test (and on LeNet-5 + MNIST when present).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/cli/engine_process.hpp"
#include "tests/cli/tiny_files.hpp"
#include "tests/common/test_models.hpp"

namespace {

namespace fs = std::filesystem;
using cli_test::EngineResult;
using cli_test::read_text;

size_t count_lines(const std::string& s) { return size_t(std::count(s.begin(), s.end(), '\n')); }

class EngineCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() /
            ("engine_cli_" + std::to_string(getpid()) + "_" + info->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);  // kept on failure, to look at
  }

  EngineResult engine(const std::vector<std::string>& args) { return cli_test::run_engine(args, dir_); }

  // tiny.json plus 5 MNIST-named images; the last label is wrong on purpose (4 of 5 correct).
  void write_tiny_dataset() {
    model_ = cli_test::write_tiny_model(dir_);
    images_ = dir_ + "/tiny-images-idx3-ubyte";
    labels_ = dir_ + "/tiny-labels-idx1-ubyte";
    cli_test::write_idx_images(images_, cli_test::tiny_images(5), 5, 4, 4);
    cli_test::write_idx_labels(labels_, {0, 1, 2, 0, 2});
  }

  // An error is one line, "error: ...", the last on stderr; anything before it is a log line.
  static void expect_one_line_error(const EngineResult& r, const std::string& fragment) {
    std::istringstream lines(r.err);
    std::string line, last;
    int errors = 0;
    while (std::getline(lines, line)) {
      if (line.rfind("error: ", 0) == 0) ++errors;
      else EXPECT_TRUE(line.rfind("info: ", 0) == 0 || line.rfind("warning: ", 0) == 0) << "stray line: " << line;
      last = line;
    }
    EXPECT_EQ(errors, 1) << r.err;
    EXPECT_EQ(last.rfind("error: ", 0), 0u) << r.err;
    EXPECT_NE(last.find(fragment), std::string::npos) << r.err;
    EXPECT_EQ(r.err.back(), '\n');
  }

  std::string dir_, model_, images_, labels_;
};

TEST_F(EngineCli, UsageErrorsExitWith2) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {},
           {"frobnicate"},
           {"run"},
           {"run", "m.json"},
           {"run", "m.json", "d.idx", "--bogus"},
           {"run", "m.json", "d.idx", "--batch", "0"},
           {"run", "m.json", "d.idx", "--precision", "fp8"},
           {"run", "m.json", "d.idx", "--threads", "0"},
           {"bench", "m.json", "--threads", "-2"},
           {"show", "d.idx", "--index", "seven"},
       }) {
    const EngineResult r = engine(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << joined << "\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << joined;
  }
}

TEST_F(EngineCli, UnknownCommandAndOptionAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"rnu"}, "error: unknown command 'rnu' (did you mean 'run'?) (see engine --help)"},
           {{"frobnicate", "x"}, "error: unknown command 'frobnicate' (see engine --help)"},
           {{"run", "m.json", "d.idx", "--limt", "5"},
            "error: unknown option '--limt' (did you mean '--limit'?) (see engine run --help)"},
           {{"run", "m.json", "d.idx", "--limt=5"},
            "error: unknown option '--limt' (did you mean '--limit'?) (see engine run --help)"},
           {{"run", "--jsno", "m.json", "d.idx"},
            "error: unknown option '--jsno' (did you mean '--json'?) (see engine run --help)"},
           {{"info", "m.json", "--verbsoe"},
            "error: unknown option '--verbsoe' (did you mean '--verbose'?) (see engine info --help)"},
           {{"backends", "--frobnicate"}, "error: unknown option '--frobnicate' (see engine backends --help)"},
           {{"--bogus"}, "error: unknown option '--bogus' (see engine --help)"},
           {{"info", "m.json", "extra"}, "error: unexpected argument 'extra' (see engine info --help)"},
       }) {
    const EngineResult r = engine(c.args);
    std::string joined;
    for (const auto& a : c.args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined;
    EXPECT_EQ(r.err, c.error + "\n") << joined;
    EXPECT_TRUE(r.out.empty()) << joined;
  }
}

TEST_F(EngineCli, HelpAndVersionExitWith0) {
  EXPECT_EQ(engine({"--help"}).exit_code, 0);
  const EngineResult run_help = engine({"run", "--help"});
  EXPECT_EQ(run_help.exit_code, 0);
  for (const char* option : {"--labels", "--backend", "--batch", "--limit", "--output", "--json", "--dump-outputs",
                             "--precision", "--nondeterministic", "--threads"})
    EXPECT_NE(run_help.out.find(option), std::string::npos) << option;
  EXPECT_NE(run_help.out.find("Allow faster algorithms whose results may vary"), std::string::npos) << run_help.out;
  EXPECT_EQ(engine({"--version"}).exit_code, 0);
}

TEST_F(EngineCli, UnknownBackendExitsWith1AndListsTheAvailableOnes) {
  write_tiny_dataset();
  const EngineResult r = engine({"run", model_, images_, "--backend", "quantum"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "unknown backend 'quantum' (built in: cpu");
  EXPECT_NE(r.err.find("see `engine backends`"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

// Without a GPU (this machine in CI), naming a GPU backend is one short line: the reason once, in
// words (not CUDA's "driver version is insufficient"), and what to use instead.
TEST_F(EngineCli, UnavailableGpuBackendIsOneShortLine) {
  write_tiny_dataset();
  int checked = 0;
  for (const std::string backend : {"custom", "cudnn"}) {
    const EngineResult r = engine({"run", model_, images_, "--backend=" + backend});
    // A GPU here, no CUDA build, or a GPU with a cuDNN of another version: not this test's case.
    if (r.exit_code == 0 || r.err.find("unknown backend") != std::string::npos ||
        r.err.find("is loaded but the engine was built for") != std::string::npos)
      continue;
    ++checked;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    expect_one_line_error(r, "error: backend '" + backend + "' is not available here: no usable NVIDIA GPU: ");
    EXPECT_NE(r.err.find("; use --backend cpu or see `engine backends`\n"), std::string::npos) << r.err;
    size_t reasons = 0;
    for (size_t at = r.err.find("no usable"); at != std::string::npos; at = r.err.find("no usable", at + 1)) ++reasons;
    EXPECT_EQ(reasons, 1u) << r.err;
    EXPECT_LE(r.err.size(), 240u) << r.err;
  }
  if (checked == 0) GTEST_SKIP() << "every GPU backend runs here, or none is built";
}

TEST_F(EngineCli, MissingModelIsOneLineNamingTheFile) {
  const std::string missing = dir_ + "/missing.json";
  const EngineResult r = engine({"run", missing, dir_ + "/nothing.idx", "--backend", "cpu"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "error: " + missing + ":");
}

TEST_F(EngineCli, InfoShowsLayersParametersInputAndBackends) {
  write_tiny_dataset();
  const EngineResult r = engine({"info", model_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* text : {"tiny", "flatten", "dense", "softmax", "[16]", "[3]", "uint8 [1, 4, 4]", "parameters",
                           "51", "cpu", "available", "zero one two"})
    EXPECT_NE(r.out.find(text), std::string::npos) << "missing '" << text << "' in\n" << r.out;
}

TEST_F(EngineCli, BackendsListsCpu) {
  const EngineResult r = engine({"backends"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("available"), std::string::npos) << r.out;
  // The precisions each available backend takes (--precision): the reference emulates every one.
  EXPECT_NE(r.out.find("precisions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32,tf32,fp16,bf16,int8"), std::string::npos) << r.out;
}

TEST_F(EngineCli, RunJsonSummaryIsTheWholeStdout) {
  write_tiny_dataset();
  const EngineResult r = engine({"run", model_, images_, "--labels", labels_, "--backend", "cpu", "--batch", "2",
                                 "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // throws (fails the test) on any stray output
  for (const char* key : {"backend", "device", "model", "images", "correct", "accuracy", "seconds",
                          "images_per_second", "plan_seconds", "confusion"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["images"], 5);
  EXPECT_EQ(j["correct"], 4);
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), 0.8);
  EXPECT_EQ(j["batch"], 2);
  // Labels 0 1 2 0 2, predictions 0 1 2 0 1: the last "2" was classified as 1.
  EXPECT_EQ(j["confusion"], nlohmann::json::parse("[[2,0,0],[0,1,0],[0,1,1]]"));
  // Logs (backend choice) go to stderr only.
  EXPECT_NE(r.err.find("using backend cpu"), std::string::npos) << r.err;
}

// --devices names GPUs: on a host backend it is an error, for run and bench alike (not a silent
// no-op that would turn a meant GPU run into a CPU one).
TEST_F(EngineCli, DevicesOnAHostBackendIsAnError) {
  write_tiny_dataset();
  const EngineResult run = engine({"run", model_, images_, "--backend", "cpu", "--devices", "0"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  expect_one_line_error(run, "--devices: backend 'cpu' runs on the host, not on GPUs");
  const EngineResult bench = engine({"bench", model_, "--backend", "reference", "--batch", "1", "--devices", "all",
                                     "--duration", "0", "--iterations", "1", "--repetitions", "1"});
  EXPECT_EQ(bench.exit_code, 1) << bench.err;
  expect_one_line_error(bench, "--devices: backend 'reference' runs on the host, not on GPUs");
}

// A GPU that does not exist, a duplicate, an empty list: each one line naming it. Without a GPU the
// backend is unavailable first (that message is checked elsewhere).
TEST_F(EngineCli, BadDeviceListsAreNamed) {
  write_tiny_dataset();
  int checked = 0;
  for (const std::string backend : {"custom", "cudnn"}) {
    const std::vector<std::pair<std::string, std::string>> cases{
        {"99", "GPU 99 does not exist ("}, {"0,0", "GPU 0 is named twice"}, {"", "an empty device index"},
        {"x", "'x' is not a device index"}};
    for (const auto& [list, fragment] : cases) {
      const EngineResult r = engine({"run", model_, images_, "--backend", backend, "--devices", list});
      if (r.err.find("is not available here") != std::string::npos ||
          r.err.find("unknown backend") != std::string::npos)
        continue;
      ++checked;
      EXPECT_EQ(r.exit_code, 1) << r.err;
      expect_one_line_error(r, fragment);
    }
  }
  if (checked == 0) GTEST_SKIP() << "no GPU backend runs here";
}

// --threads changes nothing but the speed: cpu and reference give the same report for 1 and 3 threads.
TEST_F(EngineCli, ThreadsOptionGivesTheSameAnswers) {
  write_tiny_dataset();
  for (const char* backend : {"cpu", "reference"}) {
    std::string first;
    for (const char* threads : {"1", "3"}) {
      const std::string out = dir_ + "/p" + threads + ".txt";
      const EngineResult r = engine({"run", model_, images_, "--labels", labels_, "--backend", backend, "--threads",
                                     threads, "--output", out});
      ASSERT_EQ(r.exit_code, 0) << r.err;
      std::ifstream in(out);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_FALSE(text.empty());
      if (first.empty()) first = text;
      EXPECT_EQ(text, first) << backend << " --threads " << threads;
    }
  }
}

TEST_F(EngineCli, RunTextReportHasAccuracyAndConfusionMatrix) {
  write_tiny_dataset();
  const EngineResult r = engine({"run", model_, images_, "--labels", labels_, "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("accuracy  80.00% (4 of 5 correct)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("confusion matrix"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("images/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan"), std::string::npos) << r.out;
}

TEST_F(EngineCli, LabelsAreFoundBesideMnistNamedImages) {
  write_tiny_dataset();
  const EngineResult r = engine({"run", model_, images_, "--backend", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["labels"], labels_);
  EXPECT_EQ(j["correct"], 4);
  EXPECT_NE(r.err.find(labels_), std::string::npos) << "the log names the labels file it found:\n" << r.err;
}

TEST_F(EngineCli, OutputAndDumpFilesAreCompleteAndNoTmpIsLeft) {
  write_tiny_dataset();
  const std::string out = dir_ + "/pred.txt", npy = dir_ + "/out.npy";
  const EngineResult r = engine({"run", model_, images_, "--labels", labels_, "--backend", "cpu", "--batch", "3",
                                 "--output", out, "--dump-outputs", npy});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  EXPECT_FALSE(fs::exists(npy + ".tmp"));

  const std::string text = read_text(out);
  ASSERT_EQ(count_lines(text), 5u) << text;
  std::istringstream lines(text);
  for (int i = 0; i < 5; ++i) {
    int index = -1, cls = -1;
    double p = 0;
    lines >> index >> cls >> p;
    EXPECT_EQ(index, i);
    EXPECT_EQ(cls, i % 3);
    EXPECT_GT(p, 0.99);  // logits 10 vs 0 after scaling 255 -> 1.0
  }

  const std::string bytes = read_text(npy);
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const size_t header_len = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = bytes.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (5, 3)"), std::string::npos) << header;
  ASSERT_EQ(bytes.size(), 10 + header_len + 5 * 3 * sizeof(float));
  float row0[3];
  std::memcpy(row0, bytes.data() + 10 + header_len, sizeof(row0));
  EXPECT_GT(row0[0], 0.99f);
  EXPECT_NEAR(row0[0] + row0[1] + row0[2], 1.0f, 1e-6f);
}

// Output paths are checked before anything is loaded or classified; the error names the path given.
TEST_F(EngineCli, BadOutputPathIsRefusedBeforeAnyWork) {
  write_tiny_dataset();
  struct Case {
    std::string option, path, fragment;
  };
  fs::create_directories(dir_ + "/taken");
  for (const Case& c : std::vector<Case>{{"--output", dir_ + "/no/such/folder/pred.txt", "no/such/folder does not exist"},
                                         {"--dump-outputs", dir_ + "/no/out.npy", "/no does not exist"},
                                         {"--output", dir_ + "/taken", "is a folder, not a file name"}}) {
    const EngineResult r = engine({"run", model_, images_, "--backend", "cpu", c.option, c.path});
    EXPECT_EQ(r.exit_code, 1) << c.path;
    EXPECT_EQ(r.err, "error: " + c.option + " " + c.path + ": " + r.err.substr(r.err.find(": ", 7) + 2)) << r.err;
    EXPECT_NE(r.err.find(c.fragment), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(".tmp"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("using backend"), std::string::npos) << "the check comes before any work: " << r.err;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/no"));
}

// What the report calls the outputs follows the model's last op: softmax probabilities, sigmoid
// scores, otherwise logits (never "probability" for a negative number).
TEST_F(EngineCli, OutputColumnIsNamedByWhatTheModelOutputs) {
  write_tiny_dataset();
  const std::string one = dir_ + "/one.pgm";
  const auto pixels = cli_test::tiny_images(1);
  cli_test::write_pgm(one, pixels.data(), 4, 4);
  const std::string plain = dir_ + "/plain.idx";  // no labels beside it
  cli_test::write_idx_images(plain, cli_test::tiny_images(5), 5, 4, 4);
  for (const auto& [last, kind, plural] : std::vector<std::array<std::string, 3>>{
           {"softmax", "probability", "probabilities"}, {"sigmoid", "score", "scores"}, {"", "logit", "logits"}}) {
    const std::string model = cli_test::write_tiny_model(dir_, false, last);
    const EngineResult text = engine({"run", model, one, "--backend", "cpu"});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_NE(text.out.find("class     0 (zero)   " + kind + " "), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("\n" + plural + "\n"), std::string::npos) << text.out;
    const EngineResult json = engine({"run", model, one, "--backend", "cpu", "--json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const auto j = nlohmann::json::parse(json.out);
    EXPECT_EQ(j["output"], kind);
    ASSERT_TRUE(j.contains(plural)) << json.out;
    EXPECT_FLOAT_EQ(j[plural][0].get<float>(), kind == "logit" ? 10.0f : kind == "score" ? 0.9999546f : 0.9999092f);
    const EngineResult many = engine({"run", model, plain, "--backend", "cpu"});  // no labels: predictions
    EXPECT_NE(many.out.find("  image  class"), std::string::npos) << many.out;
    EXPECT_NE(many.out.find(" " + kind + "\n  0      0 (zero)  "), std::string::npos) << many.out;
    if (kind != "probability") EXPECT_EQ(many.out.find("probabilit"), std::string::npos) << many.out;
  }
}

// Without labels, several images still show their predictions: the first ten and the histogram of
// classes; --output holds every one.
TEST_F(EngineCli, UnlabelledImagesShowPredictions) {
  model_ = cli_test::write_tiny_model(dir_);
  const std::string data = dir_ + "/unlabelled.idx";
  cli_test::write_idx_images(data, cli_test::tiny_images(12), 12, 4, 4);
  const std::string out = dir_ + "/pred.txt";
  const EngineResult r = engine({"run", model_, data, "--backend", "cpu", "--output", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("predictions (first 10 of 12; all with --output FILE)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  9      0 (zero)     0.999909\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  10  "), std::string::npos) << r.out;
  for (const char* row : {"0 (zero)       4  33.33%", "1 (one)        4  33.33%", "2 (two)        4  33.33%"})
    EXPECT_NE(r.out.find(row), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(read_text(out)), 12u);
}

// Several data files and a folder of images in one call: classified in order, each file's results
// attributed to it in the report, --json and --output.
TEST_F(EngineCli, SeveralFilesAndAFolderOfImages) {
  write_tiny_dataset();  // 5 labelled images, 4 correct
  const std::string second = dir_ + "/more-images-idx3-ubyte", second_labels = dir_ + "/more-labels-idx1-ubyte";
  cli_test::write_idx_images(second, cli_test::tiny_images(4), 4, 4, 4);
  cli_test::write_idx_labels(second_labels, {0, 0, 0, 0});  // images 1 and 2 are wrong
  const std::string folder = dir_ + "/folder";
  fs::create_directories(folder);
  const auto pixels = cli_test::tiny_images(3);
  for (int i = 0; i < 3; ++i)  // named so that name order is 2, 1, 0
    cli_test::write_pgm(folder + "/img" + std::to_string(2 - i) + ".pgm", pixels.data() + i * 16, 4, 4);
  std::ofstream(folder + "/notes.txt") << "not an image";

  const std::string out = dir_ + "/pred.txt";
  const EngineResult both = engine({"run", model_, images_, second, "--backend", "cpu", "--json", "--output", out});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const auto j = nlohmann::json::parse(both.out);
  EXPECT_EQ(j["images"], 9);
  EXPECT_EQ(j["correct"], 6);
  ASSERT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["path"], images_);
  EXPECT_EQ(j["files"][0]["correct"], 4);
  EXPECT_EQ(j["files"][1]["first"], 5);
  EXPECT_EQ(j["files"][1]["correct"], 2);
  const std::string lines = read_text(out);
  EXPECT_EQ(count_lines(lines), 9u);
  EXPECT_NE(lines.find(images_ + " 4 1 "), std::string::npos) << lines;
  EXPECT_NE(lines.find(second + " 3 0 "), std::string::npos) << lines;

  const EngineResult text = engine({"run", model_, images_, second, "--backend", "cpu"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("accuracy  66.67% (6 of 9 correct)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("tiny-images-idx3-ubyte       5    80.00%"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("more-images-idx3-ubyte       4    50.00%"), std::string::npos) << text.out;

  const EngineResult dir = engine({"run", model_, folder, "--backend", "cpu", "--output", out});
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  EXPECT_EQ(read_text(out).substr(0, folder.size() + 13), folder + "/img0.pgm 0 2") << read_text(out);
  EXPECT_NE(dir.out.find(folder + "/img2.pgm:0  0 (zero)"), std::string::npos) << dir.out;

  const std::string empty = dir_ + "/empty";
  fs::create_directories(empty);
  const EngineResult none = engine({"run", model_, empty, "--backend", "cpu"});
  EXPECT_EQ(none.exit_code, 1);
  expect_one_line_error(none, "is a folder with no image file in it");
  const EngineResult labels = engine({"run", model_, images_, second, "--labels", labels_, "--backend", "cpu"});
  EXPECT_EQ(labels.exit_code, 1);
  expect_one_line_error(labels, "--labels goes with one data file; 2 are given");
}

TEST_F(EngineCli, LimitAndPartialLastBatch) {
  write_tiny_dataset();
  const EngineResult r = engine({"run", model_, images_, "--labels", labels_, "--backend", "cpu", "--batch", "2",
                                 "--limit", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["images"], 3);
  EXPECT_EQ(j["correct"], 3);
}

TEST_F(EngineCli, ImageSizeMismatchIsExplained) {
  model_ = cli_test::write_tiny_model(dir_);
  const std::string big = dir_ + "/big.idx";
  cli_test::write_idx_images(big, cli_test::tiny_images(2, 5, 5), 2, 5, 5);
  const EngineResult r = engine({"run", model_, big, "--backend", "cpu"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "expects 1x4x4");
}

// A float32-input model reads IDX float32 samples (already preprocessed) of its input shape.
TEST_F(EngineCli, Float32InputModelRunsOnIdxFloat32Samples) {
  write_tiny_dataset();  // labels_: 0 1 2 0 2
  const std::string model = cli_test::write_tiny_model(dir_, true);
  std::vector<float> samples(5 * 16, 0.0f);
  for (int i = 0; i < 5; ++i) samples[size_t(i) * 16 + size_t(i % 3)] = 1.0f;  // as tiny_images, scaled
  const std::string floats = dir_ + "/samples.idx";
  cli_test::write_idx_floats(floats, samples, {5, 16});
  const EngineResult r = engine({"run", model, floats, "--labels", labels_, "--backend", "cpu", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["model"], "tiny-float");
  EXPECT_EQ(j["images"], 5);
  EXPECT_EQ(j["correct"], 4);

  // The same samples as [1, 4, 4] do not fit a [16] input; uint8 images do not feed a float32
  // model, nor float32 samples a uint8 one: each says which data the model needs.
  const std::string chw = dir_ + "/chw.idx";
  cli_test::write_idx_floats(chw, samples, {5, 1, 4, 4});
  const EngineResult shape = engine({"run", model, chw, "--backend", "cpu"});
  EXPECT_EQ(shape.exit_code, 1);
  expect_one_line_error(shape, chw + ": samples are [1, 4, 4] but model 'tiny-float' expects float32 [16]");
  const EngineResult bytes = engine({"run", model, images_, "--backend", "cpu"});
  EXPECT_EQ(bytes.exit_code, 1);
  expect_one_line_error(bytes, images_ + ": IDX element type 0x08 (unsigned byte) is not supported; the samples of a "
                                         "float32-input model must be float32 (0x0D)");
  const EngineResult to_uint8 = engine({"run", model_, floats, "--backend", "cpu"});
  EXPECT_EQ(to_uint8.exit_code, 1);
  expect_one_line_error(to_uint8, "float32 IDX data is for models with float32 input");
}

TEST_F(EngineCli, LabelCountMismatchIsAnError) {
  write_tiny_dataset();
  const std::string short_labels = dir_ + "/short.idx1";
  cli_test::write_idx_labels(short_labels, {0, 1});
  const EngineResult r = engine({"run", model_, images_, "--labels", short_labels, "--backend", "cpu"});
  EXPECT_EQ(r.exit_code, 1);
  expect_one_line_error(r, "2 labels");
}

TEST_F(EngineCli, SingleImagePrintsClassAndProbabilities) {
  model_ = cli_test::write_tiny_model(dir_);
  const auto pixels = cli_test::tiny_images(3);
  const std::string pgm = dir_ + "/two.pgm";
  cli_test::write_pgm(pgm, pixels.data() + 2 * 16, 4, 4);  // image 2: class 2 ("two")
  const EngineResult r = engine({"run", model_, pgm, "--backend", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("class     2 (two)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probabilities"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 (zero)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 (one)"), std::string::npos) << r.out;
}

TEST_F(EngineCli, ShowPrintsAsciiArtAndLabel) {
  write_tiny_dataset();
  const EngineResult r = engine({"show", images_, "--index", "1", "--labels", labels_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("label 1"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(r.out), 5u) << r.out;  // header + 4 rows
  EXPECT_NE(r.out.find("  @@"), std::string::npos) << "pixel 1 of row 0 is white:\n" << r.out;
  const EngineResult bad = engine({"show", images_, "--index", "5", "--labels", labels_});
  EXPECT_EQ(bad.exit_code, 1);
  expect_one_line_error(bad, "no image 5");
}

// The real thing, when the trained model and the MNIST test set are both here.
TEST_F(EngineCli, Lenet5OnMnist) {
  const std::string model = testing_support::lenet5_path();
  const std::string data = std::string(ENGINE_TEST_DATA_DIR) + "/mnist/t10k-images-idx3-ubyte.gz";
  if (!fs::exists(model)) GTEST_SKIP() << model << " does not exist yet";
  if (!fs::exists(data)) GTEST_SKIP() << data << " is not here";
  const EngineResult info = engine({"info", model});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("61,706"), std::string::npos) << info.out;
  const EngineResult r = engine({"run", model, data, "--backend", "cpu", "--limit", "1000", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["images"], 1000);
  EXPECT_GT(j["accuracy"].get<double>(), 0.95);
}

}  // namespace
