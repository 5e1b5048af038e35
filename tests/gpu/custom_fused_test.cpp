// The custom backend's fused path (engine/custom/fused): random graphs of the chain family against
// the CPU reference (odd sizes, padding, strides, every activation, outputs NaN-poisoned), huge
// batches, bitwise reproducibility across batch splits, and the rule that decides the path.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "engine/custom/custom_backend.hpp"
#include "engine/custom/fused/fused_plan.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/gpu/custom_test_util.hpp"

namespace {

using formats::OpType;
using testing_support::ModelBuilder;
using testing_support::window;

// fp32 accumulation against the reference's double, by compare_with_cpu's measure (|a - b| over
// max(|ref|, 1e-2 * the output's peak)). One fp32 reduction leaves up to 2.1e-5 (cuDNN's measured
// bound, cudnn_test_util.hpp); a chain compounds them: these 60 random chains measure up to 7.9e-5
// (a 3-layer chain, an output 1e-3 of its peak). 2e-4 keeps a 2.5x margin;
// an indexing or padding bug shows as an error of order 1.
constexpr double kFusedTolerance = 2e-4;

std::unique_ptr<engine::Executable> compile(const std::shared_ptr<formats::Model>& model, bool fuse = true) {
  engine::CompileOptions options;
  options.max_batch = 8;
  options.fuse = fuse;
  return engine::BackendRegistry::instance().create("custom")->compile(engine::plan_graph(model), options);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

OpType random_act(std::mt19937& rng) {
  const OpType acts[] = {OpType::Relu, OpType::Tanh, OpType::Sigmoid};
  return acts[rng() % 3];
}

// A random member of the chain family: [conv|pool + activations]* flatten [dense + activations]*
// [softmax], with odd sizes, asymmetric padding, strides 1 and 2, every kernel-size variant of the
// fused conv (2, 3, 5 tiled; 1, 4 and strided generic).
std::shared_ptr<formats::Model> random_chain(uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return lo + int(rng() % uint32_t(hi - lo + 1)); };
  int c = pick(1, 4), h = pick(5, 21), w = pick(5, 21);
  ModelBuilder b("random_chain_" + std::to_string(seed), {c, h, w});
  std::string cur = "x";
  int id = 0;
  auto name = [&](const char* p) { return std::string(p) + std::to_string(id++); };
  const int spatial = pick(0, 3);
  for (int i = 0; i < spatial; ++i) {
    if (pick(0, 9) < 6) {
      const int kh = std::min(h, pick(1, 5)), kw = std::min(w, pick(1, 5));
      const int sh = pick(1, 3) == 3 ? 2 : 1, sw = pick(1, 3) == 3 ? 2 : 1;
      const int pt = pick(0, kh - 1), pb = pick(0, kh - 1), pl = pick(0, kw - 1), pr = pick(0, kw - 1);
      const int oc = pick(1, 11);
      const std::string n = name("conv");
      b.conv2d(n, cur, c, oc, window(kh, kw, sh, sw, pt, pb, pl, pr), seed * 31 + uint32_t(id), pick(0, 4) != 0);
      c = oc;
      h = (h + pt + pb - kh) / sh + 1;
      w = (w + pl + pr - kw) / sw + 1;
      cur = n;
    } else {
      if (h < 2 || w < 2) continue;
      const int k = pick(2, 3), s = pick(1, k), p = pick(0, k / 2);
      const OpType op = pick(0, 1) ? OpType::MaxPool : OpType::AvgPool;
      const std::string n = name("pool");
      b.pool(n, op, cur, window(k, k, s, s, p, p, p, p), pick(0, 1) == 1);
      h = (h + 2 * p - k) / s + 1;
      w = (w + 2 * p - k) / s + 1;
      cur = n;
    }
    for (int a = pick(0, 2); a > 0; --a) {
      const std::string n = name("act");
      b.unary(n, random_act(rng), cur);
      cur = n;
    }
  }
  const std::string flat = name("flatten");
  b.unary(flat, OpType::Flatten, cur);
  cur = flat;
  int features = c * h * w;
  const int dense = spatial == 0 ? pick(1, 3) : pick(0, 3);
  for (int i = 0; i < dense; ++i) {
    const int units = pick(1, 130);
    const std::string n = name("dense");
    b.dense(n, cur, features, units, seed * 17 + uint32_t(id), pick(0, 4) != 0);
    features = units;
    cur = n;
    if (pick(0, 9) < 7) {
      const std::string a = name("act");
      b.unary(a, random_act(rng), cur);
      cur = a;
    }
  }
  if (dense > 0 && pick(0, 1)) {
    const std::string n = name("softmax");
    b.unary(n, OpType::Softmax, cur);
    cur = n;
  }
  return b.outputs({cur}).build();
}

// custom_backend.cpp's kFusedDenseChainMaxMacs: the largest dense-only chain the fused path keeps.
constexpr int64_t kFusedDenseChainMaxMacs = 100'000;

// Multiply-adds per sample of a model without convolutions; 0 when it has one.
int64_t dense_only_macs(const formats::Model& model) {
  int64_t macs = 0;
  for (const formats::Node& n : model.nodes) {
    if (n.op == OpType::Conv2D) return 0;
    if (n.op == OpType::Dense) macs += int64_t(n.weight->values.size());
  }
  return macs;
}

TEST(CustomFused, RandomChainsTakeTheFusedPathAndMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const int models = custom_test::sanitizer_run() ? 6 : 60;
  engine::CompileOptions fused;  // fuse on: the default
  for (int i = 0; i < models; ++i) {
    auto model = random_chain(uint32_t(9000 + i));
    SCOPED_TRACE(model->name);
    auto exe = compile(model);
    // A dense-only chain above the planner's threshold takes the general path by design.
    const std::string want = dense_only_macs(*model) > kFusedDenseChainMaxMacs ? "general fp32" : "fused (";
    ASSERT_EQ(exe->execution_path().rfind(want, 0), 0u) << exe->execution_path() << "\n" << exe->plan_summary();
    for (const auto& bc : custom_test::batch_cases())
      gpu_test::expect_matches_cpu("custom", model, bc, uint32_t(100 * i + bc.batch), -1.0f, 1.0f, fused,
                                   kFusedTolerance);
  }
}

// LeNet-shaped, every activation and both pools, inputs as uint8 pixels with padding.
TEST(CustomFused, LenetLikeModelsMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (OpType act : {OpType::Tanh, OpType::Relu, OpType::Sigmoid}) {
    testing_support::LenetLike o;
    o.name = std::string("fused_lenet_like_") + formats::op_name(act);
    o.seed = 77;
    o.act3 = act;
    o.s4_window = window(3, 3, 2, 2, 1, 1, 1, 1);
    auto model = testing_support::lenet_like_model(o);
    auto exe = compile(model);
    ASSERT_TRUE(contains(exe->execution_path(), "conv chain + dense chain")) << exe->plan_summary();
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    for (const auto& bc : custom_test::batch_cases()) {
      const auto pixels = testing_support::random_bytes(per_sample * size_t(bc.batch), 500u + uint32_t(bc.batch));
      const auto c = testing_support::compare_with_cpu(model, "custom", pixels.data(), bc.batch, bc.max_batch);
      EXPECT_EQ(c.unwritten, 0u);
      EXPECT_LE(c.max_rel_error, kFusedTolerance) << c.worst;
      EXPECT_EQ(c.argmax_mismatches, 0u);
    }
  }
}

// The custom backend with the image chain up to `image_max` images (0: never, the tiled kernels at
// every batch; nullopt: the default) and the other image-chain choices of `image`; the fused chain
// for every graph it can run, whatever the planner's rule would send to the general path.
std::unique_ptr<engine::Backend> custom_backend(std::optional<int> image_max, engine::custom::ImageChainOptions image = {}) {
  engine::custom::CustomOptions options;
  options.general.over_fused_chain = false;
  options.image = image;
  options.image.max_batch = image_max;
  return engine::custom::make_custom_backend(options);
}
constexpr int kAlways = 1000000;  // an image-chain limit above every batch here

std::vector<std::vector<float>> run_custom(const std::shared_ptr<formats::Model>& model, std::optional<int> image_max,
                                           const void* input, int batch, int max_batch,
                                           engine::custom::ImageChainOptions image = {}) {
  return testing_support::run_backend(model, *custom_backend(image_max, image), input, batch, max_batch);
}

// The same images give the same bits whatever batch they run in and whatever the capacity: 2,000
// images through the tiled kernels at once, then in parts of 1 and 7 (the first 301 images) and 64
// and 301 (all) through the default
// choice (the image chain on a 132-SM GPU) and through the tiled kernels (forced).
TEST(CustomFused, BitwiseEqualAcrossBatchSplits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (uint32_t seed : {9100u, 9101u, 9102u}) {
    auto model = random_chain(seed);
    SCOPED_TRACE(model->name);
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    const int total = 2000;
    const auto input = testing_support::random_floats(per_sample * total, seed);
    const std::vector<std::vector<float>> whole = run_custom(model, 0, input.data(), total, total);
    const size_t out_per_sample = whole[0].size() / total;
    for (const std::optional<int> image_max : {std::optional<int>(), std::optional<int>(0)}) {
      for (int cap : {1, 7, 64, 301}) {
        const int covered = cap < 64 ? 301 : total;  // one compile per part: small parts cover the first 301
        for (int start = 0; start < covered; start += cap) {
          const int n = std::min(cap, covered - start);
          const auto part = run_custom(model, image_max, input.data() + size_t(start) * per_sample, n, cap);
          ASSERT_EQ(std::memcmp(part[0].data(), whole[0].data() + size_t(start) * out_per_sample,
                                size_t(n) * out_per_sample * sizeof(float)),
                    0)
              << "samples " << start << ".." << start + n - 1 << " with capacity " << cap
              << (image_max ? " (tiled kernels forced)" : "");
        }
      }
    }
    const auto again = run_custom(model, 0, input.data(), total, total);
    EXPECT_EQ(std::memcmp(again[0].data(), whole[0].data(), whole[0].size() * sizeof(float)), 0);
  }
}

// The image chain (small batches) and the tiled kernels give the same bits for the same images: the
// same summation order per output, the same activation and softmax code. Forced both ways on the
// same images of every random chain: 97 images (one image per block), 33 (clusters of 4 blocks per
// image on a 132-SM GPU), 5 and 1 (clusters of 8), each against the tiled kernels' first images;
// then with the conv items' other split rules (two-channel items only, one-channel items in every
// cluster), the general cluster kernel, and clusters of at most 2 blocks.
TEST(CustomFused, ImageChainGivesTheTiledKernelsBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const int models = custom_test::sanitizer_run() ? 6 : 60;
  const int n = 97;
  for (int i = 0; i < models; ++i) {
    auto model = random_chain(uint32_t(9000 + i));
    SCOPED_TRACE(model->name);
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    const auto input = testing_support::random_floats(per_sample * n, uint32_t(7000 + i));
    engine::CompileOptions options;
    options.max_batch = n;
    {
      auto exe = custom_backend(0)->compile(engine::plan_graph(model), options);
      ASSERT_FALSE(contains(exe->execution_path(), "image chain")) << exe->execution_path();
    }
    const std::vector<std::vector<float>> tiled = run_custom(model, 0, input.data(), n, n);
    auto exe = custom_backend(kAlways)->compile(engine::plan_graph(model), options);
    ASSERT_TRUE(contains(exe->execution_path(), "image chain kernel for batches <= 1000000"))
        << exe->execution_path() << "\n" << exe->plan_summary();
    auto compare = [&](int batch, const char* how, engine::custom::ImageChainOptions image) {
      const auto got = run_custom(model, kAlways, input.data(), batch, n, image);
      ASSERT_EQ(got.size(), tiled.size());
      for (size_t o = 0; o < got.size(); ++o) {
        ASSERT_EQ(got[o].size() * size_t(n), tiled[o].size() * size_t(batch));
        EXPECT_EQ(std::memcmp(got[o].data(), tiled[o].data(), got[o].size() * sizeof(float)), 0)
            << "output " << o << " of " << batch << " images (" << how
            << ") differs between the image chain and the tiled kernels";
      }
    };
    for (int batch : {n, 33, 5, 1}) compare(batch, "the default plan", {});
    engine::custom::ImageChainOptions two_channels;
    two_channels.conv_split_items = 0;
    for (int batch : {33, 1}) compare(batch, "two-channel conv items", two_channels);
    engine::custom::ImageChainOptions general;
    general.general_cluster_kernel = true;
    for (int batch : {5, 1}) compare(batch, "the general cluster kernel", general);
    engine::custom::ImageChainOptions everywhere;
    everywhere.conv_split_items = 1000000;
    everywhere.conv_split_blocks = 2;
    for (int batch : {33, 1}) compare(batch, "one-channel conv items everywhere", everywhere);
    engine::custom::ImageChainOptions pairs;
    pairs.max_cluster = 2;
    for (int batch : {5, 1}) compare(batch, "clusters of at most 2 blocks", pairs);
  }
}

// The dense tail (ImageChainParams::tail_runs): in clusters of 8, LeNet-5's shape (dense 120 -> 84
// -> 10, softmax) sums f7's six chunks of 16 rows in the six blocks that computed those 16 f6
// outputs each, and block 0 adds them. The plan says so, and the outputs have the tiled kernels'
// bits at batches of 1 to 5; with clusters of at most 4 blocks (no tail) too.
TEST(CustomFused, DenseTailGivesTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  for (OpType act : {OpType::Tanh, OpType::Relu}) {
    testing_support::LenetLike o;
    o.name = std::string("dense_tail_") + formats::op_name(act);
    o.seed = 91;
    o.act6 = act;
    auto model = testing_support::lenet_like_model(o);
    const int n = 5;
    const size_t per_sample = size_t(formats::element_count(model->input.raw_shape));
    const auto pixels = testing_support::random_bytes(per_sample * n, 4242u);
    const std::vector<std::vector<float>> tiled = run_custom(model, 0, pixels.data(), n, n);
    engine::CompileOptions options;
    options.max_batch = n;
    auto exe = custom_backend(kAlways)->compile(engine::plan_graph(model), options);
    if (!contains(exe->plan_summary(), "a cluster of 8 blocks per image"))
      GTEST_SKIP() << "this GPU runs no clusters of 8 blocks: " << exe->plan_summary();
    EXPECT_TRUE(contains(exe->plan_summary(), "sum the last dense layer's 6 chunks in the blocks")) << exe->plan_summary();
    engine::custom::ImageChainOptions fours;
    fours.max_cluster = 4;
    auto no_tail = custom_backend(kAlways, fours)->compile(engine::plan_graph(model), options);
    EXPECT_FALSE(contains(no_tail->plan_summary(), "sum the last dense layer's")) << no_tail->plan_summary();
    for (int cluster : {8, 4}) {
      engine::custom::ImageChainOptions image;
      image.max_cluster = cluster;
      for (int batch : {1, 2, 5}) {
        const auto got = run_custom(model, kAlways, pixels.data(), batch, n, image);
        ASSERT_EQ(got.size(), tiled.size());
        for (size_t k = 0; k < got.size(); ++k)
          EXPECT_EQ(std::memcmp(got[k].data(), tiled[k].data(), got[k].size() * sizeof(float)), 0)
              << "output " << k << " of " << batch << " images, clusters of at most " << cluster;
      }
    }
  }
}

// The specialised cluster kernels (ImageChainParams::cluster_kernel): LeNet-5's shape (5x5 convs)
// and a chain of dense layers each run a kernel with only their own variants; the plan says which,
// and the outputs have the tiled kernels' bits with it and with the general kernel
// (ImageChainOptions::general_cluster_kernel), at batches of 1 to 5 (clusters of 8 and smaller).
TEST(CustomFused, SpecialisedClusterKernelGivesTheSameBits) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  const int n = 5;
  testing_support::LenetLike o;
  o.name = "specialised_lenet";
  o.seed = 77;
  auto lenet = testing_support::lenet_like_model(o);
  const auto pixels =
      testing_support::random_bytes(size_t(formats::element_count(lenet->input.raw_shape)) * n, 99u);
  auto dense = ModelBuilder("specialised_dense", {67})
                   .dense("d1", "x", 67, 45, 5)
                   .unary("t1", OpType::Tanh, "d1")
                   .dense("d2", "t1", 45, 10, 6)
                   .unary("prob", OpType::Softmax, "d2")
                   .outputs({"prob"})
                   .build();
  const auto features = testing_support::random_floats(size_t(67) * n, 7u);
  struct Case {
    std::shared_ptr<formats::Model> model;
    const void* input;
    const char* statement;
  };
  for (const Case& c : {Case{lenet, pixels.data(), "clusters run the cluster kernel specialised for 5x5 convolutions"},
                        Case{dense, features.data(), "clusters run the cluster kernel specialised for chains without conv layers"}}) {
    const std::vector<std::vector<float>> tiled = run_custom(c.model, 0, c.input, n, n);
    engine::CompileOptions options;
    options.max_batch = n;
    auto exe = custom_backend(kAlways)->compile(engine::plan_graph(c.model), options);
    if (!contains(exe->plan_summary(), "a cluster of"))
      GTEST_SKIP() << "this GPU runs no clusters: " << exe->plan_summary();
    EXPECT_TRUE(contains(exe->plan_summary(), c.statement)) << exe->plan_summary();
    engine::custom::ImageChainOptions general;
    general.general_cluster_kernel = true;
    {
      auto exe_general = custom_backend(kAlways, general)->compile(engine::plan_graph(c.model), options);
      EXPECT_TRUE(contains(exe_general->plan_summary(),
                           "the general cluster kernel (asked for: ImageChainOptions::general_cluster_kernel)"))
          << exe_general->plan_summary();
    }
    for (bool use_general : {true, false}) {
      const char* kernel = use_general ? "general" : "specialised";
      for (int batch : {1, 2, 5}) {
        const auto image = run_custom(c.model, kAlways, c.input, batch, n,
                                      use_general ? general : engine::custom::ImageChainOptions{});
        ASSERT_EQ(image.size(), tiled.size());
        for (size_t k = 0; k < image.size(); ++k)
          EXPECT_EQ(std::memcmp(image[k].data(), tiled[k].data(), image[k].size() * sizeof(float)), 0)
              << c.model->name << ": output " << k << " of " << batch << " images, " << kernel << " kernel";
      }
    }
  }
}

