// The ncnn runtime: one partition, as ncnn's own .param text and .bin weights, run by one ncnn::Net.
//
// The blob (serializer.py writes it; README.md documents it):
//   magic "NCNB", u32 version 1
//   u32 input count, then per input: string blob name, counted i64 shape (float32, NCHW)
//   u32 output count, then the same per output
//   string: the .param text
//   constant (64-aligned): the .bin weights
//
// create() loads the .param and .bin once into one ncnn::Net, with the thread count chosen at
// load time and every fp16/bf16 path off (float32 storage and arithmetic, as the reference).
// run() makes one Extractor per call (its own blob allocators, so concurrent calls share only
// the Net, which ncnn only reads while extracting), copies the inputs into ncnn Mats, extracts
// every output and copies it back: a partition runs whole, in one call.
#include <accel_sdk/blob_reader.hpp>
#include <accel_sdk/runtime.hpp>
#include <accel_sdk/tensor.hpp>

#include <datareader.h>
#include <mat.h>
#include <net.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

using accel_sdk::ArgumentError;
using accel_sdk::BlobError;
using accel_sdk::BlobReader;
using accel_sdk::Shape;
using accel_sdk::TensorSpec;
using accel_sdk::TensorView;

constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxPorts = 1024;
constexpr std::size_t kMaxName = 256;
constexpr std::size_t kMaxParam = std::size_t{64} << 20;

// A graph input or output: the ncnn blob it is, its accel shape and that shape as an ncnn Mat's
// (w, h, d, c) with the number of those dims ncnn uses (1: w; 2: w, h; 3: w, h, c).
struct Port {
  std::string name;
  TensorSpec spec;
  int dims = 0;
  int w = 1, h = 1, c = 1;
};

// The Mat an accel float32 tensor is: [1, C, H, W] -> (W, H, C); [A, B, C] -> (C, B, A);
// [M, K] -> (K, M); [N] -> (N). The serializer maps shapes the same way (support.mat_shape).
Port port(BlobReader& blob, const char* role) {
  Port p;
  p.name = blob.read_string(kMaxName, role);
  const auto dims = blob.read_counted_array<std::int64_t>(role, ACCEL_MAX_RANK);
  p.spec.dtype = ACCEL_FLOAT32;
  for (std::int64_t d : dims) {
    if (d <= 0 || d > (std::int64_t{1} << 30)) blob.fail(std::string(role) + " " + p.name + ": dimension out of range");
  }
  p.spec.shape = Shape(dims.data(), dims.size());
  const auto& s = dims;
  switch (s.size()) {
    case 1: p.dims = 1; p.w = int(s[0]); break;
    case 2: p.dims = 2; p.w = int(s[1]); p.h = int(s[0]); break;
    case 3: p.dims = 3; p.w = int(s[2]); p.h = int(s[1]); p.c = int(s[0]); break;
    case 4:
      if (s[0] != 1) blob.fail(std::string(role) + " " + p.name + ": batch must be 1");
      p.dims = 3; p.w = int(s[3]); p.h = int(s[2]); p.c = int(s[1]);
      break;
    default: blob.fail(std::string(role) + " " + p.name + ": rank must be 1 to 4");
  }
  if (std::size_t(p.w) * std::size_t(p.h) * std::size_t(p.c) != p.spec.shape.elements()) {
    blob.fail(std::string(role) + " " + p.name + ": shape does not fit a Mat");
  }
  return p;
}

std::vector<Port> ports(BlobReader& blob, const char* role) {
  const auto n = blob.read_in_range<std::uint32_t>(1, kMaxPorts, role);
  std::vector<Port> out;
  for (std::uint32_t i = 0; i < n; ++i) out.push_back(port(blob, role));
  return out;
}

// Channel by channel between a dense accel buffer and a Mat (whose channels may be padded: cstep).
void copy_in(const Port& p, const float* src, ncnn::Mat& m) {
  const std::size_t plane = std::size_t(p.w) * std::size_t(p.h);
  for (int q = 0; q < p.c; ++q) std::memcpy(m.channel(q), src + q * plane, plane * sizeof(float));
}

void copy_out(const Port& p, const ncnn::Mat& m, float* dst) {
  if (m.empty() || m.elemsize != sizeof(float) || m.elempack != 1) {
    throw std::runtime_error("ncnn returned no float32 data for output " + p.name);
  }
  const std::size_t plane = std::size_t(m.w) * std::size_t(m.h) * std::size_t(m.d);
  if (plane * std::size_t(m.c) != p.spec.shape.elements()) {
    throw std::runtime_error("ncnn output " + p.name + " has " + std::to_string(plane * std::size_t(m.c)) +
                             " elements, expected " + p.spec.describe());
  }
  for (int q = 0; q < m.c; ++q) std::memcpy(dst + q * plane, m.channel(q), plane * sizeof(float));
}

