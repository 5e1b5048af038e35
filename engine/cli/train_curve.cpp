#include "engine/cli/train_curve.hpp"

#include <fmt/format.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/cli/output_files.hpp"

extern char** environ;

namespace engine::cli {
namespace {

std::string optional_number(const std::optional<double>& v) { return v ? fmt::format("{:.9g}", *v) : ""; }

// tools/plot_training.py: ENGINE_TOOLS_DIR, else beside the executable's folder (build/engine ->
// tools/), else the source tree this binary was built from.
std::optional<std::string> find_plot_tool() {
  std::vector<std::filesystem::path> candidates;
  if (const char* dir = std::getenv("ENGINE_TOOLS_DIR")) candidates.emplace_back(dir);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "tools");
  candidates.emplace_back(std::filesystem::path(ENGINE_SOURCE_DIR) / "tools");
  for (const auto& dir : candidates) {
    const auto tool = dir / "plot_training.py";
    if (std::filesystem::is_regular_file(tool, ec)) return tool.string();
  }
  return std::nullopt;
}

// PYTHON TOOL JSON -o PNG, without a shell (paths may hold any character). True when it drew.
bool run_plot(const std::string& python, const std::string& tool, const std::string& json, const std::string& png) {
  std::vector<std::string> args{python, tool, json, "-o", png};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Interpreters to try, in order: ENGINE_PYTHON alone when set; else the project's .venv beside
// tools/, the system's, the PATH's.
std::vector<std::string> pythons(const std::string& tool) {
  if (const char* forced = std::getenv("ENGINE_PYTHON")) return {forced};
  std::vector<std::string> out;
  std::error_code ec;
  const auto venv = std::filesystem::path(tool).parent_path().parent_path() / ".venv" / "bin" / "python";
  if (std::filesystem::exists(venv, ec)) out.push_back(venv.string());
  if (std::filesystem::exists("/usr/bin/python3", ec)) out.push_back("/usr/bin/python3");
  out.push_back("python3");
  return out;
}

}  // namespace

std::vector<std::string> write_curve(const std::string& base, const TrainingCurve& curve, bool plot) {
  const std::string csv = base + ".curve.csv", json = base + ".curve.json", png = base + ".curve.png";
  write_file_atomically(csv, [&](std::ostream& out) {
    out << "epoch,loss,accuracy,val_loss,val_accuracy,seconds,images_per_second\n";
    for (const auto& e : curve.epochs)
      out << fmt::format("{},{:.9g},{:.9g},{},{},{:.3f},{:.1f}\n", e.epoch, e.loss, e.accuracy, optional_number(e.val_loss),
                         optional_number(e.val_accuracy), e.seconds, e.images_per_second);
  });
  nlohmann::ordered_json doc;
  doc["run"] = curve.run;
  doc["best_epoch"] = curve.best_epoch;
  // Arrays are filled first and then moved in: ordered_json keeps its keys in a vector, so a
  // reference to one member does not survive adding the next.
  nlohmann::ordered_json epochs = nlohmann::ordered_json::array();
  for (const auto& e : curve.epochs) {
    nlohmann::ordered_json row{{"epoch", e.epoch}, {"loss", e.loss}, {"accuracy", e.accuracy}};
    row["val_loss"] = e.val_loss ? nlohmann::ordered_json(*e.val_loss) : nlohmann::ordered_json();
    row["val_accuracy"] = e.val_accuracy ? nlohmann::ordered_json(*e.val_accuracy) : nlohmann::ordered_json();
    row["seconds"] = e.seconds;
    row["images_per_second"] = e.images_per_second;
    epochs.push_back(std::move(row));
  }
  nlohmann::ordered_json epoch = nlohmann::ordered_json::array(), loss = nlohmann::ordered_json::array(),
                         lr = nlohmann::ordered_json::array();
  for (const auto& s : curve.steps) {
    epoch.push_back(s.epoch);
    loss.push_back(s.loss);
    lr.push_back(s.lr);
  }
  doc["epochs"] = std::move(epochs);
  nlohmann::ordered_json steps;
  steps["epoch"] = std::move(epoch);
  steps["loss"] = std::move(loss);
  steps["lr"] = std::move(lr);
  doc["steps"] = std::move(steps);
  write_file_atomically(json, [&](std::ostream& out) { out << doc.dump(1) << "\n"; });
  std::vector<std::string> written{csv, json};
  if (!plot) return written;
  const auto tool = find_plot_tool();
  if (!tool) {
    spdlog::warn("no PNG curve: tools/plot_training.py not found (set ENGINE_TOOLS_DIR); the curve is in {} and {}", csv,
                 json);
  } else {
    bool drawn = false;
    for (const std::string& python : pythons(*tool))
      if ((drawn = run_plot(python, *tool, json, png))) break;
    if (drawn)
      written.push_back(png);
    else
      spdlog::warn("no PNG curve: `python3 {} {} -o {}` failed (python3 with matplotlib needed); the curve is in {} and {}",
                   *tool, json, png, csv, json);
  }
  return written;
}

}  // namespace engine::cli