TEST(CustomFused, HugeBatchesMatchCpu) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = ModelBuilder("fused_tiny_chain", {1, 9, 9})
                   .conv2d("c", "x", 1, 3, window(3, 3, 1, 1, 1, 1, 1, 1), 61)
                   .unary("t", OpType::Tanh, "c")
                   .pool("p", OpType::MaxPool, "t", window(2, 2, 2, 2))
                   .unary("f", OpType::Flatten, "p")
                   .dense("d", "f", 48, 10, 63)
                   .unary("prob", OpType::Softmax, "d")
                   .outputs({"prob"})
                   .build();
  ASSERT_TRUE(contains(compile(model)->execution_path(), "fused"));
  uint32_t seed = 4300;
  for (const auto& bc : gpu_test::huge_batch_cases())
    gpu_test::expect_matches_cpu("custom", model, bc, seed++, -1.0f, 1.0f, {}, kFusedTolerance);
}

// Graphs outside the family run the general path and say why; --no-fuse runs the per-node kernels.
TEST(CustomFused, OtherGraphsRunTheGeneralPathAndSayWhy) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto dag = testing_support::add_dag_model({3, 5, 7});
  auto exe = compile(dag);
  EXPECT_TRUE(contains(exe->execution_path(), "general fp32 (")) << exe->execution_path();
  EXPECT_TRUE(contains(exe->execution_path(), "not a chain")) << exe->execution_path();

  auto two_outputs = ModelBuilder("two_outputs", {20})
                         .dense("d", "x", 20, 5, 71)
                         .unary("t", OpType::Tanh, "d")
                         .outputs({"t", "d"})
                         .build();
  EXPECT_TRUE(contains(compile(two_outputs)->execution_path(), "2 outputs")) << compile(two_outputs)->execution_path();

  auto chain = random_chain(9200);
  EXPECT_TRUE(contains(compile(chain, false)->execution_path(), "--no-fuse"));
  const auto input = testing_support::random_floats(size_t(formats::element_count(chain->input.raw_shape)) * 5, 9201);
  const auto c = testing_support::compare_with_cpu(chain, "custom", input.data(), 5, 8, custom_test::per_node_options());
  EXPECT_LE(c.max_rel_error, 1e-5) << c.worst;
}

