#include "engine/cli/run_report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/cli/text_table.hpp"

namespace engine::cli {
namespace {

std::string class_text(const RunResult& r, int64_t k) {
  if (k >= 0 && size_t(k) < r.class_names.size() && r.class_names[size_t(k)] != std::to_string(k))
    return fmt::format("{} ({})", k, r.class_names[size_t(k)]);
  return std::to_string(k);
}

// Wide matrices do not fit a terminal; the JSON summary always carries the whole matrix.
constexpr int64_t kMaxPrintedClasses = 20;

void print_confusion(const RunResult& r) {
  if (r.classes > kMaxPrintedClasses) {
    fmt::print("confusion matrix: {} classes, see --json\n", r.classes);
    return;
  }
  std::vector<std::string> header{"true\\pred"};
  std::vector<size_t> numeric;
  for (int64_t k = 0; k < r.classes; ++k) {
    header.push_back(std::to_string(k));
    numeric.push_back(size_t(k) + 1);
  }
  header.push_back("recall");
  numeric.push_back(size_t(r.classes) + 1);
  TextTable table(header);
  for (int64_t t = 0; t < r.classes; ++t) {
    std::vector<std::string> row{std::to_string(t)};
    int64_t total = 0;
    for (int64_t p = 0; p < r.classes; ++p) {
      const int64_t n = r.confusion[size_t(t * r.classes + p)];
      total += n;
      row.push_back(std::to_string(n));
    }
    row.push_back(total ? fmt::format("{:.2f}%", 100.0 * double(r.confusion[size_t(t * r.classes + t)]) / double(total))
                        : "-");
    table.add(row);
  }
  fmt::print("confusion matrix (rows: true label, columns: predicted class)\n{}", table.render(numeric, "  "));
}

}  // namespace

void print_run_report(const RunResult& r) {
  const bool labelled = !r.labels.empty();
  fmt::print("model     {} ({})\n", r.model_name, r.model_path);
  fmt::print("backend   {}: {}\n", r.backend, r.device);
  fmt::print("data      {} image{} from {}\n", group_thousands(r.images), r.images == 1 ? "" : "s", r.data_path);
  if (labelled) fmt::print("labels    {}\n", r.labels_path);

  if (r.images == 1) {
    const int k = r.predicted[0];
    fmt::print("class     {}   probability {:.6f}\n", class_text(r, k), r.first_output[size_t(k)]);
    if (labelled) fmt::print("label     {}   {}\n", class_text(r, r.labels[0]), r.labels[0] == k ? "correct" : "WRONG");
    fmt::print("probabilities\n");
    for (int64_t c = 0; c < r.classes; ++c)
      fmt::print("  {:>4}  {:.6f}{}\n", class_text(r, c), r.first_output[size_t(c)], c == k ? "  <" : "");
  } else if (labelled) {
    fmt::print("accuracy  {:.2f}% ({} of {} correct)\n", 100.0 * double(r.correct) / double(r.images),
               group_thousands(r.correct), group_thousands(r.images));
  }
  fmt::print("time      {:.3f} s classifying, {} images/s (batch {}); plan {:.3f} s; load {:.3f} s\n", r.seconds,
             group_thousands(int64_t(double(r.images) / std::max(r.seconds, 1e-9))), r.batch, r.plan_seconds,
             r.load_seconds);
  if (r.device_ms)
    fmt::print("device    upload {:.3f} ms, compute {:.3f} ms, download {:.3f} ms (all batches)\n",
               r.device_ms->upload_ms, r.device_ms->compute_ms, r.device_ms->download_ms);
  if (labelled && r.images > 1) print_confusion(r);
}

std::string run_report_json(const RunResult& r) {
  using nlohmann::json;
  json j;
  j["backend"] = r.backend;
  j["device"] = r.device;
  if (!r.devices.empty()) j["devices"] = r.devices;
  j["model"] = r.model_name;
  j["model_path"] = r.model_path;
  j["data"] = r.data_path;
  j["labels"] = r.labels.empty() ? json(nullptr) : json(r.labels_path);
  j["images"] = r.images;
  j["classes"] = r.classes;
  j["batch"] = r.batch;
  j["precision"] = r.precision;
  j["deterministic"] = r.deterministic;
  if (r.labels.empty()) {
    j["correct"] = nullptr;
    j["accuracy"] = nullptr;
  } else {
    j["correct"] = r.correct;
    j["accuracy"] = double(r.correct) / double(r.images);
    json matrix = json::array();
    for (int64_t t = 0; t < r.classes; ++t)
      matrix.push_back(std::vector<int64_t>(r.confusion.begin() + t * r.classes, r.confusion.begin() + (t + 1) * r.classes));
    j["confusion"] = matrix;
  }
  if (!r.path.empty()) j["path"] = r.path;
  j["seconds"] = r.seconds;
  j["images_per_second"] = double(r.images) / std::max(r.seconds, 1e-9);
  j["plan_seconds"] = r.plan_seconds;
  j["load_seconds"] = r.load_seconds;
  if (r.device_ms)
    j["device_ms"] = {{"upload", r.device_ms->upload_ms}, {"compute", r.device_ms->compute_ms},
                      {"download", r.device_ms->download_ms}};
  if (r.images == 1) {
    j["class"] = r.predicted[0];
    if (size_t(r.predicted[0]) < r.class_names.size()) j["class_name"] = r.class_names[size_t(r.predicted[0])];
    j["probabilities"] = r.first_output;
  }
  return j.dump(2);
}

}  // namespace engine::cli
