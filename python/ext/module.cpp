// cnnengine._engine: the engine's Session (engine/api/session.hpp) for Python. The package's
// Python layer (python/cnnengine/runtime.py) is the documented API; this module only checks arrays
// against the model, hands their memory to the engine without copying and releases the GIL while
// the engine runs.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/api/backend_status.hpp"
#include "engine/api/session.hpp"
#include "formats/model.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using engine::api::Session;
using engine::api::SessionOptions;

std::string shape_text(const nb::ndarray<nb::ro>& a) {
  std::string s = "(";
  for (size_t i = 0; i < a.ndim(); ++i) s += fmt::format("{}{}", i ? ", " : "", a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_text(const nb::dlpack::dtype& t) {
  const char* kind = t.code == uint8_t(nb::dlpack::dtype_code::Int)     ? "int"
                     : t.code == uint8_t(nb::dlpack::dtype_code::UInt)  ? "uint"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Float) ? "float"
                     : t.code == uint8_t(nb::dlpack::dtype_code::Bool)  ? "bool"
                                                                        : "other";
  return fmt::format("{}{}", kind, int(t.bits));
}

// What the model takes, as an error message says it: "uint8 [N, 28, 28] or [N, 1, 28, 28]".
std::string accepted_text(const formats::Model& model) {
  const auto& s = model.input.raw_shape;
  const char* dtype = model.input.dtype == formats::InputDType::UInt8 ? "uint8" : "float32";
  std::string full = "[N";
  for (const int64_t d : s) full += fmt::format(", {}", d);
  full += "]";
  if (s.size() == 3 && s[0] == 1) return fmt::format("{} [N, {}, {}] or {}", dtype, s[1], s[2], full);
  return fmt::format("{} {}", dtype, full);
}

// Checks `images` against the model (dtype, [N, H, W] or [N, C, H, W], C order) and returns N.
int64_t check_images(const Session& session, const nb::ndarray<nb::ro>& images) {
  const formats::Model& model = session.model();
  const auto& raw = model.input.raw_shape;
  const bool want_u8 = model.input.dtype == formats::InputDType::UInt8;
  const nb::dlpack::dtype want = want_u8 ? nb::dtype<uint8_t>() : nb::dtype<float>();
  if (images.dtype() != want)
    throw nb::value_error(fmt::format("images are {} but model '{}' takes {}", dtype_text(images.dtype()), model.name,
                                      accepted_text(model))
                              .c_str());
  // [N, *raw_shape] for any rank; a one-channel image model also takes [N, H, W].
  bool fits = false;
  if (images.ndim() == raw.size() + 1) {
    fits = true;
    for (size_t i = 0; i < raw.size(); ++i) fits = fits && int64_t(images.shape(i + 1)) == raw[i];
  } else if (raw.size() == 3 && images.ndim() == 3) {
    fits = raw[0] == 1 && int64_t(images.shape(1)) == raw[1] && int64_t(images.shape(2)) == raw[2];
  }
  if (!fits)
    throw nb::value_error(fmt::format("images have shape {} but model '{}' takes {}", shape_text(images),
                                      model.name, accepted_text(model))
                              .c_str());
  // The engine reads samples back to back: the array must be C-contiguous (dimensions of extent 1
  // may carry any stride).
  int64_t expected = 1;
  for (size_t i = images.ndim(); i-- > 0;) {
    if (images.shape(i) != 1 && images.stride(i) != expected)
      throw nb::value_error(
          "images are not C-contiguous; pass a contiguous array (numpy.ascontiguousarray, tensor.contiguous())");
    expected *= int64_t(images.shape(i));
  }
  return int64_t(images.shape(0));
}

// One output per graph output, each [N, *its per-sample shape] (the first is the old [N, classes]).
nb::list run_images(Session& session, const nb::ndarray<nb::ro>& images) {
  const int64_t n = check_images(session, images);
  const int device = images.device_type();
  const bool on_host = device == nb::device::cpu::value || device == nb::device::cuda_host::value;
  const bool on_gpu = device == nb::device::cuda::value || device == nb::device::cuda_managed::value;
  if (!on_host && !on_gpu)
    throw nb::value_error(fmt::format("images are on a device of DLPack type {}; the engine reads host memory and, "
                                      "on a GPU backend, CUDA memory",
                                      device)
                              .c_str());
  if (on_gpu && !session.accepts_device_input())
    throw nb::value_error(fmt::format("images are in GPU memory but backend {} runs on the host; copy them to host "
                                      "memory (tensor.cpu()) or load the model with a GPU backend",
                                      session.backend().name())
                              .c_str());
  std::vector<std::unique_ptr<float[]>> buffers;
  std::vector<float*> pointers;
  for (size_t i = 0; i < session.output_count(); ++i) {
    buffers.push_back(std::make_unique<float[]>(size_t(std::max<int64_t>(1, n * session.output_elements(i)))));
    pointers.push_back(buffers.back().get());
  }
  if (n > 0) {
    nb::gil_scoped_release release;  // other Python threads run while the engine classifies
    session.run_outputs(images.data(), n, pointers, on_gpu);
  }
  nb::list out;
  const formats::Model& model = session.model();
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<size_t> shape{size_t(n)};
    for (auto d : model.value_shape(model.outputs[i])) shape.push_back(size_t(d));
    float* data = buffers[i].release();
    nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
    out.append(nb::ndarray<nb::numpy, float>(data, shape.size(), shape.data(), owner));
  }
  return out;
}