// The fused kernels have no scale_shift or concat: the plan refuses such graphs and names the first
// such node, even a chain the fused path would otherwise take. Host-only (the plan needs no GPU), so
// this runs everywhere.
TEST(CustomFusedPlan, ScaleShiftAndConcatAreNeverFused) {
  const engine::custom::fused::DeviceShape device{132, 227 * 1024};
  auto branchy = testing_support::branchy_model({2, 8, 10}, 9300);
  auto why = engine::custom::fused::plan_fused(engine::plan_graph(branchy), device);
  ASSERT_TRUE(std::holds_alternative<std::string>(why));
  EXPECT_EQ(std::get<std::string>(why), "node 'ab' (concat) has no fused kernel");

  auto chain = ModelBuilder("chain_bn", {1, 12, 12})
                   .conv2d("c", "x", 1, 4, window(3, 3, 1, 1), 9310)
                   .unary("r", OpType::Relu, "c")
                   .pool("p", OpType::MaxPool, "r", window(2, 2, 2, 2))
                   .scale_shift("bn", "p", 4, 9312)
                   .unary("f", OpType::Flatten, "bn")
                   .dense("d", "f", 100, 10, 9314)
                   .unary("prob", OpType::Softmax, "d")
                   .outputs({"prob"})
                   .build();
  why = engine::custom::fused::plan_fused(engine::plan_graph(chain), device);
  ASSERT_TRUE(std::holds_alternative<std::string>(why));
  EXPECT_EQ(std::get<std::string>(why), "node 'bn' (scale_shift) has no fused kernel");
  // Without the scale_shift the same chain is fused: the refusal above is the op's, not the shape's.
  auto plain = ModelBuilder("chain", {1, 12, 12})
                   .conv2d("c", "x", 1, 4, window(3, 3, 1, 1), 9310)
                   .unary("r", OpType::Relu, "c")
                   .pool("p", OpType::MaxPool, "r", window(2, 2, 2, 2))
                   .unary("f", OpType::Flatten, "p")
                   .dense("d", "f", 100, 10, 9314)
                   .unary("prob", OpType::Softmax, "d")
                   .outputs({"prob"})
                   .build();
  EXPECT_TRUE(std::holds_alternative<engine::custom::fused::FusedPlan>(
      engine::custom::fused::plan_fused(engine::plan_graph(plain), device)));
}

