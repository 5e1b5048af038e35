// plan_graph: values, consumers, liveness and the arena. The overlap check recomputes every
// lifetime from the model alone, so it does not trust the planner's own bookkeeping.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "engine/core/graph.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/model_builder.hpp"
#include "tests/common/test_models.hpp"

namespace {

using engine::Graph;
using formats::OpType;
using testing_support::ModelBuilder;

const engine::Value& value_named(const Graph& g, const std::string& name) {
  for (const auto& v : g.values)
    if (v.name == name) return v;
  throw std::out_of_range("no value " + name);
}

// Every pair of values whose storage is live at the same node occupies disjoint arena blocks.
void expect_live_values_disjoint(const Graph& g) {
  const auto& model = *g.model;
  const int n = int(model.nodes.size());
  std::map<std::string, std::string> root;  // flatten chains end at the value that owns storage
  std::map<std::string, int> first, last;
  first[model.input.name] = -1;
  last[model.input.name] = -1;
  root[model.input.name] = model.input.name;
  for (int i = 0; i < n; ++i) {
    const auto& node = model.nodes[i];
    first[node.name] = i;
    last[node.name] = i;
    root[node.name] = node.op == OpType::Flatten ? root.at(node.inputs[0]) : node.name;
    for (const auto& in : node.inputs) last[root.at(in)] = std::max(last[root.at(in)], i);
  }
  for (const auto& out : model.outputs) last[root.at(out)] = n;

  for (const auto& v : g.values) {
    EXPECT_EQ(v.arena_offset % 32, 0) << v.name << " is not 128-byte aligned";
    EXPECT_LE(v.arena_offset + v.elements, g.arena_floats_per_sample) << v.name << " leaves the arena";
  }
  for (const auto& a : g.values) {
    if (a.alias_of >= 0) continue;
    for (const auto& b : g.values) {
      if (b.alias_of >= 0 || &a >= &b) continue;
      const bool live_together = first[a.name] <= last[b.name] && first[b.name] <= last[a.name];
      const bool blocks_overlap =
          a.arena_offset < b.arena_offset + b.elements && b.arena_offset < a.arena_offset + a.elements;
      EXPECT_FALSE(live_together && blocks_overlap)
          << a.name << " [" << first[a.name] << ", " << last[a.name] << "] at " << a.arena_offset << " and " << b.name
          << " [" << first[b.name] << ", " << last[b.name] << "] at " << b.arena_offset << " share memory";
    }
  }
}

TEST(Planner, ChainReusesDeadBlocks) {
  auto model = ModelBuilder("chain", {1, 8, 8})
                   .unary("a", OpType::Relu, "x")
                   .unary("b", OpType::Relu, "a")
                   .unary("c", OpType::Relu, "b")
                   .unary("d", OpType::Relu, "c")
                   .outputs({"d"})
                   .build();
  const Graph g = engine::plan_graph(model);
  ASSERT_EQ(g.values.size(), 5u);
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.value(g.input).name, "x");
  EXPECT_EQ(g.value(g.input).producer, -1);
  EXPECT_EQ(value_named(g, "x").consumers, std::vector<int>{0});
  EXPECT_EQ(value_named(g, "x").last_use, 0);
  EXPECT_EQ(value_named(g, "b").producer, 1);
  EXPECT_EQ(value_named(g, "b").last_use, 2);
  EXPECT_EQ(value_named(g, "d").last_use, 4);
  EXPECT_TRUE(value_named(g, "d").is_output);
  EXPECT_FALSE(value_named(g, "c").is_output);
  // Two blocks suffice for a chain: each node reads one and writes the other.
  EXPECT_EQ(g.arena_floats_per_sample, 2 * 64);
  EXPECT_EQ(value_named(g, "a").arena_offset, value_named(g, "c").arena_offset);
  EXPECT_NE(value_named(g, "a").arena_offset, value_named(g, "b").arena_offset);
  expect_live_values_disjoint(g);
}

