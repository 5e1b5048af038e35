// Architecture-only graph files (model-format-v1.md, "Architecture-only graphs"): no "weights"
// key; tensors named by the nodes, shaped by the loader, zero; refused by require_weights; the
// writer turns a trained Model back into a full format v1 pair the loader reads.
#include <gtest/gtest.h>

#include <fstream>

#include "formats/error.hpp"
#include "formats/model_loader.hpp"
#include "formats/model_writer.hpp"
#include "tests/formats/test_files.hpp"

namespace formats_test {
namespace {

class ArchitectureOnly : public TempDirTest {
 protected:
  std::string write_architecture(Json graph) {
    graph.erase("weights");
    const std::string p = path("arch.json");
    write_text(p, graph.dump(1));
    return p;
  }
};

TEST_F(ArchitectureOnly, LoadsWithZeroTensorsOfTheNodesShapes) {
  const std::string p = write_architecture(TinyModel().graph);
  const formats::Model m = formats::load_model(p);
  EXPECT_FALSE(m.has_weights);
  EXPECT_EQ(m.weights_path, "");
  const formats::Node* c1 = m.find_node("c1");
  ASSERT_TRUE(c1 && c1->weight && c1->bias);
  EXPECT_EQ(c1->weight->shape, (formats::Shape{2, 1, 3, 3}));
  EXPECT_EQ(c1->weight->values, std::vector<float>(18, 0.0f));
  const formats::Node* d1 = m.find_node("d1");
  EXPECT_EQ(d1->weight->name, "d1.weight");
  EXPECT_EQ(d1->weight->shape, (formats::Shape{3, 2 * 5 * 5}));
  EXPECT_FORMAT_ERROR(formats::require_weights(m), p, "is an architecture-only graph", "engine train");
}

TEST_F(ArchitectureOnly, FullModelsStillNeedTheirWeightsAndPassRequireWeights) {
  TinyModel tiny;
  const std::string p = tiny.write(dir_);
  const formats::Model m = formats::load_model(p);
  EXPECT_TRUE(m.has_weights);
  EXPECT_NO_THROW(formats::require_weights(m));
}

TEST_F(ArchitectureOnly, ATensorNameUsedTwiceIsAnError) {
  Json graph = TinyModel().graph;
  graph["nodes"][0]["tensors"]["bias"] = graph["nodes"][0]["tensors"]["weight"];
  const std::string p = write_architecture(graph);
  EXPECT_FORMAT_ERROR(formats::load_model(p), p, "is already used by");
}

TEST_F(ArchitectureOnly, AHugeTensorIsRefusedBeforeItIsAllocated) {
  Json graph = TinyModel().graph;
  for (auto& n : graph["nodes"])
    if (n["name"] == "d1") n["attrs"]["units"] = 2000000000;
  const std::string p = write_architecture(graph);
  EXPECT_FORMAT_ERROR(formats::load_model(p), p, "d1.weight", "more than 268435456 values");
}

TEST_F(ArchitectureOnly, WriterGivesAFullModelTheLoaderReads) {
  const std::string arch = write_architecture(TinyModel().graph);
  formats::Model m = formats::load_model(arch);
  float v = 0.5f;
  for (auto& node : m.nodes)
    for (auto* t : {&node.weight, &node.bias})
      if (*t)
        for (float& x : (*t)->values) x = (v += 0.25f);
  std::ifstream in(arch);
  const Json source = Json::parse(in);
  const std::string out = path("trained.json");
  formats::write_model(out, source, m);
  const formats::Model back = formats::load_model(out);
  EXPECT_TRUE(back.has_weights);
  EXPECT_EQ(back.find_node("d1")->weight->values, m.find_node("d1")->weight->values);
  EXPECT_EQ(back.find_node("c1")->bias->values, m.find_node("c1")->bias->values);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  EXPECT_FORMAT_ERROR(formats::write_model(path("bad.txt"), source, m), path("bad.txt"), "must end in .json");
}

}  // namespace
}  // namespace formats_test
