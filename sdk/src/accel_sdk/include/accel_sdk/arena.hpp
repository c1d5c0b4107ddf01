// accel_sdk/arena.hpp: one arena for a run's intermediates, planned once by liveness,
// and a pool of arenas so concurrent runs of one handle never share one.
//
//   AlignedBuffer   owned memory, 64-byte aligned (oneDNN's and the vector units' preference);
//   ArenaPlan       offsets for buffers that each live over a range of steps: buffers whose
//                   ranges overlap never overlap in memory, the others share it (first fit,
//                   in order of first use);
//   ArenaPool       arenas of one size handed to concurrent runs: take() lends one (made
//                   when none is free), the lease gives it back when it ends.
//
//   accel_sdk::ArenaPlan plan;
//   const auto a = plan.add(bytes_a, 0, 2);   // written by step 0, last read by step 2
//   const auto b = plan.add(bytes_b, 1, 1);   // a step's scratch: live while it runs
//   plan.finish();                            // plan.offset(a), plan.offset(b), plan.bytes()
//   accel_sdk::ArenaPool pool(plan.bytes());
//   auto arena = pool.take();                 // arena.data() + plan.offset(a) ...
#ifndef ACCEL_SDK_ARENA_HPP
#define ACCEL_SDK_ARENA_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

namespace accel_sdk {

constexpr std::size_t kArenaAlign = 64;

// n rounded up to a multiple of kArenaAlign (std::bad_alloc past SIZE_MAX).
inline std::size_t align_up(std::size_t n) {
  if (n > static_cast<std::size_t>(-1) - (kArenaAlign - 1)) throw std::bad_alloc();
  return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    void* p = std::aligned_alloc(kArenaAlign, align_up(bytes));
    if (p == nullptr) throw std::bad_alloc();
    p_.reset(static_cast<std::uint8_t*>(p));
  }
  std::uint8_t* data() const { return p_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint8_t, Free> p_;
  std::size_t size_ = 0;
};

class ArenaPlan {
 public:
  // A buffer of `bytes` live from step `first` to step `last` (first <= last); its index.
  std::size_t add(std::size_t bytes, std::size_t first, std::size_t last) {
    if (last < first) throw std::logic_error("ArenaPlan::add: a buffer's last step precedes its first");
    items_.push_back({align_up(std::max<std::size_t>(bytes, 1)), first, last, 0});
    return items_.size() - 1;
  }

  // Lays the buffers out: in order of first step (then of index), each at the lowest offset
  // where it overlaps no buffer still live.
  void finish() {
    std::vector<std::size_t> order(items_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return items_[a].first < items_[b].first; });
    std::vector<std::size_t> live;  // indices, by offset
    bytes_ = 0;
    for (std::size_t i : order) {
      Item& it = items_[i];
      live.erase(std::remove_if(live.begin(), live.end(), [&](std::size_t j) { return items_[j].last < it.first; }),
                 live.end());
      std::size_t at = 0;
      auto pos = live.begin();
      for (; pos != live.end(); ++pos) {
        if (items_[*pos].offset >= at + it.size) break;  // the gap before this one fits
        at = std::max(at, items_[*pos].offset + items_[*pos].size);
      }
      it.offset = at;
      live.insert(pos, i);
      bytes_ = std::max(bytes_, at + it.size);
    }
  }

  std::size_t offset(std::size_t i) const { return items_.at(i).offset; }
  std::size_t bytes() const { return bytes_; }
  std::size_t size() const { return items_.size(); }

 private:
  struct Item {
    std::size_t size, first, last, offset;
  };
  std::vector<Item> items_;
  std::size_t bytes_ = 0;
};

class ArenaPool {
 public:
  explicit ArenaPool(std::size_t bytes = 0, std::size_t keep = 8) : bytes_(bytes), keep_(keep) { free_.reserve(keep); }
  ArenaPool(const ArenaPool&) = delete;
  ArenaPool& operator=(const ArenaPool&) = delete;

  // An arena lent to one run; back to the pool when the lease ends.
  class Lease {
   public:
    Lease(const ArenaPool& pool, std::unique_ptr<AlignedBuffer> buf) : pool_(&pool), buf_(std::move(buf)) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), buf_(std::move(o.buf_)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (buf_) pool_->give(std::move(buf_));
    }
    std::uint8_t* data() const { return buf_->data(); }

   private:
    const ArenaPool* pool_;
    std::unique_ptr<AlignedBuffer> buf_;
  };

  std::size_t bytes() const { return bytes_; }

  Lease take() const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto buf = std::move(free_.back());
        free_.pop_back();
        return Lease(*this, std::move(buf));
      }
    }
    return Lease(*this, std::make_unique<AlignedBuffer>(std::max(bytes_, kArenaAlign)));
  }

 private:
  void give(std::unique_ptr<AlignedBuffer> buf) const noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < keep_) free_.push_back(std::move(buf));
  }

  std::size_t bytes_;
  std::size_t keep_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<AlignedBuffer>> free_;
};

}  // namespace accel_sdk

#endif  // ACCEL_SDK_ARENA_HPP
