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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <sstream>
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

// What create checks of the .param before ncnn sees it. ncnn parses a .param for syntax only and
// trusts its numbers: a weighted layer whose weight size disagrees with the input it meets reads past
// its weights. So the layers are walked here, with only what the serializer writes allowed (its
// layer types and their parameter keys), the shapes propagated from the graph inputs, and every
// weighted layer's weight size, window and output checked against the shape it meets; the graph
// outputs must come out with the shapes the blob declares.
class ParamCheck {
 public:
  struct Mat {
    int dims = 0;
    std::int64_t w = 1, h = 1, c = 1;
    std::int64_t size() const { return w * h * c; }
    bool operator==(const Mat& o) const { return dims == o.dims && w == o.w && h == o.h && c == o.c; }
  };

  static void run(const std::string& text, const std::vector<Port>& inputs, const std::vector<Port>& outputs) {
    ParamCheck pc(inputs);
    std::istringstream in(text);
    std::int64_t magic = 0, layers = 0, blobs = 0;
    if (!(in >> magic) || magic != 7767517) fail("the .param does not start with ncnn's magic 7767517");
    if (!(in >> layers >> blobs) || layers < 1 || layers > (1 << 20) || blobs < 1 || blobs > (1 << 20)) {
      fail("the .param's layer and blob counts are out of range");
    }
    std::string line;
    std::getline(in, line);
    for (std::int64_t i = 0; i < layers; ++i) {
      if (!std::getline(in, line)) fail("the .param has fewer layers than it says");
      pc.layer(line, static_cast<int>(i));
    }
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) fail("the .param has more layers than it says");
    }
    for (const Port& p : outputs) {
      const auto it = pc.shapes_.find(p.name);
      if (it == pc.shapes_.end()) fail("the .param writes no blob " + p.name);
      if (!(it->second == Mat{p.dims, p.w, p.h, p.c})) fail("the .param's blob " + p.name + " does not have the output's shape");
    }
  }

 private:
  explicit ParamCheck(const std::vector<Port>& inputs) {
    for (const Port& p : inputs) ports_[p.name] = Mat{p.dims, p.w, p.h, p.c};
  }

  [[noreturn]] static void fail(const std::string& what) { throw BlobError(what); }

  // One layer line: type, name, bottom and top counts, their names, then key=value parameters.
  void layer(const std::string& line, int index) {
    std::istringstream ls(line);
    std::string type, name;
    int nb = -1, nt = -1;
    if (!(ls >> type >> name >> nb >> nt) || nb < 0 || nt < 1 || nb > 1024 || nt > 1024) {
      fail("layer " + std::to_string(index) + " of the .param is malformed");
    }
    const std::string where = "layer " + std::to_string(index) + " (" + type + " " + name + ")";
    std::vector<Mat> ins;
    for (int k = 0; k < nb; ++k) {
      std::string b;
      if (!(ls >> b)) fail(where + ": missing a bottom");
      const auto it = shapes_.find(b);
      if (it == shapes_.end()) fail(where + ": reads blob " + b + " before it is written");
      ins.push_back(it->second);
      shapes_.erase(it);  // each blob has one reader (Split makes copies)
    }
    std::vector<std::string> tops(static_cast<std::size_t>(nt));
    for (auto& t : tops) {
      if (!(ls >> t)) fail(where + ": missing a top");
    }
    std::map<int, std::vector<double>> params;
    std::string kv;
    while (ls >> kv) {
      const auto eq = kv.find('=');
      if (eq == std::string::npos) fail(where + ": parameter " + kv + " is not key=value");
      const int key = std::atoi(kv.substr(0, eq).c_str());
      std::vector<double> values;
      std::stringstream vs(kv.substr(eq + 1));
      std::string item;
      while (std::getline(vs, item, ',')) values.push_back(std::strtod(item.c_str(), nullptr));
      if (key <= -23300) {  // an array: its count first
        if (values.empty() || values[0] != static_cast<double>(values.size() - 1)) fail(where + ": array " + kv + " miscounted");
        values.erase(values.begin());
        params[-23300 - key] = values;
      } else {
        if (values.size() != 1) fail(where + ": parameter " + kv + " is not one number");
        params[key] = values;
      }
    }
    const std::vector<Mat> outs = shape(type, where, ins, params, nt);
    if (type == "Input") {  // a graph input, with the shape the blob declares for it
      const auto it = ports_.find(tops[0]);
      if (it == ports_.end() || !(it->second == outs[0])) fail(where + ": not a graph input of the declared shape");
      ports_.erase(it);
    }
    for (std::size_t k = 0; k < tops.size(); ++k) {
      if (!shapes_.emplace(tops[k], outs[k]).second) fail(where + ": writes blob " + tops[k] + " twice");
    }
  }

  // The value of key (an int, in [lo, hi]), or fallback when absent.
  static std::int64_t integer(const std::map<int, std::vector<double>>& p, int key, std::int64_t fallback,
                              std::int64_t lo, std::int64_t hi, const std::string& where) {
    const auto it = p.find(key);
    if (it == p.end()) return fallback;
    const double v = it->second.at(0);
    if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)) || v != std::floor(v)) {
      fail(where + ": parameter " + std::to_string(key) + " out of range");
    }
    return static_cast<std::int64_t>(v);
  }

  static void only(const std::map<int, std::vector<double>>& p, std::initializer_list<int> keys, const std::string& where) {
    for (const auto& kv : p) {
      if (std::find(keys.begin(), keys.end(), kv.first) == keys.end()) fail(where + ": parameter " + std::to_string(kv.first) + " is not one the serializer writes");
    }
  }

  // The Mat an Input or a Reshape names: 0=w, 1=h, 2=c, as many dims as keys given.
  static Mat mat_of(const std::map<int, std::vector<double>>& p, const std::string& where) {
    constexpr std::int64_t kDim = std::int64_t{1} << 30;
    only(p, {0, 1, 2}, where);
    Mat m;
    m.w = integer(p, 0, 0, 1, kDim, where);
    m.h = integer(p, 1, 1, 1, kDim, where);
    m.c = integer(p, 2, 1, 1, kDim, where);
    m.dims = p.count(2) ? 3 : p.count(1) ? 2 : 1;
    return m;
  }

  static void arity(const std::vector<Mat>& ins, std::size_t n, int nt, int tops, const std::string& where) {
    if (ins.size() != n || nt != tops) fail(where + ": wrong number of bottoms or tops");
  }

  // Output size along one axis of a window: (in + pads - extent) / stride + 1, at least 1.
  static std::int64_t window(std::int64_t in, std::int64_t pads, std::int64_t extent, std::int64_t stride, const std::string& where) {
    if (in + pads < extent) fail(where + ": the window is larger than its padded input");
    return (in + pads - extent) / stride + 1;
  }

  std::vector<Mat> shape(const std::string& type, const std::string& where, const std::vector<Mat>& ins,
                         const std::map<int, std::vector<double>>& p, int nt) {
    constexpr std::int64_t kDim = std::int64_t{1} << 30;
    if (type == "Input") {
      arity(ins, 0, nt, 1, where);
      return {mat_of(p, where)};
    }
    if (type == "Split") {
      if (ins.size() != 1) fail(where + ": a Split reads one blob");
      only(p, {}, where);
      return std::vector<Mat>(static_cast<std::size_t>(nt), ins[0]);
    }
    if (type == "ReLU" || type == "Sigmoid" || type == "Clip" || type == "LRN" || type == "Softmax") {
      arity(ins, 1, nt, 1, where);
      if (type == "ReLU") only(p, {}, where);
      if (type == "Sigmoid") only(p, {}, where);
      if (type == "Clip") only(p, {0, 1}, where);
      if (type == "LRN") {
        only(p, {0, 1, 2, 3, 4}, where);
        integer(p, 1, 5, 1, 1 << 16, where);
        if (ins[0].dims != 3) fail(where + ": an LRN reads a 3-D blob");
      }
      if (type == "Softmax") {
        only(p, {0, 1}, where);
        integer(p, 0, 0, 0, ins[0].dims - 1, where);
      }
      return {ins[0]};
    }
    if (type == "BatchNorm") {
      arity(ins, 1, nt, 1, where);
      only(p, {0, 1}, where);
      const std::int64_t channels = integer(p, 0, 0, 1, kDim, where);
      const std::int64_t have = ins[0].dims == 3 ? ins[0].c : ins[0].dims == 2 ? ins[0].h : ins[0].w;
      if (channels != have) fail(where + ": channels do not match its input");
      return {ins[0]};
    }
    if (type == "BinaryOp") {
      arity(ins, 2, nt, 1, where);
      only(p, {0}, where);
      integer(p, 0, 0, 0, 0, where);  // add
      if (!(ins[0] == ins[1])) fail(where + ": its inputs differ in shape");
      return {ins[0]};
    }
    if (type == "Concat") {
      if (ins.empty() || nt != 1) fail(where + ": wrong number of bottoms or tops");
      only(p, {0}, where);
      const std::int64_t axis = integer(p, 0, 0, 0, ins[0].dims - 1, where);
      const int along = static_cast<int>(ins[0].dims - 1 - axis);  // 0: w, 1: h, 2: c (ncnn's axis 0 is the outermost)
      auto dim = [](Mat& m, int k) -> std::int64_t& { return k == 0 ? m.w : k == 1 ? m.h : m.c; };
      Mat out = ins[0];
      dim(out, along) = 0;
      for (Mat m : ins) {
        if (m.dims != out.dims) fail(where + ": its inputs differ in rank");
        for (int k = 0; k < 3; ++k) {
          if (k != along && dim(m, k) != dim(out, k)) fail(where + ": its inputs do not fit along the axis");
        }
        dim(out, along) += dim(m, along);
      }
      return {out};
    }
    if (type == "Reshape") {
      arity(ins, 1, nt, 1, where);
      const Mat m = mat_of(p, where);
      if (m.size() != ins[0].size()) fail(where + ": the new shape does not hold its input");
      return {m};
    }
    if (type == "Pooling") {
      arity(ins, 1, nt, 1, where);
      only(p, {0, 1, 11, 2, 12, 3, 14, 13, 15, 5, 6}, where);
      if (ins[0].dims != 3) fail(where + ": a Pooling reads a 3-D blob");
      integer(p, 0, 0, 0, 1, where);
      integer(p, 5, 0, 1, 1, where);  // valid padding, explicit pads (what the serializer writes)
      const std::int64_t kw = integer(p, 1, 0, 1, kDim, where), kh = integer(p, 11, kw, 1, kDim, where);
      const std::int64_t sw = integer(p, 2, 1, 1, kDim, where), sh = integer(p, 12, sw, 1, kDim, where);
      const std::int64_t pl = integer(p, 3, 0, 0, kDim, where), pr = integer(p, 14, pl, 0, kDim, where);
      const std::int64_t pt = integer(p, 13, pl, 0, kDim, where), pb = integer(p, 15, pt, 0, kDim, where);
      if (pl >= kw || pr >= kw || pt >= kh || pb >= kh) fail(where + ": padding must be smaller than the window");
      return {Mat{3, window(ins[0].w, pl + pr, kw, sw, where), window(ins[0].h, pt + pb, kh, sh, where), ins[0].c}};
    }
    if (type == "Convolution" || type == "ConvolutionDepthWise") {
      arity(ins, 1, nt, 1, where);
      only(p, {0, 1, 11, 2, 12, 3, 13, 4, 15, 14, 16, 5, 6, 7, 9, 10}, where);
      if (ins[0].dims != 3) fail(where + ": a convolution reads a 3-D blob");
      const std::int64_t o = integer(p, 0, 0, 1, kDim, where);
      const std::int64_t kw = integer(p, 1, 0, 1, 1 << 16, where), kh = integer(p, 11, kw, 1, 1 << 16, where);
      const std::int64_t dw = integer(p, 2, 1, 1, 1 << 16, where), dh = integer(p, 12, dw, 1, 1 << 16, where);
      const std::int64_t sw = integer(p, 3, 1, 1, 1 << 16, where), sh = integer(p, 13, sw, 1, 1 << 16, where);
      const std::int64_t pl = integer(p, 4, 0, 0, 1 << 16, where), pr = integer(p, 15, pl, 0, 1 << 16, where);
      const std::int64_t pt = integer(p, 14, pl, 0, 1 << 16, where), pb = integer(p, 16, pt, 0, 1 << 16, where);
      integer(p, 5, 0, 0, 1, where);
      integer(p, 9, 0, 0, 3, where);
      const std::int64_t group = type == "Convolution" ? (p.count(7) ? -1 : 1) : integer(p, 7, 1, 1, kDim, where);
      if (group < 1) fail(where + ": a Convolution has no groups");
      const std::int64_t c = ins[0].c;
      if (c % group != 0 || o % group != 0) fail(where + ": groups do not divide the channels");
      const std::int64_t weights = integer(p, 6, 0, 1, std::int64_t{1} << 40, where);
      if (weights != o * (c / group) * kw * kh) fail(where + ": its weight size does not fit its input's channels and window");
      return {Mat{3, window(ins[0].w, pl + pr, dw * (kw - 1) + 1, sw, where),
                  window(ins[0].h, pt + pb, dh * (kh - 1) + 1, sh, where), o}};
    }
    if (type == "InnerProduct") {
      arity(ins, 1, nt, 1, where);
      only(p, {0, 1, 2, 9, 10}, where);
      const std::int64_t o = integer(p, 0, 0, 1, kDim, where);
      integer(p, 1, 0, 0, 1, where);
      integer(p, 9, 0, 0, 3, where);
      const std::int64_t weights = integer(p, 2, 0, 1, std::int64_t{1} << 40, where);
      // a 2-D input is rows of w features (one output row each); any other is flattened
      const Mat& x = ins[0];
      const std::int64_t features = x.dims == 2 ? x.w : x.size();
      if (weights != o * features) fail(where + ": its weight size does not fit its input");
      return {x.dims == 2 ? Mat{2, o, x.h, 1} : Mat{1, o, 1, 1}};
    }
    fail(where + ": layer type " + type + " is not one the serializer writes");
  }

  std::map<std::string, Mat> shapes_;
  std::map<std::string, Mat> ports_;
};

class NcnnRuntime {
 public:
  // what `accel backends` shows: the ncnn release this runtime is built on (CMakeLists.txt defines it)
  static std::string kernel_library() { return std::string("ncnn ") + ACCEL_NCNN_VERSION; }
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
    ParamCheck::run(param, rt->inputs_, rt->outputs_);
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
