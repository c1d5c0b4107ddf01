// The acl runtime on Arm Compute Library: one partition (accel-sdk's graph blob, kind "acl")
// run by ACL's NEON functions. CMakeLists.txt builds this file instead of runtime.cpp when
// the target is aarch64 and Arm Compute Library is installed; the blob, the support table
// and the reasons are the same as on x86.
//
// Every node becomes one or more ACL functions, configured once when the blob is loaded
// (ACL's validate() first: its error text, naming the node, is what a refused blob reports),
// prepared (weights reshaped into ACL's layout), then run many times on the caller's buffers,
// which are imported into the functions' tensors run by run (or copied in and out where a
// function asked for padded tensors).
//
// Exactness. float32 layers are ACL's (NEConvolutionLayer without fast math, so no Winograd
// variant that changes results; NEDepthwiseConvolutionLayer, NEFullyConnectedLayer,
// NEPoolingLayer, elementwise functions, NESoftmaxLayer, NEPermute). Quantized layers are bit-exact with accel.quant:
//  - convolutions and dense layers: ACL's NEGEMMLowpMatrixMultiplyCore hands back the int32
//    accumulators (after NEIm2Col where the window is larger than one pixel), which the
//    sdk's ChannelRequantizer requantizes (ACL's own output stage rounds twice, gemmlowp's way);
//  - depthwise convolutions: ACL has no int32 output there, so the data minus its zero point
//    (NEDequantizationLayer with scale 1) and the weights minus theirs are convolved in
//    float32 by NEDepthwiseConvolutionLayer; with at most 5x5 taps of products below 2^16
//    every partial sum is an integer below 2^24, exact in float32 in any order, and NECast
//    turns the sums back into int32 accumulators for the same requantizer;
//  - requantize, quantize, dequantize, qnn.add and integer average pools are accel's own (nodes.hpp).
//
// ACL's scheduler is one per process and its functions keep state between runs, so runs of
// all acl handles in a process take turns (AclCall); each sets the scheduler's thread count
// to its handle's before it starts.
#include "nodes.hpp"

#include <accel_sdk/arena.hpp>
#include <accel_sdk/runtime.hpp>

#include <arm_compute/core/Types.h>
#include <arm_compute/core/Version.h>
#include <arm_compute/runtime/NEON/NEFunctions.h>
#include <arm_compute/runtime/NEON/NEScheduler.h>
#include <arm_compute/runtime/Tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace accel_acl;  // the nodes (nodes.hpp)
using accel_sdk::AlignedBuffer;
namespace acl = arm_compute;

std::mutex& acl_mutex() {
  static std::mutex m;
  return m;
}