// The image chain reads dense rows, weight slices and biases as 16-byte vectors (float4 steps,
// cp.async) and stages at least 4 rows of k per unit in a slice: every plan it takes must keep those
// offsets multiples of 4 floats and its dense layers within kImageSliceFloats / 4 units, and a
// layer wider than that gets the tiled kernels with the reason stated. Host-only: runs everywhere.
TEST(CustomFusedPlan, ImageChainBuffersAreVectorAligned) {
  namespace fz = engine::custom::fused;
  const fz::DeviceShape device{132, 227 * 1024};
  int imaged = 0;
  for (uint32_t i = 0; i < 80; ++i) {
    auto model = random_chain(9700 + i);
    SCOPED_TRACE(model->name);
    auto planned = fz::plan_fused(engine::plan_graph(model), device);
    if (!std::holds_alternative<fz::FusedPlan>(planned)) continue;
    const fz::FusedPlan& plan = std::get<fz::FusedPlan>(planned);
    if (!plan.has_image || !plan.image.has_dense) continue;
    ++imaged;
    const fz::ImageChainParams& p = plan.image;
    EXPECT_EQ(p.slice_off[0] % 4, 0);
    EXPECT_EQ(p.slice_off[1] % 4, 0);
    EXPECT_EQ(p.acc_off % 4, 0);
    for (int l = 0; l < p.dense.layer_count; ++l) {
      const fz::DenseLayer& L = p.dense.layers[l];
      EXPECT_EQ(L.in_off % 4, 0) << "layer " << l;
      EXPECT_EQ(L.out_off % 4, 0) << "layer " << l;
      EXPECT_EQ(p.bias_off[l] % 4, 0) << "layer " << l;
      EXPECT_EQ(L.in_padded % 4, 0) << "layer " << l;
      EXPECT_LE(4 * L.units_padded, fz::kImageSliceFloats) << "layer " << l;
    }
    EXPECT_LE(int64_t(p.smem_floats) * 4, 227 * 1024);
  }
  EXPECT_GT(imaged, 20) << "too few random chains took the image chain with dense layers";

  auto wide = ModelBuilder("wide", {1, 8, 8})
                  .unary("f", OpType::Flatten, "x")
                  .dense("d1", "f", 64, 2100, 9720)
                  .unary("t", OpType::Tanh, "d1")
                  .dense("d2", "t", 2100, 10, 9722)
                  .outputs({"d2"})
                  .build();
  auto planned = fz::plan_fused(engine::plan_graph(wide), device);
  ASSERT_TRUE(std::holds_alternative<fz::FusedPlan>(planned));
  const fz::FusedPlan& plan = std::get<fz::FusedPlan>(planned);
  EXPECT_FALSE(plan.has_image);
  EXPECT_TRUE(contains(plan.image_why, "dense layer 0 has 2100 units")) << plan.image_why;
}

