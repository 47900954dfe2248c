// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors): named
// tensors and a string-to-string metadata map in one file that PyTorch, JAX and the Hugging Face
// tools read.
//
//   kiln::save_safetensors("model.safetensors", {{"fc1.weight", w}, {"fc1.bias", b}},
//                          {{"epoch", "3"}});
//   kiln::safetensors_file f = kiln::load_safetensors("model.safetensors", dev);
//   kiln::tensor w2 = f.at("fc1.weight");          // on dev, same dtype and shape
//   std::string epoch = f.metadata.at("epoch");
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON (padded with spaces so the
// data starts at a multiple of 8), then the tensors' bytes, row-major and little-endian, each at
// [data_offsets[0], data_offsets[1]) relative to the first byte after the header. dtypes: BOOL,
// U8, I8, U16, I16, U32, I32, U64, I64, F32, F64 (F16, BF16 and F8 are reported as
// kiln::unsupported: kiln::tensor has no such type). docs/data.md has the details.
//
// Errors: a missing file is kiln::not_found; a malformed file (truncated, header length beyond
// the file, bad JSON, unknown dtype, offsets out of range, overlapping or leaving holes, a
// shape that does not match its byte count, a BOOL byte other than 0 or 1) is
// kiln::invalid_argument naming the file and the tensor; bad arguments to save (duplicate or
// empty names, undefined tensors) are kiln::invalid_argument; I/O failures while writing are
// kiln::backend_failure. Saving writes a temporary file beside `path` and renames it over `path`,
// so a crash leaves either the old file or the new one, never half of one.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

struct safetensors_file {
  // In file order (by data offset), which is the order they were saved in by save_safetensors.
  std::vector<std::pair<std::string, tensor>> tensors;
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"

  // The tensor called name (kiln::not_found when there is none).
  const tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Lazy or strided tensors are evaluated and written contiguous; every tensor is read back to
// the host first (one synchronous copy each).
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Every tensor is created on dev (contiguous, dtype and shape as in the file).
safetensors_file load_safetensors(const std::string& path, const device& dev);

// The safetensors dtype string of t ("F32", "I64", "BOOL", ...).
const char* safetensors_dtype(scalar_type t) noexcept;

}  // namespace kiln