class NcnnRuntime {
 public:
  static std::unique_ptr<NcnnRuntime> create(BlobReader& blob, const accel_sdk::RuntimeOptions& options) {
    blob.expect_magic("NCNB");
    blob.expect_version(kVersion, kVersion);
    auto rt = std::make_unique<NcnnRuntime>();
    rt->inputs_ = ports(blob, "input");
    rt->outputs_ = ports(blob, "output");
    const std::string param = blob.read_string(kMaxParam, "param");
    std::size_t size = 0;
    const std::uint8_t* bin = blob.read_constant(64, &size, "weights");
    if (blob.remaining() != 0) blob.fail("trailing bytes after the weights");
    // ncnn reads the weights in place, 4-byte aligned, for as long as the Net lives: keep a copy.
    rt->weights_.resize((size + 3) / 4 + 1);
    if (size) std::memcpy(rt->weights_.data(), bin, size);
    rt->threads_ = options.threads;
    rt->load(param, size);
    return rt;
  }

  std::vector<TensorSpec> input_specs() const { return specs(inputs_); }
  std::vector<TensorSpec> output_specs() const { return specs(outputs_); }

  void run(const std::vector<TensorView>& inputs, std::vector<TensorView>& outputs) const {
    check("input", inputs, inputs_);
    check("output", outputs, outputs_);
    ncnn::Extractor ex = net_.create_extractor();
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      const Port& p = inputs_[i];
      ncnn::Mat m = p.dims == 1 ? ncnn::Mat(p.w) : p.dims == 2 ? ncnn::Mat(p.w, p.h) : ncnn::Mat(p.w, p.h, p.c);
      if (m.empty()) throw std::bad_alloc();
      copy_in(p, inputs[i].data_as<const float>(), m);
      if (ex.input(p.name.c_str(), m) != 0) throw std::runtime_error("ncnn refused input " + p.name);
    }
    for (std::size_t i = 0; i < outputs_.size(); ++i) {
      ncnn::Mat m;
      if (ex.extract(outputs_[i].name.c_str(), m) != 0) {
        throw std::runtime_error("ncnn failed computing output " + outputs_[i].name);
      }
      copy_out(outputs_[i], m, outputs[i].data_as<float>());
    }
  }

  int threads() const { return threads_; }

 private:
  static void check(const char* role, const std::vector<TensorView>& views, const std::vector<Port>& ports) {
    accel_sdk::check_tensors(role, views, specs(ports));
  }

  static std::vector<TensorSpec> specs(const std::vector<Port>& ports) {
    std::vector<TensorSpec> out;
    for (const Port& p : ports) out.push_back(p.spec);
    return out;
  }

  void load(const std::string& param, std::size_t size) {
    ncnn::Option& opt = net_.opt;
    opt.num_threads = threads_;
    opt.lightmode = true;  // intermediates freed as soon as their last reader ran
    opt.use_fp16_packed = opt.use_fp16_storage = opt.use_fp16_arithmetic = false;
    opt.use_bf16_storage = opt.use_bf16_packed = false;
    opt.use_fp16_uniform = false;
    opt.use_vulkan_compute = false;
    opt.use_packing_layout = true;
    std::string text = param;  // ncnn's reader wants a terminated string
    const unsigned char* p = reinterpret_cast<const unsigned char*>(text.c_str());
    ncnn::DataReaderFromMemory param_reader(p, text.size() + 1);
    if (net_.load_param(param_reader) != 0) throw BlobError("ncnn refused the .param of the blob");
    const unsigned char* w = reinterpret_cast<const unsigned char*>(weights_.data());
    ncnn::DataReaderFromMemory model_reader(w, size);
    if (net_.load_model(model_reader) != 0) throw BlobError("ncnn refused the .bin of the blob");
    const std::size_t used = static_cast<std::size_t>(w - reinterpret_cast<const unsigned char*>(weights_.data()));
    if (used != size) {
      throw BlobError("the .bin holds " + std::to_string(size) + " bytes, the layers read " + std::to_string(used));
    }
    for (const auto* ps : {&inputs_, &outputs_}) {
      for (const Port& port : *ps) {
        bool found = false;
        for (const ncnn::Blob& b : net_.blobs()) found = found || b.name == port.name;
        if (!found) throw BlobError("the .param has no blob " + port.name);
      }
    }
  }

  ncnn::Net net_;
  std::vector<std::uint32_t> weights_;
  std::vector<Port> inputs_, outputs_;
  int threads_ = 1;
};

}  // namespace

#ifndef ACCEL_NCNN_NO_MODULE  // fuzz/fuzz_ncnn_blob.cpp includes this file without the Python module
ACCEL_SDK_RUNTIME_MODULE(_runtime, "ncnn", NcnnRuntime)
#endif