TEST(Planner, FlattenIsAnAliasThatKeepsItsSourceAlive) {
  auto model = ModelBuilder("alias", {2, 4, 4})
                   .unary("a", OpType::Relu, "x")
                   .unary("f", OpType::Flatten, "a")
                   .unary("f2", OpType::Flatten, "f")
                   .unary("t", OpType::Tanh, "f")
                   .unary("s", OpType::Sigmoid, "t")
                   .add("y", "s", "f2")
                   .outputs({"y"})
                   .build();
  const Graph g = engine::plan_graph(model);
  const int a = int(&value_named(g, "a") - g.values.data());
  EXPECT_EQ(value_named(g, "f").alias_of, a);
  EXPECT_EQ(value_named(g, "f2").alias_of, a) << "an alias of an alias points at the storage owner";
  EXPECT_EQ(value_named(g, "f").arena_offset, value_named(g, "a").arena_offset);
  EXPECT_EQ(value_named(g, "f2").arena_offset, value_named(g, "a").arena_offset);
  EXPECT_EQ(value_named(g, "f").shape, (formats::Shape{32}));
  // "a" itself is read only by the flatten, but its storage must survive until "y" reads "f2":
  // "t" and "s", written meanwhile, must lie elsewhere.
  const auto& av = value_named(g, "a");
  for (const char* later : {"t", "s"}) {
    const auto& v = value_named(g, later);
    EXPECT_TRUE(v.arena_offset >= av.arena_offset + av.elements || v.arena_offset + v.elements <= av.arena_offset)
        << later << " overwrites the storage of the flatten aliases";
  }
  expect_live_values_disjoint(g);
}

TEST(Planner, OutputsAreNeverOverwritten) {
  auto model = ModelBuilder("two_outputs", {3, 5, 5})
                   .unary("early", OpType::Relu, "x")
                   .unary("b", OpType::Tanh, "early")
                   .unary("c", OpType::Sigmoid, "b")
                   .unary("d", OpType::Relu, "c")
                   .unary("e", OpType::Tanh, "d")
                   .outputs({"e", "early"})
                   .build();
  const Graph g = engine::plan_graph(model);
  const auto& early = value_named(g, "early");
  EXPECT_TRUE(early.is_output);
  EXPECT_EQ(early.last_use, int(g.nodes.size()));
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.value(g.outputs[0]).name, "e");
  EXPECT_EQ(g.value(g.outputs[1]).name, "early");
  EXPECT_EQ(g.output_elements(1), 75);
  for (const auto& v : g.values) {
    if (v.name == "early" || v.producer <= early.producer) continue;
    const bool overlap = v.arena_offset < early.arena_offset + early.elements &&
                         early.arena_offset < v.arena_offset + v.elements;
    EXPECT_FALSE(overlap) << v.name << " overwrites the output 'early'";
  }
  expect_live_values_disjoint(g);
}

TEST(Planner, DagInputLivesUntilItsLastReader) {
  auto model = testing_support::add_dag_model({4, 3, 5});
  const Graph g = engine::plan_graph(model);
  const auto& x = value_named(g, "x");
  ASSERT_EQ(x.consumers.size(), 2u);
  EXPECT_EQ(x.last_use, x.consumers.back());
  EXPECT_EQ(value_named(g, "y").producer, 2);
  expect_live_values_disjoint(g);
}

TEST(Planner, ValueReadTwiceByOneNodeIsOneConsumer) {
  auto model = ModelBuilder("twice", {7}).add("y", "x", "x").outputs({"y"}).build();
  const Graph g = engine::plan_graph(model);
  EXPECT_EQ(value_named(g, "x").consumers, std::vector<int>{0});
  ASSERT_EQ(g.nodes[0].inputs.size(), 2u);
  EXPECT_EQ(g.nodes[0].inputs[0], g.nodes[0].inputs[1]);
  expect_live_values_disjoint(g);
}

// A concat reads every input while it writes its output, so all of them (and the output) are live
// together at that node; its output has the sum of the inputs' channels.
TEST(Planner, ConcatInputsAndOutputAreLiveTogether) {
  auto model = testing_support::concat_dag_model({3, 4, 5});
  const Graph g = engine::plan_graph(model);
  const auto& c = value_named(g, "c");
  EXPECT_EQ(c.shape, (formats::Shape{9, 4, 5}));
  EXPECT_EQ(value_named(g, "y").shape, (formats::Shape{12, 4, 5}));
  const auto& node_c = g.nodes.at(size_t(c.producer));
  ASSERT_EQ(node_c.inputs.size(), 3u);
  EXPECT_EQ(g.value(node_c.inputs[1]).name, "x");
  for (int in : node_c.inputs) EXPECT_GE(g.value(in).last_use, c.producer) << g.value(in).name;
  expect_live_values_disjoint(g);

  // Branches of a conv model, joined, pooled, scaled: every block disjoint while live.
  expect_live_values_disjoint(engine::plan_graph(testing_support::branchy_model({2, 8, 10}, 3)));
}

