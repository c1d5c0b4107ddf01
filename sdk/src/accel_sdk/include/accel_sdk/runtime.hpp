// accel_sdk/runtime.hpp: the ABI glue between a C++ runtime class and accel.
//
// A backend writes one class R (accel_sdk/graph_runtime.hpp's GraphRuntime<R> writes
// create, run and threads for a graph-blob backend):
//
//   class MyRuntime {
//    public:
//     // parse + validate everything; compute with options.threads threads (resolved, >= 1)
//     static std::unique_ptr<MyRuntime> create(accel_sdk::BlobReader& blob, const accel_sdk::RuntimeOptions& options);
//     void run(const std::vector<accel_sdk::TensorView>& inputs,
//              std::vector<accel_sdk::TensorView>& outputs) const;             // thread-safe: no mutation
//     int threads() const;                                                     // what create chose
//   };
//   ACCEL_SDK_RUNTIME_MODULE(_runtime, "mybackend", MyRuntime)
//
// and gets:
// - the C table accel_runtime_api (accel/runtime_abi.h) whose create / run /
//   destroy / num_threads catch every exception and return a status and message,
//   so no exception crosses the C boundary: BlobError and any other exception in
//   create -> ACCEL_ERR_INVALID_BLOB; ArgumentError in run ->
//   ACCEL_ERR_INVALID_ARGUMENT; anything else -> ACCEL_ERR_RUNTIME;
// - a Python module (pybind11) with `ABI_VERSION`, `__accel_abi__` (a capsule
//   named ACCEL_RUNTIME_CAPSULE holding the table) and a class
//   `Runtime(blob, threads=0)` whose constructor, `run(inputs, outputs)` and
//   `threads` go through that table. The constructor raises ValueError with the
//   runtime's message; run raises RuntimeError for anything wrong (a non-array,
//   a non-contiguous or read-only buffer, a wrong shape or dtype, a failure in
//   the runtime). run releases the GIL while the runtime works.
//
// Threads: accel-core resolves the count once (accel.load(path, threads=N), `accel run
// --threads N`, ACCEL_NUM_THREADS, else every core) and passes it to create; a runtime
// never reads the environment for it. threads <= 0 reaching create means every core
// (accel_sdk::resolve_threads).
#ifndef ACCEL_SDK_RUNTIME_HPP
#define ACCEL_SDK_RUNTIME_HPP

#include <accel/runtime_abi.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/tensor.hpp>
#include <accel_sdk/threads.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

namespace accel_sdk {

// How a handle runs, as create receives it: threads already resolved (>= 1).
struct RuntimeOptions {
  int threads = 1;

  // The options a caller passed through the C table (NULL: the defaults), resolved.
  static RuntimeOptions from_abi(const accel_runtime_options* o) {
    RuntimeOptions r;
    const bool has_threads =
        o != nullptr && o->size >= offsetof(accel_runtime_options, num_threads) + sizeof(o->num_threads);
    r.threads = resolve_threads(has_threads ? o->num_threads : 0);
    return r;
  }
};

namespace detail {

inline void write_error(char* err, std::size_t err_len, const char* msg) noexcept {
  if (err == nullptr || err_len == 0) return;
  const std::size_t n = std::min(std::strlen(msg), err_len - 1);
  std::memcpy(err, msg, n);
  err[n] = '\0';
}

// The C entry points of runtime class R.
template <class R>
struct Abi {
  static accel_status create(const std::uint8_t* blob, std::size_t size, const accel_runtime_options* options,
                             accel_runtime** out, char* err, std::size_t err_len) noexcept {
    if (out == nullptr) {
      write_error(err, err_len, "create: out is NULL");
      return ACCEL_ERR_RUNTIME;
    }
    *out = nullptr;
    try {
      BlobReader reader(blob, size);
      std::unique_ptr<R> rt = R::create(reader, RuntimeOptions::from_abi(options));
      if (!rt) throw BlobError("the runtime refused the blob");
      *out = reinterpret_cast<accel_runtime*>(rt.release());
      return ACCEL_OK;
    } catch (const std::bad_alloc&) {
      write_error(err, err_len, "out of memory while loading the blob");
      return ACCEL_ERR_RUNTIME;
    } catch (const std::exception& e) {
      write_error(err, err_len, e.what());
      return ACCEL_ERR_INVALID_BLOB;
    } catch (...) {
      write_error(err, err_len, "unknown error while loading the blob");
      return ACCEL_ERR_INVALID_BLOB;
    }
  }