// One run (or the load) of an acl handle: ACL to itself, with the handle's thread count.
class AclCall {
 public:
  explicit AclCall(int threads) : lock_(acl_mutex()) {
    acl::NEScheduler::get().set_num_threads(static_cast<unsigned int>(std::max(1, threads)));
  }
  void finish() {}
  // "Arm Compute Library v20.08": the version the loaded library reports in its build information
  static std::string library() {
    const std::string info = acl::build_information();
    const std::string key = "arm_compute_version=";
    const std::size_t at = info.find(key);
    if (at == std::string::npos) return "Arm Compute Library";
    const std::size_t from = at + key.size();
    return "Arm Compute Library " + info.substr(from, info.find_first_of(" \n", from) - from);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

using Kernel = accel_sdk::Kernel<AclCall>;
using Exec = Kernel::Exec;

// ACL's data type for an accel dtype (8-bit types are ACL's asymmetric quantized ones).
acl::DataType acl_type(std::int32_t dtype) {
  switch (dtype) {
    case ACCEL_FLOAT32: return acl::DataType::F32;
    case ACCEL_UINT8: return acl::DataType::QASYMM8;
    case ACCEL_INT8: return acl::DataType::QASYMM8_SIGNED;
    case ACCEL_INT32: return acl::DataType::S32;
    default: throw std::invalid_argument(std::string("dtype ") + accel_sdk::dtype_name(dtype) + " has no Arm Compute Library type");
  }
}

// ACL orders dimensions innermost first: [N, H, W, C] is TensorShape(C, W, H, N).
acl::TensorShape acl_shape(const Shape& s) {
  if (s.rank() > static_cast<int>(acl::TensorShape::num_max_dimensions)) {
    throw std::invalid_argument("rank " + std::to_string(s.rank()) + " is more than Arm Compute Library's " +
                                std::to_string(acl::TensorShape::num_max_dimensions) + " dimensions");
  }
  acl::TensorShape t;
  t.set_num_dimensions(0);
  for (int d = 0; d < s.rank(); ++d) t.set(static_cast<std::size_t>(s.rank() - 1 - d), static_cast<std::size_t>(s[d]), false);
  if (s.rank() == 0) t.set(0, 1, false);
  return t;
}

// A tensor an ACL function reads or writes. Its info is set before the function is
// configured; its memory is the run's buffer, imported each run, unless the function
// asked for padding, in which case it owns padded memory and the run copies in and out.
class Buf {
 public:
  acl::Tensor t;

  void init(const acl::TensorShape& shape, acl::DataType type, acl::DataLayout layout = acl::DataLayout::NCHW,
            acl::QuantizationInfo q = acl::QuantizationInfo(1.f, 0)) {
    acl::TensorInfo info(shape, 1, type, q);
    info.set_data_layout(layout);
    t.allocator()->init(info);
  }
  void init(const GraphTensor& g, acl::DataLayout layout = acl::DataLayout::NCHW, acl::QuantizationInfo q = acl::QuantizationInfo(1.f, 0)) {
    init(acl_shape(g.spec.shape), acl_type(g.spec.dtype), layout, q);
  }
  // After the function is configured: owned memory if it asked for padding.
  void settle() {
    staged_ = !t.info()->padding().empty();
    if (staged_) t.allocator()->allocate();
  }
  // A buffer the function only reads (weights, biases): owned, filled once.
  void hold(const void* data, std::size_t bytes) {
    t.allocator()->allocate();
    if (t.info()->padding().empty()) {
      std::memcpy(t.buffer(), data, bytes);
    } else {
      copy(static_cast<std::uint8_t*>(const_cast<void*>(data)), true);
    }
  }
  // Before a run: the data the function reads.
  void in(const void* p) {
    // ACL's functions read through a non-const tensor; an input is only read
    void* data = const_cast<void*>(p);
    if (staged_) {
      copy(static_cast<std::uint8_t*>(data), true);
    } else {
      import(data);
    }
  }
  // Before a run: where the function writes.
  void out(void* p) {
    if (!staged_) import(p);
  }
  // After a run: the function's result, if it was written to owned memory.
  void done(void* p) {
    if (staged_) copy(static_cast<std::uint8_t*>(p), false);
  }
  std::size_t dense_bytes() const { return t.info()->tensor_shape().total_size() * t.info()->element_size(); }

 private:
  void import(void* p) {
    const acl::Status s = t.allocator()->import_memory(p);
    if (!bool(s)) throw std::runtime_error("Arm Compute Library refused a buffer: " + s.error_description());
  }
  // Dense rows of the innermost dimension to or from the padded tensor.
  void copy(std::uint8_t* dense, bool to_tensor) {
    const acl::ITensorInfo& info = *t.info();
    const acl::TensorShape& shape = info.tensor_shape();
    const std::size_t row = shape[0] * info.element_size();
    const std::size_t rows = row ? shape.total_size() / shape[0] : 0;
    std::uint8_t* base = t.buffer() + info.offset_first_element_in_bytes();
    for (std::size_t r = 0; r < rows; ++r) {
      std::size_t rest = r, at = 0;
      for (std::size_t d = 1; d < shape.num_dimensions(); ++d) {
        at += (rest % shape[d]) * info.strides_in_bytes()[d];
        rest /= shape[d];
      }
      if (to_tensor) {
        std::memcpy(base + at, dense + r * row, row);
      } else {
        std::memcpy(dense + r * row, base + at, row);
      }
    }
  }

  bool staged_ = false;
};

// ACL's validate() of a function, and its configure: a refusal names the node with ACL's words.
void check(const Ctx& c, const acl::Status& s, const char* function) {
  if (!bool(s)) c.fail(std::string("Arm Compute Library's ") + function + " refused it: " + s.error_description());
}

acl::ActivationLayerInfo act_info(const Activation& a) {
  if (a.act == 1) return acl::ActivationLayerInfo(acl::ActivationLayerInfo::ActivationFunction::RELU);
  if (a.act == 2) return acl::ActivationLayerInfo(acl::ActivationLayerInfo::ActivationFunction::BOUNDED_RELU, a.hi);
  return acl::ActivationLayerInfo();
}

acl::PadStrideInfo pad_stride(const Window& w) {
  return acl::PadStrideInfo(static_cast<unsigned>(w.sw), static_cast<unsigned>(w.sh), static_cast<unsigned>(w.pl),
                            static_cast<unsigned>(w.pr), static_cast<unsigned>(w.pt), static_cast<unsigned>(w.pb),
                            acl::DimensionRoundingType::FLOOR);
}

// OHWI weights [O, KH, KW, 1] of a depthwise convolution as ACL's [KH, KW, O].
template <class T>
std::vector<T> depthwise_weights(const T* w, std::int64_t O, std::int64_t K) {
  std::vector<T> out(static_cast<std::size_t>(O * K));
  for (std::int64_t o = 0; o < O; ++o) {
    for (std::int64_t k = 0; k < K; ++k) out[static_cast<std::size_t>(k * O + o)] = w[o * K + k];
  }
  return out;
}

// -- float32 convolution and dense -----------------------------------------------------

// conv2d (+ bias, relu / bounded relu): NEConvolutionLayer, or NEDepthwiseConvolutionLayer
// when every input channel has a group of its own.
class ConvF32 final : public Kernel {
 public:
  explicit ConvF32(const Ctx& c) {
    const auto [x, w, y] = float_operands(c, 4);
    const Shape& xs = x.spec.shape;
    const Shape& ws = w.spec.shape;
    const std::int64_t groups = c.integer("groups", 1, 1 << 20);
    const Window win = conv_window(c, ws[1], ws[2]);
    check_conv_shapes(c, xs, ws, y.spec.shape, groups, win);
    const Activation a = Activation::read(c, 0);
    const std::int64_t O = ws[0];
    const bool depthwise = groups > 1;
    if (depthwise && groups != xs[3]) c.fail("grouped convolutions other than depthwise are not supported");
    x_.init(x, acl::DataLayout::NHWC);
    y_.init(y, acl::DataLayout::NHWC);
    const float* wdata = reinterpret_cast<const float*>(w.data);
    std::vector<float> dw;
    if (depthwise) {
      w_.init(acl::TensorShape(static_cast<std::size_t>(O), static_cast<std::size_t>(ws[2]), static_cast<std::size_t>(ws[1])),
              acl::DataType::F32, acl::DataLayout::NHWC);
      dw = depthwise_weights(wdata, O, ws[1] * ws[2]);
      wdata = dw.data();
    } else {
      w_.init(w, acl::DataLayout::NHWC);  // OHWI is ACL's NHWC weight order, TensorShape(I, W, H, O)
    }
    const float* bias_data = float_bias(c, O);
    const bool has_bias = bias_data != nullptr;
    if (has_bias) b_.init(c.in(2));
    const acl::ITensor* bias = has_bias ? &b_.t : nullptr;
    const acl::Size2D dilation(static_cast<std::size_t>(win.dw), static_cast<std::size_t>(win.dh));
    if (depthwise) {
      const unsigned mult = static_cast<unsigned>(O / groups);
      check(c, acl::NEDepthwiseConvolutionLayer::validate(x_.t.info(), w_.t.info(), has_bias ? b_.t.info() : nullptr, y_.t.info(), pad_stride(win), mult, act_info(a), dilation), "NEDepthwiseConvolutionLayer");
      auto f = std::make_unique<acl::NEDepthwiseConvolutionLayer>();
      f->configure(&x_.t, &w_.t, bias, &y_.t, pad_stride(win), mult, act_info(a), dilation);
      fn_ = std::move(f);
    } else {
      check(c, acl::NEConvolutionLayer::validate(x_.t.info(), w_.t.info(), has_bias ? b_.t.info() : nullptr, y_.t.info(), pad_stride(win), acl::WeightsInfo(), dilation, act_info(a), false), "NEConvolutionLayer");
      auto f = std::make_unique<acl::NEConvolutionLayer>();
      f->configure(&x_.t, &w_.t, bias, &y_.t, pad_stride(win), acl::WeightsInfo(), dilation, act_info(a), false);
      fn_ = std::move(f);
    }
    w_.hold(wdata, static_cast<std::size_t>(ws.elements()) * sizeof(float));
    if (has_bias) b_.hold(bias_data, static_cast<std::size_t>(O) * sizeof(float));
    x_.settle();
    y_.settle();
    fn_->prepare();
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    auto& self = const_cast<ConvF32&>(*this);  // ACL's tensors change as buffers are bound; runs take turns (AclCall)
    self.x_.in(e.in(0));
    self.y_.out(e.out(0));
    fn_->run();
    self.y_.done(e.out(0));
  }

 private:
  Buf x_, w_, b_, y_;
  std::unique_ptr<acl::IFunction> fn_;
};

// dense (+ bias): [M, K] x [N, K] by NEFullyConnectedLayer.
class DenseF32 final : public Kernel {
 public:
  explicit DenseF32(const Ctx& c) {
    const auto [x, w, y] = float_operands(c, 2);
    check_dense_shapes(c, x.spec.shape, w.spec.shape, y.spec.shape);
    x_.init(x);
    w_.init(w);  // [N, K]: TensorShape(K, N), which the layer transposes once
    y_.init(y);
    const bool has_bias = float_bias(c, w.spec.shape[0]) != nullptr;
    if (has_bias) b_.init(c.in(2));
    acl::FullyConnectedLayerInfo info;
    info.transpose_weights = true;
    check(c, acl::NEFullyConnectedLayer::validate(x_.t.info(), w_.t.info(), has_bias ? b_.t.info() : nullptr, y_.t.info(), info), "NEFullyConnectedLayer");
    fn_.configure(&x_.t, &w_.t, has_bias ? &b_.t : nullptr, &y_.t, info);
    w_.hold(w.data, w.nbytes);
    if (has_bias) b_.hold(c.in(2).data, c.in(2).nbytes);
    x_.settle();
    y_.settle();
    fn_.prepare();
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    auto& self = const_cast<DenseF32&>(*this);
    self.x_.in(e.in(0));
    self.y_.out(e.out(0));
    self.fn_.run();
    self.y_.done(e.out(0));
  }

 private:
  Buf x_, w_, b_, y_;
  acl::NEFullyConnectedLayer fn_;
};

// -- one function from inputs to one output ---------------------------------------------

// A function of n inputs and one output, all bound by the run (pools, elementwise ops,
// activations, reshape, concatenate). Constant inputs (a per-channel scale) are held.
class Simple final : public Kernel {
 public:
  // make(ins, out) validates and configures; it returns the function
  template <class Make>
  Simple(const Ctx& c, std::size_t inputs, acl::DataLayout layout, const Make& make) {
    const auto& y = c.out(0);
    std::vector<Buf*> in;
    xs_.resize(inputs);
    for (std::size_t i = 0; i < inputs; ++i) {
      xs_[i] = std::make_unique<Buf>();
      xs_[i]->init(c.in(i), c.in(i).spec.shape.rank() == 4 ? layout : acl::DataLayout::NCHW);
      in.push_back(xs_[i].get());
    }
    y_.init(y, y.spec.shape.rank() == 4 ? layout : acl::DataLayout::NCHW);
    fn_ = make(in, y_);
    for (std::size_t i = 0; i < inputs; ++i) {
      if (c.in(i).constant()) {
        xs_[i]->hold(c.in(i).data, c.in(i).nbytes);
      } else {
        xs_[i]->settle();
        ins.push_back(c.n.inputs[i]);
        bound_.push_back(i);
      }
    }
    y_.settle();
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    auto& self = const_cast<Simple&>(*this);
    for (std::size_t k = 0; k < bound_.size(); ++k) self.xs_[bound_[k]]->in(e.in(k));
    self.y_.out(e.out(0));
    fn_->run();
    self.y_.done(e.out(0));
  }

 private:
  std::vector<std::unique_ptr<Buf>> xs_;
  std::vector<std::size_t> bound_;
  Buf y_;
  std::unique_ptr<acl::IFunction> fn_;
};

using Ins = std::vector<Buf*>;

std::unique_ptr<Kernel> pool_kernel(const Ctx& c) {
  const PoolParams p = float_pool(c);
  const acl::PoolingType type = p.kind == "max" ? acl::PoolingType::MAX : p.kind == "l2" ? acl::PoolingType::L2 : acl::PoolingType::AVG;
  const Window win{p.kh, p.kw, p.sh, p.sw, 1, 1, p.pt, p.pl, p.pb, p.pr};
  const acl::PoolingLayerInfo info(type, acl::Size2D(static_cast<std::size_t>(p.kw), static_cast<std::size_t>(p.kh)),
                                   acl::DataLayout::NHWC, pad_stride(win), !p.include_pad);
  return std::make_unique<Simple>(c, 1, acl::DataLayout::NHWC, [&](const Ins& in, Buf& out) {
    check(c, acl::NEPoolingLayer::validate(in[0]->t.info(), out.t.info(), info), "NEPoolingLayer");
    auto f = std::make_unique<acl::NEPoolingLayer>();
    f->configure(&in[0]->t, &out.t, info);
    return f;
  });
}

// add, multiply, maximum of float32 tensors of one shape, or add / multiply by a
// per-channel constant (ACL broadcasts a tensor's dimensions of size 1).
std::unique_ptr<Kernel> binary_kernel(const Ctx& c, const std::string& op) {
  float_binary(c, op != "maximum");
  return std::make_unique<Simple>(c, 2, acl::DataLayout::NCHW, [&](const Ins& in, Buf& out) -> std::unique_ptr<acl::IFunction> {
    const acl::ITensorInfo *a = in[0]->t.info(), *bi = in[1]->t.info(), *y = out.t.info();
    if (op == "add") {
      check(c, acl::NEArithmeticAddition::validate(a, bi, y, acl::ConvertPolicy::SATURATE), "NEArithmeticAddition");
      auto f = std::make_unique<acl::NEArithmeticAddition>();
      f->configure(&in[0]->t, &in[1]->t, &out.t, acl::ConvertPolicy::SATURATE);
      return f;
    }
    if (op == "multiply") {
      check(c, acl::NEPixelWiseMultiplication::validate(a, bi, y, 1.f, acl::ConvertPolicy::SATURATE, acl::RoundingPolicy::TO_ZERO), "NEPixelWiseMultiplication");
      auto f = std::make_unique<acl::NEPixelWiseMultiplication>();
      f->configure(&in[0]->t, &in[1]->t, &out.t, 1.f, acl::ConvertPolicy::SATURATE, acl::RoundingPolicy::TO_ZERO);
      return f;
    }
    check(c, acl::NEElementwiseMax::validate(a, bi, y), "NEElementwiseMax");
    auto f = std::make_unique<acl::NEElementwiseMax>();
    f->configure(&in[0]->t, &in[1]->t, &out.t);
    return f;
  });
}

// One float32 function of ACL from the node's one input to its output, then a repair of the
// output that reads the input: what ACL leaves unlike the reference.
template <class Fn>
class Repaired : public Kernel {
 public:
  void run(Exec& e) const override {
    auto& self = const_cast<Repaired&>(*this);
    const float* x = e.in<float>(0);
    float* y = e.out<float>(0);
    self.x_.in(x);
    self.y_.out(y);
    self.fn_.run();
    self.y_.done(y);
    repair(x, y);
  }

 protected:
  // configure(x, y, fn) validates and configures fn on the two tensors
  template <class Configure>
  void set(const Ctx& c, const Configure& configure) {
    x_.init(c.in(0));
    y_.init(c.out(0));
    configure(x_.t, y_.t, fn_);
    x_.settle();
    y_.settle();
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }
  virtual void repair(const float* x, float* y) const = 0;

 private:
  Buf x_, y_;
  Fn fn_;
};

// ReLU / bounded ReLU: NEActivationLayer, then NaN put back where the input had it (ACL's
// ReLU makes 0 of NaN; the reference, as ONNX, keeps it).
class ActivationF32 final : public Repaired<acl::NEActivationLayer> {
 public:
  explicit ActivationF32(const Ctx& c) {
    const Activation a = Activation::node(c);
    set(c, [&](acl::Tensor& x, acl::Tensor& y, acl::NEActivationLayer& fn) {
      check(c, acl::NEActivationLayer::validate(x.info(), y.info(), act_info(a)), "NEActivationLayer");
      fn.configure(&x, &y, act_info(a));
    });
    n_ = c.out(0).spec.shape.elements();
  }

 private:
  void repair(const float* x, float* y) const override {
    for (std::size_t i = 0; i < n_; ++i) {
      if (std::isnan(x[i])) y[i] = x[i];
    }
  }
  std::size_t n_ = 0;
};

// softmax along the last axis: NESoftmaxLayer (beta 1, axis 0: ACL's innermost dimension), then
// the rows the reference makes NaN (SoftmaxRows).
class SoftmaxF32 final : public Repaired<acl::NESoftmaxLayer> {
 public:
  explicit SoftmaxF32(const Ctx& c) : rows_(SoftmaxRows::read(c)) {
    set(c, [&](acl::Tensor& x, acl::Tensor& y, acl::NESoftmaxLayer& fn) {
      check(c, acl::NESoftmaxLayer::validate(x.info(), y.info(), 1.f, 0), "NESoftmaxLayer");
      fn.configure(&x, &y, 1.f, 0);
    });
  }

 private:
  void repair(const float* x, float* y) const override { rows_.fix(x, y); }
  SoftmaxRows rows_;
};

std::unique_ptr<Kernel> reshape_kernel(const Ctx& c) {
  c.arity(1, 1, 1);
  if (c.in(0).spec.dtype != c.out(0).spec.dtype || c.in(0).nbytes != c.out(0).nbytes) c.fail("reshape must keep dtype and size");
  return std::make_unique<Simple>(c, 1, acl::DataLayout::NCHW, [&](const Ins& in, Buf& out) {
    check(c, acl::NEReshapeLayer::validate(in[0]->t.info(), out.t.info()), "NEReshapeLayer");
    auto f = std::make_unique<acl::NEReshapeLayer>();
    f->configure(&in[0]->t, &out.t);
    return f;
  });
}

// transpose: NEPermute, its permutation in ACL's order of dimensions (the innermost first): ACL's
// output dimension k is its input dimension r - 1 - axes[r - 1 - k]. The permutations this
// version's NEPermute does not list are copied by nodes.hpp's PermuteCopy.
class PermuteOwn final : public Kernel {
 public:
  PermuteOwn(const Ctx& c, const std::vector<int>& axes) : copy_(c, axes) {
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }
  void run(Exec& e) const override { copy_.run(e.in(0), e.out(0)); }

 private:
  PermuteCopy copy_;
};

std::unique_ptr<Kernel> transpose_kernel(const Ctx& c) {
  const std::vector<int> axes = transpose_axes(c);
  const int r = static_cast<int>(axes.size());
  acl::PermutationVector perm;
  for (int k = 0; k < r; ++k) perm.set(static_cast<std::size_t>(k), static_cast<std::uint32_t>(r - 1 - axes[static_cast<std::size_t>(r - 1 - k)]));
  const acl::TensorInfo xi(acl_shape(c.in(0).spec.shape), 1, acl_type(c.in(0).spec.dtype));
  const acl::TensorInfo yi(acl_shape(c.out(0).spec.shape), 1, acl_type(c.out(0).spec.dtype));
  if (!bool(acl::NEPermute::validate(&xi, &yi, perm))) return std::make_unique<PermuteOwn>(c, axes);
  return std::make_unique<Simple>(c, 1, acl::DataLayout::NCHW, [&](const Ins& in, Buf& out) {
    check(c, acl::NEPermute::validate(in[0]->t.info(), out.t.info(), perm), "NEPermute");
    auto f = std::make_unique<acl::NEPermute>();
    f->configure(&in[0]->t, &out.t, perm);
    return f;
  });
}

std::unique_ptr<Kernel> concatenate_kernel(const Ctx& c) {
  const std::int64_t axis = concatenate_axis(c);
  const auto& y = c.out(0).spec;
  const std::size_t acl_axis = static_cast<std::size_t>(y.shape.rank() - 1 - axis);
  return std::make_unique<Simple>(c, c.n.inputs.size(), acl::DataLayout::NCHW, [&](const Ins& in, Buf& out) {
    std::vector<const acl::ITensorInfo*> infos;
    std::vector<const acl::ITensor*> tensors;
    for (Buf* b : in) {
      infos.push_back(b->t.info());
      tensors.push_back(&b->t);
    }
    check(c, acl::NEConcatenateLayer::validate(infos, out.t.info(), acl_axis), "NEConcatenateLayer");
    auto f = std::make_unique<acl::NEConcatenateLayer>();
    f->configure(tensors, &out.t, acl_axis);
    return f;
  });
}

// -- quantized convolution and dense ------------------------------------------------------

// ACL's quantization of a quantized layer's data for an int32 product: only the zero
// point counts (the scales are the requantizer's).
acl::QuantizationInfo zero_point(std::int32_t z) { return acl::QuantizationInfo(1.f, z); }

// qnn.conv2d (groups 1) / qnn.dense (+ int32 bias, relu) + requantize: int32 products from
// NEGEMMLowpMatrixMultiplyCore (after NEIm2Col for windows of more than one pixel), zero
// points applied here, requantized by the sdk.
//
// ACL 20.08's GEMMLowp gives exact products of raw 8-bit values only with zero offsets
// (with a data or weight offset, and for int8 data against uint8 weights, it returns
// other sums without refusing: measured under emulation), so the layer multiplies raw
// values and applies the zero points itself:
//   sum_k (x_k - zx)(w_k - zw) = sum_k x_k w_k - zx sum_k w_k - zw sum_k x_k + K zx zw.
// The weights go in as int8 (uint8 weights and their zero point shifted by -128, which
// leaves w - zw as it was), as ACL's QSYMM8_PER_CHANNEL; the terms without x are folded
// into the bias once; where a weight zero point is not 0, one more column of ones in B
// makes the GEMM also return sum_k x_k per row, and zw * that is taken off per element.
class QnnGemm final : public Kernel {
 public:
  QnnGemm(const Ctx& c, const QnnLayer& q) : out_(q.y->spec.dtype) {
    const Shape& ws = q.w->spec.shape;
    const std::int64_t O = q.outputs;
    const std::int64_t K = ws.elements() / O;
    const bool one_pixel = q.dense || (q.win.kh == 1 && q.win.kw == 1 && q.win.sh == 1 && q.win.sw == 1 &&
                                       q.win.pt == 0 && q.win.pl == 0 && q.win.pb == 0 && q.win.pr == 0);
    rows_ = static_cast<std::size_t>(q.y->spec.shape.elements() / O);
    const bool uint8_weights = q.w->spec.dtype == ACCEL_UINT8;
    zw_.resize(static_cast<std::size_t>(O));
    for (std::int64_t o = 0; o < O; ++o) {
      const std::int32_t z = q.weight_zero_points.size() == 1 ? q.weight_zero_points[0] : q.weight_zero_points[static_cast<std::size_t>(o)];
      zw_[static_cast<std::size_t>(o)] = uint8_weights ? z - 128 : z;
    }
    row_sums_ = std::any_of(zw_.begin(), zw_.end(), [](std::int32_t z) { return z != 0; });
    cols_ = static_cast<std::size_t>(O) + (row_sums_ ? 1 : 0);
    // B = the weights as a [K, cols] int8 matrix, TensorShape(cols, K); the bias with the constant terms
    std::vector<std::int8_t> b(static_cast<std::size_t>(K) * cols_);
    const std::int64_t zx = q.data_zero_point;
    std::vector<std::int32_t> bias(static_cast<std::size_t>(O));
    for (std::int64_t o = 0; o < O; ++o) {
      std::int64_t sum = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const std::uint8_t raw = q.w->data[o * K + k];
        const std::int32_t v = uint8_weights ? static_cast<std::int32_t>(raw) - 128 : static_cast<std::int8_t>(raw);
        b[static_cast<std::size_t>(k) * cols_ + static_cast<std::size_t>(o)] = static_cast<std::int8_t>(v);
        sum += v;
      }
      const std::int64_t fold = (q.bias.empty() ? 0 : q.bias[static_cast<std::size_t>(o)]) - zx * sum + K * zx * zw_[static_cast<std::size_t>(o)];
      bias[static_cast<std::size_t>(o)] = static_cast<std::int32_t>(static_cast<std::uint32_t>(fold));  // int32 wrap, as bias_add
    }
    if (row_sums_) {
      for (std::int64_t k = 0; k < K; ++k) b[static_cast<std::size_t>(k) * cols_ + static_cast<std::size_t>(O)] = 1;
    }
    rq_ = q.requantizer(bias);
    const acl::DataType atype = acl_type(q.x->spec.dtype);
    b_.init(acl::TensorShape(cols_, static_cast<std::size_t>(K)), acl::DataType::QSYMM8_PER_CHANNEL, acl::DataLayout::NCHW,
            acl::QuantizationInfo(std::vector<float>(cols_, 1.f)));
    acc_.init(acl::TensorShape(cols_, rows_), acl::DataType::S32);
    a_.init(acl::TensorShape(static_cast<std::size_t>(K), rows_), atype, acl::DataLayout::NCHW, acl::QuantizationInfo(1.f, 0));
    if (!one_pixel) {
      // the data's zero point is what im2col pads with
      x_.init(*q.x, acl::DataLayout::NHWC, acl::QuantizationInfo(1.f, q.data_zero_point));
      col_.t.allocator()->init(acl::TensorInfo());
      const acl::Size2D kernel(static_cast<std::size_t>(q.win.kw), static_cast<std::size_t>(q.win.kh));
      const acl::Size2D dilation(static_cast<std::size_t>(q.win.dw), static_cast<std::size_t>(q.win.dh));
      im2col_ = std::make_unique<acl::NEIm2Col>();
      im2col_->configure(&x_.t, &col_.t, kernel, pad_stride(q.win), false, dilation);
      check(c, acl::NEIm2Col::validate(x_.t.info(), col_.t.info(), kernel, pad_stride(q.win), false, dilation), "NEIm2Col");
      if (col_.dense_bytes() != static_cast<std::size_t>(K) * rows_ || col_.t.info()->tensor_shape()[0] != static_cast<std::size_t>(K)) {
        c.fail("NEIm2Col gave columns of an unexpected shape");
      }
      x_.settle();
      col_.settle();
      col_bytes_ = col_.dense_bytes();
    }
    const acl::GEMMInfo info(false, false, true);
    check(c, acl::NEGEMMLowpMatrixMultiplyCore::validate(a_.t.info(), b_.t.info(), nullptr, acc_.t.info(), info), "NEGEMMLowpMatrixMultiplyCore");
    gemm_.configure(&a_.t, &b_.t, nullptr, &acc_.t, info);
    b_.hold(b.data(), b.size());
    a_.settle();
    acc_.settle();
    gemm_.prepare();
    acc_bytes_ = (rows_ * cols_ * sizeof(std::int32_t) + 63) / 64 * 64;
    scratch_bytes = acc_bytes_ + col_bytes_;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    auto& self = const_cast<QnnGemm&>(*this);
    auto* acc = reinterpret_cast<std::int32_t*>(e.scratch);
    const void* a = e.in(0);
    if (im2col_) {
      void* col = e.scratch + acc_bytes_;
      self.x_.in(e.in(0));
      self.col_.out(col);
      im2col_->run();
      self.col_.done(col);
      a = col;
    }
    self.a_.in(a);
    self.acc_.out(acc);
    self.gemm_.run();
    self.acc_.done(acc);
    const std::size_t O = zw_.size();
    if (row_sums_) {
      // - zw * sum_k x_k, in int32 wrap-around arithmetic
      for (std::size_t r = 0; r < rows_; ++r) {
        std::int32_t* row = acc + r * cols_;
        const std::uint32_t sum = static_cast<std::uint32_t>(row[O]);
        for (std::size_t o = 0; o < O; ++o) {
          row[o] = static_cast<std::int32_t>(static_cast<std::uint32_t>(row[o]) - static_cast<std::uint32_t>(zw_[o]) * sum);
        }
      }
    }
    quant::AccBlock block;
    block.data = acc;
    block.rows = rows_;
    block.parts = 1;
    block.part_stride = O;
    block.row_stride = cols_;
    if (out_ == ACCEL_UINT8) {
      rq_.run(block, e.out<std::uint8_t>(0), O);
    } else {
      rq_.run(block, e.out<std::int8_t>(0), O);
    }
  }

 private:
  quant::ChannelRequantizer rq_;
  std::int32_t out_;
  std::vector<std::int32_t> zw_;  // the weights' zero points as int8 weights (per output channel)
  bool row_sums_ = false;
  std::size_t rows_ = 0, cols_ = 0, acc_bytes_ = 0, col_bytes_ = 0;
  Buf x_, col_, a_, b_, acc_;
  std::unique_ptr<acl::NEIm2Col> im2col_;
  acl::NEGEMMLowpMatrixMultiplyCore gemm_;
};

// Depthwise qnn.conv2d + requantize: (x - z_x) and (w - z_w) convolved exactly in float32
// by NEDepthwiseConvolutionLayer, NECast back to int32, requantized by the sdk.
class QnnDepthwise final : public Kernel {
 public:
  QnnDepthwise(const Ctx& c, const QnnLayer& q) : rq_(q.requantizer(q.bias)), out_(q.y->spec.dtype) {
    const Shape& ws = q.w->spec.shape;
    const std::int64_t O = q.outputs, taps = ws[1] * ws[2];
    if (taps > 25) c.fail("quantized depthwise kernels of more than 25 taps are not supported");
    // weights minus their zero points, as float32 [KH, KW, O]
    std::vector<float> w(static_cast<std::size_t>(O * taps));
    for (std::int64_t o = 0; o < O; ++o) {
      const std::int32_t z = q.weight_zero_points.size() == 1 ? q.weight_zero_points[0] : q.weight_zero_points[static_cast<std::size_t>(o)];
      for (std::int64_t k = 0; k < taps; ++k) {
        const std::int64_t i = o * taps + k;
        const std::int32_t v = q.w->spec.dtype == ACCEL_UINT8 ? reinterpret_cast<const std::uint8_t*>(q.w->data)[i]
                                                              : reinterpret_cast<const std::int8_t*>(q.w->data)[i];
        w[static_cast<std::size_t>(k * O + o)] = static_cast<float>(v - z);
      }
    }
    x_.init(*q.x, acl::DataLayout::NHWC, zero_point(q.data_zero_point));
    const acl::TensorShape xf = acl_shape(q.x->spec.shape), yf = acl_shape(q.y->spec.shape);
    xf_.init(xf, acl::DataType::F32, acl::DataLayout::NHWC);
    w_.init(acl::TensorShape(static_cast<std::size_t>(O), static_cast<std::size_t>(ws[2]), static_cast<std::size_t>(ws[1])),
            acl::DataType::F32, acl::DataLayout::NHWC);
    yf_.init(yf, acl::DataType::F32, acl::DataLayout::NHWC);
    acc_.init(yf, acl::DataType::S32, acl::DataLayout::NHWC);
    check(c, acl::NEDequantizationLayer::validate(x_.t.info(), xf_.t.info()), "NEDequantizationLayer");
    dequantize_.configure(&x_.t, &xf_.t);
    const unsigned mult = static_cast<unsigned>(O / q.groups);
    const acl::Size2D dilation(static_cast<std::size_t>(q.win.dw), static_cast<std::size_t>(q.win.dh));
    check(c, acl::NEDepthwiseConvolutionLayer::validate(xf_.t.info(), w_.t.info(), nullptr, yf_.t.info(), pad_stride(q.win), mult, acl::ActivationLayerInfo(), dilation), "NEDepthwiseConvolutionLayer");
    conv_.configure(&xf_.t, &w_.t, nullptr, &yf_.t, pad_stride(q.win), mult, acl::ActivationLayerInfo(), dilation);
    check(c, acl::NECast::validate(yf_.t.info(), acc_.t.info(), acl::ConvertPolicy::SATURATE), "NECast");
    cast_.configure(&yf_.t, &acc_.t, acl::ConvertPolicy::SATURATE);
    w_.hold(w.data(), w.size() * sizeof(float));
    x_.settle();
    xf_.settle();
    yf_.settle();
    acc_.settle();
    conv_.prepare();
    rows_ = static_cast<std::size_t>(q.y->spec.shape.elements() / O);
    xf_bytes_ = (xf_.dense_bytes() + 63) / 64 * 64;
    yf_bytes_ = (yf_.dense_bytes() + 63) / 64 * 64;
    scratch_bytes = xf_bytes_ + 2 * yf_bytes_;
    ins = {c.n.inputs[0]};
    outs = {c.n.outputs[0]};
  }

