#include "engine/cli/run_report.hpp"

#include <fmt/format.h>

#include <algorithm>
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

std::string plural(const std::string& kind) { return kind == "probability" ? "probabilities" : kind + "s"; }

// Predictions are shown in full up to this many; --output holds every one.
constexpr int64_t kShownPredictions = 10;

// Where image i came from: its index, or with several files "file:index".
std::string image_name(const RunResult& r, int64_t i) {
  if (r.files.size() <= 1) return std::to_string(i);
  for (const RunFile& f : r.files)
    if (i >= f.first && i < f.first + f.count) return fmt::format("{}:{}", f.path, i - f.first);
  return std::to_string(i);
}

// Without labels: the first predictions and how many images each class got.
void print_predictions(const RunResult& r) {
  const int64_t shown = std::min(r.images, kShownPredictions);
  fmt::print("predictions ({}{})\n", shown < r.images ? fmt::format("first {} of {}", shown, group_thousands(r.images))
                                                       : std::string("all"),
             shown < r.images ? "; all with --output FILE" : "");
  TextTable table({"image", "class", r.output_kind});
  for (int64_t i = 0; i < shown; ++i) {
    const int k = r.predicted[size_t(i)];
    table.add({image_name(r, i), class_text(r, k), fmt::format("{:.6f}", r.first_output[size_t(i * r.classes + k)])});
  }
  fmt::print("{}", table.render({2}, "  "));
  std::vector<int64_t> per_class(size_t(r.classes), 0);
  for (int k : r.predicted) ++per_class[size_t(k)];
  fmt::print("predicted classes\n");
  TextTable hist({"class", "images", "share"});
  for (int64_t k = 0; k < r.classes; ++k)
    if (per_class[size_t(k)] > 0)
      hist.add({class_text(r, k), group_thousands(per_class[size_t(k)]),
                fmt::format("{:.2f}%", 100.0 * double(per_class[size_t(k)]) / double(r.images))});
  fmt::print("{}", hist.render({1, 2}, "  "));
}

// Several data files: each one's count (and accuracy) on its own line.
void print_files(const RunResult& r, bool labelled) {
  std::vector<std::string> header{"file", "images"};
  if (labelled) header.push_back("accuracy");
  TextTable table(header);
  for (const RunFile& f : r.files) {
    std::vector<std::string> row{f.path, group_thousands(f.count)};
    if (labelled) row.push_back(fmt::format("{:.2f}%", 100.0 * double(f.correct) / double(f.count)));
    table.add(row);
  }
  fmt::print("files\n{}", table.render(labelled ? std::vector<size_t>{1, 2} : std::vector<size_t>{1}, "  "));
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
    fmt::print("class     {}   {} {:.6f}\n", class_text(r, k), r.output_kind, r.first_output[size_t(k)]);
    if (labelled) fmt::print("label     {}   {}\n", class_text(r, r.labels[0]), r.labels[0] == k ? "correct" : "WRONG");
    fmt::print("{}\n", plural(r.output_kind));
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
  if (r.files.size() > 1) print_files(r, labelled);
  if (labelled && r.images > 1) print_confusion(r);
  if (!labelled && r.images > 1) print_predictions(r);
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
  j["output"] = r.output_kind;
  if (r.files.size() > 1) {
    json files = json::array();
    for (const RunFile& f : r.files) {
      json jf{{"path", f.path}, {"first", f.first}, {"images", f.count}};
      if (!r.labels.empty()) jf["correct"] = f.correct;
      files.push_back(jf);
    }
    j["files"] = files;
  }
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
    j[plural(r.output_kind)] = r.first_output;
  }
  return j.dump(2);
}

}  // namespace engine::cli
