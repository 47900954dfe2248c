// Transformer building blocks: linear with a fused activation, layer/RMS norm, indexing
// (embedding lookups, gather/scatter) and scaled dot-product attention. Names and argument
// orders follow torch / torch.nn.functional (embedding(input, weight), as PyTorch's, is C++'s
// embedding(weight, indices)); errors are the C++ ones, mapped by errors.cpp.
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/tensor/attention.hpp"
#include "kiln/tensor/indexing.hpp"
#include "kiln/tensor/layer_norm.hpp"
#include "kiln/tensor/linalg.hpp"
#include "kiln/tensor/linear.hpp"
#include "kiln/tensor/sampling.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

using opt_tensor = std::optional<tensor>;
using release_gil = py::call_guard<py::gil_scoped_release>;

tensor or_undefined(const opt_tensor& t) { return t ? *t : tensor{}; }

// x with value where mask is true; value a Python or NumPy number, typed beside x's dtype as
// an operand is (C++ converts it to x's dtype).
tensor masked_fill(const tensor& x, const tensor& mask, py::handle value) {
  py::object v = py::reinterpret_borrow<py::object>(value);
  if (!is_python_scalar(v) && py::isinstance(v, py::module_::import("numpy").attr("generic")))
    v = v.attr("item")();
  if (!is_python_scalar(v))
    throw py::type_error("kiln.masked_fill: value must be a number (bool, int or float), got " +
                         std::string(py::str(py::type::of(v).attr("__name__"))));
  return dispatch(scalar_type_beside(x.dtype(), v), [&](auto zero) -> tensor {
    return kiln::masked_fill(x, mask, cast_scalar<decltype(zero)>(v));
  });
}

// split_size_or_sections: chunks of one size (an int) or the given sizes (a sequence).
py::tuple split(const tensor& x, py::handle sizes, int dim) {
  const std::vector<tensor> parts =
      PyLong_Check(sizes.ptr()) ? kiln::split(x, sizes.cast<std::int64_t>(), dim)
                                : kiln::split(x, sizes.cast<std::vector<std::int64_t>>(), dim);
  return py::tuple(py::cast(parts));
}

