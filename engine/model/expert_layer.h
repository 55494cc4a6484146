// What the expert runtime reads of one MoE layer: its router, experts and
// FFN norm. A copy the runtime owns — views into the model file's mapping,
// which the Model keeps for as long as the runtime lives, plus two small
// vectors — so it never points into an architecture's own layers.
#pragma once

#include <vector>

#include "../layers/layers.h"

namespace moelsp {

struct ExpertLayer {
  bool moe = false;  // false: a dense layer (nothing below is set)
  layers::MoeWeights weights;
  std::vector<float> ffn_norm;  // [n_embd]: the norm before the router
};

// The layers of an architecture whose Layer has `moe` and `ffn_norm`,
// MoE where cfg.is_moe_layer says so.
template <class Layer>
std::vector<ExpertLayer> expert_layers(const ModelConfig& cfg, const std::vector<Layer>& layers) {
  std::vector<ExpertLayer> out(layers.size());
  for (size_t il = 0; il < layers.size(); ++il)
    if (cfg.is_moe_layer(int(il))) out[il] = {true, layers[il].moe, layers[il].ffn_norm};
  return out;
}

}  // namespace moelsp
