#pragma once
// The backend used when the caller names none (`engine run` without --backend, cnnengine.load with
// backend=None). No GPU backend is the fastest for every model: the custom backend's fused path wins
// on chain-shaped CNNs, cuDNN + cuBLASLt on MLPs and on models the fused path does not take
// (docs/design/cudnn-backend.md has the figures). So, as TensorRT's tactic selection, the choice is
// measured: each GPU backend that can run the model at the precision asked is compiled and timed for
// a few batches, once per (model graph, GPU, precision, batch); the images/s are cached under the
// user's cache directory and the fastest is used. Backends that cannot compute the precision (cpu and
// int8) or that refuse a node are left out, with the reason kept for the message.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/backend.hpp"
#include "formats/model.hpp"

namespace engine::api {

// One registered backend, as the choice sees it.
struct BackendCandidate {
  std::string name;
  int priority = 0;                    // the registry's (higher wins where nothing is measured)
  bool gpu = false;                    // runs on a GPU (Backend::devices() is not empty)
  std::optional<std::string> refusal;  // why it cannot run this model at this precision here
};

struct BackendChoice {
  std::string name;
  std::string reason;  // one line for the user: "fastest measured ...", "the only backend that ..."
};

// The choice itself, free of devices so that tests inject the facts: among the candidates without a
// refusal, the GPU one with the most images/s (`images_per_s`, measured `how`), the highest priority
// where none was measured or only one GPU backend is usable, the highest-priority usable backend where
// no GPU backend is (an unavailable one counts as a refusal: it was never opened). Throws std::invalid_argument naming every refusal when nothing can run.
BackendChoice choose_backend(const std::vector<BackendCandidate>& candidates,
                             const std::map<std::string, double>& images_per_s, const std::string& how,
                             Precision precision);

// Measured images/s per backend, one line per key in a tab-separated file. Unreadable or malformed
// lines are ignored (the measurement is redone); a failed write leaves the choice uncached.
class BackendChoiceCache {
 public:
  explicit BackendChoiceCache(std::filesystem::path file) : file_(std::move(file)) {}
  // $XDG_CACHE_HOME/cnn-engine/backend-choice.tsv, else $HOME/.cache/cnn-engine/...; empty when
  // neither variable is set.
  static std::filesystem::path default_file();
  const std::filesystem::path& file() const { return file_; }
  std::optional<std::map<std::string, double>> find(const std::string& key) const;
  // Whether the entry was written (replacing the key's earlier one).
  bool store(const std::string& key, const std::map<std::string, double>& images_per_s) const;

 private:
  std::filesystem::path file_;
};

// The key of a measurement: the graph file's SHA-256 (or the architecture's, for a model built in
// code), the GPU's name, the precision and the batch.
std::string backend_choice_key(const formats::Model& model, const std::string& gpu, Precision precision, int batch);

struct ChosenBackend {
  std::unique_ptr<Backend> backend;
  std::string reason;
};
// The backend for `model` at `precision`, each GPU candidate compiled for max_batch (default: its
// preferred batch, capped by `images` when that is positive) and timed on a cache miss.
ChosenBackend choose_default_backend(const std::shared_ptr<const formats::Model>& model, Precision precision,
                                     std::optional<int> max_batch, int64_t images = 0,
                                     const BackendChoiceCache& cache = BackendChoiceCache(BackendChoiceCache::default_file()));

}  // namespace engine::api