void bind_linear_and_norms(py::module_& m) {
  m.def(
      "linear",
      [](const tensor& x, const tensor& w, const opt_tensor& b, const std::string& activation,
         bool tf32) {
        return kiln::linear(x, w, or_undefined(b), activation, matmul_options{.tf32 = tf32});
      },
      py::arg("x"), py::arg("w"), py::arg("b") = py::none(), py::arg("activation") = "none",
      py::kw_only(), py::arg("tf32") = false, release_gil(),
      "activation(x @ w.T + b): torch.nn.functional.linear with its activation fused "
      "(\"none\", \"relu\", \"gelu\" or \"gelu_tanh\"). x [..., in], w [out, in], b [out].");
  m.def("last_linear_path", &kiln::last_linear_path,
        "How this thread's last kiln.linear ran: \"epilogue\", \"bias epilogue\" or "
        "\"separate\".");
  m.def(
      "layer_norm",
      [](const tensor& x, py::handle shape, const opt_tensor& w, const opt_tensor& b, double eps) {
        const shape_t s = to_normalized_shape(shape);
        py::gil_scoped_release release;
        return kiln::layer_norm(x, s, or_undefined(w), or_undefined(b), eps);
      },
      py::arg("x"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5,
      "torch.nn.functional.layer_norm over the trailing normalized_shape dims (biased "
      "variance, statistics in f32 for 16-bit x).");
  m.def(
      "rms_norm",
      [](const tensor& x, py::handle shape, const opt_tensor& w, std::optional<double> eps) {
        const shape_t s = to_normalized_shape(shape);
        py::gil_scoped_release release;
        return kiln::rms_norm(x, s, or_undefined(w), eps);
      },
      py::arg("x"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("eps") = py::none(),
      "torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) * weight; eps None is f32's "
      "epsilon (f64's for float64 x).");
}

void bind_indexing(py::module_& m, tensor_class& cls) {
  m.def(
      "embedding",
      [](const tensor& input, const tensor& weight) { return kiln::embedding(weight, input); },
      py::arg("input"), py::arg("weight"), release_gil(),
      "Rows of weight [V, D] at the int32/int64 indices input: [*input.shape, D] "
      "(torch.nn.functional.embedding's argument order).");
  auto index_select = [](const tensor& x, int dim, const tensor& index) {
    return kiln::index_select(x, dim, index);
  };
  auto gather = [](const tensor& x, int dim, const tensor& index) {
    return kiln::gather(x, dim, index);
  };
  auto scatter_add = [](const tensor& x, int dim, const tensor& index, const tensor& src) {
    return kiln::scatter_add(x, dim, index, src);
  };
  auto tril = [](const tensor& x, std::int64_t k) { return kiln::tril(x, k); };
  auto triu = [](const tensor& x, std::int64_t k) { return kiln::triu(x, k); };
  m.def("index_select", index_select, py::arg("x"), py::arg("dim"), py::arg("index"), release_gil(),
        "x's slices index[k] along dim (index 1-D or 0-D, int32 or int64).");
  m.def("gather", gather, py::arg("x"), py::arg("dim"), py::arg("index"), release_gil(),
        "out[c] = x[c with dim replaced by index[c]]: torch.gather.");
  m.def("scatter_add", scatter_add, py::arg("x"), py::arg("dim"), py::arg("index"), py::arg("src"),
        release_gil(),
        "A copy of x with src added at index along dim (duplicates summed in order): "
        "torch.scatter_add.");
  m.def("masked_fill", &masked_fill, py::arg("x"), py::arg("mask"), py::arg("value"),
        "x where mask (bool, broadcast) is false, value where it is true; x's dtype. Lazy.");
  m.def("tril", tril, py::arg("x"), py::arg("diagonal") = 0,
        "The lower triangle (column <= row + diagonal) of the last two dims; lazy.");
  m.def("triu", triu, py::arg("x"), py::arg("diagonal") = 0,
        "The upper triangle (column >= row + diagonal) of the last two dims; lazy.");
  m.def(
      "cat", [](const std::vector<tensor>& xs, int dim) { return kiln::cat(xs, dim); },
      py::arg("tensors"), py::arg("dim") = 0, release_gil(),
      "Joins tensors of one dtype and device along dim.");
  m.def(
      "stack", [](const std::vector<tensor>& xs, int dim) { return kiln::stack(xs, dim); },
      py::arg("tensors"), py::arg("dim") = 0, release_gil(),
      "Joins tensors of one shape along a new dim.");
  m.def("split", &split, py::arg("x"), py::arg("split_size_or_sections"), py::arg("dim") = 0,
        "Views of x along dim: chunks of an int size (the last may be smaller) or of the "
        "listed sizes; a tuple, as torch.split.");

  // The methods PyTorch's tensors have.
  cls.def("index_select", index_select, py::arg("dim"), py::arg("index"), release_gil())
      .def("gather", gather, py::arg("dim"), py::arg("index"), release_gil())
      .def("scatter_add", scatter_add, py::arg("dim"), py::arg("index"), py::arg("src"),
           release_gil())
      .def("masked_fill", &masked_fill, py::arg("mask"), py::arg("value"))
      .def("tril", tril, py::arg("diagonal") = 0)
      .def("triu", triu, py::arg("diagonal") = 0)
      .def("split", &split, py::arg("split_size"), py::arg("dim") = 0);
}

// topk as torch: a (values, indices) tuple; multinomial with torch's defaults (no replacement)
// and a seed instead of a generator.
void bind_sampling(py::module_& m, tensor_class& cls) {
  auto topk = [](const tensor& x, std::int64_t k, int dim, bool largest, bool sorted) {
    topk_result r;
    {
      py::gil_scoped_release off;
      r = kiln::topk(x, k, dim, largest, sorted);
    }
    return py::make_tuple(r.values, r.indices);
  };
  m.def("topk", topk, py::arg("x"), py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
        py::arg("sorted") = true,
        "(values, indices int64) of the k largest (or smallest) entries along dim, best first: "
        "torch.topk (NaN ranks largest, ties by lower index; always sorted). values is "
        "differentiable.");
  cls.def("topk", topk, py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
          py::arg("sorted") = true);
  m.def(
      "multinomial",
      [](const tensor& probs, std::int64_t n, bool replacement, std::uint64_t seed) {
        return kiln::multinomial(probs, n, replacement, seed);
      },
      py::arg("probs"), py::arg("num_samples"), py::arg("replacement") = false, py::arg("seed") = 0,
      release_gil(),
      "int64 [.., num_samples] category indices drawn from rows of non-negative weights "
      "(1-D or 2-D, not necessarily normalised): torch.multinomial, seeded (the same seed "
      "gives the same samples on every backend).");
}

void bind_attention(py::module_& m) {
  m.def(
      "scaled_dot_product_attention",
      [](const tensor& q, const tensor& k, const tensor& v, const opt_tensor& mask,
         double dropout_p, bool is_causal, std::optional<double> scale) {
        // Accepted for torch's positional order; Kiln's attention has no dropout.
        if (dropout_p != 0.0)
          throw kiln::unsupported(
              "kiln.scaled_dot_product_attention: dropout_p must be 0 (no attention dropout "
              "in Kiln), got " +
              std::to_string(dropout_p));
        return kiln::scaled_dot_product_attention(q, k, v, or_undefined(mask), is_causal, scale);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
      release_gil(),
      "softmax(query @ key.T * scale + mask) @ value over the last two dims "
      "(torch.nn.functional.scaled_dot_product_attention): attn_mask bool (True attends) or "
      "additive in query's dtype; is_causal the top-left lower triangle; scale None is "
      "1/sqrt(E).");
}

}  // namespace

void bind_transformer(py::module_& m, tensor_class& cls) {
  bind_linear_and_norms(m);
  bind_indexing(m, cls);
  bind_sampling(m, cls);
  bind_attention(m);
}

}  // namespace kiln::python