// Every dense layer's chunks (DenseLayer::chunk_rows, the summation order of every fused kernel):
// multiples of 4 rows, at least 16 unless the layer is shorter, at most 8 of them; the image chain's
// chunk buffers inside its
// shared memory; the plan summary states them. Host-only: runs everywhere.
TEST(CustomFusedPlan, DenseChunksCoverEveryRowInOrder) {
  namespace fz = engine::custom::fused;
  const fz::DeviceShape device{132, 227 * 1024};
  int chunked = 0;
  for (uint32_t i = 0; i < 80; ++i) {
    auto model = random_chain(9800 + i);
    SCOPED_TRACE(model->name);
    auto planned = fz::plan_fused(engine::plan_graph(model), device);
    if (!std::holds_alternative<fz::FusedPlan>(planned)) continue;
    const fz::FusedPlan& plan = std::get<fz::FusedPlan>(planned);
    for (int l = 0; plan.has_dense && l < plan.dense.layer_count; ++l) {
      const fz::DenseLayer& L = plan.dense.layers[l];
      const int chunks = (L.in_padded + L.chunk_rows - 1) / L.chunk_rows;
      EXPECT_EQ(L.chunk_rows % 4, 0) << "layer " << l;
      EXPECT_LE(L.chunk_rows, L.in_padded) << "layer " << l;
      EXPECT_TRUE(L.chunk_rows >= 16 || L.chunk_rows == L.in_padded) << "layer " << l << ": " << L.chunk_rows;
      EXPECT_LE(chunks, 8) << "layer " << l;
      if (plan.has_image) EXPECT_EQ(plan.image.dense.layers[l].chunk_rows, L.chunk_rows) << "layer " << l;
      chunked += chunks > 1;
    }
    if (plan.has_image && plan.image.has_dense) {
      EXPECT_EQ(plan.image.acc_chunk_off % 4, 0);
      EXPECT_LE(int64_t(plan.image.partial_off) + fz::kImageThreads, int64_t(plan.image.smem_floats));
    }
  }
  EXPECT_GT(chunked, 20) << "too few random dense layers were summed in chunks";

  auto lenet = testing_support::lenet_like_model({});
  auto planned = fz::plan_fused(engine::plan_graph(lenet), device);
  ASSERT_TRUE(std::holds_alternative<fz::FusedPlan>(planned));
  std::string summary;
  for (const std::string& line : std::get<fz::FusedPlan>(planned).summary) summary += line + "\n";
  EXPECT_TRUE(contains(summary, "dense 400 -> 120")) << summary;
  EXPECT_TRUE(contains(summary, "(sums in 8 chunks of 52 rows, added in order)")) << summary;
}

