#pragma once
// Files the CLI tests feed the engine, written by the tests themselves so they need nothing
// committed: a tiny format-v1 model and IDX/PGM data whose correct answers are known.
#include <cstdint>
#include <string>
#include <vector>

namespace cli_test {

// "tiny": uint8 [1, 4, 4] -> flatten -> dense(16 -> 3) -> softmax, labels zero/one/two. The dense
// layer copies pixels 0, 1 and 2 (times 10) to the three logits, so an image whose only bright
// pixel is pixel k is classified as k. Returns the graph file's path. With `float_input`:
// "tiny-float", the same layers on a float32 [16] input (already preprocessed: 1.0 is bright).
// `last`: the op after the dense layer ("softmax", "sigmoid"), or "" for none (the logits are the
// output); each variant gets its own file name.
std::string write_tiny_model(const std::string& dir, bool float_input = false, const std::string& last = "softmax");

// Image i has pixel (i % 3) at 255 and the rest 0: the tiny model classifies it as i % 3.
std::vector<uint8_t> tiny_images(int count, int height = 4, int width = 4);

void write_idx_images(const std::string& path, const std::vector<uint8_t>& pixels, int count, int height, int width);
// IDX float32 (type 0x0D): dims are the count and then one sample's dimensions.
void write_idx_floats(const std::string& path, const std::vector<float>& values, const std::vector<uint32_t>& dims);
void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels);
void write_pgm(const std::string& path, const uint8_t* pixels, int height, int width);

}  // namespace cli_test
