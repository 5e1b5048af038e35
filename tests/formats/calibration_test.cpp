// "calibration" in a graph file (model-format-v1.md, "Calibration"): read into Model::calibration,
// every rule of the section refused with one message naming the file and the key.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "formats/error.hpp"
#include "formats/model_loader.hpp"
#include "tests/formats/test_files.hpp"

namespace formats_test {
namespace {

class Calibration : public TempDirTest {
 protected:
  std::string write_with(const Json& calibration) {
    TinyModel tiny;
    tiny.graph["calibration"] = calibration;
    return tiny.write(dir_);
  }
  static Json valid() {
    return Json{{"method", "max"}, {"images", 1000}, {"data", "t10k, first 1000"},
                {"ranges", {{"image", 1.0}, {"c1", 3.25}, {"d1", 0.0}}}};
  }
};

TEST_F(Calibration, IsReadWithItsRanges) {
  const formats::Model m = formats::load_model(write_with(valid()));
  ASSERT_TRUE(m.calibration);
  EXPECT_EQ(m.calibration->method, "max");
  EXPECT_EQ(m.calibration->images, 1000);
  EXPECT_EQ(m.calibration->data, "t10k, first 1000");
  ASSERT_EQ(m.calibration->ranges.size(), 3u);
  for (const auto& [name, v] : m.calibration->ranges) {
    if (name == "c1") EXPECT_EQ(v, 3.25);
    if (name == "image") EXPECT_EQ(v, 1.0);
  }
  Json p = valid();
  p["method"] = "percentile";
  p["percentile"] = 99.99;
  const formats::Model mp = formats::load_model(write_with(p));
  EXPECT_EQ(mp.calibration->percentile, 99.99);
  TinyModel plain;
  EXPECT_FALSE(formats::load_model(plain.write(dir_, "plain")).calibration);
}

TEST_F(Calibration, EveryRuleIsChecked) {
  struct Case {
    const char* what;
    std::function<void(Json&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"unknown method", [](Json& c) { c["method"] = "entropy"; }, "'method' must be \"max\" or \"percentile\""},
      {"percentile missing", [](Json& c) { c["method"] = "percentile"; }, "needs 'percentile'"},
      {"percentile out of range", [](Json& c) { c["method"] = "percentile"; c["percentile"] = 100.5; },
       "'percentile' must be in (0, 100]"},
      {"percentile with max", [](Json& c) { c["percentile"] = 99.0; }, "belongs to method \"percentile\" only"},
      {"no images", [](Json& c) { c["images"] = 0; }, "'images' must be at least 1"},
      {"images missing", [](Json& c) { c.erase("images"); }, "missing required key 'images'"},
      {"unknown key", [](Json& c) { c["scales"] = Json::object(); }, "unknown key 'scales'"},
      {"empty ranges", [](Json& c) { c["ranges"] = Json::object(); }, "'ranges' must name at least one value"},
      {"negative range", [](Json& c) { c["ranges"]["c1"] = -1.0; }, "the range of 'c1' must be a finite number >= 0"},
      {"range not a number", [](Json& c) { c["ranges"]["c1"] = "big"; }, "c1"},
      {"unknown value", [](Json& c) { c["ranges"]["nosuch"] = 1.0; },
       "calibration.ranges: 'nosuch' is not the input or a node of the graph"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Json cal = valid();
    c.mutate(cal);
    const std::string p = write_with(cal);
    EXPECT_FORMAT_ERROR(formats::load_model(p), p, c.message);
  }
}

}  // namespace
}  // namespace formats_test
