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

// PYTHON -m cnnengine.plot_training JSON -o PNG, without a shell (paths may hold any character).
// True when it drew: false also when that Python lacks the package or matplotlib.
bool run_plot(const std::string& python, const std::string& json, const std::string& png) {
  std::vector<std::string> args{python, "-m", "cnnengine.plot_training", json, "-o", png};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Interpreters to try, in order: ENGINE_PYTHON alone when set (the wheel's `engine` entry point
// sets it to the Python it runs under); else the checkout's .venv beside the build folder
// (build/engine -> .venv), the source tree's .venv, the system's, the PATH's.
std::vector<std::string> pythons() {
  if (const char* forced = std::getenv("ENGINE_PYTHON")) return {forced};
  std::vector<std::filesystem::path> venvs;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) venvs.push_back(exe.parent_path().parent_path() / ".venv" / "bin" / "python");
  venvs.push_back(std::filesystem::path(ENGINE_SOURCE_DIR) / ".venv" / "bin" / "python");
  std::vector<std::string> out;
  for (const auto& venv : venvs)
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
  bool drawn = false;
  for (const std::string& python : pythons())
    if ((drawn = run_plot(python, json, png))) break;
  if (drawn)
    written.push_back(png);
  else
    spdlog::warn("no PNG curve: `python3 -m cnnengine.plot_training {} -o {}` failed (a Python with the cnnengine "
                 "package and matplotlib is needed; ENGINE_PYTHON names one); the curve is in {} and {}",
                 json, png, csv, json);
  return written;
}

}  // namespace engine::cli