  static accel_status run(const accel_runtime* rt, const accel_tensor* inputs, std::size_t n_inputs,
                          const accel_tensor* outputs, std::size_t n_outputs, char* err, std::size_t err_len) noexcept {
    try {
      if (rt == nullptr) throw ArgumentError("run: the runtime handle is NULL");
      if ((n_inputs != 0 && inputs == nullptr) || (n_outputs != 0 && outputs == nullptr)) {
        throw ArgumentError("run: NULL tensor array");
      }
      std::vector<TensorView> ins;
      ins.reserve(n_inputs);
      for (std::size_t i = 0; i < n_inputs; ++i) ins.push_back(TensorView::from_abi(inputs[i]));
      std::vector<TensorView> outs;
      outs.reserve(n_outputs);
      for (std::size_t i = 0; i < n_outputs; ++i) outs.push_back(TensorView::from_abi(outputs[i]));
      reinterpret_cast<const R*>(rt)->run(ins, outs);
      return ACCEL_OK;
    } catch (const ArgumentError& e) {
      write_error(err, err_len, e.what());
      return ACCEL_ERR_INVALID_ARGUMENT;
    } catch (const std::bad_alloc&) {
      write_error(err, err_len, "out of memory while running");
      return ACCEL_ERR_RUNTIME;
    } catch (const std::exception& e) {
      write_error(err, err_len, e.what());
      return ACCEL_ERR_RUNTIME;
    } catch (...) {
      write_error(err, err_len, "unknown error while running");
      return ACCEL_ERR_RUNTIME;
    }
  }

  // Frees the handle and gives the heap's free pages back to the system: a handle's packed weights
  // are large, and glibc keeps freed memory for reuse, so a server that reloads models would
  // otherwise grow by a model's weights at every reload.
  static void destroy(accel_runtime* rt) noexcept {
    if (rt == nullptr) return;
    delete reinterpret_cast<R*>(rt);
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
  }

