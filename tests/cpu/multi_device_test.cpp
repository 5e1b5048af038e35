// engine::MultiDeviceExecutable and --devices parsing, without a GPU: the split into contiguous whole
// batches, outputs landing at their share's offset in input order, odd counts, fewer batches than
// parts, failures rethrown after every part has finished; and two `cpu` executables against one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/multi_device.hpp"
#include "engine/core/registry.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

using engine::BatchStream;
using engine::Executable;
using engine::MultiDeviceExecutable;

std::string message_of(const std::string& text, int available) {
  try {
    engine::parse_device_list(text, available);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(DeviceList, AllAndIndicesInTheOrderGiven) {
  EXPECT_EQ(engine::parse_device_list("all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(engine::parse_device_list("all", 1), (std::vector<int>{0}));
  EXPECT_EQ(engine::parse_device_list("0", 2), (std::vector<int>{0}));
  EXPECT_EQ(engine::parse_device_list("1,0", 2), (std::vector<int>{1, 0}));
}

TEST(DeviceList, ErrorsNameTheProblem) {
  EXPECT_EQ(message_of("2", 2), "--devices '2': GPU 2 does not exist (2 visible here: 0..1)");
  EXPECT_EQ(message_of("0,1", 1), "--devices '0,1': GPU 1 does not exist (1 visible here: 0)");
  EXPECT_EQ(message_of("0,0", 2), "--devices '0,0': GPU 0 is named twice");
  EXPECT_NE(message_of("", 2).find("an empty device index"), std::string::npos);
  EXPECT_NE(message_of("0,", 2).find("an empty device index"), std::string::npos);
  EXPECT_NE(message_of("0,,1", 2).find("an empty device index"), std::string::npos);
  EXPECT_NE(message_of("-1", 2).find("'-1' is not a device index"), std::string::npos);
  EXPECT_NE(message_of("gpu0", 2).find("'gpu0' is not a device index"), std::string::npos);
  EXPECT_NE(message_of("99999999999", 2).find("is not a device index"), std::string::npos);
  EXPECT_NE(message_of(" 1", 2).find("is not a device index"), std::string::npos);
  EXPECT_EQ(message_of("all", 0), "--devices: no GPU is visible here");
  EXPECT_EQ(message_of("0", 0), "--devices: no GPU is visible here");
}

TEST(BatchShare, ContiguousWholeBatchesCoveringTheStream) {
  for (int parts = 1; parts <= 5; ++parts)
    for (int batch = 1; batch <= 7; ++batch)
      for (int64_t count = 0; count <= 40; ++count) {
        int64_t next = 0;
        int64_t most = 0, least = std::numeric_limits<int64_t>::max();
        for (int p = 0; p < parts; ++p) {
          const engine::Share s = engine::batch_share(count, batch, p, parts);
          ASSERT_EQ(s.first, next) << count << " " << batch << " " << p << "/" << parts;
          ASSERT_GE(s.count, 0);
          // Every share but the one holding the stream's end is whole batches.
          if (s.first + s.count < count) ASSERT_EQ(s.count % batch, 0);
          const int64_t batches = (s.count + batch - 1) / batch;
          most = std::max(most, batches);
          least = std::min(least, batches);
          next = s.first + s.count;
        }
        ASSERT_EQ(next, count);
        ASSERT_LE(most - least, 1) << "unbalanced: " << count << " " << batch << " " << parts;
      }
}

// Output k of a sample = its byte + k * 1000 + 0.5; records the batch sizes and threads it saw.
class FakeExecutable final : public Executable {
 public:
  explicit FakeExecutable(int max_batch, int fail_after = -1) : max_batch_(max_batch), fail_after_(fail_after) {}
  int max_batch() const override { return max_batch_; }
  void run(const void* input, int n, std::span<float* const> outputs) override {
    if (n < 1 || n > max_batch_) throw std::invalid_argument("bad n");
    {
      std::lock_guard lock(mutex_);
      sizes.push_back(n);
      threads.insert(std::this_thread::get_id());
      if (fail_after_ >= 0 && int(sizes.size()) > fail_after_) throw std::runtime_error("part failed on purpose");
    }
    const auto* in = static_cast<const uint8_t*>(input);
    for (size_t k = 0; k < outputs.size(); ++k)
      for (int i = 0; i < n; ++i)
        for (int e = 0; e < int(k) + 1; ++e) outputs[k][i * (int(k) + 1) + e] = float(in[i]) + float(k) * 1000 + 0.5f * float(e + 1);
  }
  std::vector<int> sizes;
  std::set<std::thread::id> threads;

 private:
  int max_batch_, fail_after_;
  std::mutex mutex_;
};

struct Parts {
  std::vector<FakeExecutable*> fakes;
  std::unique_ptr<MultiDeviceExecutable> multi;
};

Parts make_parts(int count, int max_batch, int failing_part = -1) {
  Parts p;
  std::vector<std::unique_ptr<Executable>> parts;
  for (int i = 0; i < count; ++i) {
    auto f = std::make_unique<FakeExecutable>(max_batch, i == failing_part ? 1 : -1);
    p.fakes.push_back(f.get());
    parts.push_back(std::move(f));
  }
  p.multi = std::make_unique<MultiDeviceExecutable>(std::move(parts));
  return p;
}

// Two outputs of 1 and 2 floats per sample, poisoned with NaN before the call.
void check_stream(MultiDeviceExecutable& multi, int64_t count, int batch) {
  std::vector<uint8_t> input(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) input[size_t(i)] = uint8_t((i * 37 + 11) & 0xFF);
  std::vector<float> a(size_t(count), std::numeric_limits<float>::quiet_NaN()), b(size_t(count) * 2, std::numeric_limits<float>::quiet_NaN());
  float* outs[] = {a.data(), b.data()};
  const int64_t elements[] = {1, 2};
  multi.run_batches(BatchStream{input.data(), 1, count, batch, outs, elements});
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(a[size_t(i)], float(input[size_t(i)]) + 0.5f) << "sample " << i;
    ASSERT_EQ(b[size_t(i) * 2], float(input[size_t(i)]) + 1000.5f) << "sample " << i;
    ASSERT_EQ(b[size_t(i) * 2 + 1], float(input[size_t(i)]) + 1001.0f) << "sample " << i;
  }
}

TEST(MultiDevice, OutputsInInputOrderForOddCounts) {
  for (int parts : {1, 2, 3, 4})
    for (int64_t count : {int64_t(0), int64_t(1), int64_t(5), int64_t(7), int64_t(8), int64_t(29), int64_t(101)})
      for (int batch : {1, 3, 8}) {
        SCOPED_TRACE(testing::Message() << parts << " parts, " << count << " samples, batch " << batch);
        Parts p = make_parts(parts, 8);
        check_stream(*p.multi, count, batch);
        // Each part saw whole batches (a short one only where the stream ends) in its share.
        int64_t seen = 0;
        for (int i = 0; i < parts; ++i) {
          const engine::Share s = engine::batch_share(count, batch, i, parts);
          int64_t got = 0;
          for (size_t k = 0; k < p.fakes[size_t(i)]->sizes.size(); ++k) {
            const int n = p.fakes[size_t(i)]->sizes[k];
            if (k + 1 < p.fakes[size_t(i)]->sizes.size()) EXPECT_EQ(n, batch);
            got += n;
          }
          EXPECT_EQ(got, s.count);
          seen += got;
        }
        EXPECT_EQ(seen, count);
      }
}

TEST(MultiDevice, PartsRunOnTheirOwnThreadsAndAreReused) {
  Parts p = make_parts(3, 4);
  for (int round = 0; round < 20; ++round) check_stream(*p.multi, 4 * 9 + 1, 4);
  std::set<std::thread::id> all;
  for (auto* f : p.fakes) {
    EXPECT_EQ(f->threads.size(), 1u);  // the same thread every call: persistent workers
    all.insert(f->threads.begin(), f->threads.end());
  }
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(p.fakes[0]->threads.count(std::this_thread::get_id()), 1u);  // part 0 on the caller's thread
}

TEST(MultiDevice, FewerBatchesThanPartsLeavesTheRestIdle) {
  Parts p = make_parts(4, 8);
  check_stream(*p.multi, 10, 8);  // two batches: parts 0 and 2 (batch_share rounds up) get one each
  int busy = 0;
  for (auto* f : p.fakes) busy += f->sizes.empty() ? 0 : 1;
  EXPECT_EQ(busy, 2);
  EXPECT_EQ(p.fakes[0]->sizes, std::vector<int>{8});
  EXPECT_EQ(p.fakes[2]->sizes, std::vector<int>{2});
}

TEST(MultiDevice, OneBatchRunsWholeOnTheFirstPart) {
  Parts p = make_parts(2, 16);
  std::vector<uint8_t> input(13, 7);
  std::vector<float> a(13), b(26);
  float* outs[] = {a.data(), b.data()};
  p.multi->run(input.data(), 13, outs);
  EXPECT_EQ(p.fakes[0]->sizes, std::vector<int>{13});
  EXPECT_TRUE(p.fakes[1]->sizes.empty());
  EXPECT_EQ(a[12], 7.5f);
}

TEST(MultiDevice, AFailingPartIsRethrownAfterEveryPartFinished) {
  Parts p = make_parts(3, 2, /*failing_part=*/1);  // part 1 fails on its second batch
  std::vector<uint8_t> input(24, 1);
  std::vector<float> a(24, -1.0f), b(48);
  float* outs[] = {a.data(), b.data()};
  const int64_t elements[] = {1, 2};
  try {
    p.multi->run_batches(BatchStream{input.data(), 1, 24, 2, outs, elements});
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "part failed on purpose");
  }
  // Parts 0 and 2 ran their whole shares (4 batches each) before the call returned.
  EXPECT_EQ(p.fakes[0]->sizes.size(), 4u);
  EXPECT_EQ(p.fakes[2]->sizes.size(), 4u);
  EXPECT_EQ(a[0], 1.5f);
  EXPECT_EQ(a[23], 1.5f);
  // The group still works after a failure.
  Parts q = make_parts(3, 2);
  check_stream(*q.multi, 24, 2);
}

TEST(MultiDevice, RejectsMismatchedOrMissingParts) {
  std::vector<std::unique_ptr<Executable>> none;
  EXPECT_THROW(MultiDeviceExecutable(std::move(none)), std::invalid_argument);
  std::vector<std::unique_ptr<Executable>> mixed;
  mixed.push_back(std::make_unique<FakeExecutable>(4));
  mixed.push_back(std::make_unique<FakeExecutable>(8));
  EXPECT_THROW(MultiDeviceExecutable(std::move(mixed)), std::invalid_argument);
  Parts p = make_parts(2, 4);
  std::vector<uint8_t> input(8);
  std::vector<float> a(8);
  float* outs[] = {a.data()};
  const int64_t elements[] = {1};
  EXPECT_THROW(p.multi->run_batches(BatchStream{input.data(), 1, 8, 5, outs, elements}), std::invalid_argument);
}

// Two `cpu` executables driven as one give the bits of one executable on the same batches.
TEST(MultiDevice, TwoCpuExecutablesGiveTheBitsOfOne) {
  auto model = testing_support::lenet_like_model({});
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions options;
  options.max_batch = 16;
  options.threads = 1;
  auto backend = engine::BackendRegistry::instance().create("cpu");
  auto single = backend->compile(graph, options);
  std::vector<std::unique_ptr<Executable>> parts;
  parts.push_back(backend->compile(graph, options));
  parts.push_back(backend->compile(graph, options));
  MultiDeviceExecutable multi(std::move(parts));
  const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
  const int64_t classes = graph.output_elements(0);
  const int64_t count = 5 * 16 + 3;
  const auto pixels = testing_support::random_bytes(per_sample * size_t(count), 77u);
  std::vector<float> expected(size_t(count * classes)), got(expected.size(), std::numeric_limits<float>::quiet_NaN());
  const int64_t elements[] = {classes};
  float* e_out[] = {expected.data()};
  float* g_out[] = {got.data()};
  single->run_batches(BatchStream{pixels.data(), per_sample, count, 16, e_out, elements});
  multi.run_batches(BatchStream{pixels.data(), per_sample, count, 16, g_out, elements});
  EXPECT_EQ(std::memcmp(expected.data(), got.data(), expected.size() * sizeof(float)), 0);
}

}  // namespace
