#include "tests/common/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "engine/core/graph.hpp"
#include "engine/core/registry.hpp"

namespace testing_support {

std::vector<std::vector<float>> run_backend(const std::shared_ptr<formats::Model>& model, const std::string& name,
                                            const void* input, int batch, int max_batch,
                                            const engine::CompileOptions& options) {
  return run_backend(model, *engine::BackendRegistry::instance().create(name), input, batch, max_batch, options);
}

std::vector<std::vector<float>> run_backend(const std::shared_ptr<formats::Model>& model, engine::Backend& backend,
                                            const void* input, int batch, int max_batch,
                                            const engine::CompileOptions& options) {
  if (batch < 1 || batch > max_batch) throw std::invalid_argument("run_backend: batch outside 1..max_batch");
  const engine::Graph graph = engine::plan_graph(model);
  engine::CompileOptions opts = options;
  opts.max_batch = max_batch;
  auto exe = backend.compile(graph, opts);

  std::vector<std::vector<float>> outputs;
  std::vector<float*> pointers;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    outputs.emplace_back(size_t(graph.output_elements(i)) * size_t(batch), std::numeric_limits<float>::quiet_NaN());
  }
  for (auto& o : outputs) pointers.push_back(o.data());
  exe->run(input, batch, pointers);
  return outputs;
}

Comparison compare_with_cpu(const std::shared_ptr<formats::Model>& model, const std::string& name,
                            const void* input, int batch, int max_batch, const engine::CompileOptions& options) {
  return compare_with_cpu(model, *engine::BackendRegistry::instance().create(name), input, batch, max_batch, options);
}

Comparison compare_with_cpu(const std::shared_ptr<formats::Model>& model, engine::Backend& backend,
                            const void* input, int batch, int max_batch, const engine::CompileOptions& options) {
  const auto ref = run_backend(model, "reference", input, batch, max_batch, options);
  const auto got = run_backend(model, backend, input, batch, max_batch, options);

  Comparison c;
  for (size_t o = 0; o < ref.size(); ++o) {
    double peak = 0;
    for (float r : ref[o]) {
      if (std::isnan(r)) throw std::runtime_error("compare_with_cpu: the reference produced NaN for output '" +
                                                  model->outputs[o] + "'");
      peak = std::max(peak, std::fabs(double(r)));
    }
    const double floor = std::max(1e-2 * peak, 1e-6);
    const size_t per_sample = ref[o].size() / size_t(batch);
    for (size_t i = 0; i < ref[o].size(); ++i) {
      ++c.elements;
      const double r = ref[o][i], a = got[o][i];
      if (std::isnan(a)) {
        ++c.unwritten;
        continue;
      }
      const double abs_err = std::fabs(a - r);
      const double rel_err = abs_err / std::max({std::fabs(r), floor});
      c.max_abs_error = std::max(c.max_abs_error, abs_err);
      if (rel_err > c.max_rel_error) {
        c.max_rel_error = rel_err;
        std::ostringstream where;
        where.precision(9);
        where << "output '" << model->outputs[o] << "' sample " << i / per_sample << " element " << i % per_sample
              << ": " << a << " vs cpu " << r;
        c.worst = where.str();
      }
    }
    if (o == 0) {
      for (int s = 0; s < batch; ++s) {
        const auto* rb = ref[o].data() + size_t(s) * per_sample;
        const auto* gb = got[o].data() + size_t(s) * per_sample;
        if (std::max_element(rb, rb + per_sample) - rb != std::max_element(gb, gb + per_sample) - gb)
          ++c.argmax_mismatches;
      }
    }
  }
  return c;
}

std::string backend_unavailable_reason(const std::string& name) {
  const engine::BackendEntry* entry = engine::BackendRegistry::instance().find(name);
  if (!entry) return "backend '" + name + "' is not built here";
  if (!entry->unavailable_reason) return {};
  const auto why = entry->unavailable_reason();
  return why ? "backend '" + name + "' is not available here: " + *why : std::string();
}

size_t first_bit_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

}  // namespace testing_support