TEST(Planner, UnreadValueStillGetsItsOwnBlock) {
  auto model = ModelBuilder("dead", {40})
                   .unary("dead", OpType::Tanh, "x")
                   .unary("a", OpType::Relu, "x")
                   .unary("y", OpType::Sigmoid, "a")
                   .outputs({"y"})
                   .build();
  const Graph g = engine::plan_graph(model);
  EXPECT_TRUE(value_named(g, "dead").consumers.empty());
  expect_live_values_disjoint(g);
}

TEST(Planner, LenetShapedGraphUsesLessThanTheSumOfItsValues) {
  auto model = ModelBuilder("lenetish", {1, 32, 32})
                   .conv2d("c1", "x", 1, 6, testing_support::window(5, 5, 1, 1), 1)
                   .unary("t1", OpType::Tanh, "c1")
                   .pool("s2", OpType::AvgPool, "t1", testing_support::window(2, 2, 2, 2))
                   .conv2d("c3", "s2", 6, 16, testing_support::window(5, 5, 1, 1), 3)
                   .unary("t3", OpType::Tanh, "c3")
                   .pool("s4", OpType::MaxPool, "t3", testing_support::window(2, 2, 2, 2))
                   .unary("f", OpType::Flatten, "s4")
                   .dense("d5", "f", 400, 120, 5)
                   .dense("d6", "d5", 120, 10, 7)
                   .unary("p", OpType::Softmax, "d6")
                   .outputs({"p"})
                   .build();
  const Graph g = engine::plan_graph(model);
  int64_t sum = 0;
  for (const auto& v : g.values)
    if (v.alias_of < 0) sum += v.elements;
  EXPECT_LT(g.arena_floats_per_sample, sum);
  // The biggest two neighbours (c1 and t1, 4704 floats each) must coexist; nothing needs more.
  EXPECT_EQ(g.arena_floats_per_sample, 2 * 4704);
  expect_live_values_disjoint(g);
}

// Random DAGs of same-shape values: the plan must keep every pair of simultaneously live values
// apart, and the CPU backend (which relies on the plan) must match a naive evaluation that gives
// every value its own buffer.
TEST(Planner, RandomDagsAreSafe) {
  std::mt19937 gen(1234);
  for (int trial = 0; trial < 60; ++trial) {
    const int length = 37;  // not a multiple of the alignment
    ModelBuilder b("random_dag_" + std::to_string(trial), {length});
    std::vector<std::string> names{"x"};
    std::map<std::string, std::vector<double>> naive;
    const auto input = testing_support::random_floats(length, trial, -2, 2);
    naive["x"] = std::vector<double>(input.begin(), input.end());
    const int nodes = 2 + int(gen() % 10);
    for (int i = 0; i < nodes; ++i) {
      const std::string name = "v" + std::to_string(i);
      const std::string a = names[gen() % names.size()], c = names[gen() % names.size()];
      std::vector<double> out(length);
      switch (gen() % 4) {
        case 0:
          b.unary(name, OpType::Relu, a);
          for (int k = 0; k < length; ++k) out[k] = naive[a][k] > 0 ? naive[a][k] : 0;
          break;
        case 1:
          b.unary(name, OpType::Tanh, a);
          for (int k = 0; k < length; ++k) out[k] = float(std::tanh(naive[a][k]));
          break;
        case 2:
          b.unary(name, OpType::Flatten, a);
          out = naive[a];
          break;
        default:
          b.add(name, a, c);
          for (int k = 0; k < length; ++k) out[k] = float(float(naive[a][k]) + float(naive[c][k]));
          break;
      }
      naive[name] = out;
      names.push_back(name);
    }
    std::vector<std::string> outs{names.back()};
    for (size_t i = 1; i + 1 < names.size(); ++i)
      if (gen() % 4 == 0) outs.push_back(names[i]);
    auto model = b.outputs(outs).build();
    const Graph g = engine::plan_graph(model);
    expect_live_values_disjoint(g);

    const auto got = testing_support::run_backend(model, "reference", input.data(), 1, 3);
    for (size_t o = 0; o < outs.size(); ++o)
      for (int k = 0; k < length; ++k)
        ASSERT_EQ(got[o][k], float(naive[outs[o]][k])) << "trial " << trial << " output " << outs[o] << "[" << k << "]";
  }
}

}  // namespace