// The model with `outputs` (node names; empty: its own) as its outputs, the nodes no output needs
// dropped, and, where `preprocessed`, a float32 input of the shape its first nodes see (the caller
// has applied the preprocessing and padding).
std::shared_ptr<const formats::Model> model_variant(std::shared_ptr<const formats::Model> model,
                                                    const std::vector<std::string>& outputs, bool preprocessed) {
  if (outputs.empty() && !preprocessed) return model;
  auto v = std::make_shared<formats::Model>(*model);
  if (!outputs.empty()) {
    for (const auto& name : outputs)
      if (!model->find_node(name))
        throw nb::value_error(fmt::format("model '{}' has no node '{}'; its nodes: {}", model->name, name,
                                          fmt::join([&] {
                                            std::vector<std::string> names;
                                            for (const auto& n : model->nodes) names.push_back(n.name);
                                            return names;
                                          }(),
                                                    ", "))
                                  .c_str());
    v->outputs = outputs;
    std::set<std::string> needed(outputs.begin(), outputs.end());
    for (auto it = model->nodes.rbegin(); it != model->nodes.rend(); ++it)
      if (needed.count(it->name)) needed.insert(it->inputs.begin(), it->inputs.end());
    std::erase_if(v->nodes, [&](const formats::Node& n) { return !needed.count(n.name); });
  }
  if (preprocessed && v->input.dtype == formats::InputDType::UInt8) {
    v->input.dtype = formats::InputDType::Float32;
    v->input.raw_shape = v->input.shape;
    v->input.preprocess.reset();
  }
  return v;
}

nb::list shape_list(const formats::Shape& s) {
  nb::list out;
  for (auto d : s) out.append(d);
  return out;
}

nb::dict session_info(const Session& s) {
  const formats::Model& m = s.model();
  const auto& in = m.input;
  nb::dict input;
  input["name"] = in.name;
  input["dtype"] = in.dtype == formats::InputDType::UInt8 ? "uint8" : "float32";
  input["raw_shape"] = shape_list(in.raw_shape);
  input["shape"] = shape_list(in.shape);
  if (in.preprocess) {
    const auto& p = *in.preprocess;
    nb::dict pre;
    pre["scale"] = p.scale;
    pre["mean"] = p.mean;
    pre["std"] = p.std;
    pre["pad"] = std::vector<int>{p.pad_top, p.pad_bottom, p.pad_left, p.pad_right};
    pre["pad_value"] = p.pad_value;
    input["preprocess"] = pre;
  }
  nb::dict d;
  d["name"] = m.name;
  d["description"] = m.description;
  d["graph"] = m.source_path;
  d["weights"] = m.weights_path;
  d["input"] = input;
  d["outputs"] = m.outputs;
  d["labels"] = m.labels;
  d["classes"] = s.classes();
  d["parameters"] = m.parameter_count();
  d["nodes"] = m.nodes.size();
  d["backend"] = s.backend().name();
  d["device"] = s.backend().description();
  d["execution_path"] = s.execution_path();
  d["plan"] = s.plan_summary();
  d["max_batch"] = s.max_batch();
  d["precision"] = engine::precision_name(s.options().precision);
  d["deterministic"] = s.options().deterministic;
  return d;
}