// The image chain's conv set-up per cluster size (plan_image_conv_setup), worked by hand for
// LeNet-5's c1 (6 channels, 28 x 28 conv output, pool folded: 3 groups of 2 channels, 14 row pairs)
// and c3 (16 channels, 10 x 10: 8 groups, 5 row pairs): clusters of 8 split both to one-channel
// items (c1 2,352 items = 74 warps, 10 a block; c3 800 = 25 warps, 4 a block), clusters of 2 and 4
// keep two-channel items (c1 1,176 items = 37 warps: 10 a block at 4, 19 at 2). Host-only.
TEST(CustomFusedPlan, ImageConvSetupFollowsTheSplitRule) {
  namespace fz = engine::custom::fused;
  const fz::DeviceShape device{132, 227 * 1024};
  auto planned = fz::plan_fused(engine::plan_graph(testing_support::lenet_like_model({})), device);
  ASSERT_TRUE(std::holds_alternative<fz::FusedPlan>(planned));
  fz::ImageChainParams p = std::get<fz::FusedPlan>(planned).image;
  ASSERT_TRUE(p.has_conv);
  ASSERT_EQ(p.conv.layer_count, 2);
  const fz::SpatialLayer& c1 = p.conv.layers[0];
  const fz::SpatialLayer& c3 = p.conv.layers[1];
  EXPECT_EQ(c1.image_split, 1 << 3);
  EXPECT_EQ(c3.image_split, 1 << 3);
  EXPECT_EQ(c1.image_per[3], 320);
  EXPECT_EQ(c3.image_per[3], 128);
  EXPECT_EQ(c1.image_per[2], 320);
  EXPECT_EQ(c1.image_per[1], 608);
  EXPECT_EQ(c3.image_per[1], 224);  // 400 items = 13 warps, 7 a block
  EXPECT_EQ(c1.inv_ow, 1.0f / 28.0f);
  EXPECT_EQ(c3.inv_groups[0], 1.0f / 8.0f);
  EXPECT_EQ(c3.inv_groups[1], 1.0f / 16.0f);
  // ImageChainOptions' other split rules: never split, or in clusters of 2 and more.
  p.conv_split_items = 0;
  fz::plan_image_conv_setup(p);
  EXPECT_EQ(p.conv.layers[0].image_split, 0);
  EXPECT_EQ(p.conv.layers[0].image_per[3], 160);  // 37 warps, 5 a block
  p.conv_split_items = 1000000;
  p.conv_split_blocks = 2;
  fz::plan_image_conv_setup(p);
  EXPECT_EQ(p.conv.layers[1].image_split, (1 << 1) | (1 << 2) | (1 << 3));
}

// The core planner's arena for the fused plan holds only what the kernels read and write.
TEST(CustomFused, ArenaHoldsOnlyTheChainsInputsAndOutputs) {
  ENGINE_SKIP_UNLESS_BACKEND("custom");
  auto model = testing_support::lenet_like_model({});
  const std::string plan = compile(model)->plan_summary();
  EXPECT_TRUE(contains(plan, "only the chains' inputs and outputs")) << plan;
}

}  // namespace
