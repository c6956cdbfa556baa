// The most recent distinct ids, up to a capacity; the oldest is forgotten first. The controller
// remembers acknowledged group ids with it, so that a re-pushed group is answered "duplicate"
// without the set growing with every group of a run.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <unordered_set>

namespace flywheel::buffer {

class RecentIds {
 public:
  explicit RecentIds(size_t capacity) : capacity_(capacity) {}

  bool contains(const std::string& id) const { return ids_.count(id) > 0; }

  // Adds `id` (no-op when present), forgetting the oldest when over capacity.
  void insert(const std::string& id) {
    if (capacity_ == 0 || !ids_.insert(id).second) return;
    order_.push_back(id);
    if (order_.size() > capacity_) {
      ids_.erase(order_.front());
      order_.pop_front();
    }
  }

  // Oldest first (snapshots keep this order).
  const std::deque<std::string>& in_order() const { return order_; }
  size_t size() const { return order_.size(); }

 private:
  size_t capacity_;
  std::unordered_set<std::string> ids_;
  std::deque<std::string> order_;
};

}  // namespace flywheel::buffer
