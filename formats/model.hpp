#pragma once
// The validated, backend-neutral description of a model (model-format-v1.md). A Model that exists
// has passed every check: nodes are topologically sorted, every value has its per-sample shape,
// every tensor is float32 with the shape its node needs. Nothing here knows about execution.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace formats {

using Shape = std::vector<int64_t>;  // per sample: the batch dimension is implicit

int64_t element_count(const Shape& shape);  // product; shapes in a Model never overflow
// The product, or nullopt when a dimension is negative or the product overflows int64. For
// untrusted shapes (files, models built in code before validation).
std::optional<int64_t> checked_element_count(const Shape& shape);
std::string shape_to_string(const Shape& shape);  // "[6, 28, 28]"

enum class OpType { Conv2D, AvgPool, MaxPool, Relu, Tanh, Sigmoid, Flatten, Dense, Softmax, Add, ScaleShift, Concat };

const char* op_name(OpType op);                         // "conv2d", ...
std::optional<OpType> op_from_name(const std::string&);  // nullopt when unknown

// Attributes of every op in one struct keeps Node simple; each op reads only its own fields.
struct Window2D {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
};

struct Tensor {
  std::string name;
  Shape shape;                // as stored (not per sample)
  std::vector<float> values;  // row-major, element_count(shape) entries
};

struct Node {
  std::string name;  // also the name of the value it produces
  OpType op = OpType::Relu;
  std::vector<std::string> inputs;  // value names
  // conv2d, avgpool, maxpool
  Window2D window;
  int out_channels = 0;            // conv2d
  bool count_include_pad = true;   // avgpool
  int units = 0;                   // dense
  // conv2d and dense: parameters (weight required, bias optional). scale_shift keeps its 'scale'
  // tensor in `weight` and its 'shift' tensor in `bias` (both required): every place that walks a
  // node's parameters (loader, parameter counts, uploads) then sees them without a third pair of
  // fields.
  std::optional<Tensor> weight;
  std::optional<Tensor> bias;
  Shape output_shape;  // filled in by the loader's shape propagation
};

enum class InputDType { UInt8, Float32 };

struct Preprocess {
  float scale = 1.0f;
  std::vector<float> mean;  // one per channel
  std::vector<float> std;   // one per channel
  int pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  float pad_value = 0.0f;
};

struct InputSpec {
  std::string name;
  InputDType dtype = InputDType::UInt8;
  Shape raw_shape;                       // [C, H, W] of one raw sample as read from data files
  std::optional<Preprocess> preprocess;  // present iff dtype == UInt8
  Shape shape;                           // the value the first nodes see (after padding)
};

// Activation ranges for post-training int8 quantization (model-format-v1.md, "Calibration"):
// measured by `engine calibrate` on sample data, as TensorRT's calibrators do. The int8 scale of a
// value is its range / 127 (symmetric); weights need none (their ranges are in the weights).
struct Calibration {
  std::string method;       // "max" or "percentile"
  double percentile = 0;    // the percentile of |x| kept, for "percentile"
  int64_t images = 0;       // how many samples were run
  std::string data;         // where they came from (informational)
  std::vector<std::pair<std::string, double>> ranges;  // value name (input or node) -> max |x| kept, >= 0
};

struct Model {
  std::string name;
  std::string description;
  std::string source_path;   // graph file the model came from ("" for models built in code)
  std::string weights_path;  // resolved path of the weights file ("" when !has_weights)
  // False for an architecture-only graph file (no "weights" key, model-format-v1.md): every
  // parameter tensor has its name and shape, and all its values are zero. `engine train`
  // initialises it; `engine run` refuses it (require_weights).
  bool has_weights = true;
  InputSpec input;
  std::vector<std::string> labels;   // optional class names
  std::vector<Node> nodes;           // topologically sorted
  std::vector<std::string> outputs;  // value names
  std::optional<Calibration> calibration;  // present when the graph file has "calibration"

  const Node* find_node(const std::string& name) const;
  Shape value_shape(const std::string& value) const;  // input or node output; throws if unknown
  int64_t parameter_count() const;
};

// Throws FormatError(model file, ...) when the model is architecture-only: there is nothing to run.
void require_weights(const Model& model);

}  // namespace formats
