// Kiln errors: every failure is an exception derived from kiln::error.
//
//   try {
//     auto prog = kiln::program::compile(dev, source);
//   } catch (const kiln::compile_error& e) {
//     std::cerr << e.what();        // message, compiler log, offending source lines
//     std::cerr << e.log();         // the raw compiler log
//   } catch (const kiln::error& e) {
//     if (e.category() == kiln::error_category::out_of_memory) { /* retry smaller */ }
//   }
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

enum class error_category {
  invalid_argument,  // wrong sizes, types, devices, ranges: the caller's mistake
  out_of_memory,     // device or host allocation failed
  compile_error,     // kernel source did not compile
  unsupported,       // the backend or device cannot do this (e.g. barriers on the CPU)
  backend_failure,   // the driver or device failed
  not_found,         // a device, backend or kernel entry point that does not exist
  device_lost        // the device failed for the process (e.g. a trapped CUDA kernel)
};

const char* to_string(error_category c) noexcept;

class error : public std::runtime_error {
 public:
  error(error_category c, const std::string& message) : std::runtime_error(message), category_(c) {}
  error_category category() const noexcept { return category_; }

 private:
  error_category category_;
};

class invalid_argument : public error {
 public:
  explicit invalid_argument(const std::string& m) : error(error_category::invalid_argument, m) {}
};

// Tensors (kiln/tensor.hpp): shapes that do not broadcast, a view or reshape to another
// number of elements, host data of the wrong size. The message names both shapes: "[2, 3] and
// [4]".
class shape_error : public invalid_argument {
 public:
  explicit shape_error(const std::string& m) : invalid_argument(m) {}
};

// A tensor read as an element type other than its dtype (to_vector<T>, item<T>).
class dtype_error : public invalid_argument {
 public:
  explicit dtype_error(const std::string& m) : invalid_argument(m) {}
};

// Operands of one tensor operation on different devices; the message names both.
class device_mismatch : public invalid_argument {
 public:
  explicit device_mismatch(const std::string& m) : invalid_argument(m) {}
};

// A tensor dimension (axis) out of range for the tensor's rank.
class axis_error : public invalid_argument {
 public:
  explicit axis_error(const std::string& m) : invalid_argument(m) {}
};

// A kernel in checked mode (KILN_CHECK=bounds, docs/kernel_language.md) indexed a buffer
// outside its elements. The message names the kernel, the argument, the index, the buffer's
// size and the source line: "kernel 'scale', argument 1 ('y'): index 1000 is outside the
// buffer's 1000 elements (line 4)". The first violation of a launch is reported.
class out_of_bounds : public invalid_argument {
 public:
  explicit out_of_bounds(const std::string& m) : invalid_argument(m) {}
};

class out_of_memory : public error {
 public:
  explicit out_of_memory(const std::string& m) : error(error_category::out_of_memory, m) {}
};

class unsupported : public error {
 public:
  explicit unsupported(const std::string& m) : error(error_category::unsupported, m) {}
};

class backend_failure : public error {
 public:
  explicit backend_failure(const std::string& m) : error(error_category::backend_failure, m) {}
};

class not_found : public error {
 public:
  explicit not_found(const std::string& m) : error(error_category::not_found, m) {}
};

// The device failed in a way that poisons it for the process: a kernel trapped or touched an
// illegal address (CUDA's sticky errors). Every later call on the device, and on its buffers,
// queues, events and kernels, throws this until kiln::device::reset() is called; handles from
// before the reset keep throwing it after (their memory is gone).
class device_lost : public error {
 public:
  explicit device_lost(const std::string& m) : error(error_category::device_lost, m) {}
};

// A kernel that failed to compile. what() holds the summary, the offending
// source lines with line numbers, and the compiler log.
class compile_error : public error {
 public:
  compile_error(const std::string& message, std::string log, std::string excerpt)
      : error(error_category::compile_error, message),
        log_(std::move(log)),
        excerpt_(std::move(excerpt)) {}
  const std::string& log() const noexcept { return log_; }
  // The source lines the log points at, numbered, offending ones marked '>'.
  const std::string& excerpt() const noexcept { return excerpt_; }

 private:
  std::string log_;
  std::string excerpt_;
};

}  // namespace kiln