std::unique_ptr<Session> make_session(const std::string& path, const std::string& backend, const std::string& precision,
                                      std::optional<int> max_batch, int threads, bool fuse, bool deterministic,
                                      bool cuda_graph, const std::vector<std::string>& outputs, bool preprocessed) {
  SessionOptions o;
  o.backend = backend;
  if (const auto p = engine::parse_precision(precision))
    o.precision = *p;
  else
    throw nb::value_error(
        fmt::format("precision must be 'fp32', 'tf32', 'fp16', 'bf16' or 'int8', not '{}'", precision).c_str());
  if (max_batch && *max_batch < 1) throw nb::value_error(fmt::format("max_batch must be >= 1, not {}", *max_batch).c_str());
  if (threads < 0 || threads > engine::kMaxThreads)
    throw nb::value_error(fmt::format("threads must be 0 (all cores) to {}, not {}", engine::kMaxThreads, threads).c_str());
  o.max_batch = max_batch;
  o.threads = threads;
  o.fuse = fuse;
  o.deterministic = deterministic;
  o.cuda_graph = cuda_graph;
  nb::gil_scoped_release release;  // compiling for a GPU uploads weights and may take a while
  auto engine_backend = engine::api::open_backend(backend);  // a wrong name fails before the model loads
  auto model = model_variant(engine::api::load_runnable_model(path), outputs, preprocessed);
  return std::make_unique<Session>(std::move(engine_backend), std::move(model), o);
}

}  // namespace

NB_MODULE(_engine, m) {
  m.doc() = "The C++ engine (engine/api) as a Python extension; use it through the cnnengine package.";

  // One exception type for whatever the engine refuses (files, backends, CUDA); its message is the
  // engine's own, as `engine` prints it. Array checks done here raise ValueError instead.
  static nb::object engine_error = nb::steal(PyErr_NewExceptionWithDoc(
      "cnnengine.EngineError", "The engine refused or failed; the message is the engine's.", PyExc_RuntimeError,
      nullptr));
  m.attr("EngineError") = engine_error;
  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const nb::python_error&) {
          throw;  // already a Python exception
        } catch (const nb::builtin_exception&) {
          throw;  // nb::value_error and friends: nanobind's own translator
        } catch (const std::bad_alloc&) {
          throw;  // MemoryError
        } catch (const std::exception& e) {
          PyErr_SetString(static_cast<PyObject*>(payload), e.what());
        }
      },
      engine_error.ptr());

  m.def(
      "backends",
      [] {
        nb::list out;
        for (const auto& s : engine::api::backend_statuses()) {
          nb::dict d;
          d["name"] = s.name;
          d["available"] = s.available;
          d["default"] = s.is_default;
          d["priority"] = s.priority;
          d["detail"] = s.detail;
          nb::list precisions;
          for (const auto& p : s.precisions) precisions.append(p);
          d["precisions"] = precisions;
          out.append(d);
        }
        return out;
      },
      "The backends built in, in registration order: name, available, default, priority, detail (what it "
      "runs on, or why it cannot run here), and precisions (the precision= values it takes; empty when "
      "unavailable).");

  nb::class_<Session>(m, "Session")
      .def(nb::new_(&make_session), "path"_a, "backend"_a = "", "precision"_a = "fp32", "max_batch"_a = nb::none(),
           "threads"_a = 0, "fuse"_a = true, "deterministic"_a = true, "cuda_graph"_a = true,
           "outputs"_a = std::vector<std::string>{}, "preprocessed"_a = false)
      .def_prop_ro("name", [](const Session& s) { return s.model().name; })
      .def_prop_ro("backend", [](const Session& s) { return s.backend().name(); })
      .def_prop_ro("device", [](const Session& s) { return s.backend().description(); })
      .def_prop_ro("input_name", [](const Session& s) { return s.model().input.name; })
      .def_prop_ro("input_dtype",
                   [](const Session& s) {
                     return s.model().input.dtype == formats::InputDType::UInt8 ? "uint8" : "float32";
                   })
      .def_prop_ro("input_shape",
                   [](const Session& s) {
                     const auto& r = s.model().input.raw_shape;  // any rank: [C, H, W], [K], ...
                     nb::list dims;
                     for (const int64_t d : r) dims.append(d);
                     return nb::tuple(dims);
                   })
      .def_prop_ro("labels", [](const Session& s) { return s.model().labels; })
      .def_prop_ro("classes", &Session::classes)
      .def_prop_ro("max_batch", &Session::max_batch)
      .def_prop_ro("accepts_device_input", &Session::accepts_device_input)
      .def("info", &session_info)
      .def_prop_ro("outputs", [](const Session& s) { return s.model().outputs; })
      .def_prop_ro("model_input_shape",
                   [](const Session& s) {
                     nb::list dims;
                     for (const int64_t d : s.model().input.shape) dims.append(d);
                     return nb::tuple(dims);
                   })
      .def("run", &run_images, "images"_a,
           "One float32 array [N, *shape] per output for images [N, H, W] or [N, C, H, W] (host memory, or GPU "
           "memory on a GPU backend); the GIL is released while the engine runs.");
}