  static std::int32_t num_threads(const accel_runtime* rt) noexcept {
    return rt == nullptr ? 0 : static_cast<std::int32_t>(reinterpret_cast<const R*>(rt)->threads());
  }
};

// The accel_dtype of a numpy dtype, or -1 (not a plain native-endian number).
inline std::int32_t numpy_dtype_code(const pybind11::dtype& dt) {
  const char order = dt.byteorder();
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  if (order == '<') return -1;
#else
  if (order == '>') return -1;
#endif
  const auto size = dt.itemsize();
  switch (dt.kind()) {
    case 'f': return size == 4 ? ACCEL_FLOAT32 : size == 8 ? ACCEL_FLOAT64 : size == 2 ? ACCEL_FLOAT16 : -1;
    case 'i': return size == 1 ? ACCEL_INT8 : size == 2 ? ACCEL_INT16 : size == 4 ? ACCEL_INT32 : size == 8 ? ACCEL_INT64 : -1;
    case 'u': return size == 1 ? ACCEL_UINT8 : size == 2 ? ACCEL_UINT16 : size == 4 ? ACCEL_UINT32 : size == 8 ? ACCEL_UINT64 : -1;
    case 'b': return size == 1 ? ACCEL_BOOL : -1;
    default: return -1;
  }
}

// ABI descriptors of a Python sequence of numpy arrays (references held until destroyed).
class TensorArgs {
 public:
  TensorArgs(pybind11::handle seq, const char* role, bool writable) {
    namespace py = pybind11;
    // a list or tuple only: a bare array would otherwise pass as the sequence of its rows
    if (!PyList_Check(seq.ptr()) && !PyTuple_Check(seq.ptr())) {
      throw std::runtime_error(std::string(role) + "s must be a list or tuple of numpy arrays, got " +
                               Py_TYPE(seq.ptr())->tp_name);
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    refs_.reserve(static_cast<std::size_t>(n));
    shapes_.resize(static_cast<std::size_t>(n));
    descs_.resize(static_cast<std::size_t>(n));
    constexpr int kNeed = py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_ | py::detail::npy_api::NPY_ARRAY_ALIGNED_;
    for (Py_ssize_t i = 0; i < n; ++i) {
      const std::string what = std::string(role) + " " + std::to_string(i);
      py::handle item(items[i]);
      if (!py::isinstance<py::array>(item)) {
        throw std::runtime_error(what + " is a " + std::string(Py_TYPE(item.ptr())->tp_name) +
                                 ", not a numpy array");
      }
      auto arr = py::reinterpret_borrow<py::array>(item);
      if ((arr.flags() & kNeed) != kNeed) throw std::runtime_error(what + " must be C-contiguous and aligned");
      if (writable && !arr.writeable()) throw std::runtime_error(what + " must be writeable");
      const std::int32_t code = numpy_dtype_code(arr.dtype());
      if (code < 0) throw std::runtime_error(what + " has dtype " + std::string(py::str(arr.dtype())) + ", not supported");
      const auto rank = arr.ndim();
      if (rank > ACCEL_MAX_RANK) throw std::runtime_error(what + " has rank " + std::to_string(rank) + " > ACCEL_MAX_RANK");
      auto& shape = shapes_[static_cast<std::size_t>(i)];
      for (py::ssize_t d = 0; d < rank; ++d) shape[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(arr.shape(d));
      descs_[static_cast<std::size_t>(i)] =
          accel_tensor{const_cast<void*>(arr.data()), code, static_cast<std::int32_t>(rank), shape.data()};
      refs_.push_back(std::move(arr));
    }
  }

  const accel_tensor* data() const { return descs_.data(); }
  std::size_t size() const { return descs_.size(); }

 private:
  std::vector<pybind11::object> refs_;
  std::vector<std::array<std::int64_t, ACCEL_MAX_RANK>> shapes_;
  std::vector<accel_tensor> descs_;
};

// A loaded blob, as the Python class Runtime sees it: everything goes through the C table.
class PyRuntime {
 public:
  PyRuntime(const accel_runtime_api* api, pybind11::buffer blob, int threads) : api_(api) {
    Py_buffer view;
    if (PyObject_GetBuffer(blob.ptr(), &view, PyBUF_SIMPLE) != 0) {
      PyErr_Clear();
      throw pybind11::type_error("Runtime(blob): blob must be bytes or another contiguous buffer");
    }
    char err[1024] = {0};
    accel_status status;
    const accel_runtime_options options{static_cast<std::uint32_t>(sizeof(accel_runtime_options)), threads};
    {
      pybind11::gil_scoped_release release;
      status = api_->create(static_cast<const std::uint8_t*>(view.buf), static_cast<std::size_t>(view.len), &options,
                            &handle_, err, sizeof err);
    }
    PyBuffer_Release(&view);
    if (status != ACCEL_OK) {
      handle_ = nullptr;
      throw pybind11::value_error(err[0] ? err : "the runtime refused the blob");
    }
  }

  ~PyRuntime() { api_->destroy(handle_); }
  PyRuntime(const PyRuntime&) = delete;
  PyRuntime& operator=(const PyRuntime&) = delete;

  void run(pybind11::handle inputs, pybind11::handle outputs) const {
    TensorArgs ins(inputs, "input", false);
    TensorArgs outs(outputs, "output", true);
    char err[1024] = {0};
    accel_status status;
    {
      pybind11::gil_scoped_release release;
      status = api_->run(handle_, ins.data(), ins.size(), outs.data(), outs.size(), err, sizeof err);
    }
    if (status != ACCEL_OK) throw std::runtime_error(err[0] ? err : "the runtime failed");
  }

  const char* backend() const { return api_->backend; }
  int threads() const { return api_->num_threads(handle_); }

 private:
  const accel_runtime_api* api_;
  accel_runtime* handle_ = nullptr;
};

}  // namespace detail

// The static C table of runtime class R (one per R and module).
template <class R>
const accel_runtime_api* runtime_api(const char* backend) {
  static const accel_runtime_api api = {ACCEL_ABI_VERSION, backend, &detail::Abi<R>::create, &detail::Abi<R>::run,
                                        &detail::Abi<R>::destroy, &detail::Abi<R>::num_threads};
  return &api;
}

// Fills module m: ABI_VERSION, __accel_abi__ and class Runtime.
namespace detail {
// R::kernel_library(), where R names the library it computes with ("oneDNN 3.2.0").
template <class R, class = void>
struct HasKernelLibrary : std::false_type {};
template <class R>
struct HasKernelLibrary<R, std::void_t<decltype(R::kernel_library())>> : std::true_type {};
}  // namespace detail

template <class R>
void bind_runtime(pybind11::module_& m, const char* backend) {
  namespace py = pybind11;
  const accel_runtime_api* api = runtime_api<R>(backend);
  m.attr("ABI_VERSION") = py::int_(api->abi_version);
  m.attr("__accel_abi__") = py::capsule(static_cast<const void*>(api), ACCEL_RUNTIME_CAPSULE);
  // what `accel backends` shows as the plugin's kernel library ("" when R does not say)
  if constexpr (detail::HasKernelLibrary<R>::value) {
    m.attr("KERNEL_LIBRARY") = py::str(std::string(R::kernel_library()));
  } else {
    m.attr("KERNEL_LIBRARY") = py::str("");
  }
  py::class_<detail::PyRuntime>(m, "Runtime", py::module_local(),
                                "A loaded blob of this backend; one instance may run from several threads at once.")
      .def(py::init([api](py::buffer blob, int threads) { return std::make_unique<detail::PyRuntime>(api, blob, threads); }),
           py::arg("blob"), py::arg("threads") = 0,
           "Parse and validate blob (ValueError when it is malformed); compute with `threads` threads "
           "(0: every core).")
      .def("run", &detail::PyRuntime::run, py::arg("inputs"), py::arg("outputs"),
           "Read the input arrays and write the output arrays (C-contiguous, exact shapes and dtypes); "
           "RuntimeError on any failure.")
      .def_property_readonly("backend", &detail::PyRuntime::backend)
      .def_property_readonly("threads", &detail::PyRuntime::threads, "The threads this handle computes with.");
}

}  // namespace accel_sdk

// Defines the Python extension module `module_name` for runtime class R of backend `backend_name`.
#define ACCEL_SDK_RUNTIME_MODULE(module_name, backend_name, R) \
  PYBIND11_MODULE(module_name, m) { ::accel_sdk::bind_runtime<R>(m, backend_name); }

#endif  // ACCEL_SDK_RUNTIME_HPP
