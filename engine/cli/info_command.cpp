// engine info: what a model file holds, and where it could run.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "engine/cli/backend_status.hpp"
#include "engine/cli/commands.hpp"
#include "engine/cli/text_table.hpp"
#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"
#include "formats/model_loader.hpp"

namespace engine::cli {
namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string floats_text(const std::vector<float>& v) {
  std::vector<std::string> parts;
  for (float f : v) parts.push_back(fmt::format("{:g}", f));
  return "[" + join(parts, ", ") + "]";
}

std::string window_text(const formats::Window2D& w) {
  std::string s = fmt::format("k {}x{}, s {}x{}", w.kernel_h, w.kernel_w, w.stride_h, w.stride_w);
  if (w.pad_top || w.pad_bottom || w.pad_left || w.pad_right)
    s += fmt::format(", pad {},{},{},{}", w.pad_top, w.pad_bottom, w.pad_left, w.pad_right);
  return s;
}

std::string attributes_text(const formats::Node& n) {
  switch (n.op) {
    case formats::OpType::Conv2D: return fmt::format("{} out, {}", n.out_channels, window_text(n.window));
    case formats::OpType::AvgPool:
      return window_text(n.window) + (n.count_include_pad ? ", count_include_pad" : ", exclude pad");
    case formats::OpType::MaxPool: return window_text(n.window);
    case formats::OpType::Dense: return fmt::format("{} units", n.units);
    default: return "";
  }
}

int64_t parameters_of(const formats::Node& n) {
  return (n.weight ? formats::element_count(n.weight->shape) : 0) + (n.bias ? formats::element_count(n.bias->shape) : 0);
}

// Multiply-adds per sample, the figure throughput ceilings are computed from.
int64_t multiply_adds_of(const formats::Node& n) {
  if (n.op == formats::OpType::Conv2D && n.weight)
    return formats::element_count(n.output_shape) * formats::element_count(n.weight->shape) / n.out_channels;
  if (n.op == formats::OpType::Dense && n.weight) return formats::element_count(n.weight->shape);
  return 0;
}

}  // namespace

int info_command(const InfoOptions& o) {
  auto model = std::make_shared<const formats::Model>(formats::load_model(o.model));
  const Graph graph = plan_graph(model);
  const auto& in = model->input;

  fmt::print("model     {}{}\n", model->name, model->description.empty() ? "" : " - " + model->description);
  fmt::print("graph     {}\n", o.model);
  fmt::print("weights   {}\n", model->has_weights ? model->weights_path
                                                  : std::string("none: an architecture-only graph (engine train gives it weights)"));
  fmt::print("input     {}: {} {}", in.name, in.dtype == formats::InputDType::UInt8 ? "uint8" : "float32",
             formats::shape_to_string(in.raw_shape));
  if (in.preprocess) {
    const auto& p = *in.preprocess;
    fmt::print(" -> float32 {}\n", formats::shape_to_string(in.shape));
    fmt::print("          (x * {:.9g} - mean[c]) / std[c], mean {}, std {}\n", p.scale, floats_text(p.mean),
               floats_text(p.std));
    if (p.pad_top || p.pad_bottom || p.pad_left || p.pad_right)
      fmt::print("          padded by {},{},{},{} (top, bottom, left, right) with {:g}\n", p.pad_top, p.pad_bottom,
                 p.pad_left, p.pad_right, p.pad_value);
  } else {
    fmt::print("\n");
  }
  std::vector<std::string> outs;
  for (const auto& name : model->outputs) outs.push_back(name + " " + formats::shape_to_string(model->value_shape(name)));
  fmt::print("outputs   {}\n", join(outs, ", "));
  if (!model->labels.empty()) fmt::print("labels    {}\n", join(model->labels, " "));
  if (const auto& c = model->calibration) {
    fmt::print("int8      calibrated: {} ranges, {} over {} samples ({})\n", c->ranges.size(),
               c->method == "max" ? std::string("max |x|") : fmt::format("percentile {} of |x|", c->percentile), c->images,
               c->data.empty() ? "source not recorded" : c->data);
  } else {
    fmt::print("int8      not calibrated (engine calibrate MODEL DATA -o OUT.json)\n");
  }

  TextTable table({"node", "op", "inputs", "attributes", "output", "params", "mult-adds"});
  int64_t total_macs = 0;
  for (const auto& n : model->nodes) {
    const int64_t params = parameters_of(n), macs = multiply_adds_of(n);
    total_macs += macs;
    table.add({n.name, formats::op_name(n.op), join(n.inputs, ", "), attributes_text(n),
               formats::shape_to_string(n.output_shape), params ? group_thousands(params) : "-",
               macs ? group_thousands(macs) : "-"});
  }
  fmt::print("\n{}", table.render({5, 6}));
  fmt::print("\nparameters            {}\n", group_thousands(model->parameter_count()));
  fmt::print("multiply-adds/sample  {}\n", group_thousands(total_macs));
  fmt::print("activation arena      {} floats per sample ({:.1f} KiB), reused by liveness\n",
             group_thousands(graph.arena_floats_per_sample), double(graph.arena_floats_per_sample) * 4 / 1024);

  const auto statuses = backend_statuses();
  fmt::print("\nbackends built here\n{}", render_backend_table(statuses, "  "));
  if (const std::string gpus = render_device_list(statuses, "  "); !gpus.empty())
    fmt::print("\nGPUs visible here\n{}", gpus);
  // How each usable backend would run this model (compiled for one image: the path does not depend
  // on the batch).
  bool header = false;
  for (const auto& s : statuses) {
    if (!s.available) continue;
    std::string path;
    try {
      CompileOptions copts;
      copts.max_batch = 1;
      auto exe = BackendRegistry::instance().create(s.name)->compile(graph, copts);
      path = exe->execution_path();
      if (path.empty()) path = "one step per node";
    } catch (const std::exception& e) {
      path = std::string("cannot compile: ") + e.what();
    }
    if (!header) fmt::print("\nexecution path here\n");
    header = true;
    fmt::print("  {:<11}{}\n", s.name, path);
  }
  return 0;
}

}  // namespace engine::cli