  void run(Exec& e) const override {
    auto& self = const_cast<QnnDepthwise&>(*this);
    std::uint8_t* xf = e.scratch;
    std::uint8_t* yf = xf + xf_bytes_;
    auto* acc = reinterpret_cast<std::int32_t*>(yf + yf_bytes_);
    self.x_.in(e.in(0));
    self.xf_.out(xf);
    self.dequantize_.run();
    self.xf_.done(xf);
    self.xf_.in(xf);
    self.yf_.out(yf);
    self.conv_.run();
    self.yf_.done(yf);
    self.yf_.in(yf);
    self.acc_.out(acc);
    self.cast_.run();
    self.acc_.done(acc);
    if (out_ == ACCEL_UINT8) {
      rq_.run(acc, rows_, e.out<std::uint8_t>(0));
    } else {
      rq_.run(acc, rows_, e.out<std::int8_t>(0));
    }
  }

 private:
  quant::ChannelRequantizer rq_;
  std::int32_t out_;
  std::size_t rows_ = 0, xf_bytes_ = 0, yf_bytes_ = 0;
  Buf x_, xf_, w_, yf_, acc_;
  acl::NEDequantizationLayer dequantize_;
  acl::NEDepthwiseConvolutionLayer conv_;
  acl::NECast cast_;
};

std::unique_ptr<Kernel> qnn_kernel(const Ctx& c, bool dense) {
  QnnLayer q = QnnLayer::read(c, dense);
  if (dense || q.groups == 1) return std::make_unique<QnnGemm>(c, q);
  if (q.groups != q.x->spec.shape[3]) c.fail("grouped convolutions other than depthwise are not supported");
  return std::make_unique<QnnDepthwise>(c, q);
}

// -- the runtime --------------------------------------------------------------------------

std::unique_ptr<Kernel> acl_kernel(const Ctx& c) {
  const std::string& k = c.n.kernel;
  try {
    if (k == "conv2d") return std::make_unique<ConvF32>(c);
    if (k == "dense") return std::make_unique<DenseF32>(c);
    if (k == "qnn_conv2d") return qnn_kernel(c, false);
    if (k == "qnn_dense") return qnn_kernel(c, true);
    if (k == "pool2d") {
      if (c.n.inputs.size() == 1 && c.in(0).spec.dtype == ACCEL_INT32) return std::make_unique<PoolInt<AclCall>>(c, false);
      return pool_kernel(c);
    }
    if (k == "qnn_avg_pool2d") return std::make_unique<PoolInt<AclCall>>(c, true);
    if (k == "add" || k == "maximum" || k == "multiply") return binary_kernel(c, k);
    if (k == "activation") return std::make_unique<ActivationF32>(c);
    if (k == "reshape") return reshape_kernel(c);
    if (k == "concatenate") return concatenate_kernel(c);
    if (k == "requantize") return std::make_unique<RequantizeOp<AclCall>>(c);
    if (k == "qnn_add") return std::make_unique<QnnAdd<AclCall>>(c);
    if (k == "dequantize") return std::make_unique<DequantizeOp<AclCall>>(c);
    if (k == "quantize") return std::make_unique<QuantizeOp<AclCall>>(c);
    if (k == "softmax") return std::make_unique<SoftmaxF32>(c);
    if (k == "transpose") return transpose_kernel(c);
  } catch (const accel_sdk::BlobError&) {
    throw;
  } catch (const std::exception& e) {
    c.fail(std::string("Arm Compute Library: ") + e.what());  // ACL's error, naming the node
  }
  c.fail("unknown kernel");
}

class AclRuntime final : public accel_sdk::GraphRuntime<AclRuntime, AclCall> {
 public:
  static accel_sdk::GraphBlobSpec blob_spec() { return {"acl", kKindVersion, kKindVersion}; }
  std::unique_ptr<Kernel> make_kernel(const Ctx& c) const { return acl_kernel(c); }
};

}  // namespace

ACCEL_SDK_RUNTIME_MODULE(_runtime, "acl", AclRuntime)
