// What mixture-of-experts forwards report about their routing (RouteRecord) and the
// load-balancing loss over their routers (router_sums, load_balancing_loss).
#include <ATen/ATen.h>

#include "flywheel/model/decoder.h"

namespace flywheel::model {

at::Tensor RouteRecord::stacked() const {
  return layers.empty() ? at::Tensor() : at::stack(layers, 2);
}

RouterSums router_sums(const RouterOutputs& router, const at::Tensor& valid) {
  const int64_t experts = router.probs.size(-1);
  const at::Tensor keep = valid.reshape({-1, 1}).to(router.probs.device()).to(router.probs.dtype());
  RouterSums sums;
  sums.probs = (router.probs * keep).sum(0);
  at::NoGradGuard no_grad;
  sums.picks = (at::one_hot(router.picked, experts).sum(1).to(keep.dtype()) * keep).sum(0);
  return sums;
}

at::Tensor load_balancing_loss(const std::vector<RouterSums>& layers, double valid_tokens) {
  TORCH_CHECK(!layers.empty(), "load_balancing_loss needs the router sums of a sparse layer");
  at::Tensor picks = layers[0].picks, probs = layers[0].probs;
  for (size_t l = 1; l < layers.size(); ++l) {
    picks = picks + layers[l].picks;
    probs = probs + layers[l].probs;
  }
  const double pairs = valid_tokens * static_cast<double>(layers.size());  // (token, layer)
  if (pairs <= 0) return probs.sum() * 0;
  return (picks / pairs * (probs / pairs)).sum() * static_cast<double>(probs.size(0));
}

}  // namespace flywheel::model
